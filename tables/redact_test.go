package tables

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://ops:hunter2@db:5432/cat?sslmode=require", "postgres://ops:xxxxx@db:5432/cat?sslmode=require"},
		{"postgres://db/cat?user=ops&password=hunter2", "postgres://db/cat?password=xxxxx&user=ops"},
		{"postgresql://db/cat?sslpassword=hunter2&sslmode=verify-full", "postgresql://db/cat?sslmode=verify-full&sslpassword=xxxxx"},
		{"host=db user=ops password=hunter2 dbname=cat", "host=db user=ops password=xxxxx dbname=cat"},
		{"host=db password='hun ter2' dbname=cat", "host=db password=xxxxx dbname=cat"},
		{"sqlite:///var/lib/tributary/catalog.db", "sqlite:///var/lib/tributary/catalog.db"},
		{"https://cloud:8181?token=abc", "https://cloud:8181?token=xxxxx"},
	} {
		got := Redact(tc.in)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "hunter2") || strings.Contains(got, "hun ter2") {
			t.Errorf("secret left in %q", got)
		}
	}
}
