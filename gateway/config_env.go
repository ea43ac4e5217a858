package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// This file holds the configuration's meeting points with process
// environments: a server's environment with its secrets read from the host
// (Environment), and a Config read from AGENT_<Name>_MCP_<N>_* variables
// (ConfigFromAgentEnv).

// Environment returns the server's environment beyond the fixed base: Env
// plus every secret read from the host through lookup (nil means
// os.LookupEnv). secretValues holds the distinct non-empty secret values, for
// redaction. A missing host variable is an error naming the server, the
// secret and the host variable, never a value.
func (s ServerConfig) Environment(lookup func(string) (string, bool)) (env map[string]string, secretValues []string, err error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env = make(map[string]string, len(s.Env)+len(s.Secrets))
	maps.Copy(env, s.Env)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.Secrets)) {
		host := s.Secrets[name]
		value, ok := lookup(host)
		if !ok {
			errs = append(errs, fmt.Errorf("server %q: secret %s: host variable %s is not set; export %s before starting mcp-warden", s.Name, name, host, host))
			continue
		}
		env[name] = value
		// An empty value would match everywhere in a redactor.
		if value != "" && !slices.Contains(secretValues, value) {
			secretValues = append(secretValues, value)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return env, secretValues, nil
}

// remoteHeaders returns the headers sent to a remote server: Headers plus
// every HeaderSecrets value read from the host (lookup for env, readFile
// for file; nil means the os functions). secretValues holds the distinct
// non-empty secret values, for redaction. Errors name the server, the
// header and where its value was to come from, never a value.
func (s ServerConfig) remoteHeaders(lookup func(string) (string, bool), readFile func(string) ([]byte, error)) (headers map[string]string, secretValues []string, err error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	headers = make(map[string]string, len(s.Headers)+len(s.HeaderSecrets))
	maps.Copy(headers, s.Headers)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.HeaderSecrets)) {
		hs := s.HeaderSecrets[name]
		var value string
		switch {
		case hs.Env != "":
			v, ok := lookup(hs.Env)
			if !ok {
				errs = append(errs, fmt.Errorf("server %q: header %s: host variable %s is not set; export %s before starting mcp-warden", s.Name, name, hs.Env, hs.Env))
				continue
			}
			value = v
		default:
			b, err := readFile(hs.File)
			if err != nil {
				errs = append(errs, fmt.Errorf("server %q: header %s: read %s: %w", s.Name, name, hs.File, errors.Unwrap(err)))
				continue
			}
			value = strings.TrimRight(string(b), "\r\n")
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			errs = append(errs, fmt.Errorf("server %q: header %s: the value from %s spans lines; a header value is one line", s.Name, name, cmp.Or(hs.Env, hs.File)))
			continue
		}
		headers[name] = hs.Prefix + value
		if value != "" && !slices.Contains(secretValues, value) {
			secretValues = append(secretValues, value)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return headers, secretValues, nil
}

// agentVarSuffixes are the per-server variables of the agent environment
// scheme, mapped to the config key they set.
var agentVarSuffixes = map[string]string{
	"CMD": ".command", "ARGS": ".args", "CWD": ".cwd", "ENV_JSON": ".env", "ALLOW": ".tools.allow", "BLOCK": ".tools.block",
}

const agentSuffixList = "_CMD, _ARGS, _CWD, _ENV_JSON, _ALLOW, _BLOCK"

// ConfigFromAgentEnv builds the configuration of agent from environ (as
// os.Environ returns it), from variables AGENT_<agent>_MCP_<N>_<SUFFIX>:
//
//	_CMD       the program to run (required)
//	_ARGS      its arguments, comma separated; empty means none
//	_CWD       its working directory
//	_ENV_JSON  its environment, a JSON object of strings
//	_ALLOW     tools.allow, comma separated
//	_BLOCK     tools.block, comma separated
//
// N is 0, 1, 2… without leading zeros; servers are ordered by N and gaps are
// allowed. The agent name is matched exactly (case-sensitively) and must be
// 1–40 of [A-Za-z0-9_]. Server N is named "<lowercased agent>-<N>", e.g.
// AGENT_Claude_MCP_2_CMD → "claude-2", so names stay stable when other
// servers are added or removed. No listeners are set. The result is
// defaulted (SetDefaults) and validated; problems name the variable.
func ConfigFromAgentEnv(agent string, environ []string) (*Config, error) {
	const source = "environment"
	if !validAgentName(agent) {
		return nil, &ConfigError{Source: source, Key: "agent", Problem: fmt.Sprintf("%q is not a usable agent name", agent),
			Fix: "use 1–40 letters, digits or '_'; it is matched exactly in AGENT_<Name>_MCP_<N>_CMD"}
	}
	prefix := "AGENT_" + agent + "_MCP_"
	var errs []*ConfigError
	bad := func(key, problem, fix string) {
		errs = append(errs, &ConfigError{Source: source, Key: key, Problem: problem, Fix: fix})
	}

	vars := map[int]map[string]string{} // N → suffix → value
	seen := map[string]bool{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, prefix) || seen[name] {
			continue // like os.Getenv, the first of duplicate entries wins
		}
		seen[name] = true
		num, suffix, _ := strings.Cut(name[len(prefix):], "_")
		n, err := strconv.Atoi(num)
		switch {
		case err != nil || len(num) > 9 || num != strconv.Itoa(n):
			bad(name, "does not continue the prefix "+prefix+" with a server number", "number servers 0, 1, 2… without leading zeros, e.g. "+prefix+"0_CMD")
		case agentVarSuffixes[suffix] == "":
			bad(name, "unknown variable", "the variables of a server end in "+agentSuffixList)
		default:
			if vars[n] == nil {
				vars[n] = map[string]string{}
			}
			vars[n][suffix] = value
		}
	}
	if len(vars) == 0 && len(errs) == 0 {
		hint := ""
		for _, kv := range environ {
			if name, _, _ := strings.Cut(kv, "="); len(name) > len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) {
				hint = fmt.Sprintf(" (%s is set, but agent names are matched exactly)", name)
				break
			}
		}
		return nil, &ConfigError{Source: source, Problem: "no variables found with prefix " + prefix + hint,
			Fix: "set at least " + prefix + "0_CMD to the program to run"}
	}

	cfg := &Config{source: source}
	ns := slices.Sorted(maps.Keys(vars))
	for _, n := range ns {
		v := vars[n]
		varName := func(suffix string) string { return prefix + strconv.Itoa(n) + "_" + suffix }
		if _, ok := v["CMD"]; !ok {
			others := slices.Sorted(maps.Keys(v))
			bad(varName("CMD"), "missing, but "+varName(others[0])+" is set",
				"set it to the program to run, or remove the other "+varName("*")+" variables")
			continue
		}
		s := ServerConfig{
			Name:    strings.ToLower(agent) + "-" + strconv.Itoa(n),
			Command: v["CMD"],
			Cwd:     v["CWD"],
			Tools:   ToolFilter{Allow: commaList(v["ALLOW"]), Block: commaList(v["BLOCK"])},
		}
		if a := v["ARGS"]; a != "" {
			s.Args = strings.Split(a, ",") // kept exactly: no trimming, no quoting
		}
		env, problem := parseEnvJSON(v["ENV_JSON"])
		if problem != "" {
			bad(varName("ENV_JSON"), problem, `write a JSON object of strings, e.g. {"LOG_LEVEL":"debug"}`)
		}
		s.Env = env
		cfg.Servers = append(cfg.Servers, s)
	}
	if len(errs) > 0 {
		return nil, joinConfigErrors(errs)
	}

	cfg.SetDefaults()
	errs = cfg.validate()
	for _, e := range errs {
		if i, rest, ok := splitServerKey(e.Key); ok && i < len(ns) {
			suffix := "*"
			for sfx, field := range agentVarSuffixes {
				if rest == field || strings.HasPrefix(rest, field+".") || strings.HasPrefix(rest, field+"[") {
					suffix = sfx
				}
			}
			e.Key = prefix + strconv.Itoa(ns[i]) + "_" + suffix
		}
	}
	if err := joinConfigErrors(errs); err != nil {
		return nil, err
	}
	return cfg, nil
}

func validAgentName(agent string) bool {
	return validName(agent, 40) && !strings.ContainsRune(agent, '-')
}

// commaList splits a comma-separated list, trimming spaces and dropping
// empty items.
func commaList(s string) []string {
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// parseEnvJSON reads a JSON object of strings. Problems never quote the
// input, which may hold secrets.
func parseEnvJSON(s string) (map[string]string, string) {
	if strings.TrimSpace(s) == "" {
		return nil, ""
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
		case errors.As(err, &te):
			return nil, "is a JSON " + te.Value + ", not an object"
		}
		return nil, "not valid JSON (it ends early)"
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "has data after the JSON object"
	}
	env := make(map[string]string, len(raw))
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v, ok := raw[k].(string)
		if !ok {
			return nil, fmt.Sprintf("the value of %s is not a string", k)
		}
		env[k] = v
	}
	return env, ""
}
