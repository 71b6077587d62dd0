package tables

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Stores a warehouse can be on. Each cloud store's SDK is linked in by a
// file of its own (store_s3.go, store_gcs.go, store_azure.go) that the
// build tag notrib_<store> leaves out, so that an edge on one store can
// be built without the others' SDKs (docs/operations.md, "Smaller builds").
const (
	StoreFile  = "file"
	StoreS3    = "s3"
	StoreGCS   = "gcs"
	StoreAzure = "azure"
)

// linked are the stores of this build: file always, the others by the
// init of their store_*.go file.
var linked = map[string]bool{StoreFile: true}

// LinkedStores are the stores this build can write and read, sorted
// (file, then the cloud stores whose notrib_ tag was not given).
func LinkedStores() []string {
	var s []string
	for k := range linked {
		if k != StoreFile {
			s = append(s, k)
		}
	}
	sort.Strings(s)
	return append([]string{StoreFile}, s...)
}

// StoreOf is the store of a warehouse URL: StoreFile, StoreS3, StoreGCS,
// StoreAzure (abfss://, abfs://, wasbs://, wasb:// and the azblob:// alias),
// or "" for any other scheme.
func StoreOf(warehouse string) string {
	u, err := url.Parse(warehouse)
	if err != nil {
		return ""
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		return StoreFile
	case "s3":
		return StoreS3
	case "gs":
		return StoreGCS
	case "abfss", "abfs", "wasbs", "wasb", "azblob":
		return StoreAzure
	}
	return ""
}

// StoreLinked is nil when this build can use warehouse's store (or the
// scheme is not one of the known stores), and otherwise says which build
// tag left it out.
func StoreLinked(warehouse string) error {
	s := StoreOf(warehouse)
	if s == "" || linked[s] {
		return nil
	}
	scheme, _, _ := strings.Cut(warehouse, "://")
	return fmt.Errorf("this build has no %s:// support; build without the notrib_%s tag (this build has: %s)",
		strings.ToLower(scheme), s, strings.Join(LinkedStores(), ", "))
}
