package config

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/tables"
)

// TestStorageProperties: each warehouse gets the iceberg-go FileIO
// properties of its store (the same settings the uplink writes with), and
// the ones handed to engines carry no secret.
func TestStorageProperties(t *testing.T) {
	var s Storage
	s.S3.Endpoint, s.S3.Region, s.S3.AccessKeyID, s.S3.SecretAccessKey = "http://127.0.0.1:7070", "eu-west-1", "id", "secret"
	s.GCS.Endpoint, s.GCS.CredentialsFile = "http://127.0.0.1:4443/storage/v1/", "/etc/gcs.json"
	s.Azure.Endpoint, s.Azure.Key = "http://127.0.0.1:10000/devstoreaccount1", "a2V5"
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, c := range []struct {
		warehouse   string
		want, wantE map[string]string
	}{
		{"file:///tmp/w", nil, nil},
		{"s3://lake/w", map[string]string{"s3.endpoint": "http://127.0.0.1:7070", "s3.region": "eu-west-1",
			"s3.access-key-id": "id", "s3.secret-access-key": "secret"},
			map[string]string{"s3.endpoint": "http://127.0.0.1:7070", "s3.region": "eu-west-1"}},
		{"gs://lake/w", map[string]string{"gcs.service.host": "http://127.0.0.1:4443/storage/v1/", "gcs.keypath": "/etc/gcs.json"},
			map[string]string{"gcs.service.host": "http://127.0.0.1:4443/storage/v1/"}},
		{"abfss://lake@devstoreaccount1.dfs.core.windows.net/w", map[string]string{"adls.endpoint": "127.0.0.1:10000",
			"adls.protocol": "http", "adls.auth.shared-key.account.name": "devstoreaccount1", "adls.auth.shared-key.account.key": "a2V5"},
			map[string]string{"adls.endpoint": "127.0.0.1:10000", "adls.protocol": "http"}},
		{"wasbs://lake@devstoreaccount1.blob.core.windows.net/w", map[string]string{"adls.endpoint": "127.0.0.1:10000",
			"adls.protocol": "http", "adls.auth.shared-key.account.name": "devstoreaccount1", "adls.auth.shared-key.account.key": "a2V5"},
			map[string]string{"adls.endpoint": "127.0.0.1:10000", "adls.protocol": "http"}},
	} {
		if got := s.CatalogProperties(c.warehouse); !maps.Equal(got, c.want) {
			t.Errorf("%s: catalog properties %v, want %v", c.warehouse, got, c.want)
		}
		if got := s.EngineProperties(c.warehouse); !maps.Equal(got, c.wantE) {
			t.Errorf("%s: engine properties %v, want %v", c.warehouse, got, c.wantE)
		}
	}

	// A SAS token is keyed by the warehouse's host, a connection string by
	// its account (iceberg-go's adls.sas-token.HOST, adls.connection-string.ACCOUNT).
	var a Storage
	a.Azure.SASToken = "?sv=2024&sig=x"
	w := "abfss://lake@acct.dfs.core.windows.net/w"
	if got, want := a.CatalogProperties(w), map[string]string{"adls.sas-token.acct.dfs.core.windows.net": "sv=2024&sig=x"}; !maps.Equal(got, want) {
		t.Errorf("sas token: %v, want %v", got, want)
	}
	if got := a.EngineProperties(w); len(got) != 0 {
		t.Errorf("sas token handed to engines: %v", got)
	}
	a.Azure.SASToken, a.Azure.ConnectionString = "", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k"
	if got := a.CatalogProperties(w); got["adls.connection-string.acct"] == "" || len(a.EngineProperties(w)) != 0 {
		t.Errorf("connection string: %v, engines %v", got, a.EngineProperties(w))
	}

	// STORAGE_EMULATOR_HOST stands for an anonymous endpoint.
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")
	var g Storage
	if got, want := g.CatalogProperties("gs://lake/w"), map[string]string{"gcs.service.host": "http://127.0.0.1:4443/storage/v1/",
		"gcs.no-auth": "true"}; !maps.Equal(got, want) {
		t.Errorf("STORAGE_EMULATOR_HOST: %v, want %v", got, want)
	}
}

// TestAzblobAlias: azblob://CONTAINER/prefix is recorded in the abfss://
// form engines read, with storage.azure.account; without it, it is refused.
func TestAzblobAlias(t *testing.T) {
	var s Storage
	s.Azure.Account = "acct"
	if got, want := s.Warehouse("azblob://lake/w/"), "abfss://lake@acct.dfs.core.windows.net/w"; got != want {
		t.Errorf("alias: %s, want %s", got, want)
	}
	if got := s.Warehouse("s3://lake/w"); got != "s3://lake/w" {
		t.Errorf("s3 changed: %s", got)
	}
	var none Storage
	var fields []string
	none.Validate(none.Warehouse("azblob://lake/w"), func(field, format string, args ...any) { fields = append(fields, field) })
	if len(fields) != 1 || fields[0] != "storage.azure.account" {
		t.Errorf("azblob:// without an account: %v, want storage.azure.account", fields)
	}
}

// TestStorageStoreNotLinked: config check of a build without a store's SDK
// (a notrib_ tag; make test runs this with all of them) refuses a
// warehouse on it under catalog.warehouse, naming the tag.
func TestStorageStoreNotLinked(t *testing.T) {
	n := 0
	for _, wh := range []string{"s3://lake/w", "gs://lake/w", "abfss://lake@acct.dfs.core.windows.net/w", "azblob://lake/w"} {
		if tables.StoreLinked(wh) == nil {
			continue
		}
		n++
		var got []string
		Storage{}.Validate(wh, func(field, format string, args ...any) {
			got = append(got, field+": "+fmt.Sprintf(format, args...))
		})
		want := "catalog.warehouse: this build has no " + strings.SplitN(wh, ":", 2)[0] + ":// support; build without the notrib_" + tables.StoreOf(wh) + " tag"
		if len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("%s: %q, want one error starting %q", wh, got, want)
		}
	}
	if n == 0 {
		t.Skip("every store is linked in this build (make test also runs this with the notrib_ tags)")
	}
}
