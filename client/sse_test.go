package client

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// sseSeeds returns the captured event streams in testdata/sse (see its
// README for where each came from). It fails the test when there are none.
func sseSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "sse", "*.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no captured event streams in testdata/sse")
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func readAll(r *SSEReader) ([]*SSEEvent, error) {
	var evs []*SSEEvent
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSEProtocolVector(t *testing.T) {
	b := sseSeeds(t)["protocol-vector-chat.sse"]
	if b == nil {
		t.Fatal("missing protocol-vector-chat.sse")
	}
	evs, err := readAll(NewSSEReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || string(evs[2].Data) != "[DONE]" || !bytes.Contains(evs[1].Data, []byte(`" upon"`)) {
		t.Fatalf("events = %+v", evs)
	}
	// One byte at a time gives the same events.
	evs2, err := readAll(NewSSEReader(iotest.OneByteReader(bytes.NewReader(b))))
	if err != nil || len(evs2) != 3 || !bytes.Equal(evs2[0].Data, evs[0].Data) {
		t.Fatalf("one-byte reader: %+v, %v", evs2, err)
	}
}

func TestSSESyntax(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // data of each event
		event    string   // event name of the first event
		err      bool
	}{
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}, "", false},
		{"multi-line", "data: a\ndata: b\n\n", []string{"a\nb"}, "", false},
		{"no space", "data:a\n\n", []string{"a"}, "", false},
		{"two spaces keep one", "data:  a\n\n", []string{" a"}, "", false},
		{"comments and retry", ": keep-alive\nretry: 10\ndata: x\n\n", []string{"x"}, "", false},
		{"event name", "event: error\ndata: {}\n\n", []string{"{}"}, "error", false},
		{"no data is not dispatched", "event: ping\n\ndata: y\n\n", []string{"y"}, "", false},
		{"leading blank lines", "\n\n\ndata: z\n\n", []string{"z"}, "", false},
		{"empty input", "", nil, "", false},
		{"field without colon", "data\n\n", []string{""}, "", false},
		{"lone cr is data", "data: a\rb\n\n", []string{"a\rb"}, "", false},
		{"cut inside event", "data: a\n\ndata: b\n", []string{"a"}, "", true},
		{"cut inside line", "data: a\n\ndata: b", []string{"a"}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := readAll(NewSSEReader(strings.NewReader(c.in)))
			var se *SSEError
			if c.err != errors.As(err, &se) {
				t.Fatalf("err = %v, want SSEError %v", err, c.err)
			}
			if len(evs) != len(c.want) {
				t.Fatalf("got %d events %+v, want %q", len(evs), evs, c.want)
			}
			for i := range evs {
				if string(evs[i].Data) != c.want[i] {
					t.Errorf("event %d data = %q, want %q", i, evs[i].Data, c.want[i])
				}
			}
			if len(evs) > 0 && evs[0].Event != c.event {
				t.Errorf("event name = %q, want %q", evs[0].Event, c.event)
			}
		})
	}
}

func TestSSELimits(t *testing.T) {
	long := "data: " + strings.Repeat("x", MaxSSELineSize) + "\n\n"
	_, err := readAll(NewSSEReader(strings.NewReader(long)))
	var se *SSEError
	if !errors.As(err, &se) {
		t.Fatalf("over-long line: err = %v, want *SSEError", err)
	}
	line := "data: " + strings.Repeat("y", 1<<20) + "\n"
	big := strings.Repeat(line, MaxSSEEventSize/(1<<20)+1) + "\n"
	_, err = readAll(NewSSEReader(strings.NewReader(big)))
	if !errors.As(err, &se) {
		t.Fatalf("over-large event: err = %v, want *SSEError", err)
	}
	// The error sticks.
	r := NewSSEReader(strings.NewReader(long))
	_, err1 := r.Next()
	_, err2 := r.Next()
	if err1 == nil || err1 != err2 {
		t.Fatalf("errors %v then %v, want the same error twice", err1, err2)
	}
}

func FuzzParseSSE(f *testing.F) {
	for _, b := range sseSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := readAll(NewSSEReader(bytes.NewReader(b)))
		if err != nil {
			var se *SSEError
			if !errors.As(err, &se) {
				t.Fatalf("error of type %T: %v", err, err)
			}
		}
		total := 0
		for _, ev := range evs {
			if len(ev.Data) > MaxSSEEventSize {
				t.Fatalf("event of %d bytes", len(ev.Data))
			}
			total += len(ev.Data)
		}
		if total > len(b) {
			t.Fatalf("%d bytes of data from %d bytes of input", total, len(b))
		}
		// Reading one byte at a time gives the same events and outcome.
		evs2, err2 := readAll(NewSSEReader(iotest.OneByteReader(bytes.NewReader(b))))
		if (err == nil) != (err2 == nil) || len(evs) != len(evs2) {
			t.Fatalf("byte-wise read differs: %d events, %v vs %d events, %v", len(evs), err, len(evs2), err2)
		}
		for i := range evs {
			if !bytes.Equal(evs[i].Data, evs2[i].Data) || evs[i].Event != evs2[i].Event || evs[i].ID != evs2[i].ID {
				t.Fatalf("event %d differs byte-wise", i)
			}
		}
	})
}
