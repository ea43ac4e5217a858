# mcp-warden — the two commands that matter:
#   make run    the gateway on the embedded demo (demo server + demo policy) at http://127.0.0.1:8080/mcp
#   make test   vet + all tests with the race detector, end-to-end tests included
GO      ?= go
BIN     := bin/mcp-warden
# Tests run with -race; a slow 2-core CI machine needs a generous timeout.
TESTFLAGS ?= -race -timeout 20m

.PHONY: all build run test vet deps e2e policy-test conformance-opa bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/mcp-warden

run: build
	./$(BIN) serve --demo

# Node 22 and the npm MCP servers used by end-to-end tests, into .cache/ (git-ignored).
deps:
	.ci/install-deps

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
		echo "$$unformatted"; echo "gofmt: the files above need formatting (gofmt -w)" >&2; exit 1; fi

test: deps vet
	$(GO) test $(TESTFLAGS) ./...
	$(MAKE) --no-print-directory conformance-opa

# OPA's compliance corpus (v0 and v1 cases shipped in the OPA module)
# through mcp-warden's Wasm host, skips = OPA's exceptions.yaml. Without
# -race (a build tag keeps it out of ./...); last line: N passed, N failed, N skipped.
conformance-opa:
	@summary=$$(mktemp); \
	OPA_CONFORMANCE_SUMMARY=$$summary $(GO) test -tags conformance -count=1 -timeout 30m -run TestOPAConformance ./wasm/ >$$summary.log 2>&1; \
	status=$$?; grep -E '^\s*--- FAIL' $$summary.log | head -50; \
	if [ ! -s $$summary ]; then tail -50 $$summary.log; echo "0 passed, 1 failed, 0 skipped"; status=1; else cat $$summary; fi; \
	rm -f $$summary $$summary.log; exit $$status

# One tools/call decision of the default policy through (a) our Wasm host,
# (b) OPA's rego.Target("wasm"), (c) OPA's topdown prepared query, in one
# run: medians and ratios.
bench:
	$(GO) test -run '^$$' -bench 'BenchmarkToolsCallDecision' -count 5 ./policy/ | tee /dev/stderr | awk -f .ci/bench-medians.awk

# Only the end-to-end tests (real servers, real clients, the built binary).
e2e: deps
	$(GO) test $(TESTFLAGS) -run 'E2E' ./...

# The shipped Rego library under mcp-warden's own runner.
policy-test: build
	./$(BIN) policy test -v rego/library rego/demo

clean:
	rm -rf bin
