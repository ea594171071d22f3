package sample

import "strings"

// StopStrings withholds generated text until it is known not to begin a
// stop string, so a stop string split across several tokens is still
// found and none of its text is ever emitted.
//
// Feed each decoded piece to Push and write out what it returns; after the
// last token call Flush. Once Push reports stopped, the text before the
// stop string has been returned and the rest is discarded.
type StopStrings struct {
	stops   []string
	pending strings.Builder
	stopped bool
}

// NewStopStrings returns a matcher for the non-empty strings in stops.
func NewStopStrings(stops []string) *StopStrings {
	s := &StopStrings{}
	for _, x := range stops {
		if x != "" {
			s.stops = append(s.stops, x)
		}
	}
	return s
}

// Push adds text and returns the part that can be emitted now. stopped is
// true when a stop string has been completed; emit then holds the text up to
// (not including) the earliest stop string.
func (s *StopStrings) Push(text string) (emit string, stopped bool) {
	if s.stopped {
		return "", true
	}
	if len(s.stops) == 0 {
		return text, false
	}
	s.pending.WriteString(text)
	buf := s.pending.String()
	// Earliest complete match wins.
	cut := -1
	for _, st := range s.stops {
		if i := strings.Index(buf, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		s.stopped = true
		s.pending.Reset()
		return buf[:cut], true
	}
	// Hold back the longest suffix that is a proper prefix of a stop string.
	hold := 0
	for _, st := range s.stops {
		for n := min(len(st)-1, len(buf)); n > hold; n-- {
			if strings.HasSuffix(buf, st[:n]) {
				hold = n
				break
			}
		}
	}
	s.pending.Reset()
	s.pending.WriteString(buf[len(buf)-hold:])
	return buf[:len(buf)-hold], false
}

// Flush returns the withheld text at the end of generation (empty after a
// stop).
func (s *StopStrings) Flush() string {
	if s.stopped {
		return ""
	}
	out := s.pending.String()
	s.pending.Reset()
	return out
}

// Stopped reports whether a stop string was found.
func (s *StopStrings) Stopped() bool { return s.stopped }
