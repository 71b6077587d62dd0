package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// frame encodes req as a client would: size, header v1/v2, body.
func frame(req kmsg.Request) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 7)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 'c')
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// TestDecodeRequest: the API table decides what is admitted; ApiVersions
// of an unknown version is admitted as Unsupported, anything else outside
// the table is an error that closes the connection.
func TestDecodeRequest(t *testing.T) {
	apis := APIs{MetadataKey: {Min: 0, Max: 12}, ApiVersionsKey: ApiVersionsVersions}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mdNew := kmsg.NewPtrMetadataRequest()
	mdNew.Version = 13
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	avNew := kmsg.NewPtrApiVersionsRequest()
	avNew.Version = 99
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 4
	for _, tc := range []struct {
		name        string
		req         kmsg.Request
		err         error
		unsupported bool
	}{
		{"metadata v12", md, nil, false},
		{"metadata v13", mdNew, ErrUnsupportedVers, false},
		{"apiversions v3", av, nil, false},
		{"apiversions v99", avNew, nil, true},
		{"fetch not in table", fetch, ErrUnsupportedAPI, false},
	} {
		f, err := ReadFrame(bytes.NewReader(frame(tc.req)), 1<<20)
		if err != nil {
			t.Fatalf("%s: read frame: %v", tc.name, err)
		}
		req, err := DecodeRequest(f, apis)
		if !errors.Is(err, tc.err) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if err != nil {
			continue
		}
		if req.Key != tc.req.Key() || req.CorrID != 7 || req.ClientID != "c" || req.Unsupported != tc.unsupported {
			t.Fatalf("%s: decoded %+v", tc.name, req)
		}
		if req.Unsupported {
			resp := HandleApiVersions(req, req.Body.(*kmsg.ApiVersionsRequest), apis).(*kmsg.ApiVersionsResponse)
			if resp.ErrorCode != CodeUnsupportedVersion || resp.GetVersion() != 0 || len(resp.ApiKeys) != 2 {
				t.Fatalf("%s: response %+v", tc.name, resp)
			}
			// ApiVersions responses use header v0: no tag byte after the
			// correlation id, whatever the version.
			out := AppendResponse(nil, req, resp)
			if int(binary.BigEndian.Uint32(out)) != len(out)-4 || binary.BigEndian.Uint32(out[4:]) != 7 {
				t.Fatalf("%s: bad framing", tc.name)
			}
		}
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0x7f, 0, 0, 0}), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 3, 1, 2, 3}), 1<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short frame: %v", err)
	}
}
