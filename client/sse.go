package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Limits of the server-sent-events reader.
const (
	// MaxSSELineSize caps one line of an event stream (a streamed chunk is
	// one "data:" line; the appliance seals at most 1 MiB per chunk).
	MaxSSELineSize = 1<<20 + 1024
	// MaxSSEEventSize caps the data of one event.
	MaxSSEEventSize = 4 << 20
)

// SSEEvent is one server-sent event.
type SSEEvent struct {
	// Event is the "event:" field, "" when absent (a "message" event).
	Event string
	// Data is the event's data: its "data:" lines joined with "\n".
	Data []byte
	// ID is the last "id:" field seen, "" when none.
	ID string
}

// SSEError is an event stream the reader could not parse.
type SSEError struct {
	// Line is the 1-based line number where the problem was found.
	Line   int
	Detail string
}

func (e *SSEError) Error() string {
	return fmt.Sprintf("client: malformed event stream at line %d: %s", e.Line, e.Detail)
}

// SSEReader reads server-sent events (the text/event-stream format of the
// HTML standard) as the OpenAI API streams them: events are separated by
// an empty line, "data:" lines accumulate, lines starting with ":" are
// comments, "event:" and "id:" are kept, other fields ("retry:" and unknown
// names) are ignored.
//
// It is stricter than a browser in two ways, both of which only reject
// input: lines end with LF or CRLF (a lone CR is data, not a line end),
// and a stream that ends inside an event (data without the closing empty
// line) is an *SSEError rather than a silently dropped event, so a cut
// stream never looks complete. Lines over MaxSSELineSize and events over
// MaxSSEEventSize are an *SSEError; input that is not UTF-8 is passed
// through as bytes.
//
// SSEReader does not authenticate anything: over an encrypted response,
// read it from the decrypting reader, which returns io.EOF only at the
// authenticated end of the response.
type SSEReader struct {
	r    *bufio.Reader
	line int
	err  error
	id   string
}

// NewSSEReader returns a reader of the events in r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// readLine returns the next line without its terminator. At the end of
// input it returns io.EOF when no byte of a line was read, and
// io.ErrUnexpectedEOF for an unterminated last line.
func (s *SSEReader) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(line)+len(frag) > MaxSSELineSize {
			return nil, &SSEError{Line: s.line + 1, Detail: fmt.Sprintf("line longer than %d bytes", MaxSSELineSize)}
		}
		switch {
		case err == nil:
			s.line++
			if line == nil {
				line = frag // valid until the next read: callers copy
			} else {
				line = append(line, frag...)
			}
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, frag...)
		case errors.Is(err, io.EOF):
			if len(line)+len(frag) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Next returns the next event. It returns io.EOF when the input ended
// cleanly between events, an *SSEError for malformed input, and the
// underlying reader's error otherwise. After an error every call returns it.
func (s *SSEReader) Next() (*SSEEvent, error) {
	if s.err != nil {
		return nil, s.err
	}
	ev, err := s.next()
	if err != nil {
		s.err = err
	}
	return ev, err
}

func (s *SSEReader) next() (*SSEEvent, error) {
	var (
		data    []byte
		hasData bool
		event   string
		started bool // a field line of this event was seen
	)
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && !started {
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, &SSEError{Line: s.line + 1, Detail: "stream ended inside an event"}
			}
			return nil, err
		}
		if len(line) == 0 {
			if !started {
				continue
			}
			if !hasData {
				// An event without data is not dispatched (HTML standard);
				// its event name is reset.
				started, event = false, ""
				continue
			}
			return &SSEEvent{Event: event, Data: data, ID: s.id}, nil
		}
		if line[0] == ':' {
			continue // comment
		}
		started = true
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			if len(data)+len(value)+1 > MaxSSEEventSize {
				return nil, &SSEError{Line: s.line, Detail: fmt.Sprintf("event data longer than %d bytes", MaxSSEEventSize)}
			}
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			event = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.id = string(value)
			}
		}
	}
}
