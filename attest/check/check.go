// Package check holds the vocabulary every verifier in attest/ shares: the
// outcome of one check, the ordered list of checks a verification produced,
// and the three kinds of failure a caller must be able to tell apart.
//
// A verifier never answers with a bare "false". It answers with a [List] in
// which each entry names a check, says whether it passed, failed or was
// skipped, and gives a one-line reason. Errors returned alongside are typed:
//
//   - [*ParseError]: the input is unusable (garbage, truncated, wrong type).
//     The CLI maps it to exit code 2.
//   - [*VerifyError]: the input parsed but a cryptographic or structural check
//     failed: the evidence is rejected. The CLI maps it to exit code 1.
//   - [*UnavailableError]: a check could not be carried out (offline, missing
//     collateral, service down). This is not a rejection and not a pass; a
//     policy decides whether it may be tolerated.
//
// Use errors.As to tell them apart; never match message text.
package check

import (
	"fmt"
	"strings"
)

// Status is the outcome of one check.
type Status string

const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Skipped Status = "skipped"
)

// Check is one line of a verification checklist.
type Check struct {
	// Name is a stable, dotted identifier, e.g. "tdx.quote.signature".
	Name string `json:"name"`
	// Status is pass, fail or skipped.
	Status Status `json:"status"`
	// Reason is one lowercase line saying why, with the bad value quoted.
	Reason string `json:"reason"`
}

// List is an ordered checklist. The zero value is an empty list.
type List []Check

// Pass appends a passing check.
func (l *List) Pass(name, format string, args ...any) {
	*l = append(*l, Check{Name: name, Status: Pass, Reason: fmt.Sprintf(format, args...)})
}

// Fail appends a failing check.
func (l *List) Fail(name, format string, args ...any) {
	*l = append(*l, Check{Name: name, Status: Fail, Reason: fmt.Sprintf(format, args...)})
}

// Skip appends a skipped check.
func (l *List) Skip(name, format string, args ...any) {
	*l = append(*l, Check{Name: name, Status: Skipped, Reason: fmt.Sprintf(format, args...)})
}

// Failed reports whether any check failed.
func (l List) Failed() bool {
	for _, c := range l {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Find returns the first check with the given name.
func (l List) Find(name string) (Check, bool) {
	for _, c := range l {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// String renders the list as a readable checklist, one check a line.
func (l List) String() string {
	var b strings.Builder
	for _, c := range l {
		mark := "ok  "
		switch c.Status {
		case Fail:
			mark = "FAIL"
		case Skipped:
			mark = "skip"
		}
		fmt.Fprintf(&b, "[%s] %s: %s\n", mark, c.Name, c.Reason)
	}
	return b.String()
}

// ParseError reports unusable input: it could not be parsed at all.
type ParseError struct {
	What string // what was being parsed, e.g. "tdx quote header"
	Err  error
}

func (e *ParseError) Error() string { return "parse " + e.What + ": " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// VerifyError reports evidence that parsed but failed a check: rejected.
type VerifyError struct {
	Check string // the Name of the failing check
	Err   error
}

func (e *VerifyError) Error() string { return e.Check + ": " + e.Err.Error() }
func (e *VerifyError) Unwrap() error { return e.Err }

// UnavailableError reports a check that could not be carried out.
type UnavailableError struct {
	What string // what was missing, e.g. "pcs collateral"
	Err  error
}

func (e *UnavailableError) Error() string { return e.What + " unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }
