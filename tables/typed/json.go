package typed

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the kind of a decoded JSON value or of a column type.
type Kind uint8

// Value kinds (Null … Array) and the column kinds (Bool, Long, Double,
// String, Timestamp, Struct, List). A decoded number is Long when it is an
// integer literal (no fraction, no exponent) that fits 64 bits, else Double.
const (
	Null Kind = iota
	Bool
	Long
	Double
	String
	Timestamp // microseconds since the epoch, UTC (Iceberg timestamptz)
	Object    // a decoded value
	Array     // a decoded value
	Struct    // a column type (of Object values)
	List      // a column type (of Array values)
)

var kindNames = [...]string{"null", "boolean", "long", "double", "string", "timestamptz", "object", "array", "struct", "list"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Value is one decoded JSON value. Objects keep their members in order.
type Value struct {
	Kind    Kind
	Bool    bool
	Long    int64
	Double  float64
	Str     string
	Members []Member // Object
	Elems   []Value  // Array
}

// Member is one name/value pair of an object.
type Member struct {
	Name  string
	Value Value
}

// Limits of the decoder. Every payload a device sends is decoded, so
// nothing in it may cost more than its size: nesting is capped (the
// decoder recurses), and so are the members of one object.
const (
	// MaxDepth is the deepest nesting of objects and arrays accepted: the
	// payload's top-level object is depth 1. Deeper payloads are refused
	// (ErrTooDeep) and go to the dead-letter table.
	MaxDepth = 16
	// MaxMembers is the most members of one object.
	MaxMembers = 1024
)

// Decoding errors. Each is the reason a payload lands in the dead-letter
// table; the DLQ row's error says which and where.
var (
	ErrSyntax    = errors.New("not JSON")
	ErrUTF8      = errors.New("not valid UTF-8")
	ErrTooDeep   = fmt.Errorf("nested deeper than %d levels", MaxDepth)
	ErrRange     = errors.New("number out of range")
	ErrDuplicate = errors.New("duplicate member name")
	ErrTooWide   = fmt.Errorf("object with more than %d members", MaxMembers)
)

// Decode parses one JSON document (RFC 8259, strictly: UTF-8, no trailing
// commas, no comments, nothing after the value but whitespace). It is a
// pure function of its input and allocates at most a small multiple of it.
func Decode(b []byte) (Value, error) {
	if !utf8.Valid(b) {
		return Value{}, ErrUTF8
	}
	d := decoder{b: b}
	d.ws()
	v, err := d.value(1)
	if err != nil {
		return Value{}, err
	}
	d.ws()
	if d.i != len(d.b) {
		return Value{}, d.errf("data after the value")
	}
	return v, nil
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) errf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d", ErrSyntax, fmt.Sprintf(format, args...), d.i)
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (Value, error) {
	if d.i >= len(d.b) {
		return Value{}, d.errf("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		if depth > MaxDepth {
			return Value{}, ErrTooDeep
		}
		return d.object(depth)
	case c == '[':
		if depth > MaxDepth {
			return Value{}, ErrTooDeep
		}
		return d.array(depth)
	case c == '"':
		s, err := d.str()
		return Value{Kind: String, Str: s}, err
	case c == 't':
		return Value{Kind: Bool, Bool: true}, d.lit("true")
	case c == 'f':
		return Value{Kind: Bool}, d.lit("false")
	case c == 'n':
		return Value{}, d.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return Value{}, d.errf("unexpected %q", c)
	}
}

func (d *decoder) lit(s string) error {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return d.errf("bad literal")
	}
	d.i += len(s)
	return nil
}

func (d *decoder) object(depth int) (Value, error) {
	d.i++ // {
	v := Value{Kind: Object}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return v, nil
	}
	for {
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return Value{}, d.errf("want a member name")
		}
		name, err := d.str()
		if err != nil {
			return Value{}, err
		}
		for _, m := range v.Members {
			if m.Name == name {
				return Value{}, fmt.Errorf("%w %q", ErrDuplicate, name)
			}
		}
		if len(v.Members) == MaxMembers {
			return Value{}, ErrTooWide
		}
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return Value{}, d.errf("want ':'")
		}
		d.i++
		d.ws()
		mv, err := d.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		v.Members = append(v.Members, Member{Name: name, Value: mv})
		d.ws()
		if d.i >= len(d.b) {
			return Value{}, d.errf("unexpected end of object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return v, nil
		default:
			return Value{}, d.errf("want ',' or '}'")
		}
	}
}

func (d *decoder) array(depth int) (Value, error) {
	d.i++ // [
	v := Value{Kind: Array}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return v, nil
	}
	for {
		d.ws()
		ev, err := d.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		v.Elems = append(v.Elems, ev)
		d.ws()
		if d.i >= len(d.b) {
			return Value{}, d.errf("unexpected end of array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return v, nil
		default:
			return Value{}, d.errf("want ',' or ']'")
		}
	}
}

// str reads a string at d.i (which is '"'). The input is valid UTF-8
// (checked once by Decode); escapes are decoded, and a \u escape that is
// a lone surrogate is an error rather than U+FFFD.
func (d *decoder) str() (string, error) {
	d.i++
	start := d.i
	// Fast path: no escapes.
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			s := string(d.b[start:d.i])
			d.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", d.errf("control character in string")
		}
		d.i++
	}
	buf := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), nil
		case c < 0x20:
			return "", d.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.b) {
			break
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
					return "", fmt.Errorf("%w: lone surrogate \\u%04x at byte %d", ErrUTF8, r, d.i)
				}
				d.i += 2
				r2, ok := d.hex4()
				if !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return "", fmt.Errorf("%w: lone surrogate \\u%04x at byte %d", ErrUTF8, r, d.i)
				}
				r = utf16.DecodeRune(r, r2)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", d.errf("bad escape \\%c", e)
		}
	}
	return "", d.errf("unterminated string")
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

// number reads a number at d.i: an integer literal that fits int64 is a
// Long; any other number a Double. An integer literal beyond int64, or a
// number beyond float64, is ErrRange: it cannot be stored without
// changing it.
func (d *decoder) number() (Value, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	intStart := d.i
	if n := digits(); n == 0 {
		return Value{}, d.errf("bad number")
	} else if n > 1 && d.b[intStart] == '0' {
		return Value{}, d.errf("leading zero")
	}
	isInt := true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		isInt = false
		if digits() == 0 {
			return Value{}, d.errf("bad fraction")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		isInt = false
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return Value{}, d.errf("bad exponent")
		}
	}
	lit := string(d.b[start:d.i])
	if isInt {
		n, err := strconv.ParseInt(lit, 10, 64)
		if err != nil {
			return Value{}, fmt.Errorf("%w: integer %.40s does not fit 64 bits", ErrRange, lit)
		}
		return Value{Kind: Long, Long: n}, nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return Value{}, fmt.Errorf("%w: %.40s does not fit a double", ErrRange, lit)
	}
	return Value{Kind: Double, Double: f}, nil
}
