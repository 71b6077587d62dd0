package rest

import (
	"testing"

	"github.com/apache/iceberg-go/table"
)

// Edge nodes renew their owner leases with Write on the lease namespace;
// anything else about namespace properties stays Admin.
func TestLeaseUpdateNeedsOnlyWrite(t *testing.T) {
	cases := []struct {
		ns   table.Identifier
		rm   []string
		upd  map[string]string
		want bool
	}{
		{table.Identifier{"tributary_leases"}, nil, map[string]string{"tributary.lease.n1": "x.1"}, true},
		{table.Identifier{"tributary_leases"}, []string{"tributary.lease.n1"}, nil, true},
		{table.Identifier{"tributary_leases"}, nil, map[string]string{"tributary.lease.n1": "x", "owner": "me"}, false},
		{table.Identifier{"tributary_leases"}, nil, nil, false},
		{table.Identifier{"factory"}, nil, map[string]string{"tributary.lease.n1": "x.1"}, false},
		{table.Identifier{"tributary_leases", "x"}, nil, map[string]string{"tributary.lease.n1": "x.1"}, false},
	}
	for i, c := range cases {
		if got := leaseUpdate(c.ns, c.rm, c.upd); got != c.want {
			t.Errorf("case %d: leaseUpdate(%v, %v, %v) = %v, want %v", i, c.ns, c.rm, c.upd, got, c.want)
		}
	}
}
