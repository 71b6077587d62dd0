package tables

import (
	"slices"
	"strings"
	"testing"
)

// storeWarehouses are a warehouse of each cloud store.
var storeWarehouses = map[string][]string{
	StoreS3:    {"s3://lake/w"},
	StoreGCS:   {"gs://lake/w"},
	StoreAzure: {"abfss://lake@acct.dfs.core.windows.net/w", "wasbs://lake@acct.blob.core.windows.net/w", "azblob://lake/w"},
}

// TestStoreLinked: a warehouse on a store this build leaves out (its
// notrib_ tag) is refused with the scheme and the tag to drop; file:// and
// the linked stores pass. Run by make test both in the full build and with
// every notrib_ tag.
func TestStoreLinked(t *testing.T) {
	if err := StoreLinked("file:///var/lib/tributary/warehouse"); err != nil {
		t.Fatalf("file://: %v", err)
	}
	if err := StoreLinked("mem://x"); err != nil {
		t.Fatalf("an unknown scheme is not a store's to refuse: %v", err)
	}
	for store, whs := range storeWarehouses {
		for _, wh := range whs {
			if got := StoreOf(wh); got != store {
				t.Errorf("StoreOf(%s) = %q, want %q", wh, got, store)
			}
			if err := StoreLinked(wh); (err == nil) != linked[store] {
				t.Errorf("%s: linked %v, StoreLinked %v", wh, linked[store], err)
			}
		}
	}
	if ls := LinkedStores(); ls[0] != StoreFile || !slices.IsSorted(ls[1:]) {
		t.Errorf("LinkedStores() = %v: want file first, then sorted", ls)
	}
}

// TestStoreNotLinkedMessage: the refusal names the scheme as written and
// the tag, and lists what the build has (the message operators read).
func TestStoreNotLinkedMessage(t *testing.T) {
	was := linked[StoreGCS]
	delete(linked, StoreGCS)
	defer func() {
		if was {
			linked[StoreGCS] = true
		}
	}()
	err := StoreLinked("gs://lake/w")
	want := "this build has no gs:// support; build without the notrib_gcs tag (this build has: " + strings.Join(LinkedStores(), ", ") + ")"
	if err == nil || err.Error() != want {
		t.Fatalf("StoreLinked(gs://) = %v, want %q", err, want)
	}
	if slices.Contains(LinkedStores(), StoreGCS) {
		t.Fatalf("LinkedStores() = %v lists gcs", LinkedStores())
	}
}
