package engine

import (
	"strings"
	"testing"
)

// TestBench runs the benchmark on the embedded model (CPU) with small
// numbers and checks which points it measures: a prefill from an empty
// cache, per context the cache fill and a prefill after it where that fits
// the context, and decode at each context.
func TestBench(t *testing.T) {
	e := loadT(t, Options{Context: 64})
	r, err := e.Bench(BenchConfig{Contexts: []int{16, 48}, Tokens: 4, Runs: 3, PrefillTokens: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type pt struct{ ctx, n int }
	var got []pt
	for _, p := range r.Prefill {
		got = append(got, pt{p.Context, p.Tokens})
		if len(p.Runs) != 3 || p.Median <= 0 {
			t.Errorf("prefill point %+v: want 3 runs and a positive median", p)
		}
	}
	// 48 + 8 fits 64: both contexts get the prefill-after point
	want := []pt{{0, 8}, {0, 16}, {16, 8}, {0, 48}, {48, 8}}
	if len(got) != len(want) {
		t.Fatalf("prefill points %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("prefill points %v, want %v", got, want)
		}
	}
	if len(r.Decode) != 2 || r.Decode[0].Context != 16 || r.Decode[1].Context != 48 || r.Decode[0].Tokens != 4 {
		t.Fatalf("decode points %+v", r.Decode)
	}
	for _, p := range r.Decode {
		if p.Median <= 0 || p.WeightGBs <= 0 || p.RooflinePct != 0 {
			t.Errorf("decode point %+v: want a positive median and weights rate, no roofline on the CPU", p)
		}
	}

	// a prefill that does not fit after the context is left out, not an error
	r, err = e.Bench(BenchConfig{Contexts: []int{60}, Tokens: 4, Runs: 1, PrefillTokens: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Prefill) != 2 || r.Prefill[1].Context != 0 || r.Prefill[1].Tokens != 60 {
		t.Fatalf("prefill points %+v, want the empty-cache prefill and the fill to 60 only", r.Prefill)
	}
	// decode past the context is an error
	if _, err := e.Bench(BenchConfig{Contexts: []int{62}, Tokens: 4, Runs: 1, PrefillTokens: 8}, nil); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("context 62 + 4 tokens in 64: %v", err)
	}
}
