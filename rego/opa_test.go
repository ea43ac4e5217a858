package rego

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/mcp-warden/mcp-warden/testdata/testenv"
)

// TestLibraryPassesRealOPATest runs the shipped Rego tests under the real
// OPA CLI, built from the OPA module in go.mod, and checks that it passes
// as many tests as Test does.
func TestLibraryPassesRealOPATest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the OPA CLI (about a minute on a cold build cache)")
	}
	opa := testenv.BuildGo(t, "github.com/open-policy-agent/opa")
	root := testenv.RepoRoot(t)

	cmd := exec.Command(opa, "test", "-v", "rego/library", "rego/demo")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s test -v rego/library rego/demo: %v\n%s", opa, err, out)
	}
	m := regexp.MustCompile(`(?m)^PASS: (\d+)/(\d+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no PASS: n/n summary in opa test output:\n%s", out)
	}
	opaPassed, _ := strconv.Atoi(string(m[1]))
	opaTotal, _ := strconv.Atoi(string(m[2]))

	passed, failed, err := Test(context.Background(), []string{
		filepath.Join(root, "rego", "library"), filepath.Join(root, "rego", "demo"),
	}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if opaPassed != opaTotal || opaPassed != passed || failed != 0 || passed != libraryTests+demoTests {
		t.Errorf("opa test passed %d/%d, Test passed %d and failed %d; want all %d passed by both\n%s",
			opaPassed, opaTotal, passed, failed, libraryTests+demoTests, out)
	}
}
