package gateway

import "time"

// Config is the whole configuration of a gateway: the upstream servers, how
// tool-name conflicts are resolved, where policy comes from, where decisions
// are logged and where clients connect.
//
// A Config is loaded by LoadConfig (YAML or Claude-Desktop JSON) or
// ConfigFromAgentEnv, and checked by Validate; New validates again.
type Config struct {
	// Servers are the upstream MCP servers, in priority order (the order
	// matters for NamingFirst).
	Servers []ServerConfig `yaml:"servers" json:"servers"`
	// Naming says how two upstream tools with the same name are exposed.
	// Empty means NamingPrefix.
	Naming NamingMode `yaml:"naming" json:"naming"`
	// Policy says where the Rego policy comes from. Empty means the
	// embedded default policy.
	Policy PolicyConfig `yaml:"policy" json:"policy"`
	// DecisionLog says where decisions are written. Empty path means
	// standard error.
	DecisionLog DecisionLogConfig `yaml:"decision_log" json:"decision_log"`
	// Listeners are the downstream faces of the gateway.
	Listeners []ListenerConfig `yaml:"listeners" json:"listeners"`
	// Principal is the identity of the client on listeners that carry no
	// credentials (stdio, and HTTP until authentication is configured).
	Principal PrincipalConfig `yaml:"principal" json:"principal"`

	// source names where the config was read from, for error messages.
	source string
}

// ServerConfig describes one upstream stdio MCP server.
type ServerConfig struct {
	// Name identifies the server in tool prefixes, policy input and logs:
	// 1–64 characters of [A-Za-z0-9_-].
	Name string `yaml:"name" json:"name"`
	// Command is the program to run; it is never run through a shell.
	Command string `yaml:"command" json:"command"`
	// Args are the program's arguments.
	Args []string `yaml:"args" json:"args"`
	// Cwd is the working directory; empty means the gateway's own.
	Cwd string `yaml:"cwd" json:"cwd"`
	// Env is the server's environment beyond the fixed minimal base. Nothing
	// of the gateway's own environment is inherited.
	Env map[string]string `yaml:"env" json:"env"`
	// Secrets maps a variable name in the server's environment to the name
	// of a host environment variable it is read from at start. Secret values
	// never appear in logs or policy input.
	Secrets map[string]string `yaml:"secrets" json:"secrets"`
	// CallTimeout bounds every tools/call to this server. Zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration `yaml:"call_timeout" json:"call_timeout"`
	// Tools holds the allow and block lists handed to the policy as data.
	Tools ToolFilter `yaml:"tools" json:"tools"`
}

// ToolFilter is an allow list and a block list of tool-name glob patterns.
// The gateway does not enforce them itself: they are data for the policy,
// where the default policy exposes allow − block and nothing when allow is
// empty.
type ToolFilter struct {
	Allow []string `yaml:"allow" json:"allow"`
	Block []string `yaml:"block" json:"block"`
}

// NamingMode says how tool-name conflicts between upstream servers are
// resolved.
type NamingMode string

const (
	// NamingPrefix exposes every tool as "<server>__<tool>".
	NamingPrefix NamingMode = "prefix"
	// NamingFirst exposes tools under their own names; on a conflict the
	// server listed first wins and the other tool is not exposed.
	NamingFirst NamingMode = "first"
)

// PolicyConfig says where the policy comes from and which engine runs it.
type PolicyConfig struct {
	// Path is a directory of .rego/.json files or a bundle (.tar.gz). Empty
	// means the embedded default policy.
	Path string `yaml:"path" json:"path"`
	// Engine is "rego" (OPA's evaluator) or "wasm" (the policy compiled to
	// WebAssembly and run by mcp-warden's Wasm host; Path may then also be
	// a bundle built with `opa build -t wasm -e mcp/warden/decision`).
	// Empty means "rego". Both make the same decisions.
	Engine string `yaml:"engine" json:"engine"`
}

// DecisionLogConfig says where decision events are written.
type DecisionLogConfig struct {
	// Path is the file decision events are appended to, one JSON line each.
	// Empty means standard error.
	Path string `yaml:"path" json:"path"`
}

// ListenerConfig is one downstream face: stdio, or streamable HTTP on an
// address. Exactly one of the two is set.
type ListenerConfig struct {
	Stdio bool   `yaml:"stdio" json:"stdio"`
	HTTP  string `yaml:"http" json:"http"`
}

// PrincipalConfig is a configured client identity.
type PrincipalConfig struct {
	ID     string         `yaml:"id" json:"id"`
	Claims map[string]any `yaml:"claims" json:"claims"`
}

// DefaultCallTimeout bounds a tools/call when the server sets no CallTimeout.
const DefaultCallTimeout = 60 * time.Second

// DefaultPrincipalID is the principal of clients when none is configured.
const DefaultPrincipalID = "anonymous"
