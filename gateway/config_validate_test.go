package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validConfig is a small valid configuration for tests to break.
func validConfig() *Config {
	return &Config{
		Servers: []ServerConfig{
			{Name: "a", Command: "x", Env: map[string]string{"K": "v"}, Secrets: map[string]string{"S": "HOST_S"}},
			{Name: "b", Command: "y"},
		},
		Listeners: []ListenerConfig{{Stdio: true}, {HTTP: "127.0.0.1:8080"}},
		source:    "config.yaml",
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		breakIt             func(*Config)
		key, problem, inFix string
	}{
		{"no servers", func(c *Config) { c.Servers = nil },
			"servers", "no servers configured", "add at least one"},
		{"empty name", func(c *Config) { c.Servers[1].Name = "" },
			"servers[1].name", "missing", "name the server"},
		{"bad name", func(c *Config) { c.Servers[1].Name = "my server" },
			"servers[1].name", `"my server" is not a valid server name`, "1–64 letters"},
		{"long name", func(c *Config) { c.Servers[1].Name = strings.Repeat("n", 65) },
			"servers[1].name", `"` + strings.Repeat("n", 65) + `" is not a valid server name`, "1–64"},
		{"duplicate name", func(c *Config) { c.Servers[1].Name = "a" },
			"servers[1].name", `"a" is already the name of servers[0]`, "its own name"},
		{"reserved prefix", func(c *Config) { c.Servers[1].Name = "warden" },
			"servers[1].name", `"warden" would put its tools under the reserved prefix "warden__"`, "rename"},
		{"missing command", func(c *Config) { c.Servers[0].Command = " " },
			"servers[0].command", "missing", "set the program to run, e.g. npx"},
		{"NUL in argument", func(c *Config) { c.Servers[0].Args = []string{"ok", "a\x00b"} },
			"servers[0].args[1]", "the argument contains a NUL byte", "remove it"},
		{"empty env name", func(c *Config) { c.Servers[0].Env[""] = "v" },
			"servers[0].env", "variable name is empty", "plain variable name"},
		{"env name with =", func(c *Config) { c.Servers[0].Env["A=B"] = "v" },
			"servers[0].env", `variable name "A=B" contains '='`, "plain variable name"},
		{"env name with NUL", func(c *Config) { c.Servers[0].Env["A\x00"] = "v" },
			"servers[0].env", `variable name "A\x00" contains a NUL byte`, "plain variable name"},
		{"env value with NUL", func(c *Config) { c.Servers[0].Env["K"] = "v\x00" },
			"servers[0].env.K", "the value of K contains a NUL byte", "remove it"},
		{"secret name", func(c *Config) { c.Servers[0].Secrets["X=Y"] = "H" },
			"servers[0].secrets", `variable name "X=Y" contains '='`, "e.g. GITHUB_TOKEN: GH_PAT"},
		{"secret host name", func(c *Config) { c.Servers[0].Secrets["S"] = "" },
			"servers[0].secrets.S", "host variable name is empty", "the host variable"},
		{"secret also in env", func(c *Config) { c.Servers[0].Env["S"] = "plain" },
			"servers[0].secrets.S", "S is also set in env", "keep it in one place"},
		{"negative timeout", func(c *Config) { c.Servers[1].CallTimeout = -time.Second },
			"servers[1].call_timeout", "negative (-1s)", "0 for the default (1m0s)"},
		{"naming", func(c *Config) { c.Naming = "last" },
			"naming", `"last" is not a naming mode`, "use prefix"},
		{"engine", func(c *Config) { c.Policy.Engine = "wasmtime" },
			"policy.engine", `"wasmtime" is not a policy engine`, "use rego (OPA's evaluator, the default) or wasm"},
		{"wasm keys without the wasm engine", func(c *Config) { c.Policy.Wasm.Instances = 4 },
			"policy.wasm", "set, but policy.engine is not wasm", "add engine: wasm"},
		{"wasm timeout", func(c *Config) { c.Policy = PolicyConfig{Engine: "wasm", Wasm: WasmConfig{Timeout: -time.Millisecond}} },
			"policy.wasm.timeout", "negative (-1ms)", "0 for the default (1s)"},
		{"wasm memory", func(c *Config) { c.Policy = PolicyConfig{Engine: "wasm", Wasm: WasmConfig{MemoryLimitPages: 65536}} },
			"policy.wasm.memory_limit_pages", "65536 is not a number of 64 KiB pages from 1 to 65535", "1024 for 64 MiB"},
		{"wasm instances", func(c *Config) { c.Policy = PolicyConfig{Engine: "wasm", Wasm: WasmConfig{Instances: -2}} },
			"policy.wasm.instances", "negative (-2)", "one per CPU"},
		{"fsync", func(c *Config) { c.DecisionLog.Fsync = "sometimes" },
			"decision_log.fsync", `"sometimes" is not an fsync policy`, "interval (the default), always or never"},
		{"rotation without file", func(c *Config) { c.DecisionLog.MaxBytes = 1 << 20 },
			"decision_log.max_bytes", "rotation needs a file", "set decision_log.path"},
		{"tiny rotation", func(c *Config) { c.DecisionLog = DecisionLogConfig{Path: "d.log", MaxBytes: 10} },
			"decision_log.max_bytes", "10 is too small to hold records", "at least 4096"},
		{"on_error", func(c *Config) { c.DecisionLog.OnError = "ignore" },
			"decision_log.on_error", `"ignore" is not deny or allow`, "fail open"},
		{"upload url", func(c *Config) { c.DecisionLog.Upload.URL = "logs.example.com" },
			"decision_log.upload.url", `"logs.example.com" is not an http(s) URL`, "<url>/logs"},
		{"input timeout", func(c *Config) { c.InputRequests.Timeout = -time.Second },
			"input_requests.timeout", "-1s is negative", "2m"},
		{"held calls", func(c *Config) { c.InputRequests.MaxHeld = -1 },
			"input_requests.max_held", "-1 is negative", "positive"},
		{"metrics address", func(c *Config) { c.Metrics.HTTP = "9464" },
			"metrics.http", `"9464" is not a host:port address (missing port in address)`, "127.0.0.1:9464"},
		{"upload token in clear", func(c *Config) {
			c.DecisionLog.Upload = DecisionLogUploadConfig{URL: "http://logs.example.com", BearerTokenFile: "/run/secrets/logs"}
		}, "decision_log.upload.bearer_token_file", "would send the token in clear text to logs.example.com", "https"},
		{"upload rate", func(c *Config) { c.DecisionLog.Upload.MaxDecisionsPerSecond = -1 },
			"decision_log.upload.max_decisions_per_second", "negative (-1)", "0 for no limit"},
		{"upload buffer", func(c *Config) { c.DecisionLog.Upload.BufferEvents = -1 },
			"decision_log.upload.buffer_events", "negative (-1)", "default (10000)"},
		{"api key as plain token", func(c *Config) { c.Auth.APIKeys = []APIKeyConfig{{ID: "ci", SHA256: "my-token"}} },
			"auth.api_keys[0].sha256", "not a hex sha256 (64 hex digits)", "never the token"},
		{"jwt without issuer", func(c *Config) {
			c.Auth = AuthConfig{Resource: "https://gw.example/mcp", JWT: JWTConfig{JWKSFile: "k.pem"}}
		}, "auth.jwt.issuer", "missing", "the issuer (iss)"},
		{"jwt with two key sources", func(c *Config) {
			c.Auth = AuthConfig{Resource: "https://gw.example/mcp", JWT: JWTConfig{Issuer: "https://idp", JWKSFile: "k.pem", JWKSURL: "https://idp/jwks"}}
		}, "auth.jwt", "needs exactly one of jwks_file and jwks_url", "jwks_url"},
		{"jwks over plain http", func(c *Config) {
			c.Auth = AuthConfig{Resource: "https://gw.example/mcp", JWT: JWTConfig{Issuer: "https://idp", JWKSURL: "http://idp.example/jwks"}}
		}, "auth.jwt.jwks_url", `"http://idp.example/jwks" is not an https URL`, "loopback"},
		{"scope with a space", func(c *Config) {
			c.Auth = AuthConfig{Resource: "https://gw.example/mcp", JWT: JWTConfig{Issuer: "https://idp", JWKSFile: "k.pem", RequiredScopes: []string{"mcp:tools", "a b"}}}
		}, "auth.jwt.required_scopes[1]", `"a b" is not a scope token`, "one scope per entry"},
		{"jwt without audience", func(c *Config) { c.Auth = AuthConfig{JWT: JWTConfig{Issuer: "https://idp", JWKSFile: "k.pem"}} },
			"auth.jwt.audience", "missing, and no auth.resource to default to", "set auth.resource"},
		{"listener with both", func(c *Config) { c.Listeners[0].HTTP = ":1" },
			"listeners[0]", "sets both stdio and http", "split it"},
		{"listener with neither", func(c *Config) { c.Listeners[1].HTTP = "" },
			"listeners[1]", "sets neither stdio nor http", "set stdio: true"},
		{"second stdio", func(c *Config) { c.Listeners[1] = ListenerConfig{Stdio: true} },
			"listeners[1]", "a second stdio listener (the first is listeners[0])", "keep one"},
		{"http without port", func(c *Config) { c.Listeners[1].HTTP = "127.0.0.1" },
			"listeners[1].http", `"127.0.0.1" is not a host:port address (missing port in address)`, "write host:port"},
		{"http with named port", func(c *Config) { c.Listeners[1].HTTP = "localhost:http" },
			"listeners[1].http", `"localhost:http" is not a host:port address (the port must be a number from 0 to 65535)`, "write host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			require.NoError(t, c.Validate())
			tc.breakIt(c)
			err := c.Validate()
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "config.yaml", ce.Source)
			assert.Equal(t, tc.key, ce.Key)
			assert.Equal(t, tc.problem, ce.Problem)
			assert.Contains(t, ce.Fix, tc.inFix)
			assert.Equal(t, "config.yaml: "+tc.key+": "+tc.problem+"; "+ce.Fix, err.Error())
		})
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.source = ""
	c.Servers[0].Command = ""
	c.Naming = "x"
	c.Listeners = append(c.Listeners, ListenerConfig{})
	var keys []string
	for _, p := range configProblems(t, c.Validate()) {
		assert.Equal(t, "config", p.Source, "a Config built in code")
		keys = append(keys, p.Key)
	}
	assert.Equal(t, []string{"servers[0].command", "naming", "listeners[2]"}, keys)

	assert.ErrorContains(t, (*Config)(nil).Validate(), "no configuration")

	c = &Config{source: "many.yaml"}
	for range 30 {
		c.Servers = append(c.Servers, ServerConfig{Name: "a", Command: "x"})
	}
	problems := configProblems(t, c.Validate())
	require.Len(t, problems, maxReportedProblems+1)
	assert.Equal(t, "many.yaml: 9 more problems not shown; fix the ones above first", problems[maxReportedProblems].Error())
}

func TestConfigValidateAcceptsZeroValuesAndDefaults(t *testing.T) {
	c := &Config{Servers: []ServerConfig{{Name: "warden", Command: "x"}}, Naming: NamingFirst}
	assert.NoError(t, c.Validate(), "no listeners, zero timeout, empty engine; reserved prefix only matters in prefix mode")

	c = &Config{Servers: []ServerConfig{{Name: "a", Command: "x", CallTimeout: time.Second}, {Name: "b", Command: "y"}}}
	c.SetDefaults()
	assert.Equal(t, NamingPrefix, c.Naming)
	assert.Equal(t, "rego", c.Policy.Engine)
	assert.Equal(t, DefaultPrincipalID, c.Principal.ID)
	assert.Equal(t, time.Second, c.Servers[0].CallTimeout)
	assert.Equal(t, DefaultCallTimeout, c.Servers[1].CallTimeout)

	c = &Config{Naming: NamingFirst, Policy: PolicyConfig{Engine: "rego"}, Principal: PrincipalConfig{ID: "bob"}}
	c.SetDefaults()
	assert.Equal(t, NamingFirst, c.Naming, "set values are kept")
	assert.Equal(t, "bob", c.Principal.ID)
}

func TestConfigWarnings(t *testing.T) {
	c := &Config{
		Servers: []ServerConfig{
			{Name: "open", Command: "x", Tools: ToolFilter{Allow: []string{"*"}}},
			{Name: "closed", Command: "x", Tools: ToolFilter{Block: []string{"rm"}}},
		},
		Listeners: []ListenerConfig{{HTTP: "127.0.0.1:1"}, {HTTP: "[::1]:2"}, {HTTP: "localhost:3"}, {HTTP: ":4"}, {HTTP: "0.0.0.0:5"}, {Stdio: true}},
		source:    "c.yaml",
	}
	assert.Equal(t, []string{
		`c.yaml: server "closed": tools.allow is empty, so the default policy exposes none of its tools; list the tools to expose in tools.allow (or AGENT_<Name>_MCP_<N>_ALLOW), or use a policy that allows them`,
		`c.yaml: listeners[3].http: ":4" is reachable from other hosts and HTTP clients are not authenticated; bind 127.0.0.1 unless that is intended`,
		`c.yaml: listeners[4].http: "0.0.0.0:5" is reachable from other hosts and HTTP clients are not authenticated; bind 127.0.0.1 unless that is intended`,
	}, c.Warnings())
}
