package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparkinfer/cc/engine/quant"
)

// testModel builds a small random model in memory (no GGUF) of the given
// architecture with matrices of type typ.
func testModel(t testing.TB, arch string, typ quant.Type, seed uint64) *Model {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	c := Config{Arch: arch, ContextLength: 512, Dim: 64, Layers: 2, FFN: 96, Heads: 4, KVHeads: 2, HeadDim: 16,
		RMSEps: 1e-5, RopeBase: 10000, RopeDim: 16, RopeScale: 1, Vocab: 160}
	if arch == "qwen3" {
		c.HeadDim, c.RopeDim, c.RopeNeox, c.QKNorm, c.RopeBase = 32, 32, true, true, 1e6
	}
	mat := func(name string, rows, cols int) Matrix {
		q, err := quant.Quantize(typ, randVec(r, rows*cols, 0.2))
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := quant.RowBytes(typ, cols)
		return Matrix{Name: name, Type: typ, Rows: rows, Cols: cols, RowBytes: rb, Data: q}
	}
	norm := func(n int) []float32 {
		v := randVec(r, n, 0.1)
		for i := range v {
			v[i]++
		}
		return v
	}
	m := &Model{Config: c, Embed: mat("token_embd", c.Vocab, c.Dim), OutNorm: norm(c.Dim)}
	m.Output = mat("output", c.Vocab, c.Dim)
	qw, kw := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for range c.Layers {
		l := Layer{AttnNorm: norm(c.Dim), Wq: mat("q", qw, c.Dim), Wk: mat("k", kw, c.Dim), Wv: mat("v", kw, c.Dim),
			Wo: mat("o", c.Dim, qw), FFNNorm: norm(c.Dim), Gate: mat("g", c.FFN, c.Dim), Up: mat("u", c.FFN, c.Dim), Down: mat("d", c.Dim, c.FFN)}
		if c.QKNorm {
			l.QNorm, l.KNorm = norm(c.HeadDim), norm(c.HeadDim)
		}
		m.Blocks = append(m.Blocks, l)
	}
	return m
}

func tokens(n, vocab int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int, n)
	for i := range out {
		out[i] = r.IntN(vocab)
	}
	return out
}

func TestMatMulEqualsDotRowAndReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		rows, cols, T := 37, 512, 5
		q, err := quant.Quantize(typ, randVec(r, rows*cols, 0.5))
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := quant.RowBytes(typ, cols)
		w := Matrix{Type: typ, Rows: rows, Cols: cols, RowBytes: rb, Data: q}
		x := randVec(r, T*cols, 1)
		c := NewCPU(nil, 3)
		out := make([]float32, T*rows)
		c.matMul(&w, x, T, out)
		// The decode path (one input) is exactly DotRow.
		one := make([]float32, rows)
		c.matMul(&w, x[:cols], 1, one)
		for ri := range rows {
			if one[ri] != quant.DotRow(typ, w.Row(ri), x[:cols]) {
				t.Fatalf("%v: single-input row %d differs from quant.DotRow", typ, ri)
			}
		}
		c.Close()
		deq := make([]float32, rows*cols)
		if err := quant.Dequantize(typ, q, deq); err != nil {
			t.Fatal(err)
		}
		for ti := range T {
			for ri := range rows {
				xr := x[ti*cols : (ti+1)*cols]
				if got, want := out[ti*rows+ri], quant.DotRow(typ, w.Row(ri), xr); got != want {
					t.Fatalf("%v: out[%d][%d] = %v, DotRow = %v", typ, ti, ri, got, want)
				}
				var ref float64
				for k := range cols {
					ref += float64(deq[ri*cols+k]) * float64(xr[k])
				}
				if d := math.Abs(float64(out[ti*rows+ri]) - ref); !(d <= 1e-5*(1+math.Abs(ref))*math.Sqrt(float64(cols))) {
					t.Fatalf("%v: out[%d][%d] = %v, float64 reference %v", typ, ti, ri, out[ti*rows+ri], ref)
				}
			}
		}
	}
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}

// TestPrefillMatchesDecode: a batch forward gives the same logits at every
// position as feeding the tokens one at a time, including across the
// internal MaxBatch split.
func TestPrefillMatchesDecode(t *testing.T) {
	for _, arch := range Architectures {
		for _, typ := range []quant.Type{quant.F32, quant.Q8_0} {
			m := testModel(t, arch, typ, 1)
			cpu := NewCPU(m, 2)
			n := MaxBatch + 21
			toks := tokens(n, m.Vocab, 2)
			a, _ := cpu.NewSequence(0)
			b, _ := cpu.NewSequence(0)
			batch, err := b.Forward(toks, true)
			if err != nil {
				t.Fatal(err)
			}
			for i, tok := range toks {
				lg, err := a.Forward([]int{tok}, false)
				if err != nil {
					t.Fatal(err)
				}
				row := batch[i*m.Vocab : (i+1)*m.Vocab]
				tol := 1e-5 * maxAbs(lg)
				for j := range lg {
					if d := math.Abs(float64(lg[j] - row[j])); !(d <= tol) {
						t.Fatalf("%s %v position %d logit %d: decode %v, prefill %v", arch, typ, i, j, lg[j], row[j])
					}
				}
			}
			// Prefill of a prefix then decode: last logits of a batch equal.
			c, _ := cpu.NewSequence(0)
			last, err := c.Forward(toks[:40], false)
			if err != nil {
				t.Fatal(err)
			}
			if len(last) != m.Vocab || math.Abs(float64(last[3]-batch[39*m.Vocab+3])) > 1e-5*maxAbs(last) {
				t.Fatalf("%s: last-only logits differ from the all-logits row", arch)
			}
			cpu.Close()
		}
	}
}

func TestParallelEqualsSingleThread(t *testing.T) {
	for _, arch := range Architectures {
		m := testModel(t, arch, quant.Q8_0, 3)
		toks := tokens(50, m.Vocab, 4)
		run := func(threads int) []float32 {
			cpu := NewCPU(m, threads)
			defer cpu.Close()
			s, _ := cpu.NewSequence(64)
			out, err := s.Forward(toks[:45], true)
			if err != nil {
				t.Fatal(err)
			}
			res := append([]float32(nil), out...)
			for _, tok := range toks[45:] {
				lg, err := s.Forward([]int{tok}, false)
				if err != nil {
					t.Fatal(err)
				}
				res = append(res, lg...)
			}
			return res
		}
		one, four := run(1), run(4)
		for i := range one {
			if one[i] != four[i] || math.IsNaN(float64(one[i])) {
				t.Fatalf("%s: element %d single %v, parallel %v", arch, i, one[i], four[i])
			}
		}
	}
}

func TestTruncateReplays(t *testing.T) {
	m := testModel(t, "llama", quant.Q8_0, 5)
	cpu := NewCPU(m, 2)
	defer cpu.Close()
	s, _ := cpu.NewSequence(64)
	toks := tokens(20, m.Vocab, 6)
	want, _ := s.Forward(toks, false)
	want = append([]float32(nil), want...)
	if err := s.Truncate(12); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Forward(toks[12:], false)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d after truncate+replay %v, want %v", i, got[i], want[i])
		}
	}
	if err := s.Truncate(21); err == nil {
		t.Fatal("truncate past Len accepted")
	}
}

func TestForwardErrors(t *testing.T) {
	m := testModel(t, "qwen3", quant.F32, 7)
	cpu := NewCPU(m, 1)
	defer cpu.Close()
	s, err := cpu.NewSequence(8)
	if err != nil {
		t.Fatal(err)
	}
	var ce *ContextError
	if _, err := s.Forward(make([]int, 9), false); !errors.As(err, &ce) || ce.Add != 9 || ce.Cap != 8 {
		t.Fatalf("9 tokens into 8: %v", err)
	}
	if s.Len() != 0 {
		t.Fatal("failed forward changed the sequence")
	}
	var te *TokenError
	if _, err := s.Forward([]int{1, m.Vocab}, false); !errors.As(err, &te) || te.Token != m.Vocab {
		t.Fatalf("token out of range: %v", err)
	}
	if _, err := s.Forward([]int{-1}, false); !errors.As(err, &te) {
		t.Fatalf("negative token: %v", err)
	}
	if _, err := cpu.NewSequence(m.ContextLength + 1); err == nil {
		t.Fatal("sequence longer than the model context accepted")
	}
}
