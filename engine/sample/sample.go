// Package sample picks the next token from a model's logits.
//
// The sampling chain follows llama.cpp's default order and semantics:
//
//  1. repetition penalty over the last RepeatLastN accepted tokens (each
//     distinct token once: a positive logit is divided by the penalty, a
//     non-positive one multiplied by it);
//  2. if Temperature <= 0: greedy, the argmax (lowest id on ties), and stop;
//  3. top-k: keep the K highest logits (K <= 0: off);
//  4. top-p (nucleus): keep the smallest prefix, by descending probability,
//     whose probability mass reaches P (P >= 1: off), computed on the
//     softmax of the current logits;
//  5. min-p: drop tokens whose probability is below MinP times the top
//     token's probability (MinP <= 0: off);
//  6. temperature: divide the remaining logits by Temperature;
//  7. draw from the softmax with a PCG generator seeded from Seed, so the
//     same seed, logits and history give the same tokens.
//
// At least one token always survives each filter. Stop tokens and max
// tokens are the caller's loop (the engine package); stop strings, which are
// matched on text across token boundaries, are handled by [StopStrings].
//
// What is not checked: logits are trusted to be finite except that NaN
// logits are never chosen; a vocabulary with only NaN logits yields token 0.
package sample

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultRepeatLastN is llama.cpp's default penalty window.
const DefaultRepeatLastN = 64

// Params configures a [Sampler]. The zero value is greedy decoding with no
// penalty.
type Params struct {
	Temperature   float64 // <= 0: greedy (argmax)
	TopK          int     // <= 0: off
	TopP          float64 // <= 0 or >= 1: off
	MinP          float64 // <= 0: off
	RepeatPenalty float64 // 0 or 1: off; must be > 0 otherwise
	RepeatLastN   int     // penalty window in tokens; 0: DefaultRepeatLastN; -1: the whole history
	Seed          uint64  // seeds the PCG generator used for draws
}

// ParamError reports an invalid sampling parameter.
type ParamError struct {
	Field string
	Value float64
	Want  string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("sample: %s = %v is invalid: want %s", e.Field, e.Value, e.Want)
}

// Validate reports the first invalid field.
func (p Params) Validate() error {
	bad := func(f string, v float64, want string) error { return &ParamError{Field: f, Value: v, Want: want} }
	switch {
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return bad("temperature", p.Temperature, "a finite number")
	case math.IsNaN(p.TopP) || p.TopP < 0:
		return bad("top_p", p.TopP, "a number >= 0")
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return bad("min_p", p.MinP, "a number in [0, 1]")
	case math.IsNaN(p.RepeatPenalty) || math.IsInf(p.RepeatPenalty, 0) || p.RepeatPenalty < 0:
		return bad("repeat_penalty", p.RepeatPenalty, "a finite number > 0 (1: off)")
	case p.TopK < 0:
		return bad("top_k", float64(p.TopK), "an integer >= 0 (0: off)")
	case p.RepeatLastN < -1:
		return bad("repeat_last_n", float64(p.RepeatLastN), "an integer >= -1")
	}
	return nil
}

// Sampler holds the parameters, the random generator and the token history
// of one sequence. It is not safe for concurrent use.
type Sampler struct {
	p       Params
	rng     *rand.Rand
	history []int

	cand []cand
	seen map[int]struct{}
}

type cand struct {
	id    int
	logit float32
	p     float64
}

// ErrEmptyLogits is returned by Sample for an empty logits slice.
var ErrEmptyLogits = errors.New("sample: empty logits")

// New returns a sampler; the parameters are validated.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.RepeatLastN == 0 {
		p.RepeatLastN = DefaultRepeatLastN
	}
	if p.RepeatPenalty == 0 {
		p.RepeatPenalty = 1
	}
	return &Sampler{
		p:    p,
		rng:  rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)),
		seen: map[int]struct{}{},
	}, nil
}

// Params returns the parameters in effect (defaults filled in).
func (s *Sampler) Params() Params { return s.p }

// Accept records a token in the history the repetition penalty looks at:
// prompt tokens and generated tokens alike.
func (s *Sampler) Accept(id int) {
	s.history = append(s.history, id)
	// Keep memory bounded when the window is finite.
	if n := s.p.RepeatLastN; n > 0 && len(s.history) > 4*n+1024 {
		s.history = append(s.history[:0], s.history[len(s.history)-n:]...)
	}
}

// Reset clears the history (the generator state is kept).
func (s *Sampler) Reset() { s.history = s.history[:0] }

// Sample returns the next token for logits (one value per vocabulary
// entry). logits is not modified.
func (s *Sampler) Sample(logits []float32) (int, error) {
	if len(logits) == 0 {
		return 0, ErrEmptyLogits
	}
	c := s.cand[:0]
	for i, l := range logits {
		if l != l { // NaN never wins
			continue
		}
		c = append(c, cand{id: i, logit: l})
	}
	s.cand = c
	if len(c) == 0 {
		return 0, nil
	}
	s.penalize(c)
	if s.p.Temperature <= 0 {
		best := 0
		for i := range c {
			if c[i].logit > c[best].logit {
				best = i
			}
		}
		return c[best].id, nil
	}
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		sortDesc(c)
		sorted = true
		c = c[:k]
	}
	if p := s.p.TopP; p > 0 && p < 1 && len(c) > 1 {
		if !sorted {
			sortDesc(c)
			sorted = true
		}
		softmax(c, 1)
		var cum float64
		keep := len(c)
		for i := range c {
			cum += c[i].p
			if cum >= p {
				keep = i + 1
				break
			}
		}
		c = c[:keep]
	}
	if mp := s.p.MinP; mp > 0 && len(c) > 1 {
		// p_i >= mp * p_max  <=>  logit_i >= max + ln(mp)
		maxl := c[0].logit
		for _, x := range c {
			maxl = max(maxl, x.logit)
		}
		thr := float64(maxl) + math.Log(mp)
		out := c[:0]
		for _, x := range c {
			if float64(x.logit) >= thr {
				out = append(out, x)
			}
		}
		c = out
	}
	softmax(c, s.p.Temperature)
	r := s.rng.Float64()
	var cum float64
	for _, x := range c {
		cum += x.p
		if r < cum {
			return x.id, nil
		}
	}
	return c[len(c)-1].id, nil
}

// penalize applies the repetition penalty over the window, each distinct
// token once (llama.cpp's penalties sampler with frequency and presence 0).
func (s *Sampler) penalize(c []cand) {
	pen := float32(s.p.RepeatPenalty)
	if pen == 1 || len(s.history) == 0 {
		return
	}
	h := s.history
	if n := s.p.RepeatLastN; n > 0 && len(h) > n {
		h = h[len(h)-n:]
	}
	clear(s.seen)
	for _, id := range h {
		s.seen[id] = struct{}{}
	}
	// c holds the non-NaN tokens in id order at this point; find by id.
	for id := range s.seen {
		i, ok := slices.BinarySearchFunc(c, id, func(x cand, id int) int { return cmp.Compare(x.id, id) })
		if !ok {
			continue
		}
		if c[i].logit <= 0 {
			c[i].logit *= pen
		} else {
			c[i].logit /= pen
		}
	}
}

func sortDesc(c []cand) {
	slices.SortStableFunc(c, func(a, b cand) int { return cmp.Compare(b.logit, a.logit) })
}

// softmax fills c[i].p with softmax(logit/temp), computed in float64.
func softmax(c []cand, temp float64) {
	maxl := math.Inf(-1)
	for _, x := range c {
		maxl = max(maxl, float64(x.logit))
	}
	if math.IsInf(maxl, -1) { // every logit is -Inf: uniform
		for i := range c {
			c[i].p = 1 / float64(len(c))
		}
		return
	}
	var sum float64
	for i := range c {
		e := math.Exp((float64(c[i].logit) - maxl) / temp)
		c[i].p = e
		sum += e
	}
	for i := range c {
		c[i].p /= sum
	}
}
