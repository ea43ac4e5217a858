package gateway

import (
	"net/http"

	"github.com/mcp-warden/mcp-warden/policy"
)

// restRoutes mounts the REST face (GET /mcp/v1/tools, POST
// /mcp/v1/execute, GET /mcp/v1/spec).
func (g *Gateway) restRoutes(mux *http.ServeMux, principal policy.Principal) {}
