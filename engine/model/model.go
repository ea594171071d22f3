// Package model holds the transformer graphs of the dense llama and qwen3
// architectures and the pure-Go CPU backend that runs them.
//
// A [Model] is the configuration (from GGUF metadata, llama.cpp key names)
// plus views of the weight tensors in the GGUF file's memory: quantized
// matrices are never expanded, the CPU backend takes dot products straight
// over their blocks. A [Backend] runs the forward pass; [CPU] is the
// reference every other backend is checked against.
//
// The graph per layer: RMSNorm -> Q, K, V projections -> (qwen3: per-head
// RMSNorm of Q and K) -> RoPE (llama: adjacent pairs, llama.cpp's "NORM"
// layout; qwen3: NEOX halves) -> grouped-query causal attention over an f32
// KV cache -> output projection + residual -> RMSNorm -> SwiGLU FFN +
// residual; then a final RMSNorm and the output projection (token_embd when
// output.weight is absent: tied embeddings).
//
// Checked at load: the architecture, every metadata value the graph uses,
// that every tensor exists with the expected shape and a supported type.
// Not checked: that the weights are sensible numbers.
package model

import (
	"fmt"
	"math"

	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/quant"
)

// Matrix is a weight matrix W[Rows][Cols] stored row by row in a quantized
// type; each row is RowBytes bytes of Data.
type Matrix struct {
	Name     string
	Type     quant.Type
	Rows     int // output features
	Cols     int // input features (the contiguous dimension)
	RowBytes int
	Data     []byte
}

// Row returns the bytes of row r.
func (m *Matrix) Row(r int) []byte { return m.Data[r*m.RowBytes : (r+1)*m.RowBytes] }

// Bytes is the size of the matrix data.
func (m *Matrix) Bytes() int64 { return int64(m.Rows) * int64(m.RowBytes) }

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm       []float32 // [Dim]
	Wq, Wk, Wv, Wo Matrix    // [Heads*HeadDim][Dim], [KVHeads*HeadDim][Dim] x2, [Dim][Heads*HeadDim]
	QNorm, KNorm   []float32 // [HeadDim], qwen3 only
	FFNNorm        []float32 // [Dim]
	Gate, Up, Down Matrix    // [FFN][Dim] x2, [Dim][FFN]
}

// Model is a loaded model: configuration and weight views. It is read-only
// and safe to share between backends and goroutines.
type Model struct {
	Config
	Embed    Matrix    // token_embd.weight [Vocab][Dim]
	OutNorm  []float32 // output_norm.weight [Dim]
	Output   Matrix    // output.weight [Vocab][Dim], or Embed when tied
	Tied     bool
	Blocks   []Layer
	RopeFreq []float32 // rope_freqs.weight [RopeDim/2] (frequency divisors, Llama 3.1 style), nil if absent
}

// Load builds a Model over f's tensors. f must stay open while the model
// is used: the matrices point into its memory.
func Load(f *gguf.File) (*Model, error) {
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, &TensorError{Name: "token_embd.weight", Msg: "missing"}
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(cfg.Dim) || emb.Dims[1] == 0 || emb.Dims[1] > 1<<24 {
		return nil, &TensorError{Name: "token_embd.weight", Msg: fmt.Sprintf("shape %v, want [%d, vocab]", emb.Dims, cfg.Dim)}
	}
	m.Vocab = int(emb.Dims[1])
	m.Config.Vocab = m.Vocab
	if m.Embed, err = matrix(f, "token_embd.weight", m.Vocab, cfg.Dim); err != nil {
		return nil, err
	}
	if m.OutNorm, err = vector(f, "output_norm.weight", cfg.Dim); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok {
		if m.Output, err = matrix(f, "output.weight", m.Vocab, cfg.Dim); err != nil {
			return nil, err
		}
	} else {
		m.Output, m.Tied = m.Embed, true
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		if m.RopeFreq, err = vector(f, "rope_freqs.weight", cfg.RopeDim/2); err != nil {
			return nil, err
		}
		for i, v := range m.RopeFreq {
			if !(v > 0) || math.IsInf(float64(v), 0) {
				return nil, &TensorError{Name: "rope_freqs.weight", Msg: fmt.Sprintf("element %d = %v, want a positive finite number", i, v)}
			}
		}
	}
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	m.Blocks = make([]Layer, cfg.Layers)
	for i := range m.Blocks {
		l := &m.Blocks[i]
		n := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }
		steps := []func() error{
			func() (err error) { l.AttnNorm, err = vector(f, n("attn_norm"), cfg.Dim); return },
			func() (err error) { l.Wq, err = matrix(f, n("attn_q"), q, cfg.Dim); return },
			func() (err error) { l.Wk, err = matrix(f, n("attn_k"), kv, cfg.Dim); return },
			func() (err error) { l.Wv, err = matrix(f, n("attn_v"), kv, cfg.Dim); return },
			func() (err error) { l.Wo, err = matrix(f, n("attn_output"), cfg.Dim, q); return },
			func() (err error) { l.FFNNorm, err = vector(f, n("ffn_norm"), cfg.Dim); return },
			func() (err error) { l.Gate, err = matrix(f, n("ffn_gate"), cfg.FFN, cfg.Dim); return },
			func() (err error) { l.Up, err = matrix(f, n("ffn_up"), cfg.FFN, cfg.Dim); return },
			func() (err error) { l.Down, err = matrix(f, n("ffn_down"), cfg.Dim, cfg.FFN); return },
		}
		if cfg.QKNorm {
			steps = append(steps,
				func() (err error) { l.QNorm, err = vector(f, n("attn_q_norm"), cfg.HeadDim); return },
				func() (err error) { l.KNorm, err = vector(f, n("attn_k_norm"), cfg.HeadDim); return })
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func matrix(f *gguf.File, name string, rows, cols int) (Matrix, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return Matrix{}, &TensorError{Name: name, Msg: "missing"}
	}
	if len(t.Dims) != 2 || t.Dims[0] != uint64(cols) || t.Dims[1] != uint64(rows) {
		return Matrix{}, &TensorError{Name: name, Msg: fmt.Sprintf("shape %v, want [%d, %d]", t.Dims, cols, rows)}
	}
	if !t.Type.Supported() {
		return Matrix{}, &TensorError{Name: name, Msg: (&quant.UnsupportedTypeError{Type: t.Type}).Error()}
	}
	rb, err := quant.RowBytes(t.Type, cols)
	if err != nil {
		return Matrix{}, &TensorError{Name: name, Msg: err.Error()}
	}
	data := f.TensorData(t)
	if int64(len(data)) < int64(rows)*int64(rb) {
		return Matrix{}, &TensorError{Name: name, Msg: fmt.Sprintf("%d bytes of data, want %d", len(data), int64(rows)*int64(rb))}
	}
	return Matrix{Name: name, Type: t.Type, Rows: rows, Cols: cols, RowBytes: rb, Data: data[:rows*rb]}, nil
}

// vector reads a 1-D tensor of n elements (any supported type) as float32.
func vector(f *gguf.File, name string, n int) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, &TensorError{Name: name, Msg: "missing"}
	}
	if len(t.Dims) != 1 || t.Dims[0] != uint64(n) {
		return nil, &TensorError{Name: name, Msg: fmt.Sprintf("shape %v, want [%d]", t.Dims, n)}
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, f.TensorData(t), out); err != nil {
		return nil, &TensorError{Name: name, Msg: err.Error()}
	}
	return out, nil
}

// WeightBytesPerToken is the weight data one decode step reads: every layer
// matrix, the output matrix and one embedding row (norm vectors are
// negligible and not counted).
func (m *Model) WeightBytesPerToken() int64 {
	var n int64
	for i := range m.Blocks {
		l := &m.Blocks[i]
		for _, w := range []*Matrix{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.Gate, &l.Up, &l.Down} {
			n += w.Bytes()
		}
	}
	return n + m.Output.Bytes() + int64(m.Embed.RowBytes)
}
