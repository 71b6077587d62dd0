package uplink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// TestOpenBucketStoreNotLinked: a build without a store's SDK (a notrib_
// tag; make test runs this with all of them) refuses a warehouse on it at
// once, naming catalog.warehouse and the tag, without reaching any network.
func TestOpenBucketStoreNotLinked(t *testing.T) {
	n := 0
	for _, wh := range []string{"s3://lake/w", "gs://lake/w", "abfss://lake@acct.dfs.core.windows.net/w"} {
		if tables.StoreLinked(wh) == nil {
			continue
		}
		n++
		store := tables.StoreOf(wh)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := OpenBucket(ctx, wh)
		cancel()
		if err == nil {
			b.Close()
			t.Fatalf("%s: opened in a build without %s", wh, store)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "catalog.warehouse: this build has no ") ||
			!strings.Contains(msg, "build without the notrib_"+store+" tag") {
			t.Errorf("%s: %v", wh, err)
		}
	}
	if n == 0 {
		t.Skip("every store is linked in this build (make test also runs this with the notrib_ tags)")
	}
}
