package gateway

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
