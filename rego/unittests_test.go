package rego

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

// The Rego tests shipped in library/ and demo/. Update these when adding
// tests there: they make sure that no test silently stops running.
const (
	libraryTests = 38
	demoTests    = 10
	// demoLogTests of demoTests test the demo's decision-log rules, which
	// do not need the library.
	demoLogTests = 2
)

func TestLibraryTestsPass(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		paths []string
		want  int
	}{
		{[]string{"library"}, libraryTests},
		{[]string{"library", "demo"}, libraryTests + demoTests},
	} {
		var out bytes.Buffer
		passed, failed, err := Test(ctx, tc.paths, &out, false)
		if err != nil || passed != tc.want || failed != 0 {
			t.Errorf("Test(%v) = %d passed, %d failed, %v; want %d passed\n%s", tc.paths, passed, failed, err, tc.want, &out)
		}
		if want := "PASS: " + strconv.Itoa(tc.want) + "/" + strconv.Itoa(tc.want); !strings.Contains(out.String(), want) {
			t.Errorf("Test(%v) report does not contain %q:\n%s", tc.paths, want, &out)
		}

		// The embedded copies are the same tests.
		passed, failed, err = runTests(ctx, embedded, tc.paths, nil, false)
		if err != nil || passed != tc.want || failed != 0 {
			t.Errorf("embedded %v: %d passed, %d failed, %v; want %d passed", tc.paths, passed, failed, err, tc.want)
		}
	}
}

func TestTestVerboseListsEveryTest(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := Test(context.Background(), []string{"demo", "library"}, &out, true); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"test_block_wins_over_allow", "test_demo_private_notes_are_refused", "test_unknown_action_is_denied_by_default"} {
		if !strings.Contains(out.String(), "data.mcp.warden_test."+name+": PASS") {
			t.Errorf("verbose report does not list %s:\n%s", name, &out)
		}
	}
	// Reported in file order, whatever order the tests finished in.
	if strings.Index(out.String(), "demo/notes_test.rego") > strings.Index(out.String(), "library/decision_test.rego") {
		t.Errorf("report not in file order:\n%s", &out)
	}
}

func TestTestReportsFailures(t *testing.T) {
	var out bytes.Buffer
	passed, failed, err := Test(context.Background(), []string{"testdata/failing"}, &out, false)
	if err != nil || passed != 1 || failed != 1 {
		t.Errorf("Test = %d passed, %d failed, %v; want 1 passed, 1 failed (and 1 skipped, not counted)", passed, failed, err)
	}
	for _, want := range []string{"data.failing_test.test_fails: FAIL", "FAIL: 1/3", "SKIPPED: 1/3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report does not contain %q:\n%s", want, &out)
		}
	}
}

func TestDemoTestsNeedTheLibrary(t *testing.T) {
	// Without the library, data.mcp.warden.decision is undefined.
	passed, failed, err := Test(context.Background(), []string{"demo"}, nil, false)
	if err != nil || passed != demoLogTests || failed != demoTests-demoLogTests {
		t.Errorf("Test(demo) = %d passed, %d failed, %v; want %d failed", passed, failed, err, demoTests-demoLogTests)
	}
}

func TestTestOfCustomPolicyLoadsItsData(t *testing.T) {
	passed, failed, err := Test(context.Background(), []string{"testdata/custom"}, nil, false)
	if err != nil || passed != 2 || failed != 0 {
		t.Errorf("Test = %d passed, %d failed, %v; want 2 passed", passed, failed, err)
	}
}

func TestTestErrors(t *testing.T) {
	for _, tc := range []struct {
		paths []string
		want  []string
	}{
		{nil, []string{"no paths"}},
		{[]string{"testdata/broken"}, []string{"testdata/broken/broken.rego:6:", "rego_parse_error"}},
		{[]string{"testdata/unsafe"}, []string{"testdata/unsafe/unsafe.rego:4:", "var user is unsafe"}},
		{[]string{"testdata/nonexistent"}, []string{"testdata/nonexistent", "no such file or directory"}},
	} {
		passed, failed, err := Test(context.Background(), tc.paths, nil, false)
		if err == nil {
			t.Errorf("Test(%v) = %d passed, %d failed, no error", tc.paths, passed, failed)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Test(%v) error %q does not contain %q", tc.paths, err, want)
			}
		}
	}
}
