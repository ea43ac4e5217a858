// Package policy is the decision contract of mcp-warden: the input document
// every decision is made on, the decision itself, the engines that evaluate
// Rego into decisions, and the decision log that records each one.
//
// Every tools/list exposure and every tools/call goes through Decider.Decide
// (or Decider.DecideAll for a list), which evaluates the policy's single
// entry point, data.mcp.warden.decision, and logs the outcome before
// returning it. Any evaluation error or undefined result is a denial.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Action is what a decision is about.
type Action string

const (
	// ActionToolsList decides whether one tool is exposed in a tools/list.
	ActionToolsList Action = "tools/list"
	// ActionToolsCall decides whether one tools/call may proceed.
	ActionToolsCall Action = "tools/call"
	// ActionResourcesList decides whether one resource or resource template
	// is exposed in a resources/list or resources/templates/list.
	ActionResourcesList Action = "resources/list"
	// ActionResourcesRead decides whether one resources/read (or a
	// subscription to the resource) may proceed.
	ActionResourcesRead Action = "resources/read"
	// ActionPromptsList decides whether one prompt is exposed in a
	// prompts/list.
	ActionPromptsList Action = "prompts/list"
	// ActionPromptsGet decides whether one prompts/get may proceed.
	ActionPromptsGet Action = "prompts/get"
)

// Input is the document the policy sees as `input`. Its JSON form is
// described field by field in the README and in policy/input.schema.json.
type Input struct {
	// Action is what is decided: tools/list, tools/call, resources/list,
	// resources/read, prompts/list or prompts/get.
	Action Action `json:"action"`
	// Principal is who is asking.
	Principal Principal `json:"principal"`
	// Server is the upstream server the tool belongs to.
	Server Server `json:"server"`
	// Tool is the tool being exposed or called (tools/* actions only).
	Tool *Tool `json:"tool,omitempty"`
	// Resource is the resource or template being exposed or read
	// (resources/* actions only).
	Resource *Resource `json:"resource,omitempty"`
	// Prompt is the prompt being exposed or got (prompts/* actions only).
	Prompt *Prompt `json:"prompt,omitempty"`
	// Arguments are the tools/call or prompts/get arguments, exactly as the
	// client sent them; absent for list actions.
	Arguments map[string]any `json:"arguments,omitempty"`
	// RequestID is the JSON-RPC id of the client's request, when it has one.
	RequestID string `json:"request_id,omitempty"`
	// SessionID is the MCP session of the client, when it has one.
	SessionID string `json:"session_id,omitempty"`
	// Time is when the request was received, RFC 3339 with nanoseconds.
	Time string `json:"time"`
}

// Principal is the identity of the calling client.
type Principal struct {
	// ID names the client (a configured id, or a token's subject).
	ID string `json:"id"`
	// Claims are what is known about the client beyond its id: the
	// configured claims, a verified JWT's claims, or a verified client
	// certificate's description (subject, issuer, serial, SANs).
	Claims map[string]any `json:"claims,omitempty"`
	// AuthMethod is how the client was authenticated: "api_key", "jwt",
	// "mtls" (client certificate), or "none" when no credentials were checked (a configured principal).
	AuthMethod string `json:"auth_method"`
	// Transport is the downstream transport: "stdio", "streamable-http",
	// "sse" (legacy HTTP+SSE), "rest" (the REST face) or "api" (the Go
	// embedding API).
	Transport string `json:"transport"`
}

// Server describes the upstream server as configured and as confined.
type Server struct {
	// Name is the configured server name.
	Name string `json:"name"`
	// Command is the program and Args its arguments. Secret values never
	// appear here (they are passed through the environment only).
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// URL is the endpoint of a remote server (instead of Command).
	URL string `json:"url,omitempty"`
	// Confinement states the protections the server actually runs under.
	Confinement Confinement `json:"confinement"`
}

// Confinement is the set of protections a server actually runs under, as
// reported by the sandbox that spawned it, so that policy can refuse tools
// of a weakly confined server.
type Confinement struct {
	// ProcessGroup: the server runs in its own process group.
	ProcessGroup bool `json:"process_group"`
	// PIDNamespace: the server runs in its own PID namespace, so its whole
	// tree dies with it.
	PIDNamespace bool `json:"pid_namespace"`
	// ParentDeathSignal: the server is killed if the gateway dies.
	ParentDeathSignal bool `json:"parent_death_signal"`
	// EnvironmentInherited: the server inherited the gateway's environment.
	// mcp-warden never does this; the field exists so policy can insist.
	EnvironmentInherited bool `json:"environment_inherited"`
	// Level sums up the confinement: "strong" (every namespace, Landlock,
	// seccomp, no_new_privs, no capabilities), "partial" or "weak" (process
	// group and parent-death signal only).
	Level string `json:"level"`
	// The namespaces the server runs in.
	UserNamespace    bool `json:"user_namespace"`
	MountNamespace   bool `json:"mount_namespace"`
	NetworkNamespace bool `json:"network_namespace"`
	IPCNamespace     bool `json:"ipc_namespace"`
	UTSNamespace     bool `json:"uts_namespace"`
	// Landlock is the Landlock ABI version enforcing the filesystem rules,
	// 0 when none.
	Landlock int `json:"landlock"`
	// Seccomp: the syscall denylist and 32-bit guard are loaded.
	Seccomp bool `json:"seccomp"`
	// NoNewPrivs and CapabilitiesDropped: no privilege can be gained.
	NoNewPrivs          bool `json:"no_new_privs"`
	CapabilitiesDropped bool `json:"capabilities_dropped"`
	// Cgroup: "limits", "kill" or "" (see the README).
	Cgroup string `json:"cgroup"`
	// Network: "none", "proxy" (none plus the egress allowlist proxy) or "host".
	Network string `json:"network"`
	// Missing names each protection not achieved, with the kernel's reason.
	Missing []string `json:"missing,omitempty"`
}

// Tool is a tool definition as the upstream server declared it, with the
// name it is exposed under.
type Tool struct {
	// Name is the name clients see (possibly prefixed with the server).
	Name string `json:"name"`
	// UpstreamName is the name the upstream server declared.
	UpstreamName string `json:"upstream_name"`
	// Description is the upstream description, verbatim.
	Description string `json:"description,omitempty"`
	// InputSchema is the upstream JSON Schema of the arguments.
	InputSchema any `json:"input_schema,omitempty"`
	// Annotations are the upstream hints (untrusted).
	Annotations any `json:"annotations,omitempty"`
	// SHA256 is the hex sha256 of the upstream definition in canonical JSON
	// (see DefinitionHash), so policy can pin definitions.
	SHA256 string `json:"sha256"`
}

// Resource is a resource (or resource template) as the upstream server
// declared it. Resource URIs are not renamed by the gateway.
type Resource struct {
	// URI is the resource's URI; for a template, its URI template.
	URI string `json:"uri"`
	// Template is true when URI is an RFC 6570 URI template.
	Template bool `json:"template,omitempty"`
	// Name and MIMEType are the upstream's declaration, when known (a read
	// of a URI no listed resource declares has neither).
	Name     string `json:"name,omitempty"`
	MIMEType string `json:"mime_type,omitempty"`
}

// Prompt is a prompt as the upstream server declared it, with the name it
// is exposed under.
type Prompt struct {
	// Name is the name clients see (possibly prefixed with the server).
	Name string `json:"name"`
	// UpstreamName is the name the upstream server declared.
	UpstreamName string `json:"upstream_name"`
	// Description is the upstream description, verbatim.
	Description string `json:"description,omitempty"`
}

// DefinitionHash returns the hex sha256 of a tool definition's canonical
// JSON encoding (Go's encoding/json sorts map keys, so the encoding of a
// decoded definition is canonical).
func DefinitionHash(definition any) (string, error) {
	b, err := json.Marshal(definition)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Timestamp formats t as input.time does.
func Timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
