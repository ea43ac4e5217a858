package gateway

import (
	"time"

	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/sandbox"
)

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
	// RemoteProxy is the Proxy of every remote server that sets none.
	// Empty means ProxyNone: remote servers are reached directly, and
	// proxy variables in the gateway's environment are ignored.
	RemoteProxy string `yaml:"remote_proxy" json:"remote_proxy"`
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
	// credentials (stdio, and HTTP when Auth is not configured).
	Principal PrincipalConfig `yaml:"principal" json:"principal"`
	// Auth makes HTTP listeners require credentials. Empty means HTTP
	// clients act as Principal.
	Auth AuthConfig `yaml:"auth" json:"auth"`
	// Metrics says where Prometheus metrics are served. Empty means
	// nowhere.
	Metrics MetricsConfig `yaml:"metrics" json:"metrics"`
	// InputRequests bounds the tools/call of 2026-07-28 clients that a
	// server of an older era asks for input while serving (see
	// InputRequestsConfig). Empty means the defaults.
	InputRequests InputRequestsConfig `yaml:"input_requests" json:"input_requests"`

	// source names where the config was read from, for error messages.
	source string
}

// ServerConfig describes one upstream MCP server: a stdio program the
// gateway runs confined (Command), or a remote server it connects to (URL).
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
	// Restart says whether a stdio server whose process exits is started
	// again, and with which backoff (see RestartConfig).
	Restart RestartConfig `yaml:"restart" json:"restart"`
	// Instances says whether the server runs once for every client (the
	// default) or once per principal (see InstancesConfig).
	Instances InstancesConfig `yaml:"instances" json:"instances"`
	// Tools holds the allow and block lists handed to the policy as data.
	Tools ToolFilter `yaml:"tools" json:"tools"`
	// Sandbox is the server's confinement profile: mode (require or
	// best_effort), read_only and read_write paths, network (none or host),
	// min_landlock_abi and limits. Empty means the default profile (see
	// sandbox.Profile).
	Sandbox sandbox.Profile `yaml:"sandbox" json:"sandbox"`
	// Resources and Prompts are the same for resource URIs and prompt
	// names (data.warden.servers[name].resources and .prompts).
	Resources ToolFilter `yaml:"resources" json:"resources"`
	Prompts   ToolFilter `yaml:"prompts" json:"prompts"`
	// URL is the endpoint of a remote server, instead of Command.
	URL string `yaml:"url" json:"url"`
	// Transport is how URL is spoken: "streamable-http" (the default) or
	// "sse" (the deprecated HTTP+SSE transport).
	Transport string `yaml:"transport" json:"transport"`
	// Headers are sent with every request to URL. Together with
	// HeaderSecrets they are the only credentials a remote server sees: a
	// client's own are never forwarded. Put nothing secret here: use
	// HeaderSecrets.
	Headers map[string]string `yaml:"headers" json:"headers"`
	// HeaderSecrets are headers whose values are read at start from a host
	// environment variable or a file (an API key, a bearer token), so that
	// the config holds no secret; their values never appear in logs.
	HeaderSecrets map[string]HeaderSecret `yaml:"header_secrets" json:"header_secrets"`
	// AllowPrivateNetwork lets URL reach loopback, private, link-local,
	// shared (CGNAT) and cloud-metadata addresses, which are refused by
	// default so that a remote server entry cannot be pointed at the
	// gateway's own network (SSRF). Set it for a server you run next to
	// the gateway.
	AllowPrivateNetwork bool `yaml:"allow_private_network" json:"allow_private_network"`
	// Proxy says how URL is reached: ProxyNone ("none": directly, whatever
	// the environment says), ProxyEnvironment ("environment": through the
	// proxy HTTPS_PROXY/HTTP_PROXY name, unless NO_PROXY exempts the host)
	// or an http(s) proxy URL, http://[user:password@]host:port. Empty
	// means Config.RemoteProxy. The password is never logged; prefer
	// "environment" to keep it out of the config file.
	Proxy string `yaml:"proxy" json:"proxy"`
	// CAFile holds the PEM CA certificates an https URL's certificate must
	// chain to, instead of the system's roots: a server behind a private
	// CA, trusted without trusting that CA for anything else.
	CAFile string `yaml:"ca_file" json:"ca_file"`
}

// HeaderSecret says where a secret header value is read from: exactly one
// of Env (a host environment variable) and File (a file whose content,
// without a trailing newline, is the value). Prefix goes before it, e.g.
// "Bearer ".
type HeaderSecret struct {
	Env    string `yaml:"env" json:"env"`
	File   string `yaml:"file" json:"file"`
	Prefix string `yaml:"prefix" json:"prefix"`
}

// Remote server transports (ServerConfig.Transport).
const (
	RemoteStreamableHTTP = "streamable-http"
	RemoteSSE            = "sse"
)

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
	// Wasm tunes the wasm engine; the zero value is the default.
	Wasm WasmConfig `yaml:"wasm" json:"wasm"`
}

// WasmConfig tunes the wasm engine (policy.engine: wasm).
type WasmConfig struct {
	// Timeout bounds one evaluation: a policy that runs longer is a denial
	// ("policy evaluation timed out") and its instance is replaced. Zero
	// means one second.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// MemoryLimitPages caps each instance's memory in 64 KiB pages: a
	// policy that needs more is a denial ("policy evaluation exceeded the
	// memory limit"). Zero means 1024 (64 MiB); at most 65535.
	MemoryLimitPages int `yaml:"memory_limit_pages" json:"memory_limit_pages"`
	// CacheDir keeps compiled machine code across restarts (relative to
	// the configuration file). Empty means the user's cache directory
	// (~/.cache/mcp-warden/wasm), "-" none. An
	// existing directory must belong to the gateway's user and be writable
	// by no one else.
	CacheDir string `yaml:"cache_dir" json:"cache_dir"`
	// Instances bounds concurrent evaluations (one per instance). Zero
	// means the number of CPUs the gateway may use (GOMAXPROCS).
	Instances int `yaml:"instances" json:"instances"`
}

// options are the engine options of c.
func (c WasmConfig) options() policy.WasmOptions {
	return policy.WasmOptions{
		CacheDir:         c.CacheDir,
		Instances:        c.Instances,
		Timeout:          c.Timeout,
		MemoryLimitPages: uint32(c.MemoryLimitPages),
	}
}

// DecisionLogConfig says where decision events are written and how
// durably.
type DecisionLogConfig struct {
	// Path is the file decision events are appended to, one JSON line each.
	// Empty means standard error.
	Path string `yaml:"path" json:"path"`
	// Fsync is "interval" (default: each event is written before its
	// response is released and fsynced within FsyncInterval), "always"
	// (fsynced before the response) or "never" (left to the kernel).
	Fsync string `yaml:"fsync" json:"fsync"`
	// FsyncInterval is the delay of "interval"; zero means one second.
	FsyncInterval time.Duration `yaml:"fsync_interval" json:"fsync_interval"`
	// MaxBytes rotates the file before it grows larger; zero never rotates.
	MaxBytes int64 `yaml:"max_bytes" json:"max_bytes"`
	// OnError is "deny" (default: a decision whose event cannot be written
	// is a denial) or "allow" (fail open: the decision stands).
	OnError string `yaml:"on_error" json:"on_error"`
	// Upload also sends every record to an OPA-compatible decision-log
	// service when its URL is set.
	Upload DecisionLogUploadConfig `yaml:"upload" json:"upload"`
}

// DecisionLogUploadConfig says where decision-log records are uploaded:
// POSTed in gzipped JSON-array batches to <url>/logs, as OPA's decision-log
// plugin does, in the background, retried with backoff, never holding up a
// decision.
type DecisionLogUploadConfig struct {
	// URL is the service's base URL (http or https).
	URL string `yaml:"url" json:"url"`
	// BufferEvents bounds the records waiting for upload; when it is full
	// the oldest are dropped and counted. Zero means 10000.
	BufferEvents int `yaml:"buffer_events" json:"buffer_events"`
	// Interval is how long a record may wait to be batched with later
	// ones. Zero means one second.
	Interval time.Duration `yaml:"interval" json:"interval"`
	// MaxRecordBytes leaves larger records out of the upload (they stay
	// in the file and count as dropped). Zero: no limit.
	MaxRecordBytes int `yaml:"max_record_bytes" json:"max_record_bytes"`
	// MaxDecisionsPerSecond bounds the records uploaded per second, as
	// OPA's decision_logs.reporting.max_decisions_per_second; the others
	// stay in the file and count as dropped. Zero: no limit.
	MaxDecisionsPerSecond float64 `yaml:"max_decisions_per_second" json:"max_decisions_per_second"`
	// BearerTokenFile holds the token the log service expects, sent as
	// "Authorization: Bearer <token>" (read at start, surrounding
	// whitespace trimmed; never logged, and redacted from events).
	BearerTokenFile string `yaml:"bearer_token_file" json:"bearer_token_file"`
}

// ListenerConfig is one downstream face: stdio, or streamable HTTP on an
// address. Exactly one of the two is set.
type ListenerConfig struct {
	Stdio bool   `yaml:"stdio" json:"stdio"`
	HTTP  string `yaml:"http" json:"http"`
	// AllowedOrigins are browser origins (scheme://host[:port]) an HTTP
	// listener accepts besides same-origin and, on loopback, loopback ones.
	AllowedOrigins []string `yaml:"allowed_origins" json:"allowed_origins"`
	// TLS, when set, serves the HTTP listener over TLS, optionally
	// verifying client certificates (mTLS).
	TLS *ListenerTLSConfig `yaml:"tls" json:"tls"`
}

// ListenerTLSConfig is the TLS of one HTTP listener. With ClientCAFile set,
// a client certificate signed by one of its CAs identifies the client (auth
// method "mtls"); RequireClientCert refuses, in the TLS handshake, clients
// presenting none.
type ListenerTLSConfig struct {
	// CertFile and KeyFile are the listener's PEM certificate (chain) and
	// private key.
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
	// ClientCAFile holds the PEM CA certificates client certificates must
	// chain to; empty: client certificates are not asked for.
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
	// RequireClientCert fails the handshake of clients without a
	// certificate from ClientCAFile's CAs.
	RequireClientCert bool `yaml:"require_client_cert" json:"require_client_cert"`
	// ClientCRLFile holds certificate revocation lists (PEM "X509 CRL"
	// blocks, or one DER list) of ClientCAFile's CAs. With it, every
	// client certificate and intermediate CA is checked in the handshake:
	// one revoked, or issued by a CA without a list here, or whose list is
	// past its next update, is refused. The file is read again when it
	// changes.
	ClientCRLFile string `yaml:"client_crl_file" json:"client_crl_file"`
}

// MetricsConfig says where the Prometheus /metrics endpoint is served.
type MetricsConfig struct {
	// HTTP is the host:port serving /metrics. The address of an HTTP
	// listener serves it there, behind that listener's authentication;
	// any other address gets a listener of its own, without
	// authentication, so bind it to loopback or a private network.
	HTTP string `yaml:"http" json:"http"`
}

// PrincipalConfig is a configured client identity.
type PrincipalConfig struct {
	ID     string         `yaml:"id" json:"id"`
	Claims map[string]any `yaml:"claims" json:"claims"`
}

// AuthConfig says which credentials HTTP clients must present: a static
// API key, or a JWT from an OAuth authorization server. With either set,
// every HTTP request without valid credentials is answered 401.
type AuthConfig struct {
	// Resource is the public URL of the MCP endpoint, e.g.
	// https://mcp.example.com/mcp: the "resource" of the RFC 9728
	// protected-resource metadata, and the default JWT audience.
	Resource string `yaml:"resource" json:"resource"`
	// APIKeys are static bearer tokens, each kept only as its sha256.
	APIKeys []APIKeyConfig `yaml:"api_keys" json:"api_keys"`
	// JWT accepts bearer JWTs when its Issuer is set.
	JWT JWTConfig `yaml:"jwt" json:"jwt"`
}

// Enabled reports whether HTTP clients must authenticate.
func (a AuthConfig) Enabled() bool { return len(a.APIKeys) > 0 || a.JWT.Issuer != "" }

// APIKeyConfig is one static bearer token and the principal it stands for.
type APIKeyConfig struct {
	// ID is the principal id of clients presenting this key.
	ID string `yaml:"id" json:"id"`
	// SHA256 is the hex sha256 of the token (sha256sum of the token
	// without a newline); the token itself is never configured.
	SHA256 string         `yaml:"sha256" json:"sha256"`
	Claims map[string]any `yaml:"claims" json:"claims"`
}

// JWTConfig says how bearer JWTs are verified: signature against the keys
// of JWKSFile (a JWKS or PEM public keys) or JWKSURL (fetched, cached and
// refetched when a token names an unknown key id), issuer, audience, expiry
// (required) and not-before.
type JWTConfig struct {
	Issuer string `yaml:"issuer" json:"issuer"`
	// Audience is the required "aud"; empty means Resource.
	Audience string `yaml:"audience" json:"audience"`
	JWKSFile string `yaml:"jwks_file" json:"jwks_file"`
	JWKSURL  string `yaml:"jwks_url" json:"jwks_url"`
	// SubjectClaim holds the principal id; empty means "sub".
	SubjectClaim string `yaml:"subject_claim" json:"subject_claim"`
	// RequiredScopes must all be among a token's scopes (its "scope"
	// claim, space-separated, or "scp"); a valid token that lacks one is
	// answered 403 insufficient_scope (RFC 6750). API keys and client
	// certificates carry no scopes and are not checked.
	RequiredScopes []string `yaml:"required_scopes" json:"required_scopes"`
}

// InputRequestsConfig bounds the calls the gateway holds for 2026-07-28
// clients: when a server that speaks only an older era sends elicitation,
// sampling or roots requests during such a client's tools/call, the
// gateway answers the client with an input_required result and keeps the
// server's call open until the client retries with its answers.
type InputRequestsConfig struct {
	// Timeout is how long a held call waits for the client's retry before
	// it is cancelled on the server. Zero means DefaultInputTimeout.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// MaxPerPrincipal is how many calls one principal may have held at
	// once; a server's request beyond it is refused. Zero means
	// DefaultMaxHeldPerPrincipal.
	MaxPerPrincipal int `yaml:"max_per_principal" json:"max_per_principal"`
	// MaxHeld is how many calls all principals together may have held.
	// Zero means DefaultMaxHeld.
	MaxHeld int `yaml:"max_held" json:"max_held"`
}

// Defaults of InputRequestsConfig.
const (
	DefaultInputTimeout        = 2 * time.Minute
	DefaultMaxHeldPerPrincipal = 8
	DefaultMaxHeld             = 256
)

// DefaultCallTimeout bounds a tools/call when the server sets no CallTimeout.
const DefaultCallTimeout = 60 * time.Second

// DefaultPrincipalID is the principal of clients when none is configured.
const DefaultPrincipalID = "anonymous"
