// Package environ builds a server's environment from scratch and resolves its
// program against that environment, never the gateway's.
package environ

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Base is the fixed environment every server starts from. Declared variables
// are laid over it. HOME is /tmp rather than the server's Dir so that dotfiles
// and caches never land in a workspace; a later change gives each server a
// private HOME.
var Base = map[string]string{
	"PATH": "/usr/local/bin:/usr/bin:/bin",
	"HOME": "/tmp",
	"LANG": "C.UTF-8",
}

// refused names variables that change which code a server runs (dynamic
// loader, interpreter start-up hooks, package-index redirection) or hand it a
// host daemon socket. A declaration of any of them is refused, not silently
// dropped, so that the config author sees why it has no effect. Credential
// variables (GITHUB_TOKEN, AWS_*, …) are allowed when declared: declaring
// them is how a server receives its secret, and the host's copies are never
// inherited.
var refused = map[string]bool{
	"GLIBC_TUNABLES":    true,
	"NODE_OPTIONS":      true,
	"NODE_PATH":         true,
	"PYTHONPATH":        true,
	"PYTHONSTARTUP":     true,
	"PYTHONHOME":        true,
	"PERL5LIB":          true,
	"PERL5OPT":          true,
	"RUBYOPT":           true,
	"JAVA_TOOL_OPTIONS": true,
	"BASH_ENV":          true,
	"ENV":               true,
	"PROMPT_COMMAND":    true,
	"SSH_AUTH_SOCK":     true,
	"DOCKER_HOST":       true,
	"UV_INDEX_URL":      true,
}

// refusedPrefixes are matched case-sensitively except npm's, which npm reads
// in any case.
var refusedPrefixes = []string{"LD_", "GIT_"}

// RefusedError reports a declared variable that is never passed to a server.
type RefusedError struct {
	Key    string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("environment variable %q refused: %s", e.Key, e.Reason)
}

// Build returns the environment ("KEY=value", sorted by key) made of Base with
// declared laid over it. It refuses malformed entries and the variables listed
// in refused, naming the key; values are never quoted in errors (they may be
// secrets).
func Build(declared map[string]string) ([]string, error) {
	env := make(map[string]string, len(Base)+len(declared))
	for k, v := range Base {
		env[k] = v
	}
	for k, v := range declared {
		if err := check(k, v); err != nil {
			return nil, err
		}
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

func check(k, v string) error {
	switch {
	case k == "":
		return &RefusedError{Key: k, Reason: "empty name"}
	case strings.ContainsAny(k, "=\x00"):
		return &RefusedError{Key: k, Reason: "name contains '=' or NUL"}
	case strings.ContainsRune(v, 0):
		return &RefusedError{Key: k, Reason: "value contains NUL"}
	case strings.HasPrefix(v, "()"):
		// bash imports such values as functions (Shellshock class).
		return &RefusedError{Key: k, Reason: "value starts with \"()\" (shell function import)"}
	case refused[k]:
		return &RefusedError{Key: k, Reason: "it changes which code the server runs or exposes a host socket"}
	case strings.HasPrefix(strings.ToLower(k), "npm_config_registry"):
		return &RefusedError{Key: k, Reason: "it redirects package downloads"}
	}
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(k, p) {
			return &RefusedError{Key: k, Reason: "variables starting " + p + " change which code the server runs"}
		}
	}
	return nil
}

// Get returns the value of key in env ("KEY=value" entries), last one wins.
func Get(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// ErrNotFound reports a program missing from every PATH directory.
var ErrNotFound = errors.New("executable file not found in PATH")

// Resolve checks that dir (if set) is a directory and resolves command the
// way execvp would for a process whose environment is env and whose working
// directory is dir, without consulting the gateway's own environment. A name
// with a slash is checked as is (relative to dir). Relative PATH entries are
// skipped: they would let the working directory choose the program. Errors
// name the directory or the command.
func Resolve(command string, env []string, dir string) (string, error) {
	if dir != "" {
		fi, err := os.Stat(dir)
		if err == nil && !fi.IsDir() {
			err = fmt.Errorf("not a directory")
		}
		if err != nil {
			return "", fmt.Errorf("dir %q: %w", dir, err)
		}
	}
	path, err := lookPath(command, env, dir)
	if err != nil {
		return "", fmt.Errorf("command %q: %w", command, err)
	}
	return path, nil
}

func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", err
		}
		return file, nil
	}
	for _, d := range filepath.SplitList(Get(env, "PATH")) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", ErrNotFound
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: p, Err: fs.ErrPermission}
	}
	return nil
}
