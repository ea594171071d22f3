package model

import (
	"fmt"

	"github.com/sparkinfer/cc/engine/quant"
)

// CPU is the pure-Go backend. Matrix products run straight over the
// quantized rows with quant.DotRow, rows split across a worker pool; a
// batch of tokens (prefill) takes each weight row through all tokens while
// it is in cache, so the weights are read once per batch.
type CPU struct {
	m    *Model
	pool *Pool
}

// MaxBatch is the most tokens one internal pass processes; longer inputs
// to Forward are split, which bounds the scratch memory.
const MaxBatch = 256

// NewCPU returns a CPU backend for m with a pool of threads workers
// (threads <= 0: GOMAXPROCS).
func NewCPU(m *Model, threads int) *CPU {
	return &CPU{m: m, pool: NewPool(threads)}
}

func (c *CPU) Name() string  { return fmt.Sprintf("cpu (%d threads)", c.pool.Workers()) }
func (c *CPU) Model() *Model { return c.m }
func (c *CPU) Close() error  { c.pool.Close(); return nil }

// NewSequence allocates a KV cache of ctx positions (f32).
func (c *CPU) NewSequence(ctx int) (Sequence, error) {
	if ctx <= 0 {
		ctx = c.m.ContextLength
	}
	if ctx > c.m.ContextLength {
		return nil, fmt.Errorf("model: context %d exceeds the model's context length %d", ctx, c.m.ContextLength)
	}
	kvw := c.m.KVHeads * c.m.HeadDim
	s := &cpuSeq{c: c, cap: ctx, kvw: kvw}
	s.k = make([][]float32, c.m.Layers)
	s.v = make([][]float32, c.m.Layers)
	for i := range s.k {
		s.k[i] = make([]float32, ctx*kvw)
		s.v[i] = make([]float32, ctx*kvw)
	}
	return s, nil
}

type cpuSeq struct {
	c    *CPU
	cap  int
	n    int
	kvw  int
	k, v [][]float32 // per layer [cap][kvw]

	// scratch, sized for the largest batch seen
	bt                    int
	x, xb, q, kk, vv, att []float32
	gate, up, rope        []float32
	logits                []float32
}

func (s *cpuSeq) Len() int { return s.n }
func (s *cpuSeq) Cap() int { return s.cap }

func (s *cpuSeq) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("model: truncate to %d outside [0, %d]", n, s.n)
	}
	s.n = n
	return nil
}

func (s *cpuSeq) Forward(tokens []int, all bool) ([]float32, error) {
	m := s.c.m
	if len(tokens) == 0 {
		return nil, fmt.Errorf("model: no tokens to forward")
	}
	if len(tokens) > s.cap-s.n {
		return nil, &ContextError{Have: s.n, Add: len(tokens), Cap: s.cap}
	}
	for _, t := range tokens {
		if t < 0 || t >= m.Vocab {
			return nil, &TokenError{Token: t, Vocab: m.Vocab}
		}
	}
	V := m.Vocab
	need := V
	if all {
		need = len(tokens) * V
	}
	if cap(s.logits) < need {
		s.logits = make([]float32, need)
	}
	out := s.logits[:need]
	for start := 0; start < len(tokens); start += MaxBatch {
		chunk := tokens[start:min(start+MaxBatch, len(tokens))]
		last := start+len(chunk) == len(tokens)
		switch {
		case all:
			s.forward(chunk, out[start*V:(start+len(chunk))*V], true)
		case last:
			s.forward(chunk, out, false)
		default:
			s.forward(chunk, nil, false)
		}
	}
	return out, nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// forward runs T tokens at positions s.n.. and writes logits for all of
// them (all) or the last one into out (nil: none).
func (s *cpuSeq) forward(tokens []int, out []float32, all bool) {
	m := s.c.m
	T := len(tokens)
	D, H, KVH, HD, F := m.Dim, m.Heads, m.KVHeads, m.HeadDim, m.FFN
	qw := H * HD
	s.x = grow(s.x, T*D)
	s.xb = grow(s.xb, T*max(D, qw))
	s.q = grow(s.q, T*qw)
	s.kk = grow(s.kk, T*s.kvw)
	s.vv = grow(s.vv, T*s.kvw)
	s.att = grow(s.att, T*qw)
	s.gate = grow(s.gate, T*F)
	s.up = grow(s.up, T*F)
	s.rope = grow(s.rope, T*m.RopeDim)
	pos0 := s.n

	for t, id := range tokens {
		if err := quant.Dequantize(m.Embed.Type, m.Embed.Row(id), s.x[t*D:(t+1)*D]); err != nil {
			panic(err) // shapes were checked at load
		}
		ropeAngles(s.rope[t*m.RopeDim:(t+1)*m.RopeDim], pos0+t, m.RopeDim, m.RopeBase, m.RopeScale, m.RopeFreq)
	}
	rope := ropeNorm
	if m.RopeNeox {
		rope = ropeNeox
	}
	for li := range m.Blocks {
		l := &m.Blocks[li]
		for t := range T {
			rmsNorm(s.xb[t*D:(t+1)*D], s.x[t*D:(t+1)*D], l.AttnNorm, m.RMSEps)
		}
		s.c.matMul(&l.Wq, s.xb[:T*D], T, s.q)
		s.c.matMul(&l.Wk, s.xb[:T*D], T, s.kk)
		s.c.matMul(&l.Wv, s.xb[:T*D], T, s.vv)
		for t := range T {
			cs := s.rope[t*m.RopeDim : (t+1)*m.RopeDim]
			for h := range H {
				qh := s.q[t*qw+h*HD : t*qw+(h+1)*HD]
				if l.QNorm != nil {
					rmsNorm(qh, qh, l.QNorm, m.RMSEps)
				}
				rope(qh, cs)
			}
			for h := range KVH {
				kh := s.kk[t*s.kvw+h*HD : t*s.kvw+(h+1)*HD]
				if l.KNorm != nil {
					rmsNorm(kh, kh, l.KNorm, m.RMSEps)
				}
				rope(kh, cs)
			}
		}
		copy(s.k[li][pos0*s.kvw:], s.kk[:T*s.kvw])
		copy(s.v[li][pos0*s.kvw:], s.vv[:T*s.kvw])
		// Attention: one work item per (token, head).
		keys, vals := s.k[li], s.v[li]
		group := H / KVH
		s.c.pool.For(T*H, 1, func(lo, hi int) {
			sc := make([]float32, pos0+T)
			for i := lo; i < hi; i++ {
				t, h := i/H, i%H
				kvo := (h / group) * HD
				n := pos0 + t + 1
				attendHead(s.att[t*qw+h*HD:t*qw+(h+1)*HD], s.q[t*qw+h*HD:t*qw+(h+1)*HD],
					keys[kvo:], vals[kvo:], s.kvw, n, sc)
			}
		})
		s.c.matMul(&l.Wo, s.att[:T*qw], T, s.xb)
		for i := range T * D {
			s.x[i] += s.xb[i]
		}
		for t := range T {
			rmsNorm(s.xb[t*D:(t+1)*D], s.x[t*D:(t+1)*D], l.FFNNorm, m.RMSEps)
		}
		s.c.matMul(&l.Gate, s.xb[:T*D], T, s.gate)
		s.c.matMul(&l.Up, s.xb[:T*D], T, s.up)
		swiglu(s.gate[:T*F], s.up[:T*F])
		s.c.matMul(&l.Down, s.gate[:T*F], T, s.xb)
		for i := range T * D {
			s.x[i] += s.xb[i]
		}
	}
	s.n += T
	if out == nil {
		return
	}
	first := T - 1
	if all {
		first = 0
	}
	n := T - first
	for t := first; t < T; t++ {
		rmsNorm(s.xb[(t-first)*D:(t-first+1)*D], s.x[t*D:(t+1)*D], m.OutNorm, m.RMSEps)
	}
	s.c.matMul(&m.Output, s.xb[:n*D], n, out[:n*m.Vocab])
}

// matMul sets out[t*Rows+r] = W.Row(r) · x[t*Cols:(t+1)*Cols] for t < T,
// each with quant.DotRow over the quantized blocks. Rows are split across
// the pool; each row is read from memory once and applied to all T inputs
// while it is in cache, so a batch (prefill) streams the weights once.
//
// A variant that dequantizes each row once per batch and takes float32 dot
// products four inputs at a time was measured (BenchmarkMatVec) and was
// slower per token than repeating DotRow on this machine, so it was dropped.
func (c *CPU) matMul(w *Matrix, x []float32, T int, out []float32) {
	rows, cols := w.Rows, w.Cols
	c.pool.For(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := w.Data[r*w.RowBytes : (r+1)*w.RowBytes]
			for t := range T {
				out[t*rows+r] = quant.DotRow(w.Type, row, x[t*cols:(t+1)*cols])
			}
		}
	})
}
