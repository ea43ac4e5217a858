package auditlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// Problem kinds reported by Verify.
const (
	// KindEdited: the record does not match its own hash.
	KindEdited = "edited"
	// KindChainBroken: the record does not follow the record before it: a
	// record was deleted, records were reordered, or a file is missing.
	KindChainBroken = "chain broken"
	// KindTruncated: the file ends inside a record.
	KindTruncated = "truncated"
	// KindMalformed: the line is not a record (not a JSON object with a
	// hash and a prev_hash).
	KindMalformed = "malformed"
	// KindDanglingReference: the record refers to an earlier record that
	// is not where it should be (found by a RecordCheck).
	KindDanglingReference = "dangling reference"
)

// RecordCheck looks at each record that matches its hash and follows the
// record before it: file is its file's name, canonical its canonical
// encoding without "hash". A non-empty answer reports the record as a
// Problem of KindDanglingReference with that detail.
type RecordCheck func(file string, canonical []byte, hash string) (detail string)

// Problem is the first record that fails verification.
type Problem struct {
	File string
	Line int // 1-based
	Kind string
	// Detail says what exactly did not match.
	Detail string
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Kind, p.Detail)
}

// Summary is what Verify checked.
type Summary struct {
	Files, Records int
	// FirstPrev is the prev_hash of the first record (Genesis unless the
	// files continue an earlier chain); LastHash is the hash the next
	// record must name.
	FirstPrev, LastHash string
}

// Verify checks that files, in order, hold one unbroken chain. With
// fromGenesis the first record must start a chain; otherwise the files may
// continue a chain whose earlier files are gone (retention). check, when
// not nil, sees every record that passes. It returns the first *Problem
// found, or an I/O error.
func Verify(files []string, fromGenesis bool, check RecordCheck) (Summary, error) {
	var s Summary
	prev := ""
	for _, name := range files {
		if err := verifyFile(name, &prev, fromGenesis, &s, check); err != nil {
			return s, err
		}
		s.Files++
	}
	s.LastHash = prev
	return s, nil
}

func verifyFile(name string, prev *string, fromGenesis bool, s *Summary, check RecordCheck) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var buf []byte
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(line) > 0 {
				return &Problem{name, lineNo, KindTruncated, "the file ends inside a record (no newline after it)"}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		rec, err := canonicalRecord(buf[:0], line[:len(line)-1])
		if err != nil {
			var se *SyntaxError
			if errors.As(err, &se) {
				return &Problem{name, lineNo, KindMalformed, "not a JSON object: " + se.Error()}
			}
			return &Problem{name, lineNo, KindMalformed, err.Error()}
		}
		buf = rec.canonical
		switch {
		case !validHash(rec.hash):
			return &Problem{name, lineNo, KindMalformed, `no valid "hash" (64 hex digits)`}
		case !validHash(rec.prevHash):
			return &Problem{name, lineNo, KindMalformed, `no valid "prev_hash" (64 hex digits)`}
		}
		if got := hashOf(rec.canonical); got != rec.hash {
			return &Problem{name, lineNo, KindEdited, fmt.Sprintf("its content hashes to %s, not to its recorded hash %s", got, rec.hash)}
		}
		switch {
		case *prev == "" && fromGenesis && rec.prevHash != Genesis:
			return &Problem{name, lineNo, KindChainBroken, "the first record does not start a chain (its prev_hash is not all zeros): an earlier file or record is missing"}
		case *prev == "":
			s.FirstPrev = rec.prevHash
		case rec.prevHash != *prev:
			return &Problem{name, lineNo, KindChainBroken, fmt.Sprintf("its prev_hash %s is not the hash of the record before it (%s): a record was deleted or records were reordered here", rec.prevHash, *prev)}
		}
		if check != nil {
			if detail := check(name, rec.canonical, rec.hash); detail != "" {
				return &Problem{name, lineNo, KindDanglingReference, detail}
			}
		}
		*prev = rec.hash
		s.Records++
	}
}
