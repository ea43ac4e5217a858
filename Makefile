# mcp-warden — the two commands that matter:
#   make run    the gateway on the embedded demo (demo server + demo policy) at http://127.0.0.1:8080/mcp
#   make test   vet + all tests with the race detector, end-to-end tests included
GO      ?= go
BIN     := bin/mcp-warden
# Tests run with -race; a slow 2-core CI machine needs a generous timeout.
TESTFLAGS ?= -race -timeout 20m

.PHONY: all build run test vet deps e2e policy-test bench bench-engines bench-list bench-log bench-spawn bench-proxy conformance-mcp conformance-opa clean

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
	$(MAKE) --no-print-directory conformance-mcp
	$(MAKE) --no-print-directory conformance-opa

# The official MCP conformance suite (2025-11-25 and 2026-07-28 eras) against
# the go-sdk everything-server directly, then through the gateway with that
# server as a stdio and as an HTTP upstream; every scenario must end as in
# the direct run. Without -race: it is a large corpus run by Node.
conformance-mcp: deps
	MCP_CONFORMANCE=1 $(GO) test -count=1 -timeout 15m -run '^TestConformance$$' ./gateway/
	@cat .cache/conformance/summary.txt

# OPA's compliance corpus (v0 and v1 cases shipped in the OPA module)
# through mcp-warden's Wasm host, skips = OPA's exceptions.yaml, and the
# Wasm memory test over a million evaluations. Without -race (a build tag
# keeps them out of ./...); last line: N passed, N failed, N skipped.
conformance-opa:
	@summary=$$(mktemp); \
	OPA_CONFORMANCE_SUMMARY=$$summary $(GO) test -tags conformance -count=1 -timeout 30m -run 'TestOPAConformance|TestMemoryStaysFlatAcrossEvaluations' ./wasm/ >$$summary.log 2>&1; \
	status=$$?; grep -E '^\s*--- FAIL' $$summary.log | head -50; \
	if [ ! -s $$summary ]; then tail -50 $$summary.log; echo "0 passed, 1 failed, 0 skipped"; status=1; else cat $$summary; fi; \
	rm -f $$summary $$summary.log; exit $$status

# Every benchmark target; each measures against its own baseline in the same run.
bench: bench-engines bench-list bench-log bench-spawn bench-proxy

# One tools/call decision of the default policy (from the whole input's JSON
# bytes, and from the Input as the Decider encodes it) through (a) our Wasm host,
# (b) OPA's rego.Target("wasm"), (c) OPA's topdown prepared query, in one
# run: medians and ratios.
bench-engines:
	@out=$$(mktemp); $(GO) test -run '^$$' -bench 'BenchmarkToolsCallDecision' -count 5 ./policy/ >$$out; status=$$?; \
	cat $$out; awk -f .ci/bench-medians.awk $$out; rm -f $$out; exit $$status

# One tools/list of 1,000 tools for one principal through the Decider, logged
# to a file, per engine: cold (empty exposure cache) and warm (the same list
# again), in one run.
bench-list:
	$(GO) test -run '^$$' -bench 'BenchmarkToolsListExposure' -benchtime 1s -count 3 ./policy/

# Only the end-to-end tests (real servers, real clients, the built binary).
e2e: deps
	$(GO) test $(TESTFLAGS) -run 'E2E' ./...

# The shipped Rego library under mcp-warden's own runner.
policy-test: build
	./$(BIN) policy test -v rego/library rego/demo

# Decision logging on vs off in the same run, interleaved call by call:
# p50_added_ns is what the log adds to a decision (default and always fsync);
# then the log's part of a 1,000-tool list logged in full.
bench-log:
	$(GO) test -run '^$$' -bench 'DecisionLogOverhead|CanonicalRecord|^BenchmarkEventEncoding$$' -benchtime 5000x ./policy/...
	$(GO) test -run '^$$' -bench 'ListEventEncoding' -benchtime 50x ./policy/

# Confined vs bare spawn-to-ready of the same server, in one run.
bench-spawn:
	$(GO) test -run '^$$' -bench 'BenchmarkSpawnToReady' -count 3 ./sandbox/

# One tools/call through `mcp-warden serve --stdio` (default policy, decision
# log to a file), and through the same gateway with policy.engine: wasm, vs
# straight to the same stdio server and through a bare go-sdk relay (the
# floor of one hop), in one run: p50/p99, what each gateway adds, CPU per
# call of each process; calls per second with 16 concurrent callers and the
# ratios to direct.
bench-proxy:
	$(GO) test -run '^$$' -bench 'BenchmarkProxyToolsCall' -benchtime 5000x ./cmd/mcp-warden/

clean:
	rm -rf bin
