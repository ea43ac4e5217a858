package gateway

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

const configFixtures = "../testdata/config"

// configFixture is the path of a fixture file and its absolute directory.
func configFixture(t *testing.T, name string) (path, dir string) {
	t.Helper()
	dir, err := filepath.Abs(configFixtures)
	require.NoError(t, err)
	return filepath.Join(configFixtures, name), dir
}

// writeConfigFile writes content to name in a fresh directory.
func writeConfigFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// configProblems flattens err into its *ConfigError parts.
func configProblems(t *testing.T, err error) []*ConfigError {
	t.Helper()
	require.Error(t, err)
	var out []*ConfigError
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *ConfigError
		require.True(t, errors.As(err, &ce), "not a *ConfigError: %v", err)
		out = append(out, ce)
	}
	walk(err)
	return out
}

func TestLoadConfigValidYAML(t *testing.T) {
	path, dir := configFixture(t, "valid.yaml")
	cfg, err := LoadConfig(path)
	require.NoError(t, err)

	want := &Config{
		Servers: []ServerConfig{{
			Name:        "github",
			Command:     "npx",
			Args:        []string{"-y", "@modelcontextprotocol/server-github"},
			Env:         map[string]string{"LOG_LEVEL": "debug", "PORT": "8080"},
			Secrets:     map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "GH_PAT"},
			CallTimeout: 30 * time.Second,
			Tools:       ToolFilter{Allow: []string{"search_*", "get_issue"}, Block: []string{"delete_*"}},
		}, {
			Name:        "files",
			Command:     "./bin/fs-server",
			Cwd:         filepath.Join(dir, "work"),
			CallTimeout: DefaultCallTimeout,
			Instances:   InstancesConfig{Per: InstancesPerPrincipal, Max: 8, IdleTimeout: 5 * time.Minute},
			Tools:       ToolFilter{Allow: []string{"*"}},
			Sandbox: sandbox.Profile{
				Mode:      sandbox.ModeRequire,
				ReadOnly:  []string{"/srv/docs"},
				ReadWrite: []string{"/srv/work"},
				Network:   sandbox.NetworkNone,
				Egress: sandbox.Egress{Allow: []string{"api.github.com", "*.githubusercontent.com", "git.example.com:8443"},
					Deny: []string{"gist.github.com"}},
				MinLandlockABI: 3,
				Limits:         sandbox.Limits{MemoryMiB: 512, Processes: 64, OpenFiles: 256, CPUSeconds: 60, FileSizeMiB: 100},
			},
		}},
		Naming:      NamingFirst,
		RemoteProxy: ProxyEnvironment,
		Policy: PolicyConfig{Path: filepath.Join(dir, "policies"), Engine: "wasm", Wasm: WasmConfig{
			Timeout: 500 * time.Millisecond, MemoryLimitPages: 512, CacheDir: filepath.Join(dir, "cache", "wasm"), Instances: 4}},
		DecisionLog: DecisionLogConfig{Path: filepath.Join(dir, "logs", "decisions.log"), Fsync: "always",
			FsyncInterval: 2 * time.Second, MaxBytes: 100 << 20, OnError: "deny",
			Upload: DecisionLogUploadConfig{URL: "https://logs.example.com/v1", BufferEvents: 5000, Interval: 5 * time.Second}},
		Listeners: []ListenerConfig{{Stdio: true}, {HTTP: "127.0.0.1:8080", TLS: &ListenerTLSConfig{
			CertFile: "/etc/mcp-warden/tls.crt", KeyFile: "/etc/mcp-warden/tls.key", ClientCAFile: "/etc/mcp-warden/client-ca.pem"}}},
		Metrics:       MetricsConfig{HTTP: "127.0.0.1:9464"},
		InputRequests: InputRequestsConfig{Timeout: 90 * time.Second, MaxPerPrincipal: 4, MaxHeld: 100},
		Principal:     PrincipalConfig{ID: "alice", Claims: map[string]any{"team": "platform", "level": 3}},
		Auth: AuthConfig{
			Resource: "https://mcp.example.com/mcp",
			APIKeys:  []APIKeyConfig{{ID: "ci-bot", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Claims: map[string]any{"team": "ci"}}},
			JWT: JWTConfig{Issuer: "https://idp.example.com", Audience: "https://mcp.example.com/mcp",
				JWKSFile: filepath.Join(dir, "keys", "jwks.json"), SubjectClaim: "sub"},
		},
		source: path,
	}
	assert.Equal(t, want, cfg)
	assert.Empty(t, cfg.Warnings())
	assert.NoError(t, cfg.Validate())
}

func TestLoadConfigClaudeDesktopKeepsOrder(t *testing.T) {
	path, dir := configFixture(t, "claude_desktop.json")
	cfg, err := LoadConfig(path)
	require.NoError(t, err)

	var names []string
	for _, s := range cfg.Servers {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"zeta", "alpha", "middle"}, names, "file order, not sorted")
	assert.Equal(t, ServerConfig{
		Name:        "alpha",
		Command:     "uvx",
		Args:        []string{"mcp-server-git"},
		Env:         map[string]string{"GIT_AUTHOR_NAME": "bot"},
		Cwd:         filepath.Join(dir, "repo"),
		CallTimeout: DefaultCallTimeout,
	}, cfg.Servers[1])
	assert.Equal(t, NamingPrefix, cfg.Naming)
	assert.Equal(t, DefaultPrincipalID, cfg.Principal.ID)
	assert.Empty(t, cfg.Listeners, "the command chooses listeners")

	// Claude Desktop files cannot list tools: every server is worth a warning.
	warnings := cfg.Warnings()
	require.Len(t, warnings, 3)
	assert.Contains(t, warnings[0], `claude_desktop.json: server "zeta": tools.allow is empty`)
}

// TestLoadConfigClaudeDesktopRemote: Claude Desktop url entries are remote
// servers; a header value naming a host variable is read from the host at
// start, like header_secrets, instead of kept in the config.
func TestLoadConfigClaudeDesktopRemote(t *testing.T) {
	path, _ := configFixture(t, "claude_remote.json")
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	require.Len(t, cfg.Servers, 3)
	assert.Equal(t, ServerConfig{
		Name: "remote", URL: "https://mcp.example.com/mcp", Transport: RemoteStreamableHTTP, Proxy: ProxyNone,
		Headers:       map[string]string{"X-Client": "mcp-warden"},
		HeaderSecrets: map[string]HeaderSecret{"Authorization": {Env: "REMOTE_TOKEN", Prefix: "Bearer "}},
		CallTimeout:   DefaultCallTimeout,
	}, cfg.Servers[1])
	assert.Equal(t, RemoteSSE, cfg.Servers[2].Transport)
	assert.Equal(t, "https://legacy.example.com/sse", cfg.Servers[2].URL)
}

func TestLoadConfigJSONSchema(t *testing.T) {
	path, _ := configFixture(t, "config.json")
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	assert.Equal(t, &Config{
		Servers: []ServerConfig{{
			Name:        "search",
			Command:     "search-server",
			Args:        []string{"--index", "docs"},
			Secrets:     map[string]string{"API_KEY": "SEARCH_API_KEY"},
			CallTimeout: 45 * time.Second,
			Tools:       ToolFilter{Allow: []string{"query"}, Block: []string{}},
		}},
		Naming:      NamingPrefix,
		Policy:      PolicyConfig{Engine: "rego"},
		DecisionLog: DecisionLogConfig{Path: "/var/log/mcp-warden/decisions.log"},
		Listeners:   []ListenerConfig{{HTTP: "localhost:9090"}},
		Principal:   PrincipalConfig{ID: "ci", Claims: map[string]any{"roles": []any{"reader"}}},
		source:      path,
	}, cfg)
}

func TestLoadConfigFixtureErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string // full messages, fixture path stripped
	}{{
		file: "unknown_key.yaml",
		want: []string{":4: servers[0].tool: unknown key; did you mean tools? known keys here: name, command, args, cwd, env, secrets, call_timeout, restart, instances, tools, sandbox, resources, prompts, url, transport, headers, header_secrets, allow_private_network, proxy, ca_file"},
	}, {
		file: "bad_type.yaml",
		want: []string{`:4: servers[0].args: want a list, got the number 3; write a list, e.g. ["-y", "some-server"]`},
	}, {
		file: "invalid.yaml",
		want: []string{
			`:5: servers[1].name: "github" is already the name of servers[0]; give each server its own name`,
			`:5: servers[1].command: missing; set the program to run, e.g. npx (it is run directly, not through a shell)`,
			`:7: naming: "alphabetical" is not a naming mode; use prefix (tools exposed as <server>__<tool>) or first (the server listed first wins a name conflict)`,
			`:9: listeners[0]: sets both stdio and http; split it into two listeners: {stdio: true} and {http: "127.0.0.1:8080"}`,
		},
	}, {
		file: "bad_egress.yaml",
		want: []string{`:4: servers[0].sandbox.egress: "169.254.169.254": IP addresses are not allowed, name the host; see the sandbox keys in the README (Confinement)`},
	}, {
		file: "syntax.yaml",
		want: []string{`:1: invalid YAML: did not find expected '-' indicator; check indentation, colons and quoting at or after this line`},
	}, {
		file: "syntax.json",
		want: []string{`:4: invalid JSON: invalid character ']' looking for beginning of value; check brackets, quotes and commas (JSON allows no trailing commas or comments)`},
	}} {
		t.Run(tc.file, func(t *testing.T) {
			path, _ := configFixture(t, tc.file)
			cfg, err := LoadConfig(path)
			assert.Nil(t, cfg)
			var got []string
			for _, p := range configProblems(t, err) {
				assert.Equal(t, path, p.Source)
				got = append(got, strings.TrimPrefix(p.Error(), path))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := LoadConfig(missing)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.EqualError(t, err, missing+": cannot read the file: no such file or directory; check the path and its permissions")

	dir := t.TempDir()
	_, err = LoadConfig(dir)
	assert.EqualError(t, err, dir+": cannot read the file: is a directory; check the path and its permissions")

	big := writeConfigFile(t, "big.yaml", "#"+strings.Repeat("x", maxConfigSize))
	_, err = LoadConfig(big)
	assert.EqualError(t, err, big+": larger than 4 MiB; point --config at the configuration file")

	if os.Geteuid() != 0 { // root reads anything
		locked := writeConfigFile(t, "locked.yaml", "servers: []\n")
		require.NoError(t, os.Chmod(locked, 0))
		_, err = LoadConfig(locked)
		assert.ErrorIs(t, err, fs.ErrPermission)
		assert.ErrorContains(t, err, "permission denied")
	}
}

func TestLoadConfigRelativePaths(t *testing.T) {
	path := writeConfigFile(t, "c.yaml", `
servers:
  - {name: rel, command: x, cwd: sub/dir}
  - {name: abs, command: x, cwd: /srv/abs}
  - {name: none, command: x}
policy: {path: ../policies}
decision_log: {path: /var/log/d.log}
`)
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	dir := filepath.Dir(path)
	assert.Equal(t, filepath.Join(dir, "sub", "dir"), cfg.Servers[0].Cwd)
	assert.Equal(t, "/srv/abs", cfg.Servers[1].Cwd)
	assert.Empty(t, cfg.Servers[2].Cwd, "no cwd stays the gateway's own")
	assert.Equal(t, filepath.Join(filepath.Dir(dir), "policies"), cfg.Policy.Path)
	assert.Equal(t, "/var/log/d.log", cfg.DecisionLog.Path)

	// A relative config path still yields absolute paths.
	t.Chdir(dir)
	cfg, err = LoadConfig("c.yaml")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "sub", "dir"), cfg.Servers[0].Cwd)
}

func TestLoadConfigFormatByContent(t *testing.T) {
	for name, content := range map[string]string{
		"json": "\xef\xbb\xbf  {\"servers\": [{\"name\": \"a\", \"command\": \"x\"}]}",
		"yaml": "servers: [{name: a, command: x}]",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(writeConfigFile(t, "mcp-warden.conf", content))
			require.NoError(t, err)
			assert.Equal(t, "a", cfg.Servers[0].Name)
		})
	}
}

func FuzzLoadConfig(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(configFixtures, "*"))
	require.NoError(f, err)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte("servers: &a [*a]"))
	f.Add([]byte("a: &a {<<: *a}"))
	f.Add([]byte(`{"mcpServers": {"a": {"command": "x", "args": [1, true, null, 2.5e3]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []configFormat{formatYAML, formatJSON} {
			cfg, err := loadConfig("fuzz", "/fuzz", data, format)
			if err != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("not a *ConfigError: %v", err)
				}
				continue
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("loaded config fails Validate: %v", err)
			}
			cfg.Warnings()
		}
	})
}
