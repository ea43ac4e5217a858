package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file reads a Config from a file (YAML, JSON, Claude-Desktop JSON);
// config_env.go reads one from the per-agent environment, and
// config_validate.go holds the one place it is checked.
//
// Files are parsed into a yaml.Node tree first (JSON is converted token by
// token, keeping key order and line numbers) and decoded by nodeDecoder
// (config_decode.go), so both formats report problems the same way: file,
// line, key path and fix.

// maxConfigSize bounds what LoadConfig reads, so that a path naming a device
// or a huge file fails fast instead of exhausting memory.
const maxConfigSize = 4 << 20

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
	if c.Policy.Wasm.CacheDir != "-" {
		c.Policy.Wasm.CacheDir = abs(c.Policy.Wasm.CacheDir)
	}
	c.DecisionLog.Path = abs(c.DecisionLog.Path)
	c.Auth.JWT.JWKSFile = abs(c.Auth.JWT.JWKSFile)
}
