package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		{"wasm keys located", "c.yaml", "servers: [{name: a, command: x}]\npolicy:\n  engine: wasm\n  wasm:\n    timeout: 100\n    memory_limit_pages: 70000\n    cache_sir: /x\n",
			[]string{":5: policy.wasm.timeout: the number 100 is not a duration", ":7: policy.wasm.cache_sir: unknown key; did you mean cache_dir?"}},
		{"wasm memory cap located", "c.yaml", "servers: [{name: a, command: x}]\npolicy:\n  engine: wasm\n  wasm:\n    memory_limit_pages: 70000\n",
			[]string{":5: policy.wasm.memory_limit_pages: 70000 is not a number of 64 KiB pages from 1 to 65535"}},
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
			[]string{`mcpServers.a.disabled: unknown key; known keys here: command, args, env, cwd, type, url, headers`}},
		{"Claude unknown type", "c.json", `{"mcpServers": {"a": {"type": "websocket", "url": "wss://example.com/mcp"}}}`,
			[]string{`mcpServers.a.type: "websocket" is not a server type; use "stdio" (command), "http" or "sse" (url)`}},
		{"Claude url to loopback", "c.json", `{"mcpServers": {"a": {"url": "http://127.0.0.1:3000/mcp"}}}`,
			[]string{`mcpServers.a.url: "http://127.0.0.1:3000/mcp" points at 127.0.0.1, a loopback address, where remote servers are refused (SSRF)`}},
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

func TestLoadConfigWasmKeys(t *testing.T) {
	path := writeConfigFile(t, "c.yaml", "servers: [{name: a, command: x}]\npolicy:\n  engine: wasm\n  wasm: {timeout: 250ms, memory_limit_pages: 512, cache_dir: /var/cache/warden, instances: 3}\n")
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	assert.Equal(t, WasmConfig{Timeout: 250 * time.Millisecond, MemoryLimitPages: 512, CacheDir: "/var/cache/warden", Instances: 3}, cfg.Policy.Wasm)
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
