package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxDecodeSteps bounds the nodes visited while decoding, so that YAML
// aliases nesting aliases cannot expand into an exponential amount of work.
const maxDecodeSteps = 1 << 20

// maxJSONDepth bounds the nesting of a JSON config file.
const maxJSONDepth = 100

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
			var cs struct {
				Command string            `yaml:"command"`
				Args    []string          `yaml:"args"`
				Env     map[string]string `yaml:"env"`
				Cwd     string            `yaml:"cwd"`
				Type    string            `yaml:"type"`
				URL     string            `yaml:"url"`
				Headers map[string]string `yaml:"headers"`
			}
			d.decode(e.value, reflect.ValueOf(&cs).Elem(), key)
			sc := ServerConfig{Name: e.key.Value, Command: cs.Command, Args: cs.Args, Env: cs.Env, Cwd: cs.Cwd}
			switch cs.Type {
			case "", "stdio":
				if cs.URL != "" && cs.Type == "stdio" {
					d.fail(e.key, key+".type", `"stdio" with a url`, `a remote server's type is "http" or "sse"; a stdio one has a command instead of a url`)
					continue
				}
			case "http", "streamable-http", "streamableHttp":
				sc.Transport = RemoteStreamableHTTP
			case "sse":
				sc.Transport = RemoteSSE
			default:
				d.fail(e.key, key+".type", fmt.Sprintf("%q is not a server type", cs.Type), `use "stdio" (command), "http" or "sse" (url)`)
				continue
			}
			if cs.URL != "" {
				sc.URL = cs.URL
				if sc.Transport == "" {
					sc.Transport = RemoteStreamableHTTP
				}
				sc.Headers, sc.HeaderSecrets = claudeHeaders(cs.Headers)
			} else if len(cs.Headers) > 0 {
				sc.Headers = cs.Headers // refused by Validate: headers without url
			}
			cfg.Servers = append(cfg.Servers, sc)
		}
	}
}

// claudeVariable is a Claude Desktop header value naming a host variable:
// "${NAME}", possibly after a prefix such as "Bearer ".
var claudeVariable = regexp.MustCompile(`^([^$]*)\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// claudeHeaders splits a Claude Desktop entry's headers into literal ones
// and those whose value comes from a host variable ("Bearer ${TOKEN}"),
// which are read at start and kept out of logs like header_secrets.
func claudeHeaders(in map[string]string) (map[string]string, map[string]HeaderSecret) {
	var headers map[string]string
	var secrets map[string]HeaderSecret
	for name, value := range in {
		if m := claudeVariable.FindStringSubmatch(value); m != nil {
			if secrets == nil {
				secrets = map[string]HeaderSecret{}
			}
			secrets[name] = HeaderSecret{Env: m[2], Prefix: m[1]}
			continue
		}
		if headers == nil {
			headers = map[string]string{}
		}
		headers[name] = value
	}
	return headers, secrets
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
