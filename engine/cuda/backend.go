package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sparkinfer/cc/engine/model"
)

// Backend runs a model.Model on one GPU: weights resident, one KV cache,
// each decode step one CUDA graph replay. It implements model.Backend and is
// checked against the CPU reference backend.
//
// The GPU holds one sequence at a time: NewSequence starts a fresh one and
// retires the previous (its calls then fail with ErrSequenceRetired).
type Backend struct {
	d      *Device
	owns   bool // Close closes d
	m      *model.Model
	sm     *C.sk_model
	maxCtx int
	gen    int
	logits []float32
}

// ErrSequenceRetired is returned by a sequence after a newer one was started.
var ErrSequenceRetired = errors.New("cuda: sequence retired: the GPU backend holds one sequence at a time")

var _ model.Backend = (*Backend)(nil)

// NewBackend uploads m's weights to the device and allocates a KV cache of
// maxCtx positions (maxCtx <= 0: the model's context length).
func NewBackend(d *Device, m *model.Model, maxCtx int) (*Backend, error) {
	c := m.Config
	if maxCtx <= 0 {
		maxCtx = c.ContextLength
	}
	scale := 1.0
	if c.RopeScale > 0 {
		scale = 1 / c.RopeScale
	}
	cfg := C.sk_model_config{
		n_layer: C.int(c.Layers), dim: C.int(c.Dim), n_head: C.int(c.Heads), n_kv_head: C.int(c.KVHeads),
		head_dim: C.int(c.HeadDim), ffn: C.int(c.FFN), vocab: C.int(c.Vocab), max_ctx: C.int(maxCtx),
		rope_dim: C.int(c.RopeDim), eps: C.float(c.RMSEps), freq_base: C.float(c.RopeBase), freq_scale: C.float(scale),
	}
	if c.RopeNeox {
		cfg.neox = 1
	}
	if c.QKNorm {
		cfg.qk_norm = 1
	}
	b := &Backend{d: d, m: m, maxCtx: maxCtx, logits: make([]float32, c.Vocab)}
	d.mu.Lock()
	err := d.check("model create", C.w_model_create(d.c, &cfg, &b.sm))
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := b.upload(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) setMatrix(slot, layer int, w *model.Matrix) error {
	if w.Rows*w.RowBytes == 0 || len(w.Data) < w.Rows*w.RowBytes {
		return fmt.Errorf("cuda: tensor %q has no data", w.Name)
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	rc := C.w_model_set(b.sm, C.int(slot), C.int(layer), C.int(w.Type), unsafe.Pointer(&w.Data[0]), C.int(w.Rows), C.int(w.Cols))
	if err := b.d.check("upload "+w.Name, rc); err != nil {
		return err
	}
	return nil
}

func (b *Backend) setVector(slot, layer int, v []float32, name string) error {
	if len(v) == 0 {
		return fmt.Errorf("cuda: vector %s is empty", name)
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	rc := C.w_model_set(b.sm, C.int(slot), C.int(layer), C.SK_F32, unsafe.Pointer(&v[0]), 1, C.int(len(v)))
	return b.d.check("upload "+name, rc)
}

func (b *Backend) upload() error {
	m := b.m
	if err := b.setMatrix(C.SK_T_TOKEN_EMBD, 0, &m.Embed); err != nil {
		return err
	}
	if !m.Tied {
		if err := b.setMatrix(C.SK_T_OUTPUT, 0, &m.Output); err != nil {
			return err
		}
	}
	if err := b.setVector(C.SK_T_OUTPUT_NORM, 0, m.OutNorm, "output_norm"); err != nil {
		return err
	}
	if m.RopeFreq != nil {
		if err := b.setVector(C.SK_T_ROPE_FREQ, 0, m.RopeFreq, "rope_freqs"); err != nil {
			return err
		}
	}
	for i := range m.Blocks {
		l := &m.Blocks[i]
		for _, s := range []struct {
			slot int
			w    *model.Matrix
		}{{C.SK_T_Q, &l.Wq}, {C.SK_T_K, &l.Wk}, {C.SK_T_V, &l.Wv}, {C.SK_T_O, &l.Wo},
			{C.SK_T_GATE, &l.Gate}, {C.SK_T_UP, &l.Up}, {C.SK_T_DOWN, &l.Down}} {
			if err := b.setMatrix(s.slot, i, s.w); err != nil {
				return err
			}
		}
		vecs := []struct {
			slot int
			v    []float32
			name string
		}{{C.SK_T_ATTN_NORM, l.AttnNorm, "attn_norm"}, {C.SK_T_FFN_NORM, l.FFNNorm, "ffn_norm"}}
		if m.QKNorm {
			vecs = append(vecs, struct {
				slot int
				v    []float32
				name string
			}{C.SK_T_Q_NORM, l.QNorm, "attn_q_norm"}, struct {
				slot int
				v    []float32
				name string
			}{C.SK_T_K_NORM, l.KNorm, "attn_k_norm"})
		}
		for _, v := range vecs {
			if err := b.setVector(v.slot, i, v.v, fmt.Sprintf("blk.%d.%s", i, v.name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Name identifies the backend.
func (b *Backend) Name() string {
	in, err := b.d.Info()
	if err != nil {
		return "cuda"
	}
	return fmt.Sprintf("cuda (%s, sm_%s)", in.Name, in.ComputeCapability)
}

// Model returns the model.
func (b *Backend) Model() *model.Model { return b.m }

// WeightBytes is the device bytes of weights read per decoded token.
func (b *Backend) WeightBytes() int64 {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return int64(C.w_model_weight_bytes(b.sm))
}

// Persistent reports whether decode steps run as one persistent kernel per
// step (see sk_model_persistent); it is known after the first decode step.
func (b *Backend) Persistent() bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return b.sm != nil && C.w_model_persistent(b.sm) == 1
}

// Close frees the device memory (and the device, for OpenBackend).
func (b *Backend) Close() error {
	b.d.mu.Lock()
	if b.sm != nil {
		C.w_model_free(b.sm)
		b.sm = nil
	}
	b.d.mu.Unlock()
	if b.owns {
		b.d.Close()
	}
	return nil
}

// OpenBackend opens the kernels library (see OpenDevice) and GPU 0 and
// uploads m; closing the backend closes the device.
func OpenBackend(m *model.Model, maxCtx int, kernels string, allowAnyDigestUnsafe bool) (*Backend, error) {
	d, _, err := OpenDevice(kernels, 0, allowAnyDigestUnsafe)
	if err != nil {
		return nil, err
	}
	b, err := NewBackend(d, m, maxCtx)
	if err != nil {
		d.Close()
		return nil, err
	}
	b.owns = true
	return b, nil
}

// KernelsDigest is the measured digest of the loaded kernels library.
func (b *Backend) KernelsDigest() string { return b.d.lib.Digest }

// Device returns the backend's GPU.
func (b *Backend) Device() *Device { return b.d }

// NewSequence starts a fresh sequence of up to ctx tokens, retiring any
// earlier one.
func (b *Backend) NewSequence(ctx int) (model.Sequence, error) {
	if b.sm == nil {
		return nil, errors.New("cuda: backend closed")
	}
	if ctx <= 0 {
		ctx = b.maxCtx
	}
	if ctx > b.maxCtx {
		return nil, fmt.Errorf("cuda: sequence of %d tokens exceeds the %d allocated", ctx, b.maxCtx)
	}
	b.gen++
	return &sequence{b: b, gen: b.gen, cap: ctx}, nil
}

type sequence struct {
	b      *Backend
	gen    int
	n, cap int
	all    []float32
}

func (s *sequence) Len() int { return s.n }
func (s *sequence) Cap() int { return s.cap }

func (s *sequence) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("cuda: truncate to %d of %d tokens", n, s.n)
	}
	s.n = n
	return nil
}

func (s *sequence) check(tokens []int) error {
	if s.gen != s.b.gen || s.b.sm == nil {
		return ErrSequenceRetired
	}
	if len(tokens) == 0 {
		return errors.New("cuda: forward of no tokens")
	}
	if s.n+len(tokens) > s.cap {
		return &model.ContextError{Have: s.n, Add: len(tokens), Cap: s.cap}
	}
	for _, t := range tokens {
		if t < 0 || t >= s.b.m.Vocab {
			return &model.TokenError{Token: t, Vocab: s.b.m.Vocab}
		}
	}
	return nil
}

// Forward runs tokens and returns logits (see model.Sequence).
func (s *sequence) Forward(tokens []int, all bool) ([]float32, error) {
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	b := s.b
	V := b.m.Vocab
	if all && len(tokens) > 1 {
		if cap(s.all) < len(tokens)*V {
			s.all = make([]float32, len(tokens)*V)
		}
		out := s.all[:len(tokens)*V]
		for i, t := range tokens {
			if _, err := s.decode(t, out[i*V:(i+1)*V]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if len(tokens) == 1 {
		if _, err := s.decode(tokens[0], b.logits); err != nil {
			return nil, err
		}
		return b.logits, nil
	}
	ids := make([]int32, len(tokens))
	for i, t := range tokens {
		ids[i] = int32(t)
	}
	var next C.int32_t
	b.d.mu.Lock()
	err := b.d.check("prefill", C.w_model_prefill(b.sm, (*C.int32_t)(unsafe.Pointer(&ids[0])), C.int(len(ids)), C.int(s.n),
		(*C.float)(unsafe.Pointer(&b.logits[0])), &next))
	b.d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.n += len(tokens)
	return b.logits, nil
}

func (s *sequence) decode(tok int, logits []float32) (int, error) {
	var lp *C.float
	if logits != nil {
		lp = (*C.float)(unsafe.Pointer(&logits[0]))
	}
	var next C.int32_t
	s.b.d.mu.Lock()
	err := s.b.d.check("decode", C.w_model_decode(s.b.sm, C.int(tok), C.int(s.n), lp, &next))
	s.b.d.mu.Unlock()
	if err != nil {
		return 0, err
	}
	s.n++
	return int(next), nil
}

// Greedy feeds one token and returns the argmax of the next-token logits,
// computed on the device; only the token id crosses the bus. It is the fast
// path for greedy decoding and for benchmarks (model.GreedySequence).
func (s *sequence) Greedy(tok int) (int, error) {
	if err := s.check([]int{tok}); err != nil {
		return 0, err
	}
	return s.decode(tok, nil)
}

// Prefill feeds tokens without returning logits and returns the argmax
// after the last one.
func Prefill(seq model.Sequence, tokens []int) (int, error) {
	s, ok := seq.(*sequence)
	if !ok {
		return 0, errors.New("cuda: not a cuda sequence")
	}
	if err := s.check(tokens); err != nil {
		return 0, err
	}
	ids := make([]int32, len(tokens))
	for i, t := range tokens {
		ids[i] = int32(t)
	}
	var next C.int32_t
	s.b.d.mu.Lock()
	err := s.b.d.check("prefill", C.w_model_prefill(s.b.sm, (*C.int32_t)(unsafe.Pointer(&ids[0])), C.int(len(ids)), C.int(s.n), nil, &next))
	s.b.d.mu.Unlock()
	if err != nil {
		return 0, err
	}
	s.n += len(tokens)
	return int(next), nil
}
