package sample

import (
	"errors"
	"math"
	"testing"
)

func mustNew(t *testing.T, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func draw(t *testing.T, s *Sampler, logits []float32) int {
	t.Helper()
	id, err := s.Sample(logits)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestGreedy(t *testing.T) {
	s := mustNew(t, Params{})
	if got := draw(t, s, []float32{0.1, 3, -1, 3, 2}); got != 1 {
		t.Fatalf("argmax with tie: got %d, want 1 (lowest id)", got)
	}
	if got := draw(t, s, []float32{float32(math.NaN()), -5, -4}); got != 2 {
		t.Fatalf("NaN must not win: got %d", got)
	}
	if _, err := s.Sample(nil); !errors.Is(err, ErrEmptyLogits) {
		t.Fatalf("empty logits: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{
		{Temperature: math.NaN()}, {TopP: -0.1}, {MinP: 1.5}, {RepeatPenalty: -1},
		{TopK: -3}, {RepeatLastN: -2}, {Temperature: math.Inf(1)},
	} {
		var pe *ParamError
		if _, err := New(p); !errors.As(err, &pe) {
			t.Errorf("%+v: got %v, want *ParamError", p, err)
		}
	}
}

// frequencies draws n samples and returns the count per id.
func frequencies(t *testing.T, p Params, logits []float32, n int) []int {
	s := mustNew(t, p)
	cnt := make([]int, len(logits))
	for range n {
		cnt[draw(t, s, logits)]++
	}
	return cnt
}

func TestTemperatureDistribution(t *testing.T) {
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(5))} // probs 1/8, 2/8, 5/8
	const n = 40000
	cnt := frequencies(t, Params{Temperature: 1, Seed: 7}, logits, n)
	for i, want := range []float64{1. / 8, 2. / 8, 5. / 8} {
		got := float64(cnt[i]) / n
		if math.Abs(got-want) > 0.01 {
			t.Errorf("id %d: frequency %.4f, want %.4f", i, got, want)
		}
	}
	// Temperature 0.5 squares the odds: 1:4:25.
	cnt = frequencies(t, Params{Temperature: 0.5, Seed: 7}, logits, n)
	for i, want := range []float64{1. / 30, 4. / 30, 25. / 30} {
		got := float64(cnt[i]) / n
		if math.Abs(got-want) > 0.01 {
			t.Errorf("T=0.5 id %d: frequency %.4f, want %.4f", i, got, want)
		}
	}
}

func TestTopK(t *testing.T) {
	logits := []float32{1, 5, 4, 0, 3}
	cnt := frequencies(t, Params{Temperature: 10, TopK: 2, Seed: 1}, logits, 2000)
	if cnt[0]+cnt[3]+cnt[4] != 0 || cnt[1] == 0 || cnt[2] == 0 {
		t.Fatalf("top-k 2 must draw only ids 1 and 2: %v", cnt)
	}
}

func TestTopP(t *testing.T) {
	// probs 0.5, 0.3, 0.15, 0.05
	logits := []float32{float32(math.Log(0.5)), float32(math.Log(0.3)), float32(math.Log(0.15)), float32(math.Log(0.05))}
	cnt := frequencies(t, Params{Temperature: 1, TopP: 0.8, Seed: 3}, logits, 4000)
	if cnt[2]+cnt[3] != 0 || cnt[0] == 0 || cnt[1] == 0 {
		t.Fatalf("top-p 0.8 must keep ids 0,1 only: %v", cnt)
	}
	cnt = frequencies(t, Params{Temperature: 1, TopP: 0.81, Seed: 3}, logits, 4000)
	if cnt[3] != 0 || cnt[2] == 0 {
		t.Fatalf("top-p 0.81 must keep ids 0,1,2: %v", cnt)
	}
	// Renormalised: 0.5/0.8 for id 0.
	cnt = frequencies(t, Params{Temperature: 1, TopP: 0.8, Seed: 3}, logits, 40000)
	if got := float64(cnt[0]) / 40000; math.Abs(got-0.625) > 0.01 {
		t.Fatalf("renormalised frequency of id 0: %.4f, want 0.625", got)
	}
}

func TestMinP(t *testing.T) {
	// probs relative to max: 1, 0.5, 0.2, 0.09
	logits := []float32{0, float32(math.Log(0.5)), float32(math.Log(0.2)), float32(math.Log(0.09))}
	cnt := frequencies(t, Params{Temperature: 1, MinP: 0.1, Seed: 5}, logits, 4000)
	if cnt[3] != 0 || cnt[2] == 0 {
		t.Fatalf("min-p 0.1 must drop id 3 only: %v", cnt)
	}
	cnt = frequencies(t, Params{Temperature: 1, MinP: 0.6, Seed: 5}, logits, 1000)
	if cnt[0] != 1000 {
		t.Fatalf("min-p 0.6 must keep id 0 only: %v", cnt)
	}
}

func TestRepeatPenalty(t *testing.T) {
	s := mustNew(t, Params{RepeatPenalty: 2, RepeatLastN: 2})
	logits := []float32{3, 2, -1, -0.9}
	if got := draw(t, s, logits); got != 0 {
		t.Fatalf("no history: got %d", got)
	}
	s.Accept(0) // 3 -> 1.5 < 2
	if got := draw(t, s, logits); got != 1 {
		t.Fatalf("penalised positive logit: got %d, want 1", got)
	}
	if logits[0] != 3 {
		t.Fatal("Sample modified its input")
	}
	// Negative logits are multiplied: -0.9*2 = -1.8 < -1.
	s2 := mustNew(t, Params{RepeatPenalty: 2})
	neg := []float32{-5, -5, -1, -0.9}
	s2.Accept(3)
	s2.Accept(3) // counted once
	if got := draw(t, s2, neg); got != 2 {
		t.Fatalf("penalised negative logit: got %d, want 2", got)
	}
	// Window: only the last 2 tokens count.
	s.Accept(2)
	s.Accept(3) // history 0,2,3 -> window {2,3}; id 0 no longer penalised
	if got := draw(t, s, logits); got != 0 {
		t.Fatalf("token outside window still penalised: got %d", got)
	}
}

func TestSeedDeterminism(t *testing.T) {
	logits := make([]float32, 100)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	run := func(seed uint64) []int {
		s := mustNew(t, Params{Temperature: 1.5, TopK: 40, TopP: 0.95, MinP: 0.01, Seed: seed})
		var out []int
		for range 50 {
			out = append(out, draw(t, s, logits))
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	same := func(x, y []int) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("same seed gave different tokens")
	}
	if same(a, c) {
		t.Fatal("different seeds gave identical 50-token sequences")
	}
}

func TestStopStrings(t *testing.T) {
	type step struct {
		in, out string
		stop    bool
	}
	cases := []struct {
		name  string
		stops []string
		steps []step
		flush string
	}{
		{"across tokens", []string{"<|end|>"}, []step{{"Hello <", "Hello ", false}, {"|en", "", false}, {"d|> more", "", true}, {"x", "", true}}, ""},
		{"false start released", []string{"STOP"}, []step{{"ST", "", false}, {"OP", "", true}}, ""},
		{"prefix then diverge", []string{"STOP"}, []step{{"aST", "a", false}, {"ay", "STay", false}}, ""},
		{"held at end is flushed", []string{"\n\n"}, []step{{"line\n", "line", false}}, "\n"},
		{"earliest of several", []string{"world", "lo w"}, []step{{"hello world", "hel", true}}, ""},
		{"none", nil, []step{{"abc", "abc", false}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewStopStrings(c.stops)
			for i, st := range c.steps {
				out, stop := s.Push(st.in)
				if out != st.out || stop != st.stop {
					t.Fatalf("step %d Push(%q) = %q, %v; want %q, %v", i, st.in, out, stop, st.out, st.stop)
				}
			}
			if got := s.Flush(); got != c.flush {
				t.Fatalf("Flush = %q, want %q", got, c.flush)
			}
		})
	}
}
