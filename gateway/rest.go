package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// The REST face: a plain-HTTP view of the tools for clients that do not
// speak MCP. It goes through ListTools and CallTool like every other face.
const (
	restTools   = "/mcp/v1/tools"
	restExecute = "/mcp/v1/execute"
	restSpec    = "/mcp/v1/spec"
)

// restRoutes mounts the REST face on mux.
func (g *Gateway) restRoutes(mux *http.ServeMux, base policy.Principal) {
	who := func(r *http.Request) policy.Principal {
		return principalOf(base, TransportREST, &mcp.RequestExtra{Header: r.Header, TokenInfo: auth.TokenInfoFromContext(r.Context())})
	}
	mux.HandleFunc("GET "+restTools, func(w http.ResponseWriter, r *http.Request) {
		tools, err := g.ListTools(r.Context(), who(r))
		if err != nil {
			writeRESTError(w, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"tools": tools})
	})
	mux.HandleFunc("POST "+restExecute, func(w http.ResponseWriter, r *http.Request) {
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&call); err != nil {
			writeRESTError(w, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the body must be {\"name\": ..., \"arguments\": {...}}: " + err.Error()})
			return
		}
		if call.Name == "" {
			writeRESTError(w, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "name is missing"})
			return
		}
		args, err := decodeArguments(call.Arguments)
		if err != nil {
			writeRESTError(w, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()})
			return
		}
		res, err := g.CallTool(r.Context(), who(r), call.Name, args)
		if err != nil {
			writeRESTError(w, restError(err))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": res})
	})
	mux.HandleFunc("GET "+restSpec, func(w http.ResponseWriter, r *http.Request) {
		tools, err := g.ListTools(r.Context(), who(r))
		if err != nil {
			writeRESTError(w, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, openAPISpec(tools))
	})
}

// restError maps a CallTool error to the REST face's JSON-RPC codes: an
// unknown tool — and a hidden one, indistinguishably — is -32601, invalid
// parameters -32602, anything else an execution failure, -32603.
func restError(err error) *jsonrpc.Error {
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	var unknown *unknownTool
	if errors.As(err, &unknown) {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: rpcErr.Message}
	}
	switch rpcErr.Code {
	case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound:
		return rpcErr
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: rpcErr.Message}
}

func writeRESTError(w http.ResponseWriter, e *jsonrpc.Error) {
	status := http.StatusInternalServerError
	switch e.Code {
	case jsonrpc.CodeMethodNotFound:
		status = http.StatusNotFound
	case jsonrpc.CodeInvalidParams:
		status = http.StatusBadRequest
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		http.Error(w, fmt.Sprintf(`{"error":{"code":%d,"message":"encode response"}}`, jsonrpc.CodeInternalError), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// openAPISpec describes the REST face for the tools the caller may see:
// the execute body is one of the tools, each with its own input schema.
func openAPISpec(tools []*mcp.Tool) map[string]any {
	bodies := []any{}
	schemas := map[string]any{
		"Error": map[string]any{
			"type":     "object",
			"required": []string{"error"},
			"properties": map[string]any{"error": map[string]any{
				"type":       "object",
				"required":   []string{"code", "message"},
				"properties": map[string]any{"code": map[string]any{"type": "integer"}, "message": map[string]any{"type": "string"}},
			}},
		},
	}
	for _, t := range tools {
		ref := "tool." + t.Name
		schemas[ref] = map[string]any{
			"type":        "object",
			"description": t.Description,
			"required":    []string{"name"},
			"properties": map[string]any{
				"name":      map[string]any{"const": t.Name},
				"arguments": t.InputSchema,
			},
		}
		bodies = append(bodies, map[string]any{"$ref": "#/components/schemas/" + ref})
	}
	errorResponse := func(what string) map[string]any {
		return map[string]any{"description": what, "content": map[string]any{"application/json": map[string]any{
			"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "mcp-warden tools", "version": Version},
		"paths": map[string]any{
			restTools: map[string]any{"get": map[string]any{
				"summary": "The tools the caller may see",
				"responses": map[string]any{"200": map[string]any{"description": "the tools", "content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"type": "object", "properties": map[string]any{"tools": map[string]any{"type": "array"}}}}}}},
			}},
			restExecute: map[string]any{"post": map[string]any{
				"summary":     "Call a tool",
				"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"oneOf": bodies}}}},
				"responses": map[string]any{
					"200": map[string]any{"description": "the tool's CallToolResult", "content": map[string]any{"application/json": map[string]any{
						"schema": map[string]any{"type": "object", "required": []string{"result"}, "properties": map[string]any{"result": map[string]any{"type": "object"}}}}}},
					"400": errorResponse("invalid parameters (-32602)"),
					"404": errorResponse("unknown tool (-32601)"),
					"500": errorResponse("execution failure (-32603)"),
				},
			}},
			restSpec: map[string]any{"get": map[string]any{
				"summary":   "This document",
				"responses": map[string]any{"200": map[string]any{"description": "an OpenAPI 3.1 document"}},
			}},
		},
		"components": map[string]any{"schemas": schemas},
	}
}
