package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads a Config from a file (YAML, JSON, Claude-Desktop JSON) or
// from the per-agent environment, and holds the one place it is checked.
//
// Files are parsed into a yaml.Node tree first (JSON is converted token by
// token, keeping key order and line numbers) and decoded by nodeDecoder, so
// both formats report problems the same way: file, line, key path and fix.

// maxConfigSize bounds what LoadConfig reads, so that a path naming a device
// or a huge file fails fast instead of exhausting memory.
const maxConfigSize = 4 << 20

// maxDecodeSteps bounds the nodes visited while decoding, so that YAML
// aliases nesting aliases cannot expand into an exponential amount of work.
const maxDecodeSteps = 1 << 20

// maxJSONDepth bounds the nesting of a JSON config file.
const maxJSONDepth = 100

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

// LoadConfig reads, defaults (SetDefaults) and validates the configuration
// file at path. The format is chosen by extension (.yaml/.yml, .json) or, for
// other names, by content (a leading '{' means JSON):
//
//   - YAML: the Config tree, keys as tagged; unknown keys are errors.
//   - JSON with a top-level "mcpServers" object: a Claude Desktop file; its
//     servers keep the file's order and its other top-level keys are ignored.
//   - other JSON: the same schema as YAML.
//
// Relative cwd, policy.path and decision_log.path are resolved against the
// file's directory. Errors are *ConfigError values naming the file, the line,
// the key and the fix.
func LoadConfig(path string) (*Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, &ConfigError{Source: path, Problem: "cannot locate its directory: " + err.Error(), Err: err}
	}
	return loadConfig(path, dir, data, formatOf(path, data))
}

// readConfigFile reads at most maxConfigSize bytes of path.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var data []byte
		data, err = io.ReadAll(io.LimitReader(f, maxConfigSize+1))
		if err == nil && len(data) > maxConfigSize {
			return nil, &ConfigError{Source: path, Problem: fmt.Sprintf("larger than %d MiB", maxConfigSize>>20),
				Fix: "point --config at the configuration file"}
		}
		if err == nil {
			return data, nil
		}
	}
	reason := err.Error()
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	return nil, &ConfigError{Source: path, Problem: "cannot read the file: " + reason,
		Fix: "check the path and its permissions", Err: err}
}

// configFormat is the syntax of a configuration file.
type configFormat int

const (
	formatYAML configFormat = iota
	formatJSON
)

var utf8BOM = []byte("\xef\xbb\xbf")

func formatOf(path string, data []byte) configFormat {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return formatJSON
	case ".yaml", ".yml":
		return formatYAML
	}
	if t := bytes.TrimLeft(bytes.TrimPrefix(data, utf8BOM), " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return formatJSON
	}
	return formatYAML
}

// loadConfig is LoadConfig after the file is read; dir is the absolute
// directory relative paths are resolved against.
func loadConfig(source, dir string, data []byte, format configFormat) (*Config, error) {
	root, perr := parseDocument(source, data, format)
	if perr != nil {
		return nil, perr
	}
	d := &nodeDecoder{source: source, lines: map[string]int{}, expanding: map[*yaml.Node]bool{}}
	cfg := &Config{source: source}
	var rename func(string) string
	if format == formatJSON && hasKey(root, "mcpServers") {
		d.claudeServers(root, cfg)
		names := make([]string, len(cfg.Servers))
		for i, s := range cfg.Servers {
			names[i] = s.Name
		}
		rename = func(key string) string {
			if key == "servers" {
				return "mcpServers"
			}
			if i, rest, ok := splitServerKey(key); ok && i < len(names) {
				return pathKey("mcpServers", names[i]) + rest
			}
			return key
		}
	} else {
		d.decode(root, reflect.ValueOf(cfg).Elem(), "")
	}
	if len(d.errs) > 0 {
		return nil, joinConfigErrors(d.errs)
	}
	cfg.resolvePaths(dir)
	cfg.SetDefaults()
	errs := cfg.validate()
	for _, e := range errs {
		if rename != nil {
			e.Key = rename(e.Key)
		}
		e.Line = d.lineOf(e.Key)
	}
	if err := joinConfigErrors(errs); err != nil {
		return nil, err
	}
	return cfg, nil
}

// resolvePaths makes the relative file paths of c relative to dir.
func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	for i := range c.Servers {
		c.Servers[i].Cwd = abs(c.Servers[i].Cwd)
	}
	c.Policy.Path = abs(c.Policy.Path)
	c.DecisionLog.Path = abs(c.DecisionLog.Path)
}

// SetDefaults fills the fields whose zero value stands for a default:
// Naming (NamingPrefix), Policy.Engine ("rego"), Principal.ID
// (DefaultPrincipalID) and each server's CallTimeout (DefaultCallTimeout).
// LoadConfig and ConfigFromAgentEnv call it; Validate does not, and accepts
// the zero values. It modifies c.
func (c *Config) SetDefaults() {
	c.Naming = cmp.Or(c.Naming, NamingPrefix)
	c.Policy.Engine = cmp.Or(c.Policy.Engine, "rego")
	c.Principal.ID = cmp.Or(c.Principal.ID, DefaultPrincipalID)
	for i := range c.Servers {
		c.Servers[i].CallTimeout = cmp.Or(c.Servers[i].CallTimeout, DefaultCallTimeout)
	}
}

// --- parsing -----------------------------------------------------------

var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument parses data into the mapping node at its top level.
func parseDocument(source string, data []byte, format configFormat) (*yaml.Node, error) {
	var root *yaml.Node
	if format == formatJSON {
		var err error
		if root, err = jsonToNode(source, bytes.TrimPrefix(data, utf8BOM)); err != nil {
			return nil, err
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc, next yaml.Node
		err := dec.Decode(&doc)
		if err == nil {
			if err = dec.Decode(&next); err == nil {
				return nil, &ConfigError{Source: source, Line: next.Line, Problem: "a second YAML document",
					Fix: "keep one document: remove the --- separator and merge the two"}
			}
		}
		if err != nil && err != io.EOF {
			e := &ConfigError{Source: source, Problem: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "),
				Fix: "check indentation, colons and quoting", Err: err}
			if m := yamlLineError.FindStringSubmatch(err.Error()); m != nil {
				e.Line, _ = strconv.Atoi(m[1])
				e.Problem = "invalid YAML: " + m[2]
				// yaml.v3 reports the line where the enclosing block starts.
				e.Fix = "check indentation, colons and quoting at or after this line"
			}
			return nil, e
		}
		if len(doc.Content) > 0 {
			root = doc.Content[0]
		}
	}
	if root == nil || isNull(root) {
		return nil, &ConfigError{Source: source, Problem: "the file is empty",
			Fix: `list at least one server, e.g. servers: [{name: files, command: npx, args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]}]`}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &ConfigError{Source: source, Line: root.Line, Problem: "the top level is " + describe(root) + ", not a mapping",
			Fix: "start the file with keys such as servers:"}
	}
	return root, nil
}

// jsonToNode converts a JSON document into a yaml.Node tree, keeping key
// order and the line of every value.
func jsonToNode(source string, data []byte) (*yaml.Node, error) {
	r := &jsonNodeReader{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	r.dec.UseNumber()
	root, err := r.value(0)
	if err == nil {
		if _, extra := r.dec.Token(); extra != io.EOF {
			err = errors.New("unexpected content after the top-level value")
		}
	}
	if errors.Is(err, io.EOF) && root == nil {
		return nil, nil // empty
	}
	if err != nil {
		e := &ConfigError{Source: source, Line: r.line(), Problem: "invalid JSON: " + err.Error(),
			Fix: "check brackets, quotes and commas (JSON allows no trailing commas or comments)", Err: err}
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			e.Line = r.lineAt(se.Offset)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			e.Problem = "invalid JSON: the file ends before the document does"
			e.Line = r.lineAt(int64(len(bytes.TrimRight(data, " \t\r\n"))))
		}
		return nil, e
	}
	return root, nil
}

type jsonNodeReader struct {
	dec  *json.Decoder
	data []byte
	// lastOff and lastLine memoize lineAt: offsets mostly grow, so counting
	// from the previous one keeps conversion linear in the file size.
	lastOff  int64
	lastLine int
}

// line is the line of the end of the last token read.
func (r *jsonNodeReader) line() int { return r.lineAt(r.dec.InputOffset()) }

func (r *jsonNodeReader) lineAt(off int64) int {
	off = min(max(off, 0), int64(len(r.data)))
	if off < r.lastOff || r.lastLine == 0 {
		r.lastOff, r.lastLine = 0, 1
	}
	r.lastLine += bytes.Count(r.data[r.lastOff:off], []byte("\n"))
	r.lastOff = off
	return r.lastLine
}

func (r *jsonNodeReader) value(depth int) (*yaml.Node, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := r.dec.Token()
	if err != nil {
		if depth > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line := r.line()
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line}
		end := json.Delim('}')
		if t == '[' {
			n.Kind, n.Tag, end = yaml.SequenceNode, "!!seq", ']'
		} else if t != '{' {
			return nil, fmt.Errorf("unexpected %q", rune(t))
		}
		for r.dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := r.dec.Token()
				if err != nil {
					return nil, err
				}
				ks, ok := k.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: ks, Line: r.line()})
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		closing, err := r.dec.Token()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
		if closing != end {
			return nil, fmt.Errorf("expected %q", rune(end))
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: t, Line: line}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t), Line: line}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t), Line: line}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: line}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// --- decoding ------------------------------------------------------------

// nodeDecoder decodes a yaml.Node tree into Go values strictly: unknown
// keys, duplicate keys and wrong kinds are problems reported with their key
// path. It records the line of every key it visits for later messages.
// Unlike yaml.v3's own decoder it reports every problem, with its key path
// rather than a Go type, in YAML and JSON alike.
type nodeDecoder struct {
	source    string
	lines     map[string]int // key path → line
	errs      []*ConfigError
	expanding map[*yaml.Node]bool // anchors whose alias is being expanded
	steps     int
}

type nodeEntry struct{ key, value *yaml.Node }

var durationType = reflect.TypeFor[time.Duration]()

func (d *nodeDecoder) fail(n *yaml.Node, key, problem, fix string) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &ConfigError{Source: d.source, Line: line, Key: key, Problem: problem, Fix: fix})
}

// step counts one unit of work and reports whether the budget allows it.
func (d *nodeDecoder) step(n *yaml.Node, key string) bool {
	d.steps++
	if d.steps == maxDecodeSteps+1 {
		d.fail(n, key, "too much to decode (aliases expanding aliases?)", "write the values out instead of nesting aliases")
	}
	return d.steps <= maxDecodeSteps
}

// deref follows an alias, refusing one inside its own anchor; done must be
// called when the caller is finished with the returned node.
func (d *nodeDecoder) deref(n *yaml.Node, key string) (target *yaml.Node, done func()) {
	if n.Kind != yaml.AliasNode {
		return n, func() {}
	}
	if n.Alias == nil || d.expanding[n.Alias] {
		d.fail(n, key, "alias *"+n.Value+" refers to a value containing itself", "remove the loop")
		return nil, func() {}
	}
	d.expanding[n.Alias] = true
	return n.Alias, func() { delete(d.expanding, n.Alias) }
}

// lineOf is the line of key, or of its closest recorded ancestor.
func (d *nodeDecoder) lineOf(key string) int {
	ends := segmentEnds(key)
	for i := len(ends) - 1; i >= 0; i-- {
		if line, ok := d.lines[key[:ends[i]]]; ok {
			return line
		}
	}
	return 0
}

// segmentEnds lists where each segment of a key path (name, .name, [3],
// ["quoted"]) ends, so that key[:end] are the key and its ancestors.
func segmentEnds(key string) []int {
	var ends []int
	for i := 0; i < len(key); {
		switch {
		case strings.HasPrefix(key[i:], `["`):
			q, err := strconv.QuotedPrefix(key[i+1:])
			if err != nil || !strings.HasPrefix(key[i+1+len(q):], "]") {
				return ends
			}
			i += len(q) + 2
		case key[i] == '[':
			j := strings.IndexByte(key[i:], ']')
			if j < 0 {
				return ends
			}
			i += j + 1
		default:
			i++ // a leading '.' and then the name
			for i < len(key) && key[i] != '.' && key[i] != '[' {
				i++
			}
		}
		ends = append(ends, i)
	}
	return ends
}

// decode stores n into v, reporting problems under key.
func (d *nodeDecoder) decode(n *yaml.Node, v reflect.Value, key string) {
	if !d.step(n, key) {
		return
	}
	switch n.Kind {
	case yaml.AliasNode:
		target, done := d.deref(n, key)
		if target != nil {
			d.decode(target, v, key)
		}
		done()
		return
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			d.decode(n.Content[0], v, key)
		}
		return
	}
	if isNull(n) {
		v.SetZero()
		return
	}
	t := v.Type()
	switch {
	case t == durationType:
		dur, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if n.Kind != yaml.ScalarNode || err != nil {
			d.fail(n, key, fmt.Sprintf("%s is not a duration", describe(n)), `write a duration with a unit, e.g. "30s" or "2m"`)
			return
		}
		v.SetInt(int64(dur))
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, key, fmt.Sprintf("want a string, got %s", describe(n)), `write a single value, e.g. "text"`)
			return
		}
		v.SetString(n.Value)
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Decode(v.Addr().Interface()) != nil {
			d.fail(n, key, fmt.Sprintf("want true or false, got %s", describe(n)), "write true or false")
		}
	case t.Kind() == reflect.Struct:
		d.decodeStruct(n, v, key)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, key, fmt.Sprintf("want a list, got %s", describe(n)), listFix(t))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, el := range n.Content {
			k := indexKey(key, i)
			d.lines[k] = el.Line
			d.decode(el, s.Index(i), k)
		}
		v.Set(s)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		if n.Kind != yaml.MappingNode {
			d.fail(n, key, fmt.Sprintf("want a mapping, got %s", describe(n)), `write name: value pairs, e.g. {"LOG_LEVEL": "debug"}`)
			return
		}
		m := reflect.MakeMapWithSize(t, len(n.Content)/2)
		for _, e := range d.entries(n, key) {
			k := pathKey(key, e.key.Value)
			d.lines[k] = e.key.Line
			ev := reflect.New(t.Elem()).Elem()
			d.decode(e.value, ev, k)
			m.SetMapIndex(reflect.ValueOf(e.key.Value).Convert(t.Key()), ev)
		}
		v.Set(m)
	default: // free-form values such as principal claims
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.fail(n, key, "cannot read the value: "+strings.TrimPrefix(err.Error(), "yaml: "), "write plain YAML/JSON values")
		}
	}
}

func (d *nodeDecoder) decodeStruct(n *yaml.Node, v reflect.Value, key string) {
	t := v.Type()
	if n.Kind != yaml.MappingNode {
		d.fail(n, key, fmt.Sprintf("want a mapping, got %s", describe(n)), "write keys such as "+strings.Join(knownKeys(t), ", "))
		return
	}
	for _, e := range d.entries(n, key) {
		name := e.key.Value
		k := pathKey(key, name)
		i := fieldIndex(t, name)
		if i < 0 {
			d.fail(e.key, k, "unknown key", unknownKeyFix(name, knownKeys(t)))
			continue
		}
		d.lines[k] = e.key.Line
		d.decode(e.value, v.Field(i), k)
	}
}

// entries lists the key/value pairs of mapping n in order, with YAML merge
// keys (<<) applied: explicit keys win over merged ones, and earlier merged
// mappings over later ones. Duplicate and non-scalar keys are problems.
func (d *nodeDecoder) entries(n *yaml.Node, key string) []nodeEntry {
	var own, merged []nodeEntry
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.step(k, key) {
			return nil
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergeSources(v, key)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, key, "a key is "+describe(k), "use plain names as keys")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(k, pathKey(key, k.Value), fmt.Sprintf("set twice (first on line %d)", first.Line), "keep one of them")
			continue
		}
		seen[k.Value] = k
		own = append(own, nodeEntry{k, v})
	}
	for _, e := range merged {
		if _, dup := seen[e.key.Value]; !dup {
			seen[e.key.Value] = e.key
			own = append(own, e)
		}
	}
	return own
}

// mergeSources lists the entries a merge key's value brings in.
func (d *nodeDecoder) mergeSources(v *yaml.Node, key string) []nodeEntry {
	target, done := d.deref(v, key)
	defer done()
	switch {
	case target == nil:
		return nil
	case target.Kind == yaml.MappingNode:
		return d.entries(target, key)
	case target.Kind == yaml.SequenceNode:
		var all []nodeEntry
		for _, el := range target.Content {
			m, done := d.deref(el, key)
			if m != nil && m.Kind == yaml.MappingNode {
				all = append(all, d.entries(m, key)...)
			} else if m != nil {
				d.fail(el, key, "<< merges "+describe(m), "merge mappings only: <<: *anchor or <<: [*a, *b]")
			}
			done()
		}
		return all
	}
	d.fail(v, key, "<< merges "+describe(target), "merge mappings only: <<: *anchor or <<: [*a, *b]")
	return nil
}

// claudeServers decodes the servers of a Claude Desktop file; the other
// top-level keys are Claude Desktop's own settings and are ignored.
func (d *nodeDecoder) claudeServers(root *yaml.Node, cfg *Config) {
	for _, top := range d.entries(root, "") {
		if top.key.Value != "mcpServers" {
			continue
		}
		d.lines["mcpServers"] = top.key.Line
		if top.value.Kind != yaml.MappingNode {
			d.fail(top.value, "mcpServers", "want an object of servers, got "+describe(top.value),
				`write {"name": {"command": "npx", "args": ["-y", "some-server"]}}`)
			return
		}
		for _, e := range d.entries(top.value, "mcpServers") {
			key := pathKey("mcpServers", e.key.Value)
			d.lines[key] = e.key.Line
			if remote := remoteKind(e.value); remote != "" {
				d.fail(e.key, key, "is a remote server ("+remote+"); remote servers are not supported in this file yet",
					"remove the entry, or run the server through a local stdio bridge and list that command")
				continue
			}
			var cs struct {
				Command string            `yaml:"command"`
				Args    []string          `yaml:"args"`
				Env     map[string]string `yaml:"env"`
				Cwd     string            `yaml:"cwd"`
				Type    string            `yaml:"type"` // "stdio"; others are refused by remoteKind
			}
			d.decode(e.value, reflect.ValueOf(&cs).Elem(), key)
			cfg.Servers = append(cfg.Servers, ServerConfig{Name: e.key.Value, Command: cs.Command, Args: cs.Args, Env: cs.Env, Cwd: cs.Cwd})
		}
	}
}

// remoteKind describes why a Claude Desktop entry is a remote server, or
// returns "" for a stdio one.
func remoteKind(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k, v := n.Content[i].Value, n.Content[i+1]; {
		case k == "url":
			return "it has a url"
		case k == "type" && !(v.Kind == yaml.ScalarNode && v.Value == "stdio"):
			return fmt.Sprintf("type %q", v.Value)
		}
	}
	return ""
}

func hasKey(mapping *yaml.Node, key string) bool {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe names what a node holds, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		switch n.ShortTag() {
		case "!!int", "!!float":
			return "the number " + v
		case "!!bool":
			return "the boolean " + v
		case "!!null":
			return "null"
		}
		return strconv.Quote(v)
	}
	return "nothing"
}

func listFix(t reflect.Type) string {
	if t.Elem().Kind() == reflect.String {
		return `write a list, e.g. ["-y", "some-server"]`
	}
	return "write a list with one entry per item, each starting with -"
}

// fieldIndex is the index of the field of struct t tagged yaml:name, or -1.
func fieldIndex(t reflect.Type, name string) int {
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && yamlName(f) == name {
			return i
		}
	}
	return -1
}

func knownKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && yamlName(f) != "" {
			keys = append(keys, yamlName(f))
		}
	}
	return keys
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// unknownKeyFix suggests the known key closest to name, and lists them all.
func unknownKeyFix(name string, known []string) string {
	if name == "mcpServers" {
		return "mcpServers belongs in a Claude Desktop file, which is read as JSON: give the file a .json name"
	}
	fix := "known keys here: " + strings.Join(known, ", ")
	best, bestDist := "", 3
	for _, k := range known {
		if dist := editDistance(strings.ToLower(name), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		fix = fmt.Sprintf("did you mean %s? %s", best, fix)
	}
	return fix
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// pathKey is the key path of key under parent: parent.key, or
// parent["key"] when key is not a plain name.
func pathKey(parent, key string) string {
	if !validName(key, 1<<10) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexKey(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

// splitServerKey splits "servers[3].env.X" into 3 and ".env.X".
func splitServerKey(key string) (i int, rest string, ok bool) {
	after, found := strings.CutPrefix(key, "servers[")
	if !found {
		return 0, "", false
	}
	num, rest, found := strings.Cut(after, "]")
	if !found {
		return 0, "", false
	}
	i, err := strconv.Atoi(num)
	return i, rest, err == nil
}

// --- validation ----------------------------------------------------------

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
		if strings.TrimSpace(s.Command) == "" {
			bad(key+".command", "missing", "set the program to run, e.g. npx (it is run directly, not through a shell)")
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
		if s.CallTimeout < 0 {
			bad(key+".call_timeout", fmt.Sprintf("negative (%s)", s.CallTimeout), fmt.Sprintf(`use a duration such as "30s", or 0 for the default (%s)`, DefaultCallTimeout))
		}
	}

	if c.Naming != "" && c.Naming != NamingPrefix && c.Naming != NamingFirst {
		bad("naming", fmt.Sprintf("%q is not a naming mode", c.Naming),
			"use prefix (tools exposed as <server>__<tool>) or first (the server listed first wins a name conflict)")
	}
	if c.Policy.Engine != "" && c.Policy.Engine != "rego" {
		bad("policy.engine", fmt.Sprintf("%q is not a policy engine", c.Policy.Engine), "use rego, or leave it out")
	}

	firstStdio := -1
	for i, l := range c.Listeners {
		key := indexKey("listeners", i)
		switch {
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
		}
	}
	return errs
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
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			notes = append(notes, fmt.Sprintf("%s: listeners[%d].http: %q is reachable from other hosts and HTTP clients are not authenticated; "+
				"bind 127.0.0.1 unless that is intended", source, i, l.HTTP))
		}
	}
	return notes
}

// --- environment ---------------------------------------------------------

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
