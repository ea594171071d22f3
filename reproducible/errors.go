package reproducible

import "fmt"

// SourceError says a source tree could not be hashed: a file could not be
// read, is of a kind a manifest cannot hold, or its path is unusable.
type SourceError struct {
	Path string
	Err  error
}

func (e *SourceError) Error() string { return fmt.Sprintf("source %q: %v", e.Path, e.Err) }
func (e *SourceError) Unwrap() error { return e.Err }

// ParseError says an input (a manifest, a measurements file, a digest) is
// malformed.
type ParseError struct {
	What string
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("parse %s: %v", e.What, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }
