// Package parity compares two backends running the same model: a candidate
// (e.g. CUDA) against the reference (the CPU backend). It feeds both the same
// tokens one position at a time and, at each position, compares the
// next-token distributions: whether their argmax agrees (greedy top-1
// agreement) and KL(ref || cand) of their softmaxes.
package parity

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sparkinfer/cc/engine/model"
)

// Result summarises a comparison over Positions positions.
type Result struct {
	Positions   int     `json:"positions"`
	Top1Agree   float64 `json:"top1_agreement"` // fraction of positions whose argmax agrees
	MeanKL      float64 `json:"mean_kl"`        // mean KL(ref || cand) in nats
	MaxKL       float64 `json:"max_kl"`
	MaxAbsDiff  float64 `json:"max_abs_logit_diff"`
	MaxAbsLogit float64 `json:"max_abs_logit"` // of the reference
	Reference   string  `json:"reference"`
	Candidate   string  `json:"candidate"`
}

// SeededPrompt returns n token ids drawn uniformly from [0, vocab) with a
// PCG generator seeded by seed; when bos >= 0 it is the first token.
func SeededPrompt(seed uint64, n, vocab, bos int) []int {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	t := make([]int, n)
	for i := range t {
		t[i] = r.IntN(vocab)
	}
	if bos >= 0 && n > 0 {
		t[0] = bos
	}
	return t
}

// Compare runs tokens through fresh sequences of ref and cand, one token per
// step, and compares the logits after each.
func Compare(ref, cand model.Backend, tokens []int) (Result, error) {
	res := Result{Reference: ref.Name(), Candidate: cand.Name()}
	if len(tokens) == 0 {
		return res, errors.New("parity: no tokens")
	}
	rs, err := ref.NewSequence(len(tokens))
	if err != nil {
		return res, fmt.Errorf("parity: reference: %w", err)
	}
	cs, err := cand.NewSequence(len(tokens))
	if err != nil {
		return res, fmt.Errorf("parity: candidate: %w", err)
	}
	var agree int
	var klSum float64
	for i, tok := range tokens {
		rl, err := rs.Forward([]int{tok}, false)
		if err != nil {
			return res, fmt.Errorf("parity: reference at position %d: %w", i, err)
		}
		rl = append([]float32(nil), rl...)
		cl, err := cs.Forward([]int{tok}, false)
		if err != nil {
			return res, fmt.Errorf("parity: candidate at position %d: %w", i, err)
		}
		if len(rl) != len(cl) {
			return res, fmt.Errorf("parity: %d reference logits, %d candidate logits", len(rl), len(cl))
		}
		for j := range cl {
			if math.IsNaN(float64(cl[j])) || math.IsInf(float64(cl[j]), 0) {
				return res, fmt.Errorf("parity: candidate logit %d at position %d is %v", j, i, cl[j])
			}
			res.MaxAbsDiff = math.Max(res.MaxAbsDiff, math.Abs(float64(cl[j])-float64(rl[j])))
			res.MaxAbsLogit = math.Max(res.MaxAbsLogit, math.Abs(float64(rl[j])))
		}
		if Argmax(rl) == Argmax(cl) {
			agree++
		}
		kl := KL(rl, cl)
		klSum += kl
		res.MaxKL = math.Max(res.MaxKL, kl)
	}
	res.Positions = len(tokens)
	res.Top1Agree = float64(agree) / float64(len(tokens))
	res.MeanKL = klSum / float64(len(tokens))
	return res, nil
}

// Argmax returns the index of the largest value (lowest index on ties).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// KL returns KL(softmax(p) || softmax(q)) in nats, computed in float64.
func KL(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return math.Max(kl, 0)
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	ls := math.Log(s) + mx
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - ls
	}
	return out
}
