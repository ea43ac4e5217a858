package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
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
	input    *policy.Tool
	server   policy.Server
}

// catalog is the aggregated set of tools, resources, resource templates and
// prompts, in exposure order. It is immutable once built; a list_changed
// from an upstream builds a new one.
type catalog struct {
	entries []*catalogEntry
	byName  map[string]*catalogEntry

	resources  []*resourceEntry
	byURI      map[string]*resourceEntry
	templates  []*resourceEntry
	prompts    []*promptEntry
	promptByID map[string]*promptEntry
}

// resourceEntry is one exposed resource or resource template. URIs are
// exposed as the upstream declares them.
type resourceEntry struct {
	upstream *upstream
	server   policy.Server
	resource *mcp.Resource         // nil for a template
	template *mcp.ResourceTemplate // nil for a resource
	pattern  *regexp.Regexp        // a template's URI matcher
	input    *policy.Resource
}

// promptEntry is one exposed prompt under its exposed name.
type promptEntry struct {
	name     string
	upstream *upstream
	server   policy.Server
	prompt   *mcp.Prompt
	input    *policy.Prompt
}

// buildCatalog aggregates the tools of upstreams (in configuration order)
// under mode. Tools that cannot be exposed (invalid or reserved names,
// conflicts) are left out; each is described in the returned notes.
func buildCatalog(upstreams []*upstream, mode NamingMode) (*catalog, []string) {
	c := &catalog{byName: map[string]*catalogEntry{}, byURI: map[string]*resourceEntry{}, promptByID: map[string]*promptEntry{}}
	var notes []string
	for _, u := range upstreams {
		server := policy.Server{Name: u.cfg.Name, Command: u.cfg.Command, Args: u.cfg.Args, URL: u.cfg.URL, Confinement: u.confinement}
		u.mu.RLock()
		tools, resources, templates, prompts := u.tools, u.resources, u.templates, u.prompts
		u.mu.RUnlock()
		for _, r := range resources {
			if prev, taken := c.byURI[r.URI]; taken {
				notes = append(notes, fmt.Sprintf("server %q: resource %q not exposed: already served by server %q", u.cfg.Name, r.URI, prev.upstream.cfg.Name))
				continue
			}
			e := &resourceEntry{upstream: u, server: server, resource: r,
				input: &policy.Resource{URI: r.URI, Name: r.Name, MIMEType: r.MIMEType}}
			c.resources = append(c.resources, e)
			c.byURI[r.URI] = e
		}
		for _, t := range templates {
			e := &resourceEntry{upstream: u, server: server, template: t, pattern: templatePattern(t.URITemplate),
				input: &policy.Resource{URI: t.URITemplate, Template: true, Name: t.Name, MIMEType: t.MIMEType}}
			c.templates = append(c.templates, e)
		}
		for _, p := range prompts {
			name := p.Name
			if mode != NamingFirst {
				name = u.cfg.Name + prefixSeparator + p.Name
			}
			if prev, taken := c.promptByID[name]; taken {
				notes = append(notes, fmt.Sprintf("server %q: prompt %q not exposed: the name %q is already taken by server %q",
					u.cfg.Name, p.Name, name, prev.upstream.cfg.Name))
				continue
			}
			e := &promptEntry{name: name, upstream: u, server: server, prompt: p,
				input: &policy.Prompt{Name: name, UpstreamName: p.Name, Description: p.Description}}
			c.prompts = append(c.prompts, e)
			c.promptByID[name] = e
		}
		for _, t := range tools {
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
func policyTool(exposed string, t *mcp.Tool) (*policy.Tool, error) {
	def, err := canonicalDefinition(t)
	if err != nil {
		return nil, err
	}
	sum, err := policy.DefinitionHash(def)
	if err != nil {
		return nil, err
	}
	return &policy.Tool{
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

// exposedPrompt is the definition clients see: the upstream one under the
// exposed name.
func (e *promptEntry) exposedPrompt() *mcp.Prompt {
	p := *e.prompt
	p.Name = e.name
	return &p
}

// resourceFor finds what serves uri: a listed resource, else the first
// template matching it, else the only upstream serving resources at all
// (servers may serve URIs they do not list). nil means nothing does.
func (c *catalog) resourceFor(uri string) *resourceEntry {
	if e, ok := c.byURI[uri]; ok {
		return e
	}
	for _, e := range c.templates {
		if e.pattern != nil && e.pattern.MatchString(uri) {
			return e
		}
	}
	var only *upstream
	for _, e := range append(slices.Clip(c.resources), c.templates...) {
		if only != nil && e.upstream != only {
			return nil
		}
		only = e.upstream
	}
	if only == nil {
		return nil
	}
	return &resourceEntry{upstream: only, server: c.serverOf(only), input: &policy.Resource{URI: uri}}
}

func (c *catalog) serverOf(u *upstream) policy.Server {
	for _, e := range c.resources {
		if e.upstream == u {
			return e.server
		}
	}
	for _, e := range c.templates {
		if e.upstream == u {
			return e.server
		}
	}
	return policy.Server{Name: u.cfg.Name}
}

// templatePattern compiles an RFC 6570 URI template into a matcher: each
// {expression} matches one path segment, {+expression} and {#expression}
// anything. Templates it cannot read match nothing.
func templatePattern(tmpl string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(tmpl))
			break
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return nil
		}
		b.WriteString(regexp.QuoteMeta(tmpl[:i]))
		switch expr := tmpl[i+1 : i+j]; {
		case strings.HasPrefix(expr, "+"), strings.HasPrefix(expr, "#"):
			b.WriteString(".*")
		case strings.HasPrefix(expr, "?"), strings.HasPrefix(expr, "&"):
			b.WriteString(`(?:[?&][^#]*)?`)
		default:
			b.WriteString(`[^/?#]*`)
		}
		tmpl = tmpl[i+j+1:]
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil
	}
	return re
}
