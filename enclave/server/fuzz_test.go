package server

import (
	"errors"
	"github.com/sparkinfer/cc/internal/fuzzseed"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seeds adds the request bodies in testdata/requests whose names start with
// prefix; the test fails when there are none.
func seeds(f *testing.F, prefix string) {
	fuzzseed.Files(f, filepath.Join("testdata", "requests", prefix+"*.json"))
}

// checkJob asserts what every accepted request must satisfy, and that a
// rejection is a *RequestError with a 4xx status.
func checkJob(t *testing.T, j *Job, err error, chat bool) {
	lim := DefaultLimits
	if err != nil {
		var re *RequestError
		if !errors.As(err, &re) || re.Status < 400 || re.Status > 499 || re.Code == "" || re.Message == "" {
			t.Fatalf("rejection %v is not a 4xx *RequestError", err)
		}
		return
	}
	if j.Model == "" || j.Chat != chat {
		t.Fatalf("accepted job %+v", j)
	}
	if chat && (len(j.Request.Messages) == 0 || len(j.Request.Messages) > lim.MaxMessages) {
		t.Fatalf("chat job with %d messages", len(j.Request.Messages))
	}
	if j.Request.MaxTokens < 1 || j.Request.MaxTokens > lim.MaxTokens || len(j.Request.Stop) > lim.MaxStops {
		t.Fatalf("limits not enforced: max tokens %d, %d stops", j.Request.MaxTokens, len(j.Request.Stop))
	}
	if err := j.Request.Sampling.Validate(); err != nil {
		t.Fatalf("invalid sampling accepted: %v", err)
	}
	for _, m := range j.Request.Messages {
		if m.Role != "system" && m.Role != "user" && m.Role != "assistant" {
			t.Fatalf("role %q reached the engine", m.Role)
		}
	}
	if j.IncludeUsage && !j.Stream {
		t.Fatal("include_usage without stream")
	}
}

func FuzzDecodeChatRequest(f *testing.F) {
	seeds(f, "chat-")
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := DecodeChatRequest(body, Limits{})
		checkJob(t, j, err, true)
	})
}

func FuzzDecodeCompletionRequest(f *testing.F) {
	seeds(f, "completion-")
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := DecodeCompletionRequest(body, Limits{})
		checkJob(t, j, err, false)
	})
}

func TestSeedRequestsDecode(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if len(files) == 0 {
		t.Fatal("no seed requests")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		chat := strings.HasPrefix(filepath.Base(p), "chat-")
		dec := DecodeCompletionRequest
		if chat {
			dec = DecodeChatRequest
		}
		j, err := dec(b, Limits{})
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		checkJob(t, j, nil, chat)
	}
}
