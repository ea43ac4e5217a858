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
			Tools:       ToolFilter{Allow: []string{"*"}},
		}},
		Naming:      NamingFirst,
		Policy:      PolicyConfig{Path: filepath.Join(dir, "policies"), Engine: "rego"},
		DecisionLog: DecisionLogConfig{Path: filepath.Join(dir, "logs", "decisions.log")},
		Listeners:   []ListenerConfig{{Stdio: true}, {HTTP: "127.0.0.1:8080"}},
		Principal:   PrincipalConfig{ID: "alice", Claims: map[string]any{"team": "platform", "level": 3}},
		source:      path,
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
		want: []string{":4: servers[0].tool: unknown key; did you mean tools? known keys here: name, command, args, cwd, env, secrets, call_timeout, tools"},
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
		file: "syntax.yaml",
		want: []string{`:1: invalid YAML: did not find expected '-' indicator; check indentation, colons and quoting at or after this line`},
	}, {
		file: "syntax.json",
		want: []string{`:4: invalid JSON: invalid character ']' looking for beginning of value; check brackets, quotes and commas (JSON allows no trailing commas or comments)`},
	}, {
		file: "claude_remote.json",
		want: []string{`:4: mcpServers.remote: is a remote server (type "http"); remote servers are not supported in this file yet; remove the entry, or run the server through a local stdio bridge and list that command`},
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

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []string // substrings of the one message, file name excluded
	}{
		{"unknown top-level key", "c.yaml", "servers: [{name: a, command: x}]\nnamin: first\n",
			[]string{":2: namin: unknown key; did you mean naming?"}},
		{"claude file as YAML", "c.yaml", "mcpServers: {}\n",
			[]string{":1: mcpServers: unknown key; mcpServers belongs in a Claude Desktop file, which is read as JSON"}},
		{"duplicate key", "c.yaml", "servers:\n  - name: a\n    command: x\n    command: y\n",
			[]string{":4: servers[0].command: set twice (first on line 3); keep one of them"}},
		{"bad duration", "c.yaml", "servers: [{name: a, command: x, call_timeout: 30}]\n",
			[]string{":1: servers[0].call_timeout: the number 30 is not a duration", `e.g. "30s"`}},
		{"bool expected", "c.yaml", "servers: [{name: a, command: x}]\nlisteners: [{stdio: maybe}]\n",
			[]string{`:2: listeners[0].stdio: want true or false, got "maybe"; write true or false`}},
		{"string expected", "c.yaml", "servers:\n  - name: [a]\n    command: x\n",
			[]string{":2: servers[0].name: want a string, got a list"}},
		{"map expected", "c.yaml", "servers:\n  - name: a\n    command: x\n    env: [A]\n",
			[]string{":4: servers[0].env: want a mapping, got a list"}},
		{"server not a mapping", "c.yaml", "servers:\n  - npx\n",
			[]string{`:2: servers[0]: want a mapping, got "npx"; write keys such as name, command`}},
		{"top level list", "c.yaml", "- a\n- b\n",
			[]string{":1: the top level is a list, not a mapping"}},
		{"empty YAML", "c.yaml", "# nothing\n", []string{": the file is empty"}},
		{"two YAML documents", "c.yaml", "servers: [{name: a, command: x}]\n---\nnaming: first\n",
			[]string{":2: a second YAML document; keep one document"}},
		{"empty JSON", "c.json", " \n", []string{": the file is empty"}},
		{"alias loop", "c.yaml", "servers: [&s {name: a, command: x, <<: *s}]\n",
			[]string{"refers to a value containing itself"}},
		{"merge of a scalar", "c.yaml", "servers: [{name: a, command: x, <<: 3}]\n",
			[]string{"servers[0]: << merges the number 3"}},
		{"JSON unknown key", "c.json", "{\"servers\": [{\"name\": \"a\", \"command\": \"x\",\n \"argz\": []}]}",
			[]string{":2: servers[0].argz: unknown key; did you mean args?"}},
		{"JSON bad type", "c.json", `{"servers": [{"name": "a", "command": "x", "args": 3}]}`,
			[]string{":1: servers[0].args: want a list, got the number 3"}},
		{"JSON string for bool", "c.json", `{"servers": [{"name": "a", "command": "x"}], "listeners": [{"stdio": "true"}]}`,
			[]string{`listeners[0].stdio: want true or false, got "true"`}},
		{"JSON trailing data", "c.json", `{"servers": []} {}`,
			[]string{"invalid JSON: unexpected content after the top-level value"}},
		{"JSON truncated", "c.json", "{\"servers\": [\n",
			[]string{":1: invalid JSON: the file ends before the document does"}},
		{"JSON duplicate key", "c.json", `{"naming": "first", "naming": "prefix", "servers": []}`,
			[]string{`naming: set twice`}},
		{"JSON too deep", "c.json", `{"principal": {"claims": ` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
			[]string{"invalid JSON: nested deeper than 100 levels"}},
		{"Claude unknown entry key", "c.json", `{"mcpServers": {"a": {"command": "x", "disabled": true}}}`,
			[]string{`mcpServers.a.disabled: unknown key; known keys here: command, args, env, cwd, type`}},
		{"Claude url entry", "c.json", `{"mcpServers": {"a": {"url": "https://example.com/mcp"}}}`,
			[]string{"mcpServers.a: is a remote server (it has a url); remote servers are not supported in this file yet"}},
		{"Claude servers not an object", "c.json", `{"mcpServers": ["a"]}`,
			[]string{`mcpServers: want an object of servers, got a list`}},
		{"Claude no servers", "c.json", `{"mcpServers": {}}`,
			[]string{`:1: mcpServers: no servers configured`}},
		{"Claude validation names the entry", "c.json", "{\"mcpServers\": {\n  \"my server\": {\"command\": \"\"}}}",
			[]string{`:2: mcpServers["my server"].name: "my server" is not a valid server name`, `:2: mcpServers["my server"].command: missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfigFile(t, tc.file, tc.content)
			cfg, err := LoadConfig(path)
			assert.Nil(t, cfg)
			require.Error(t, err)
			msg := strings.ReplaceAll(err.Error(), path, "")
			for _, w := range tc.want {
				assert.Contains(t, msg, w)
			}
			assert.NotEmpty(t, configProblems(t, err))
		})
	}
}

func TestConfigKeySegmentEnds(t *testing.T) {
	for key, want := range map[string][]string{
		"naming":                       {"naming"},
		"servers[1].env.K":             {"servers", "servers[1]", "servers[1].env", "servers[1].env.K"},
		`servers[0].env["a.b[\"]"]`:    {"servers", "servers[0]", "servers[0].env", `servers[0].env["a.b[\"]"]`},
		`mcpServers["my server"].name`: {"mcpServers", `mcpServers["my server"]`, `mcpServers["my server"].name`},
		`mcpServers["unterminated`:     {"mcpServers"},
		"":                             nil,
	} {
		var got []string
		for _, end := range segmentEnds(key) {
			got = append(got, key[:end])
		}
		assert.Equal(t, want, got, key)
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

func TestLoadConfigYAMLAnchorsAndMerges(t *testing.T) {
	path := writeConfigFile(t, "c.yaml", `
x-base: &base
  command: npx
  env: &env {LOG_LEVEL: info}
  tools: {allow: ["*"]}
servers:
  - <<: *base
    name: one
  - <<: *base
    name: two
    command: node
    env: *env
`)
	_, err := LoadConfig(path)
	require.ErrorContains(t, err, "x-base: unknown key", "extension keys are not allowed at the top level")

	path = writeConfigFile(t, "c.yaml", `
servers:
  - &one
    name: one
    command: npx
    env: &env {LOG_LEVEL: info}
    tools: {allow: ["*"]}
  - <<: *one
    name: two
    command: node
    env: *env
`)
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	require.Len(t, cfg.Servers, 2)
	assert.Equal(t, "two", cfg.Servers[1].Name, "explicit keys win over merged ones")
	assert.Equal(t, "node", cfg.Servers[1].Command)
	assert.Equal(t, map[string]string{"LOG_LEVEL": "info"}, cfg.Servers[1].Env)
	assert.Equal(t, []string{"*"}, cfg.Servers[1].Tools.Allow)
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
		{"engine", func(c *Config) { c.Policy.Engine = "wasm" },
			"policy.engine", `"wasm" is not a policy engine`, "use rego"},
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

func TestConfigFromAgentEnv(t *testing.T) {
	environ := []string{
		"HOME=/root",
		"AGENT_Claude_MCP_10_CMD=node",
		"AGENT_Claude_MCP_10_ARGS=server.js",
		"AGENT_Claude_MCP_0_CMD=npx",
		"AGENT_Claude_MCP_0_ARGS=-y,@modelcontextprotocol/server-github",
		`AGENT_Claude_MCP_0_ENV_JSON={"LOG_LEVEL":"debug","EMPTY":""}`,
		"AGENT_Claude_MCP_0_ALLOW=search_*, get_issue,",
		"AGENT_Claude_MCP_0_BLOCK=delete_*",
		"AGENT_Claude_MCP_2_CMD=/usr/bin/srv",
		"AGENT_Claude_MCP_2_ARGS=",
		"AGENT_Claude_MCP_2_CWD=/srv",
		"AGENT_Claude_MCP_2_CMD=shadowed",   // like os.Getenv, the first wins
		"AGENT_Other_MCP_0_CMD=not-claude",  // another agent
		"AGENT_Claude_TOKEN=not-under-mcp_", // not under the prefix
	}
	cfg, err := ConfigFromAgentEnv("Claude", environ)
	require.NoError(t, err)
	assert.Equal(t, &Config{
		Servers: []ServerConfig{{
			Name:        "claude-0",
			Command:     "npx",
			Args:        []string{"-y", "@modelcontextprotocol/server-github"},
			Env:         map[string]string{"LOG_LEVEL": "debug", "EMPTY": ""},
			CallTimeout: DefaultCallTimeout,
			Tools:       ToolFilter{Allow: []string{"search_*", "get_issue"}, Block: []string{"delete_*"}},
		}, {
			Name:        "claude-2",
			Command:     "/usr/bin/srv",
			Cwd:         "/srv",
			CallTimeout: DefaultCallTimeout,
		}, {
			Name:        "claude-10",
			Command:     "node",
			Args:        []string{"server.js"},
			CallTimeout: DefaultCallTimeout,
		}},
		Naming:    NamingPrefix,
		Policy:    PolicyConfig{Engine: "rego"},
		Principal: PrincipalConfig{ID: DefaultPrincipalID},
		source:    "environment",
	}, cfg)
	assert.NoError(t, cfg.Validate())
}

func TestConfigFromAgentEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		agent   string
		environ []string
		want    []string // one message each
	}{
		{"no variables", "bot", []string{"PATH=/bin"},
			[]string{"environment: no variables found with prefix AGENT_bot_MCP_; set at least AGENT_bot_MCP_0_CMD to the program to run"}},
		{"wrong case", "bot", []string{"AGENT_BOT_MCP_0_CMD=x"},
			[]string{"environment: no variables found with prefix AGENT_bot_MCP_ (AGENT_BOT_MCP_0_CMD is set, but agent names are matched exactly); set at least AGENT_bot_MCP_0_CMD to the program to run"}},
		{"bad agent name", "my-bot", nil,
			[]string{`environment: agent: "my-bot" is not a usable agent name; use 1–40 letters, digits or '_'; it is matched exactly in AGENT_<Name>_MCP_<N>_CMD`}},
		{"CMD missing", "bot", []string{"AGENT_bot_MCP_0_CMD=x", "AGENT_bot_MCP_1_ARGS=a", "AGENT_bot_MCP_1_CWD=/"},
			[]string{"environment: AGENT_bot_MCP_1_CMD: missing, but AGENT_bot_MCP_1_ARGS is set; set it to the program to run, or remove the other AGENT_bot_MCP_1_* variables"}},
		{"unknown suffix", "bot", []string{"AGENT_bot_MCP_0_CMD=x", "AGENT_bot_MCP_0_COMMAND=x"},
			[]string{"environment: AGENT_bot_MCP_0_COMMAND: unknown variable; the variables of a server end in _CMD, _ARGS, _CWD, _ENV_JSON, _ALLOW, _BLOCK"}},
		{"no number", "bot", []string{"AGENT_bot_MCP_CMD=x"},
			[]string{"environment: AGENT_bot_MCP_CMD: does not continue the prefix AGENT_bot_MCP_ with a server number; number servers 0, 1, 2… without leading zeros, e.g. AGENT_bot_MCP_0_CMD"}},
		{"leading zero", "bot", []string{"AGENT_bot_MCP_01_CMD=x"},
			[]string{"environment: AGENT_bot_MCP_01_CMD: does not continue the prefix AGENT_bot_MCP_ with a server number; number servers 0, 1, 2… without leading zeros, e.g. AGENT_bot_MCP_0_CMD"}},
		{"ENV_JSON syntax", "bot", []string{"AGENT_bot_MCP_0_CMD=x", `AGENT_bot_MCP_0_ENV_JSON={"TOKEN": s3cr3t}`},
			[]string{`environment: AGENT_bot_MCP_0_ENV_JSON: not valid JSON (at byte 11); write a JSON object of strings, e.g. {"LOG_LEVEL":"debug"}`}},
		{"ENV_JSON array", "bot", []string{"AGENT_bot_MCP_0_CMD=x", `AGENT_bot_MCP_0_ENV_JSON=["a"]`},
			[]string{`environment: AGENT_bot_MCP_0_ENV_JSON: is a JSON array, not an object; write a JSON object of strings, e.g. {"LOG_LEVEL":"debug"}`}},
		{"ENV_JSON number", "bot", []string{"AGENT_bot_MCP_0_CMD=x", `AGENT_bot_MCP_0_ENV_JSON={"PORT": 8080}`},
			[]string{`environment: AGENT_bot_MCP_0_ENV_JSON: the value of PORT is not a string; write a JSON object of strings, e.g. {"LOG_LEVEL":"debug"}`}},
		{"ENV_JSON trailing", "bot", []string{"AGENT_bot_MCP_0_CMD=x", `AGENT_bot_MCP_0_ENV_JSON={"A": "1"}}`},
			[]string{`environment: AGENT_bot_MCP_0_ENV_JSON: has data after the JSON object; write a JSON object of strings, e.g. {"LOG_LEVEL":"debug"}`}},
		{"validation names the variable", "bot", []string{"AGENT_bot_MCP_3_CMD=", `AGENT_bot_MCP_3_ENV_JSON={"A=B": "1"}`},
			[]string{
				"environment: AGENT_bot_MCP_3_CMD: missing; set the program to run, e.g. npx (it is run directly, not through a shell)",
				`environment: AGENT_bot_MCP_3_ENV_JSON: variable name "A=B" contains '='; use a plain variable name such as LOG_LEVEL`,
			}},
		{"several problems", "bot", []string{"AGENT_bot_MCP_0_CMD=x", "AGENT_bot_MCP_0_X=1", "AGENT_bot_MCP_1_ALLOW=a"},
			[]string{
				"environment: AGENT_bot_MCP_0_X: unknown variable; the variables of a server end in _CMD, _ARGS, _CWD, _ENV_JSON, _ALLOW, _BLOCK",
				"environment: AGENT_bot_MCP_1_CMD: missing, but AGENT_bot_MCP_1_ALLOW is set; set it to the program to run, or remove the other AGENT_bot_MCP_1_* variables",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ConfigFromAgentEnv(tc.agent, tc.environ)
			assert.Nil(t, cfg)
			var got []string
			for _, p := range configProblems(t, err) {
				got = append(got, p.Error())
			}
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, err.Error(), "s3cr3t", "values never appear in errors")
		})
	}
}

func TestServerEnvironment(t *testing.T) {
	host := map[string]string{"GH_PAT": "ghp_secret", "ALSO_PAT": "ghp_secret", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	s := ServerConfig{
		Name:    "github",
		Env:     map[string]string{"LOG_LEVEL": "debug"},
		Secrets: map[string]string{"TOKEN": "GH_PAT", "TOKEN2": "ALSO_PAT", "OPTIONAL": "EMPTY"},
	}

	env, secrets, err := s.Environment(lookup)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"LOG_LEVEL": "debug", "TOKEN": "ghp_secret", "TOKEN2": "ghp_secret", "OPTIONAL": ""}, env)
	assert.Equal(t, []string{"ghp_secret"}, secrets, "distinct, and no empty value a redactor would match everywhere")
	assert.Equal(t, map[string]string{"LOG_LEVEL": "debug"}, s.Env, "the config is not modified")

	s.Secrets = map[string]string{"TOKEN": "GH_PAT", "DB": "DB_PASSWORD", "AWS": "AWS_KEY"}
	env, secrets, err = s.Environment(lookup)
	assert.Nil(t, env)
	assert.Nil(t, secrets)
	assert.EqualError(t, err, `server "github": secret AWS: host variable AWS_KEY is not set; export AWS_KEY before starting mcp-warden`+"\n"+
		`server "github": secret DB: host variable DB_PASSWORD is not set; export DB_PASSWORD before starting mcp-warden`)
	assert.NotContains(t, err.Error(), "ghp_secret")

	t.Setenv("MCP_WARDEN_TEST_SECRET", "from-os")
	env, _, err = ServerConfig{Name: "x", Secrets: map[string]string{"S": "MCP_WARDEN_TEST_SECRET"}}.Environment(nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"S": "from-os"}, env, "nil lookup reads the process environment")
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
