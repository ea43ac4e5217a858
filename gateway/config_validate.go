package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-warden/mcp-warden/gateway/internal/authn"
	"github.com/mcp-warden/mcp-warden/policy"
	"github.com/mcp-warden/mcp-warden/sandbox"
)

// This file holds ConfigError, the defaults and the one place a Config is
// checked.

// ConfigError is one problem in a configuration: where it is, what is wrong
// and how to fix it. LoadConfig, ConfigFromAgentEnv and Validate return a
// *ConfigError, or several joined with errors.Join (errors.As reaches the
// first). Its message never contains secret or environment values.
type ConfigError struct {
	// Source is the file as given to LoadConfig, "environment" for
	// ConfigFromAgentEnv, or "config" for a Config built in code.
	Source string
	// Line is the 1-based line in Source; 0 when unknown.
	Line int
	// Key is the path of the offending key, e.g. "servers[1].command", or
	// the variable name for the environment; empty for the whole source.
	Key string
	// Problem says what is wrong; Fix says what to do about it.
	Problem string
	Fix     string
	// Err is the underlying error, if any (e.g. fs.ErrNotExist).
	Err error
}

// Error formats the problem as "source:line: key: problem; fix".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(cmp.Or(e.Source, "config"))
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// maxReportedProblems bounds the problems one error lists; a file with
// thousands of mistakes needs the first few fixed, not a screenful.
const maxReportedProblems = 20

// joinConfigErrors returns nil, the only error, or the first
// maxReportedProblems joined.
func joinConfigErrors(errs []*ConfigError) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	var all []error
	for _, e := range errs[:min(len(errs), maxReportedProblems)] {
		all = append(all, e)
	}
	if n := len(errs) - maxReportedProblems; n > 0 {
		all = append(all, &ConfigError{Source: errs[0].Source, Problem: fmt.Sprintf("%d more problems not shown", n),
			Fix: "fix the ones above first"})
	}
	return errors.Join(all...)
}

// SetDefaults fills the fields whose zero value stands for a default:
// Naming (NamingPrefix), Policy.Engine ("rego"), Principal.ID
// (DefaultPrincipalID) and each server's CallTimeout (DefaultCallTimeout).
// LoadConfig and ConfigFromAgentEnv call it; Validate does not, and accepts
// the zero values. It modifies c.
func (c *Config) SetDefaults() {
	c.Naming = cmp.Or(c.Naming, NamingPrefix)
	c.Policy.Engine = cmp.Or(c.Policy.Engine, policy.EngineRego)
	c.Principal.ID = cmp.Or(c.Principal.ID, DefaultPrincipalID)
	for i := range c.Servers {
		c.Servers[i].CallTimeout = cmp.Or(c.Servers[i].CallTimeout, DefaultCallTimeout)
		if c.Servers[i].URL != "" {
			c.Servers[i].Proxy = cmp.Or(c.Servers[i].Proxy, c.RemoteProxy, ProxyNone)
		}
	}
}

// --- validation ----------------------------------------------------------

const proxyFix = `write none, environment, or the proxy's URL, e.g. http://proxy.example:3128`

// Validate checks c and returns every problem found, as a *ConfigError or
// several joined; nil means c is usable. It does not apply defaults (see
// SetDefaults) and does not modify c, so it is safe to call concurrently.
// Messages name c's source file when c came from LoadConfig.
func (c *Config) Validate() error {
	return joinConfigErrors(c.validate())
}

func (c *Config) validate() []*ConfigError {
	if c == nil {
		return []*ConfigError{{Source: "config", Problem: "no configuration", Fix: "load one with LoadConfig"}}
	}
	var errs []*ConfigError
	bad := func(key, problem, fix string) {
		errs = append(errs, &ConfigError{Source: cmp.Or(c.source, "config"), Key: key, Problem: problem, Fix: fix})
	}
	noNUL := func(key, what, s string) {
		if strings.ContainsRune(s, 0) {
			bad(key, what+" contains a NUL byte", "remove it: programs cannot receive it")
		}
	}

	if p := c.RemoteProxy; p != "" && p != ProxyNone && p != ProxyEnvironment {
		if _, err := parseProxyURL(p); err != nil {
			bad("remote_proxy", err.Error(), proxyFix)
		}
	}
	if len(c.Servers) == 0 {
		bad("servers", "no servers configured",
			`add at least one, e.g. servers: [{name: files, command: npx, args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]}]`)
	}
	firstWithName := map[string]int{}
	for i, s := range c.Servers {
		key := indexKey("servers", i)
		switch j, dup := firstWithName[s.Name]; {
		case s.Name == "":
			bad(key+".name", "missing", "name the server with 1–64 letters, digits, '-' or '_', e.g. name: github")
		case !validName(s.Name, 64):
			bad(key+".name", fmt.Sprintf("%q is not a valid server name", s.Name), "use 1–64 letters, digits, '-' or '_'")
		case dup:
			bad(key+".name", fmt.Sprintf("%q is already the name of servers[%d]", s.Name, j), "give each server its own name")
		default:
			firstWithName[s.Name] = i
			if c.Naming != NamingFirst {
				for _, p := range reservedToolPrefixes {
					if strings.HasPrefix(s.Name+prefixSeparator, p) {
						bad(key+".name", fmt.Sprintf("%q would put its tools under the reserved prefix %q", s.Name, p), "rename the server")
					}
				}
			}
		}
		switch remote := s.URL != ""; {
		case remote && s.Command != "":
			bad(key, "sets both command and url", "a server is either a program to run (command) or a remote endpoint (url): keep one")
		case remote:
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(key+".url", fmt.Sprintf("%q is not an http(s) URL", s.URL), "write the server's endpoint, e.g. https://mcp.example.com/mcp")
			}
			if s.Transport != "" && s.Transport != RemoteStreamableHTTP && s.Transport != RemoteSSE {
				bad(key+".transport", fmt.Sprintf("%q is not a remote transport", s.Transport), "use streamable-http (the default) or sse")
			}
			for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
				if name == "" || strings.ContainsAny(name+s.Headers[name], "\r\n\x00") || strings.ContainsAny(name, " :") {
					bad(pathKey(key+".headers", name), "not a valid HTTP header", "use a header name without spaces or colons, and values on one line")
				}
			}
			for _, name := range slices.Sorted(maps.Keys(s.HeaderSecrets)) {
				hk, hs := pathKey(key+".header_secrets", name), s.HeaderSecrets[name]
				switch {
				case name == "" || strings.ContainsAny(name, " :\r\n\x00") || strings.ContainsAny(hs.Prefix, "\r\n\x00"):
					bad(hk, "not a valid HTTP header", "use a header name without spaces or colons, and a prefix on one line")
				case (hs.Env == "") == (hs.File == ""):
					bad(hk, "needs exactly one of env and file", "name the host variable (env: REMOTE_TOKEN) or the file holding the value (file: /run/secrets/token)")
				case hasHeader(s.Headers, name):
					bad(hk, "is also set in headers", "keep the header in one place: header_secrets for secret values")
				}
			}
			if s.Proxy != "" && s.Proxy != ProxyNone && s.Proxy != ProxyEnvironment {
				if _, err := parseProxyURL(s.Proxy); err != nil {
					bad(key+".proxy", err.Error(), proxyFix)
				}
			}
			if u, err := url.Parse(s.URL); err == nil && s.CAFile != "" && u.Scheme != "https" {
				bad(key+".ca_file", "is set for a URL that is not https", "remove ca_file, or use the server's https URL")
			}
			if u, err := url.Parse(s.URL); err == nil && !s.AllowPrivateNetwork {
				if why := blockedHost(u.Hostname()); why != "" {
					bad(key+".url", fmt.Sprintf("%q points at %s, where remote servers are refused (SSRF)", s.URL, why),
						"set allow_private_network: true on this server if it is yours and meant to be reached there")
				}
			}
		case strings.TrimSpace(s.Command) == "":
			bad(key+".command", "missing", "set the program to run, e.g. npx (it is run directly, not through a shell)")
		}
		if s.URL == "" && (s.Transport != "" || len(s.Headers) > 0 || len(s.HeaderSecrets) > 0 || s.AllowPrivateNetwork || s.Proxy != "" || s.CAFile != "") {
			bad(key, "sets transport, headers, header_secrets, allow_private_network, proxy or ca_file without url", "they apply to remote servers only: set url, or remove them")
		}
		noNUL(key+".command", "the command", s.Command)
		for j, a := range s.Args {
			noNUL(indexKey(key+".args", j), "the argument", a)
		}
		noNUL(key+".cwd", "the directory", s.Cwd)
		for _, name := range slices.Sorted(maps.Keys(s.Env)) {
			if problem := envNameProblem(name); problem != "" {
				bad(key+".env", "variable "+problem, "use a plain variable name such as LOG_LEVEL")
			}
			noNUL(pathKey(key+".env", name), "the value of "+name, s.Env[name])
		}
		for _, name := range slices.Sorted(maps.Keys(s.Secrets)) {
			host := s.Secrets[name]
			if problem := envNameProblem(name); problem != "" {
				bad(key+".secrets", "variable "+problem, "map the server's variable name to a host variable name, e.g. GITHUB_TOKEN: GH_PAT")
				continue
			}
			if problem := envNameProblem(host); problem != "" {
				bad(pathKey(key+".secrets", name), "host variable "+problem, "name the host variable the value is read from, e.g. GH_PAT")
			}
			if _, both := s.Env[name]; both {
				bad(pathKey(key+".secrets", name), name+" is also set in env", "keep it in one place: secrets for values read from the host, env for plain values")
			}
		}
		if pe := (*sandbox.ProfileError)(nil); errors.As(s.Sandbox.Validate(), &pe) {
			bad(key+".sandbox."+pe.Key, pe.Problem, "see the sandbox keys in the README (Confinement)")
		}
		if s.CallTimeout < 0 {
			bad(key+".call_timeout", fmt.Sprintf("negative (%s)", s.CallTimeout), fmt.Sprintf(`use a duration such as "30s", or 0 for the default (%s)`, DefaultCallTimeout))
		}
		s.Restart.problems(key+".restart", s.URL != "", bad)
		s.Instances.problems(key+".instances", bad)
	}

	if c.Naming != "" && c.Naming != NamingPrefix && c.Naming != NamingFirst {
		bad("naming", fmt.Sprintf("%q is not a naming mode", c.Naming),
			"use prefix (tools exposed as <server>__<tool>) or first (the server listed first wins a name conflict)")
	}
	c.validatePolicy(bad)

	dl := c.DecisionLog
	if !slices.Contains([]string{"", "interval", "always", "never"}, dl.Fsync) {
		bad("decision_log.fsync", fmt.Sprintf("%q is not an fsync policy", dl.Fsync), "use interval (the default), always or never")
	}
	if dl.FsyncInterval < 0 {
		bad("decision_log.fsync_interval", fmt.Sprintf("negative (%s)", dl.FsyncInterval), `use a duration such as "1s", or 0 for the default`)
	}
	switch {
	case dl.MaxBytes < 0 || dl.MaxBytes > 0 && dl.MaxBytes < 4096:
		bad("decision_log.max_bytes", fmt.Sprintf("%d is too small to hold records", dl.MaxBytes), "use 0 (never rotate) or at least 4096, e.g. 104857600 for 100 MiB")
	case dl.MaxBytes > 0 && dl.Path == "":
		bad("decision_log.max_bytes", "rotation needs a file", "set decision_log.path, or remove max_bytes")
	}
	if !slices.Contains([]string{"", "deny", "allow"}, dl.OnError) {
		bad("decision_log.on_error", fmt.Sprintf("%q is not deny or allow", dl.OnError), "use deny (the default: no response without its record) or allow (fail open)")
	}
	if up := dl.Upload; up.URL != "" {
		if u, err := url.Parse(up.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("decision_log.upload.url", fmt.Sprintf("%q is not an http(s) URL", up.URL), "write the service's base URL, e.g. https://logs.example.com (records go to <url>/logs)")
		}
	}
	if dl.Upload.BufferEvents < 0 {
		bad("decision_log.upload.buffer_events", fmt.Sprintf("negative (%d)", dl.Upload.BufferEvents), "use a positive number of records, or 0 for the default (10000)")
	}
	if dl.Upload.MaxRecordBytes < 0 {
		bad("decision_log.upload.max_record_bytes", fmt.Sprintf("negative (%d)", dl.Upload.MaxRecordBytes), "use a size in bytes, or 0 for no limit")
	}
	if dl.Upload.MaxDecisionsPerSecond < 0 {
		bad("decision_log.upload.max_decisions_per_second", fmt.Sprintf("negative (%g)", dl.Upload.MaxDecisionsPerSecond), "use a rate, or 0 for no limit")
	}
	if up := dl.Upload; up.BearerTokenFile != "" {
		if u, err := url.Parse(up.URL); err == nil && u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
			bad("decision_log.upload.bearer_token_file", "would send the token in clear text to "+u.Host, "use an https url (plain http only on a loopback host)")
		}
	}
	if dl.Upload.Interval < 0 {
		bad("decision_log.upload.interval", fmt.Sprintf("negative (%s)", dl.Upload.Interval), `use a duration such as "1s", or 0 for the default`)
	}

	c.Auth.validate(bad)
	if c.InputRequests.Timeout < 0 {
		bad("input_requests.timeout", fmt.Sprintf("%s is negative", c.InputRequests.Timeout), `write a duration such as "2m", or leave it out for the default`)
	}
	if c.InputRequests.MaxPerPrincipal < 0 {
		bad("input_requests.max_per_principal", fmt.Sprintf("%d is negative", c.InputRequests.MaxPerPrincipal), "write a positive number, or leave it out for the default")
	}
	if c.InputRequests.MaxHeld < 0 {
		bad("input_requests.max_held", fmt.Sprintf("%d is negative", c.InputRequests.MaxHeld), "write a positive number, or leave it out for the default")
	}
	if c.Metrics.HTTP != "" {
		if problem := httpAddrProblem(c.Metrics.HTTP); problem != "" {
			bad("metrics.http", fmt.Sprintf("%q is not a host:port address (%s)", c.Metrics.HTTP, problem), `write host:port, e.g. "127.0.0.1:9464"`)
		}
	}

	firstStdio := -1
	for i, l := range c.Listeners {
		key := indexKey("listeners", i)
		switch {
		case l.Stdio && l.TLS != nil:
			bad(key+".tls", "is set on a stdio listener", "remove tls: it applies to http listeners only")
		case l.Stdio && l.HTTP != "":
			bad(key, "sets both stdio and http", `split it into two listeners: {stdio: true} and {http: "127.0.0.1:8080"}`)
		case !l.Stdio && l.HTTP == "":
			bad(key, "sets neither stdio nor http", `set stdio: true or http: "127.0.0.1:8080"`)
		case l.Stdio && firstStdio >= 0:
			bad(key, fmt.Sprintf("a second stdio listener (the first is listeners[%d])", firstStdio), "keep one: there is only one standard input")
		case l.Stdio:
			firstStdio = i
		default:
			if problem := httpAddrProblem(l.HTTP); problem != "" {
				bad(key+".http", fmt.Sprintf("%q is not a host:port address (%s)", l.HTTP, problem), `write host:port, e.g. "127.0.0.1:8080"`)
			}
			if l.TLS != nil {
				l.TLS.validate(key+".tls", bad)
			}
		}
	}
	return errs
}

func (t *ListenerTLSConfig) validate(key string, bad func(key, problem, fix string)) {
	if t.CertFile == "" || t.KeyFile == "" {
		bad(key, "needs both cert_file and key_file", "name the listener's PEM certificate and private key: cert_file: /etc/mcp-warden/tls.crt, key_file: /etc/mcp-warden/tls.key")
	}
	if t.RequireClientCert && t.ClientCAFile == "" {
		bad(key+".require_client_cert", "is true without client_ca_file", "name the PEM file of the CAs client certificates must chain to: client_ca_file: /etc/mcp-warden/client-ca.pem")
	}
	if t.ClientCRLFile != "" && t.ClientCAFile == "" {
		bad(key+".client_crl_file", "is set without client_ca_file", "name the PEM file of the CAs whose revocation lists these are: client_ca_file: /etc/mcp-warden/client-ca.pem")
	}
}

func (a AuthConfig) validate(bad func(key, problem, fix string)) {
	if a.Resource != "" {
		if u, err := url.Parse(a.Resource); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("auth.resource", fmt.Sprintf("%q is not an http(s) URL", a.Resource), "write the public URL of the MCP endpoint, e.g. https://mcp.example.com/mcp")
		}
	}
	ids := map[string]int{}
	for i, k := range a.APIKeys {
		key := indexKey("auth.api_keys", i)
		if j, dup := ids[k.ID]; dup {
			bad(key+".id", fmt.Sprintf("%q is already the id of auth.api_keys[%d]", k.ID, j), "give each key its own id")
		}
		ids[k.ID] = i
		if strings.TrimSpace(k.ID) == "" {
			bad(key+".id", "missing", "name the principal the key stands for, e.g. id: ci-bot")
		}
		if _, err := authn.ParseKeyHash(k.SHA256); err != nil {
			bad(key+".sha256", "not a hex sha256 (64 hex digits)", "write the hash of the token, e.g. printf %s \"$TOKEN\" | sha256sum, never the token")
		}
	}
	j := a.JWT
	if j.Issuer == "" && j.Audience == "" && j.JWKSFile == "" && j.JWKSURL == "" && j.SubjectClaim == "" && len(j.RequiredScopes) == 0 {
		return
	}
	for i, s := range j.RequiredScopes {
		if s == "" || strings.ContainsAny(s, " \t\n\"\\") {
			bad(fmt.Sprintf("auth.jwt.required_scopes[%d]", i), fmt.Sprintf("%q is not a scope token", s), "write one scope per entry, e.g. - mcp:tools")
		}
	}
	if j.Issuer == "" {
		bad("auth.jwt.issuer", "missing", "set the issuer (iss) tokens must carry, e.g. https://idp.example.com")
	}
	if (j.JWKSFile == "") == (j.JWKSURL == "") {
		bad("auth.jwt", "needs exactly one of jwks_file and jwks_url", "name the issuer's key set: jwks_url: https://idp.example.com/.well-known/jwks.json, or a local JWKS/PEM file")
	}
	if j.JWKSURL != "" {
		if u, err := url.Parse(j.JWKSURL); err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopbackHost(u.Hostname()))) {
			bad("auth.jwt.jwks_url", fmt.Sprintf("%q is not an https URL", j.JWKSURL), "use https (plain http only on a loopback host)")
		}
	}
	if j.Audience == "" && a.Resource == "" {
		bad("auth.jwt.audience", "missing, and no auth.resource to default to", "set auth.resource to the public URL of the MCP endpoint (or auth.jwt.audience)")
	}
}

// validName reports whether s is 1–maxLen characters of [A-Za-z0-9_-].
func validName(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// envNameProblem says what makes name unusable as an environment variable
// name, or returns "".
func envNameProblem(name string) string {
	switch {
	case name == "":
		return "name is empty"
	case strings.ContainsRune(name, '='):
		return fmt.Sprintf("name %q contains '='", name)
	case strings.ContainsRune(name, 0):
		return fmt.Sprintf("name %q contains a NUL byte", name)
	}
	return ""
}

func httpAddrProblem(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return ae.Err
		}
		return err.Error()
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "the port must be a number from 0 to 65535"
	}
	return ""
}

// Warnings lists what in c is allowed but probably not intended: servers
// whose empty allow list leaves none of their tools exposed by the default
// policy, and HTTP listeners reachable from other hosts. It assumes c is
// valid.
func (c *Config) Warnings() []string {
	source := cmp.Or(c.source, "config")
	var notes []string
	for _, s := range c.Servers {
		if len(s.Tools.Allow) == 0 {
			notes = append(notes, fmt.Sprintf("%s: server %q: tools.allow is empty, so the default policy exposes none of its tools; "+
				"list the tools to expose in tools.allow (or AGENT_<Name>_MCP_<N>_ALLOW), or use a policy that allows them", source, s.Name))
		}
	}
	for i, l := range c.Listeners {
		if l.HTTP == "" || httpAddrProblem(l.HTTP) != "" {
			continue
		}
		host, _, _ := net.SplitHostPort(l.HTTP)
		if !c.Auth.Enabled() && !isLoopbackHost(host) {
			notes = append(notes, fmt.Sprintf("%s: listeners[%d].http: %q is reachable from other hosts and HTTP clients are not authenticated; "+
				"bind 127.0.0.1 unless that is intended", source, i, l.HTTP))
		}
	}
	return notes
}

// validatePolicy checks the policy keys, reporting problems through bad.
func (c *Config) validatePolicy(bad func(key, problem, fix string)) {
	if c.Policy.Engine != "" && c.Policy.Engine != policy.EngineRego && c.Policy.Engine != policy.EngineWasm {
		bad("policy.engine", fmt.Sprintf("%q is not a policy engine", c.Policy.Engine),
			"use rego (OPA's evaluator, the default) or wasm (the policy compiled to WebAssembly)")
	}
	if w := c.Policy.Wasm; w != (WasmConfig{}) {
		if c.Policy.Engine != policy.EngineWasm {
			bad("policy.wasm", "set, but policy.engine is not wasm", "add engine: wasm under policy, or remove policy.wasm")
		}
		if w.Timeout < 0 {
			bad("policy.wasm.timeout", fmt.Sprintf("negative (%s)", w.Timeout), `use a duration such as "500ms", or 0 for the default (1s)`)
		}
		if w.MemoryLimitPages < 0 || w.MemoryLimitPages > policy.MaxWasmMemoryLimitPages {
			bad("policy.wasm.memory_limit_pages", fmt.Sprintf("%d is not a number of 64 KiB pages from 1 to %d", w.MemoryLimitPages, policy.MaxWasmMemoryLimitPages),
				fmt.Sprintf("use e.g. 1024 for 64 MiB, or 0 for the default (%d)", policy.DefaultWasmMemoryLimitPages))
		}
		if w.Instances < 0 {
			bad("policy.wasm.instances", fmt.Sprintf("negative (%d)", w.Instances), "use a positive number of concurrent evaluations, or 0 for one per CPU")
		}
	}
}

// policyProblems checks only the policy keys of c (engine, wasm tuning) as
// Validate does, for a configuration read for its policy alone (`mcp-warden
// policy eval`).
func (c *Config) policyProblems() error {
	var errs []*ConfigError
	c.validatePolicy(func(key, problem, fix string) {
		errs = append(errs, &ConfigError{Source: cmp.Or(c.source, "config"), Key: key, Problem: problem, Fix: fix})
	})
	return joinConfigErrors(errs)
}
