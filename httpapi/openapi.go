package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPI describes both halves of the API (produce at the edge, reads
// in the cloud); each server serves it whole.
//
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI is the OpenAPI 3 document of the HTTP API.
func OpenAPI() []byte { return openAPI }

func registerOpenAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(openAPI)
	})
}
