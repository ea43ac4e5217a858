package policy

import "github.com/mcp-warden/mcp-warden/policy/internal/auditlog"

// LogProblem is the first record of a decision log that fails
// verification: its file, 1-based line, kind ("edited", "chain broken",
// "truncated" or "malformed") and what did not match. It is an error.
type LogProblem = auditlog.Problem

// LogSummary is what VerifyDecisionLog checked: files, records, the
// prev_hash the first record names and the hash the next record must name.
type LogSummary = auditlog.Summary

// VerifyDecisionLog checks that the decision-log files, oldest first
// (rotated files, then the active one), form one unbroken hash chain. With
// fromStart the first record must start the chain; without it the files
// may continue one whose older files were removed. The first record that
// fails is returned as a *LogProblem; other errors are I/O errors.
func VerifyDecisionLog(files []string, fromStart bool) (LogSummary, error) {
	return auditlog.Verify(files, fromStart)
}
