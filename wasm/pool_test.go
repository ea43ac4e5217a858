package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/stretchr/testify/require"
)

// buildWasm compiles one Rego module to policy.wasm with OPA's compiler and
// every builtin of this OPA version available, I/O ones included.
func buildWasm(t testing.TB, module string, entrypoint string) []byte {
	t.Helper()
	c := compile.New().
		WithTarget(compile.TargetWasm).
		WithRegoVersion(ast.RegoV1).
		WithEntrypoints(entrypoint).
		WithFS(fstest.MapFS{"policy.rego": {Data: []byte(module)}}).
		WithPaths(".")
	require.NoError(t, c.Build(context.Background()))
	return c.Bundle().WasmModules[0].Raw
}

func newPool(t testing.TB, module []byte, opts PoolOptions) *Pool {
	t.Helper()
	ctx := context.Background()
	m, err := Compile(ctx, module, CompileOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close(ctx) })
	p, err := NewPool(ctx, m, opts)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(ctx) })
	return p
}

const echoPolicy = `package t
p := {"input": input, "data": data.d, "n": count(input.list)} if input.list
`

func TestEvalReturnsTheEntrypointValue(t *testing.T) {
	p := newPool(t, buildWasm(t, echoPolicy, "t/p"), PoolOptions{Entrypoint: "t/p", Data: []byte(`{"d":{"k":[1,2]}}`), Size: 2})
	ctx := context.Background()
	out, err := p.Eval(ctx, []byte(`{"list":[1,"two",{"three":3}]}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"input":{"list":[1,"two",{"three":3}]},"data":{"k":[1,2]},"n":3}`, string(out))

	_, err = p.Eval(ctx, []byte(`{"other":1}`))
	require.ErrorIs(t, err, ErrUndefined)

	_, err = p.Eval(ctx, []byte(`{"list": [1,`))
	require.Error(t, err, "malformed input")
	// The instance that saw the malformed input still serves.
	for range 4 {
		_, err = p.Eval(ctx, []byte(`{"list":[]}`))
		require.NoError(t, err)
	}
}

func TestLoadErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Compile(ctx, []byte("not wasm at all"), CompileOptions{})
	require.ErrorContains(t, err, "not a valid WebAssembly module")

	// A function whose type index is out of range, called: wazero's
	// validator panics on it.
	_, err = Compile(ctx, []byte("\x00asm\x01\x00\x00\x00"+
		"\x01\x04\x01\x60\x00\x00"+ // types: () -> ()
		"\x03\x03\x02\x00\x05"+ // functions: type 0, type 5
		"\x0a\x09\x02\x04\x00\x10\x01\x0b\x02\x00\x0b"), // code: call 1; (empty)
		CompileOptions{})
	require.ErrorContains(t, err, "not a valid WebAssembly module")

	// A valid Wasm module that is not an OPA policy.
	_, err = Compile(ctx, []byte{0, 'a', 's', 'm', 1, 0, 0, 0}, CompileOptions{})
	require.ErrorContains(t, err, "not an OPA policy module")

	mod := buildWasm(t, echoPolicy, "t/p")
	m, err := Compile(ctx, mod, CompileOptions{})
	require.NoError(t, err)
	defer m.Close(ctx)
	_, err = NewPool(ctx, m, PoolOptions{Entrypoint: "t/q"})
	require.ErrorContains(t, err, "no entry point t/q (it has [t/p])")
	_, err = NewPool(ctx, m, PoolOptions{Entrypoint: "t/p", Data: []byte(`[1]`)})
	require.ErrorContains(t, err, "data is not a JSON object")
	_, err = NewPool(ctx, m, PoolOptions{Entrypoint: "t/p", Data: []byte(`{"d":`)})
	require.ErrorContains(t, err, "load data")

	old, err := Compile(ctx, withABIVersion(t, mod, 1, 1), CompileOptions{})
	require.NoError(t, err)
	defer old.Close(ctx)
	_, err = NewPool(ctx, old, PoolOptions{Entrypoint: "t/p"})
	require.ErrorContains(t, err, "unsupported OPA Wasm ABI version 1.1")
}

func TestIOBuiltinsAreRefused(t *testing.T) {
	ctx := context.Background()
	mod := buildWasm(t, `package t
p := http.send({"method": "GET", "url": "http://127.0.0.1:1/"}).status_code
`, "t/p")
	m, err := Compile(ctx, mod, CompileOptions{})
	require.NoError(t, err)
	defer m.Close(ctx)
	_, err = NewPool(ctx, m, PoolOptions{Entrypoint: "t/p"})
	require.ErrorContains(t, err, "refuses")
	require.ErrorContains(t, err, "http.send")
}

func TestHostBuiltinsSeeOneTimePerEvaluation(t *testing.T) {
	p := newPool(t, buildWasm(t, `package t
p := [time.now_ns(), sprintf("%d", [count(input)]), time.now_ns()]
`, "t/p"), PoolOptions{Entrypoint: "t/p", Size: 1})
	before := time.Now().UnixNano()
	out, err := p.Eval(context.Background(), []byte(`[1,2,3]`))
	require.NoError(t, err)
	var got []json.Number
	require.NoError(t, json.Unmarshal(out, &got))
	require.Equal(t, got[0], got[2], "time.now_ns differs within one evaluation")
	require.Equal(t, json.Number("3"), got[1])
	ns, _ := got[0].Int64()
	require.GreaterOrEqual(t, ns, before-int64(time.Second))
	require.LessOrEqual(t, ns, time.Now().UnixNano())
}

const loopPolicy = `package t
# About 10^13 comparisons: runs far past any deadline.
p if {
	some a in numbers.range(1, 30000)
	some b in numbers.range(1, 30000)
	some c in numbers.range(1, 30000)
	a == b + c + 100000
}
q := "fast"
`

func TestRunawayPolicyTimesOutAndInstanceIsReplaced(t *testing.T) {
	mod := buildWasm(t, loopPolicy, "t/p")
	p := newPool(t, mod, PoolOptions{Entrypoint: "t/p", Size: 1, Timeout: 100 * time.Millisecond, MemoryLimitPages: 16384})
	start := time.Now()
	_, err := p.Eval(context.Background(), []byte(`{}`))
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, "policy evaluation timed out", err.Error())
	require.Less(t, time.Since(start), 5*time.Second)
	// The pool's only instance was discarded; a new one serves the next call
	// (which times out again, but is evaluated).
	_, err = p.Eval(context.Background(), []byte(`{}`))
	require.ErrorIs(t, err, ErrTimeout)

	// The caller's own cancellation is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = p.Eval(ctx, []byte(`{}`))
	require.ErrorIs(t, err, context.Canceled)
}

func TestRunawayPolicyInHostBuiltinsIsStopped(t *testing.T) {
	// Nearly 10^9 sprintf calls, each a call out to Go: the evaluation is
	// stopped whether the deadline finds it in Wasm or in a builtin.
	mod := buildWasm(t, `package t
p if {
	some a in numbers.range(1, 30000)
	some b in numbers.range(1, 30000)
	sprintf("%d-%d", [a, b]) == "x"
}
`, "t/p")
	p := newPool(t, mod, PoolOptions{Entrypoint: "t/p", Size: 1, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := p.Eval(context.Background(), []byte(`{}`))
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(start), 5*time.Second)

	// The caller's cancellation, with its cause, on the replaced instance.
	stop := errors.New("client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(20*time.Millisecond, func() { cancel(stop) })
	_, err = p.Eval(ctx, []byte(`{}`))
	require.ErrorIs(t, err, stop)

	// A context already done is refused before the evaluation starts.
	_, err = p.Eval(ctx, []byte(`{}`))
	require.ErrorIs(t, err, stop)
}

func TestMemoryHungryPolicyHitsTheLimitAndPoolKeepsServing(t *testing.T) {
	mod := buildWasm(t, `package t
p := count(numbers.range(1, to)) if to := input.to
`, "t/p")
	p := newPool(t, mod, PoolOptions{Entrypoint: "t/p", Size: 1, MemoryLimitPages: 64})
	ctx := context.Background()
	_, err := p.Eval(ctx, []byte(`{"to": 100000000}`))
	require.ErrorIs(t, err, ErrMemoryLimit)
	require.Equal(t, "policy evaluation exceeded the memory limit", err.Error())
	out, err := p.Eval(ctx, []byte(`{"to": 10}`))
	require.NoError(t, err)
	require.Equal(t, "10", string(out))

	// An input larger than the memory cap.
	big := `{"to": 1, "pad": "` + strings.Repeat("x", 5<<20) + `"}`
	_, err = p.Eval(ctx, []byte(big))
	require.ErrorIs(t, err, ErrMemoryLimit)
}

// TestMemoryStaysFlatAcrossEvaluations runs flatEvaluations evaluations
// (1,000,000 with the conformance build tag, as `make conformance-opa`
// runs it, without -race) calling a host builtin and under a caller's
// context that can be cancelled: neither the instance's memory nor the Go
// heap may grow.
func TestMemoryStaysFlatAcrossEvaluations(t *testing.T) {
	mod := buildWasm(t, `package t
p := {"n": count(input.items), "s": sprintf("%d", [count(input.items)]), "u": {x | some x in input.items}} if input.items
`, "t/p")
	p := newPool(t, mod, PoolOptions{Entrypoint: "t/p", Size: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := []byte(`{"items":["a","b","c","d","e","f","g"]}`)
	eval := func() {
		if _, err := p.Eval(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	pages := func() uint32 {
		in := <-p.free
		defer func() { p.free <- in }()
		return in.MemoryPages()
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	n := flatEvaluations
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	for range n / 100 { // warm up: instance memory and Go caches at their size
		eval()
	}
	firstPages, firstHeap := pages(), heap()
	for range n {
		eval()
	}
	require.Equal(t, firstPages, pages(), "instance memory grew over %d evaluations", n)
	lastHeap := heap()
	require.Less(t, lastHeap, firstHeap+1<<20, "Go heap grew from %d to %d bytes over %d evaluations", firstHeap, lastHeap, n)
}

func TestCompilationCacheDirIsReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	mod := buildWasm(t, echoPolicy, "t/p")
	ctx := context.Background()
	m, err := Compile(ctx, mod, CompileOptions{CacheDir: dir})
	require.NoError(t, err)
	require.NoError(t, m.Close(ctx))
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "nothing cached")
}

func TestCompilationCacheDirOthersCanWriteIsRefused(t *testing.T) {
	mod := buildWasm(t, echoPolicy, "t/p")
	ctx := context.Background()
	loose := filepath.Join(t.TempDir(), "loose")
	require.NoError(t, os.Mkdir(loose, 0o700))
	require.NoError(t, os.Chmod(loose, 0o777))
	_, err := Compile(ctx, mod, CompileOptions{CacheDir: loose})
	require.ErrorContains(t, err, "writable by its group or others (mode 0777)")

	// A loose directory inside a private one (wazero's per-version one).
	private := filepath.Join(t.TempDir(), "private")
	require.NoError(t, os.MkdirAll(filepath.Join(private, "wazero-x"), 0o700))
	require.NoError(t, os.Chmod(filepath.Join(private, "wazero-x"), 0o775))
	_, err = Compile(ctx, mod, CompileOptions{CacheDir: private})
	require.ErrorContains(t, err, "wazero-x is writable by its group or others")

	// Someone else's directory.
	if os.Geteuid() == 0 {
		theirs := filepath.Join(t.TempDir(), "theirs")
		require.NoError(t, os.Mkdir(theirs, 0o700))
		require.NoError(t, os.Chown(theirs, 65534, 65534))
		_, err = Compile(ctx, mod, CompileOptions{CacheDir: theirs})
		require.ErrorContains(t, err, "belongs to uid 65534")
	}

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = Compile(ctx, mod, CompileOptions{CacheDir: file})
	require.ErrorContains(t, err, "is not a directory")
}

// withABIVersion returns mod with its ABI version globals set to
// major.minor (both one-byte LEB128 constants in OPA's output).
func withABIVersion(t *testing.T, mod []byte, major, minor byte) []byte {
	t.Helper()
	out := append([]byte(nil), mod...)
	globals, exports := sectionOf(out, 6), sectionOf(out, 7)
	require.NotNil(t, globals)
	require.NotNil(t, exports)
	set := func(name string, v byte) {
		idx := exportedGlobal(t, exports, name)
		// Walk the globals: valtype, mut, init expr up to 0x0b.
		pos := 1 // count (< 128 globals)
		for i := 0; ; i++ {
			pos += 2
			if i == idx {
				require.Equal(t, byte(0x41), globals[pos], "global %s is not an i32.const", name)
				globals[pos+1] = v
				return
			}
			for globals[pos] != 0x0b {
				pos++
			}
			pos++
		}
	}
	set("opa_wasm_abi_version", major)
	set("opa_wasm_abi_minor_version", minor)
	return out
}

// sectionOf returns the payload of section id (a view into mod).
func sectionOf(mod []byte, id byte) []byte {
	pos := 8
	for pos < len(mod) {
		sid := mod[pos]
		size, n := readU32(mod[pos+1:])
		start := pos + 1 + n
		if sid == id {
			return mod[start : start+int(size)]
		}
		pos = start + int(size)
	}
	return nil
}

func exportedGlobal(t *testing.T, exports []byte, want string) int {
	count, pos := readU32(exports)
	for range count {
		l, n := readU32(exports[pos:])
		pos += n
		name := string(exports[pos : pos+int(l)])
		pos += int(l)
		kind := exports[pos]
		idx, n := readU32(exports[pos+1:])
		pos += 1 + n
		if kind == 3 && name == want {
			return int(idx)
		}
	}
	t.Fatalf("no exported global %s", want)
	return 0
}

func readU32(b []byte) (uint32, int) {
	var v uint32
	for i := 0; ; i++ {
		v |= uint32(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
}

// A pool that records them returns what the non-deterministic builtins of
// an evaluation returned, in the form of OPA's nd_builtin_cache; one that
// does not, and an evaluation calling none, return nil.
func TestEvalRecordsNondeterministicBuiltins(t *testing.T) {
	ctx := context.Background()
	m := buildWasm(t, `package t
p := {"now": time.now_ns(), "n": rand.intn("k", 1000000), "x": input.x} if input.random
p := {"x": input.x} if not input.random
`, "t/p")
	p := newPool(t, m, PoolOptions{Entrypoint: "t/p", Size: 1, RecordNondeterministic: true})
	out, nd, err := p.EvalRecorded(ctx, []byte(`{"random":true,"x":1}`))
	require.NoError(t, err)
	var got struct {
		Now, N json.Number
	}
	require.NoError(t, json.Unmarshal(out, &got))
	require.JSONEq(t, fmt.Sprintf(`{"time.now_ns":{"[]":%s},"rand.intn":{"[\"k\",1000000]":%s}}`, got.Now, got.N), string(nd))

	_, nd, err = p.EvalRecorded(ctx, []byte(`{"random":false,"x":1}`))
	require.NoError(t, err)
	require.Nil(t, nd, "no non-deterministic builtin called")

	quiet := newPool(t, m, PoolOptions{Entrypoint: "t/p", Size: 1})
	_, nd, err = quiet.EvalRecorded(ctx, []byte(`{"random":true,"x":1}`))
	require.NoError(t, err)
	require.Nil(t, nd, "not recording")
}
