package cloud

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/federation"
	"github.com/tributary-io/tributary/tables"
)

// FederationConfig is one external Iceberg REST catalog the streams are
// published into as read-only mirrors (package federation; docs/tables.md
// "Federation").
type FederationConfig struct {
	// Name labels the catalog in metrics (catalog="…") and on the console.
	// Default the URI's host:port.
	Name string `yaml:"name"`
	// URI of the catalog: http(s)://host:port[/path]. Required.
	URI string `yaml:"uri"`
	// Warehouse is the catalog's warehouse name or location, sent to its
	// /v1/config (SeaweedFS, S3 Tables: s3://TABLE-BUCKET). Default "".
	Warehouse string `yaml:"warehouse"`
	// Token is a bearer token sent to the catalog. Default "".
	Token string `yaml:"token"`
	// Credential is "client_id:client_secret", exchanged at the catalog's
	// OAuth2 token endpoint (refreshed before it expires). Default "".
	Credential string `yaml:"credential"`
	// SigV4 signs the requests with AWS Signature V4 (storage.s3's keys
	// when set). Default off.
	SigV4 config.SigV4 `yaml:"sigv4"`
	// Namespace the mirrors are registered in (created when missing; "a.b"
	// for a nested one): stream ns.name is then NAMESPACE.ns_name. Default
	// "": each stream's own namespace and name.
	Namespace string `yaml:"namespace"`
	// Streams mirrored: names or globs over namespace.stream (e.g.
	// "factory.*"). Default: all.
	Streams []string `yaml:"streams"`
}

// federationDefaults fills the names and signature services.
func (c *Config) federationDefaults() {
	for i := range c.Federation {
		f := &c.Federation[i]
		f.SigV4.Defaults()
		if f.Name == "" {
			if u, err := url.Parse(f.URI); err == nil && u.Host != "" {
				f.Name = u.Host
			} else {
				f.Name = fmt.Sprintf("federation-%d", i)
			}
		}
	}
}

// validateFederation checks every federation entry, naming its key.
func (c *Config) validateFederation(bad func(field, format string, args ...any)) {
	names := map[string]bool{}
	for i, f := range c.Federation {
		key := func(k string) string { return fmt.Sprintf("federation[%d].%s", i, k) }
		if !tables.External(f.URI) {
			bad(key("uri"), "%q: want http(s)://host:port of an Iceberg REST catalog", tables.Redact(f.URI))
		}
		if names[f.Name] {
			bad(key("name"), "%q: two federation entries have this name", f.Name)
		}
		names[f.Name] = true
		auths := 0
		for _, set := range []bool{f.Token != "", f.Credential != "", f.SigV4.Region != ""} {
			if set {
				auths++
			}
		}
		if auths > 1 {
			bad(key("credential"), "set token, credential or sigv4, not more than one")
		}
		if cr := f.Credential; cr != "" {
			if id, secret, ok := strings.Cut(cr, ":"); !ok || id == "" || secret == "" {
				bad(key("credential"), "want client_id:client_secret")
			}
		}
		if ns := f.Namespace; ns != "" {
			for _, part := range strings.Split(ns, ".") {
				if part == "" || strings.ContainsAny(part, "/\\\x00") {
					bad(key("namespace"), "%q: want a namespace such as tributary or analytics.streams", ns)
					break
				}
			}
		}
		for j, p := range f.Streams {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				bad(fmt.Sprintf("federation[%d].streams[%d]", i, j), "%q: want a stream name or a glob such as factory.*", p)
			}
		}
	}
}

// FederationTargets are the federation entries as package federation
// takes them.
func (c Config) FederationTargets() []federation.Target {
	var out []federation.Target
	for i, f := range c.Federation {
		props := map[string]string{}
		switch {
		case f.Token != "":
			props["token"] = f.Token
		case f.Credential != "":
			props["credential"] = f.Credential
		}
		key := func(k string) string { return fmt.Sprintf("federation[%d].%s", i, k) }
		out = append(out, federation.Target{Name: f.Name,
			Catalog: tables.Config{Name: f.Name, URI: f.URI, Warehouse: f.Warehouse, Properties: props, SigV4: f.SigV4.Signer(c.Storage)},
			Keys: tables.CheckKeys{URI: key("uri"), Token: key("token"), Credential: key("credential"), SigV4: key("sigv4"),
				Warehouse: key("warehouse")},
			Namespace: f.Namespace, Streams: f.Streams})
	}
	return out
}
