package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-warden/mcp-warden/policy/internal/auditlog"
)

// LogProblem is the first record of a decision log that fails
// verification: its file, 1-based line, kind ("edited", "chain broken",
// "truncated", "malformed" or "dangling reference") and what did not
// match. It is an error.
type LogProblem = auditlog.Problem

// LogSummary is what VerifyDecisionLog checked: files, records, the
// prev_hash the first record names and the hash the next record must name.
type LogSummary = auditlog.Summary

// VerifyDecisionLog checks that the decision-log files, oldest first
// (rotated files, then the active one), form one unbroken hash chain, and
// that every list event logged as a repeat (see Event) names, by decision
// id and hash, a list event logged in full earlier in the same file, for
// the same action and principal. With fromStart the first record must
// start the chain; without it the files may continue one whose older files
// were removed. The first record that fails is returned as a *LogProblem;
// other errors are I/O errors.
//
// kept are hashes of records an earlier verification found (the last hash
// it reported, kept off the machine): each must still be in the chain, or
// be the prev_hash the files start from. Records cut from the end of the
// newest file leave no gap in the chain; a kept hash that is gone names
// that cut, as a LogProblem of kind "truncated" after the last record.
func VerifyDecisionLog(files []string, fromStart bool, kept ...string) (LogSummary, error) {
	refs := listReferences{}
	missing := map[string]bool{}
	for _, h := range kept {
		missing[strings.ToLower(h)] = true
	}
	var lastFile string
	var lastLine int
	s, err := auditlog.Verify(files, fromStart, func(file string, canonical []byte, hash string) string {
		if file != lastFile {
			lastFile, lastLine = file, 0
		}
		lastLine++
		delete(missing, hash)
		return refs.check(file, canonical, hash)
	})
	if err != nil || len(missing) == 0 {
		return s, err
	}
	delete(missing, s.FirstPrev)
	for _, h := range kept {
		if missing[strings.ToLower(h)] {
			if lastFile == "" && len(files) > 0 {
				lastFile = files[len(files)-1]
			}
			return s, &LogProblem{File: lastFile, Line: lastLine + 1, Kind: auditlog.KindTruncated,
				Detail: fmt.Sprintf("the chain ends before record %s, which an earlier verification found: records were deleted from its end", h)}
		}
	}
	return s, nil
}

// listReferences follows the list events of one file: the full ones by
// hash, to check the repeats that refer to them.
type listReferences struct {
	file string
	full map[string]listHead
}

// listHead is what a repeat must share with the event it names.
type listHead struct {
	decisionID, action string
	principal          []byte
}

func (r *listReferences) check(file string, canonical []byte, hash string) string {
	if file != r.file || r.full == nil {
		r.file, r.full = file, map[string]listHead{}
	}
	if !bytes.Contains(canonical, []byte(`/list"`)) {
		return "" // not a list event: no need to decode it
	}
	var ev struct {
		DecisionID string `json:"decision_id"`
		Input      struct {
			Action    string          `json:"action"`
			Principal json.RawMessage `json:"principal"`
		} `json:"input"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(canonical, &ev) != nil {
		return "" // an input or result masked into another shape
	}
	switch Action(ev.Input.Action) {
	case ActionToolsList, ActionResourcesList, ActionPromptsList:
	default:
		return ""
	}
	var repeat listRepeat
	if !bytes.HasPrefix(ev.Result, []byte(`{"same_as":`)) || json.Unmarshal(ev.Result, &repeat) != nil {
		r.full[hash] = listHead{decisionID: ev.DecisionID, action: ev.Input.Action, principal: ev.Input.Principal}
		return ""
	}
	ref := repeat.SameAs
	head, ok := r.full[ref.Hash]
	switch {
	case !ok:
		return fmt.Sprintf("this list repeats decision %s (record hash %s), which is not a list event earlier in this file: it was deleted or moved",
			ref.DecisionID, ref.Hash)
	case head.decisionID != ref.DecisionID || head.action != ev.Input.Action || !bytes.Equal(head.principal, ev.Input.Principal):
		return fmt.Sprintf("this list repeats record %s, whose decision id, action or principal differ from its own", ref.Hash)
	}
	return ""
}
