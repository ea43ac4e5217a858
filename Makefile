# mcp-warden — the two commands that matter:
#   make run    the gateway on the embedded demo (demo server + demo policy) at http://127.0.0.1:8080/mcp
#   make test   vet + all tests with the race detector, end-to-end tests included
GO      ?= go
BIN     := bin/mcp-warden
# Tests run with -race; a slow 2-core CI machine needs a generous timeout.
TESTFLAGS ?= -race -timeout 20m

.PHONY: all build run test vet deps e2e policy-test bench conformance-mcp clean

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

# The official MCP conformance suite (2025-11-25 and 2026-07-28 eras) against
# the go-sdk everything-server directly, then through the gateway with that
# server as a stdio and as an HTTP upstream; every scenario must end as in
# the direct run. Without -race: it is a large corpus run by Node.
conformance-mcp: deps
	MCP_CONFORMANCE=1 $(GO) test -count=1 -timeout 15m -run '^TestConformance$$' ./gateway/
	@cat .cache/conformance/summary.txt

# Only the end-to-end tests (real servers, real clients, the built binary).
e2e: deps
	$(GO) test $(TESTFLAGS) -run 'E2E' ./...

# The shipped Rego library under mcp-warden's own runner.
policy-test: build
	./$(BIN) policy test -v rego/library rego/demo

# Decision logging on vs off in the same run, interleaved call by call:
# p50_added_ns is what the log adds to a decision (default and always fsync).
bench:
	$(GO) test -run '^$$' -bench 'DecisionLogOverhead|CanonicalRecord' -benchtime 5000x ./policy/...

clean:
	rm -rf bin
