package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// toolNamePattern is the MCP rule for tool names.
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// reservedToolPrefixes are tool-name prefixes the gateway keeps for its own
// tools; upstream tools exposed under them are refused.
var reservedToolPrefixes = []string{"mcp-warden", "mcp_warden", "warden__"}

// prefixSeparator joins server and tool names in NamingPrefix mode.
const prefixSeparator = "__"

// catalogEntry is one exposed tool: the name clients see, the upstream
// serving it, and the definition handed to policy.
type catalogEntry struct {
	name     string
	upstream *upstream
	tool     *mcp.Tool // upstream definition, upstream name
	input    policy.Tool
	server   policy.Server
}

// catalog is the aggregated tool set, in exposure order. It is immutable
// once built.
type catalog struct {
	entries []*catalogEntry
	byName  map[string]*catalogEntry
}

// buildCatalog aggregates the tools of upstreams (in configuration order)
// under mode. Tools that cannot be exposed (invalid or reserved names,
// conflicts) are left out; each is described in the returned notes.
func buildCatalog(upstreams []*upstream, mode NamingMode) (*catalog, []string) {
	c := &catalog{byName: map[string]*catalogEntry{}}
	var notes []string
	for _, u := range upstreams {
		server := policy.Server{Name: u.cfg.Name, Command: u.cfg.Command, Args: u.cfg.Args, Confinement: u.confinement}
		for _, t := range u.tools {
			name := t.Name
			if mode != NamingFirst {
				name = u.cfg.Name + prefixSeparator + t.Name
			}
			if why := refuseToolName(name); why != "" {
				notes = append(notes, fmt.Sprintf("server %q: tool %q not exposed: %s", u.cfg.Name, t.Name, why))
				continue
			}
			if prev, taken := c.byName[name]; taken {
				notes = append(notes, fmt.Sprintf("server %q: tool %q not exposed: the name %q is already taken by server %q",
					u.cfg.Name, t.Name, name, prev.upstream.cfg.Name))
				continue
			}
			in, err := policyTool(name, t)
			if err != nil {
				notes = append(notes, fmt.Sprintf("server %q: tool %q not exposed: %v", u.cfg.Name, t.Name, err))
				continue
			}
			e := &catalogEntry{name: name, upstream: u, tool: t, input: in, server: server}
			c.entries = append(c.entries, e)
			c.byName[name] = e
		}
	}
	return c, notes
}

// refuseToolName says why name cannot be exposed, or "" if it can.
func refuseToolName(name string) string {
	if !toolNamePattern.MatchString(name) {
		return "MCP tool names are 1–128 characters of A-Z a-z 0-9 _ . -"
	}
	for _, p := range reservedToolPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Sprintf("names starting with %q are reserved by the gateway", p)
		}
	}
	return ""
}

// policyTool describes an upstream tool for policy input, with the sha256
// of its canonical definition.
func policyTool(exposed string, t *mcp.Tool) (policy.Tool, error) {
	def, err := canonicalDefinition(t)
	if err != nil {
		return policy.Tool{}, err
	}
	sum, err := policy.DefinitionHash(def)
	if err != nil {
		return policy.Tool{}, err
	}
	return policy.Tool{
		Name:         exposed,
		UpstreamName: t.Name,
		Description:  t.Description,
		InputSchema:  def["inputSchema"],
		Annotations:  def["annotations"],
		SHA256:       sum,
	}, nil
}

// canonicalDefinition is the tool's wire form decoded into plain JSON values,
// whose encoding (sorted keys) is canonical.
func canonicalDefinition(t *mcp.Tool) (map[string]any, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode definition: %w", err)
	}
	var def map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep numbers exactly as declared
	if err := dec.Decode(&def); err != nil {
		return nil, fmt.Errorf("decode definition: %w", err)
	}
	return def, nil
}

// exposedTool is the definition clients see: the upstream one under the
// exposed name.
func (e *catalogEntry) exposedTool() *mcp.Tool {
	t := *e.tool
	t.Name = e.name
	return &t
}
