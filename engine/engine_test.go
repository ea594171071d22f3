package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/chat"
	"github.com/sparkinfer/cc/engine/sample"
)

func loadT(t *testing.T, opts Options) *Engine {
	t.Helper()
	e, err := LoadDefault(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func gen(t *testing.T, e *Engine, req Request) (string, Result) {
	t.Helper()
	var b strings.Builder
	res, err := e.Generate(context.Background(), req, func(s string) error { b.WriteString(s); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), res
}

// TestGreedyStories260K is the acceptance test: BOS at position 0, argmax
// at each of 256 positions, detokenized, equals the published reference
// (which ends with the newline the reference program prints).
func TestGreedyStories260K(t *testing.T) {
	want, err := os.ReadFile("testdata/stories260K.greedy.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, threads := range []int{1, 2} {
		e := loadT(t, Options{Threads: threads})
		got, res := gen(t, e, Request{MaxTokens: 256})
		if got+"\n" != string(want) {
			t.Fatalf("threads=%d: greedy output differs:\n got %q\nwant %q", threads, got, want)
		}
		if res.PromptTokens != 1 || res.Tokens != 256 || res.StopReason != StopLength {
			t.Fatalf("result %+v, want 1 prompt token, 256 generated, stop %q", res, StopLength)
		}
	}
}

func TestStopString(t *testing.T) {
	e := loadT(t, Options{})
	full, _ := gen(t, e, Request{MaxTokens: 64})
	// "Lily" first appears inside a token sequence; stop before it.
	i := strings.Index(full, "Lily")
	got, res := gen(t, e, Request{MaxTokens: 64, Stop: []string{"Lily", "never appears"}})
	if got != full[:i] || res.StopReason != StopString {
		t.Fatalf("stop at Lily: got %q (%s), want %q", got, res.StopReason, full[:i])
	}
	// A stop string spanning tokens (", there was").
	j := strings.Index(full, "e, there")
	got, _ = gen(t, e, Request{MaxTokens: 64, Stop: []string{"e, there"}})
	if got != full[:j] {
		t.Fatalf("cross-token stop: got %q, want %q", got, full[:j])
	}
}

func TestMaxTokensAndContext(t *testing.T) {
	e := loadT(t, Options{Context: 20})
	got, res := gen(t, e, Request{MaxTokens: 3})
	if res.Tokens != 3 || res.StopReason != StopLength || got != "Once upon a" {
		t.Fatalf("max 3: %q %+v", got, res)
	}
	full, res := gen(t, e, Request{})
	if res.StopReason != StopContext || res.Tokens != 20 {
		t.Fatalf("until context full: %+v, want 20 tokens (positions 0..19), stop %q", res, StopContext)
	}
	// The cache is sized to the prompt plus max tokens: every limit below
	// the context stops on length with a prefix of the full run, and one at
	// or past the context stops on the context as before.
	for _, k := range []int{1, 2, 7, 18, 19} {
		got, res := gen(t, e, Request{MaxTokens: k})
		if res.Tokens != k || res.StopReason != StopLength || !strings.HasPrefix(full, got) || got == "" {
			t.Fatalf("max %d: %q %+v, want a prefix of %q", k, got, res, full)
		}
	}
	for _, k := range []int{20, 25} {
		got, res := gen(t, e, Request{MaxTokens: k})
		if got != full || res.Tokens != 20 || res.StopReason != StopLength && res.StopReason != StopContext {
			t.Fatalf("max %d: %q %+v, want the full run %q", k, got, res, full)
		}
	}
	var pe *PromptError
	long := strings.Repeat("Once upon a time there was a girl. ", 10)
	if _, err := e.Generate(context.Background(), Request{Prompt: long}, func(string) error { return nil }); !errors.As(err, &pe) || pe.Context != 20 {
		t.Fatalf("prompt longer than the context: %v", err)
	}
}

func TestSeededSampling(t *testing.T) {
	e := loadT(t, Options{})
	p := sample.Params{Temperature: 1, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, Seed: 1234}
	a, _ := gen(t, e, Request{Prompt: "Once upon a time", MaxTokens: 60, Sampling: p})
	b, _ := gen(t, e, Request{Prompt: "Once upon a time", MaxTokens: 60, Sampling: p})
	p.Seed = 1235
	c, _ := gen(t, e, Request{Prompt: "Once upon a time", MaxTokens: 60, Sampling: p})
	if a != b {
		t.Fatalf("same seed, different text:\n%q\n%q", a, b)
	}
	if a == c {
		t.Fatalf("different seeds gave the same 60-token text %q", a)
	}
}

func TestErrors(t *testing.T) {
	e := loadT(t, Options{})
	var pe *PromptError
	if _, err := e.Generate(context.Background(), Request{Messages: []chat.Message{{Role: "user", Content: "hi"}}}, nil); !errors.As(err, &pe) {
		t.Fatalf("chat without a template: %v", err)
	}
	var spe *sample.ParamError
	if _, err := e.Generate(context.Background(), Request{Sampling: sample.Params{TopK: -1}}, nil); !errors.As(err, &spe) {
		t.Fatalf("bad sampling params: %v", err)
	}
	var de *DeviceError
	if _, err := LoadDefault(Options{Device: "tpu"}); !errors.As(err, &de) {
		t.Fatalf("unknown device: %v", err)
	}
	stop := errors.New("client went away")
	if _, err := e.Generate(context.Background(), Request{MaxTokens: 10}, func(string) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("emit error not returned: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Generate(ctx, Request{MaxTokens: 10}, func(string) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}
