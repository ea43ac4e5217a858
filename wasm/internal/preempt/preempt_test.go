package preempt

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"go.uber.org/goleak"

	"github.com/mcp-warden/mcp-warden/wasm/internal/wasmbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fanoutDepth functions each call the next twice: 2^40 calls and no loop.
const fanoutDepth = 40

// runaway is a module whose exports never return (except recurse, which
// overflows the stack):
//
//	spin:    a loop with an immediate 0x03 (the loop opcode) inside it
//	count:   a loop with a parameter (a block type that is a type index)
//	recurse: unbounded recursion
//	fanout:  exponentially many calls without any loop
func runaway() []byte {
	types := []byte{2, 0x60, 0, 0, 0x60, 1, 0x7f, 0} // 0: () -> (); 1: (i32) -> ()
	bodies := [][]byte{
		{0x03, 0x40, 0x41, 0x03, 0x1a, 0x0c, 0x00, 0x0b, 0x0b}, // loop; i32.const 3; drop; br 0; end
		{0x41, 0x00, 0x03, 0x01, 0x41, 0x01, 0x6a, 0x0c, 0x00, 0x0b, 0x0b},
		{0x10, 0x02, 0x0b}, // call 2 (itself)
	}
	for i := range fanoutDepth {
		next := byte(4 + i)
		bodies = append(bodies, []byte{0x10, next, 0x10, next, 0x0b})
	}
	bodies = append(bodies, []byte{0x0b})
	funcs := wasmbin.AppendU32(nil, uint32(len(bodies)))
	code := wasmbin.AppendU32(nil, uint32(len(bodies)))
	for _, b := range bodies {
		funcs = append(funcs, 0)
		code = wasmbin.AppendU32(code, uint32(len(b)+1))
		code = append(append(code, 0), b...) // no locals
	}
	exports := wasmbin.AppendU32(nil, 4)
	for i, name := range []string{"spin", "count", "recurse", "fanout"} {
		exports = append(wasmbin.AppendName(exports, name), 0x00, byte(i))
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = wasmbin.AppendSection(m, 1, types)
	m = wasmbin.AppendSection(m, 3, funcs)
	m = wasmbin.AppendSection(m, sectionExport, exports)
	m = wasmbin.AppendSection(m, sectionCode, code)
	return m
}

func instantiate(t *testing.T, module []byte) (api.Module, api.MutableGlobal) {
	t.Helper()
	ctx := context.Background()
	instrumented, err := Instrument(module)
	require.NoError(t, err)
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	t.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, instrumented)
	require.NoError(t, err)
	g, ok := mod.ExportedGlobal(InterruptExport).(api.MutableGlobal)
	require.True(t, ok, "no mutable global %s", InterruptExport)
	return mod, g
}

func TestInterruptStopsLoopsAndCalls(t *testing.T) {
	for _, fn := range []string{"spin", "count", "fanout"} {
		t.Run(fn, func(t *testing.T) {
			mod, interrupt := instantiate(t, runaway())
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction(fn).Call(context.Background())
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("%s returned before the interrupt: %v", fn, err)
			case <-time.After(50 * time.Millisecond):
			}
			// Written from this goroutine while the module runs on
			// another: what the host's watchdog does.
			interrupt.Set(1)
			select {
			case err := <-done:
				require.ErrorContains(t, err, "unreachable")
			case <-time.After(5 * time.Second):
				t.Fatalf("%s still runs 5 s after the interrupt", fn)
			}
		})
	}
}

func TestRecursionStillTrapsOnTheStack(t *testing.T) {
	mod, interrupt := instantiate(t, runaway())
	_, err := mod.ExportedFunction("recurse").Call(context.Background())
	require.ErrorContains(t, err, "stack overflow")
	require.Zero(t, interrupt.Get())
}

func TestModulesWithoutGlobalsOrExports(t *testing.T) {
	// The smallest module, and one with a function and nothing exported:
	// both get a global section and an export section in their place.
	empty := []byte("\x00asm\x01\x00\x00\x00")
	withCode := wasmbin.AppendSection(wasmbin.AppendSection(wasmbin.AppendSection(bytes.Clone(empty),
		1, []byte{1, 0x60, 0, 0}), 3, []byte{1, 0}), sectionCode, []byte{1, 2, 0, 0x0b})
	for _, m := range [][]byte{empty, withCode} {
		_, interrupt := instantiate(t, m)
		require.Zero(t, interrupt.Get())
	}
}

func TestTheExportNameIsReserved(t *testing.T) {
	m := runaway()
	once, err := Instrument(m)
	require.NoError(t, err)
	_, err = Instrument(once)
	require.ErrorContains(t, err, "already exports "+InterruptExport)
}

func TestMalformedModulesAreErrors(t *testing.T) {
	m := runaway()
	for n := range len(m) {
		// Every truncation either fails or (cut at a section boundary) is
		// a valid shorter module: never a panic.
		if _, err := Instrument(m[:n]); err == nil && n > 8 {
			_, err = splitSections(m[:n])
			require.NoError(t, err)
		}
	}
	bad := bytes.Clone(m)
	bad[len(bad)-1] = 0xfd // a SIMD prefix in place of the last end
	_, err := Instrument(bad)
	require.Error(t, err)
	_, err = Instrument([]byte("\x00asm\x02\x00\x00\x00"))
	require.ErrorContains(t, err, "unsupported WebAssembly binary version")
}

// compiles reports whether wazero accepts module. Its validator panics on
// some malformed modules (a function whose type index is out of range).
func compiles(ctx context.Context, rt wazero.Runtime, module []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := rt.CompileModule(ctx, module)
	return err == nil
}

// FuzzInstrument: any input is an error or a module wazero accepts when the
// input was one.
func FuzzInstrument(f *testing.F) {
	f.Add(runaway())
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, module []byte) {
		out, err := Instrument(module)
		if err != nil {
			return
		}
		ctx := context.Background()
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
		defer rt.Close(ctx)
		if !compiles(ctx, rt, module) {
			return // invalid in, whatever out
		}
		if _, err := rt.CompileModule(ctx, out); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("a valid module became invalid: %v", err)
		}
	})
}
