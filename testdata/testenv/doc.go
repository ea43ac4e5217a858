// Package testenv gives tests of other packages the real parts they run
// against, and the means to check what those parts leave behind:
//
//   - RepoRoot, Node, NPMBin, NodeCommand: the repository root, Node 22 and
//     the official MCP npm servers installed under <repo>/.cache/;
//   - BuildGo: Go main packages (fixture servers under testdata/servers,
//     go-sdk's conformance everything-server, mcp-warden itself) built once
//     per test process;
//   - Marker, Processes, RequireNoProcess, RequireGone: processes tagged
//     through their environment and found again in /proc (Linux only).
//
// Nothing here is mocked. A tool that is missing is installed on first use by
// running .ci/install-deps (the same script CI runs), serialized across
// parallel test binaries by a file lock; where npm itself is missing, the
// test is skipped with a message that says what to install.
//
// The helpers are safe for concurrent use by parallel tests.
package testenv
