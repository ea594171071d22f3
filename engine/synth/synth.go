// Package synth writes synthetic models: valid GGUF files with the exact
// shapes and llama.cpp metadata of real models (TinyLlama-1.1B, Llama-2-7B,
// Qwen3-8B or any given dimensions), a real vocabulary, and random weights
// of realistic scale (matrices N(0, 0.02²), norm weights 1 + N(0, 0.02²)).
// They exist for benchmarks and for CPU/GPU parity checks: the same options
// and seed always give the same bytes, whatever the number of cores.
//
// Weights are generated and quantized in chunks, in parallel, and streamed
// to the output, so memory stays small even for a 7B model.
//
// Vocabularies (embedded, gzip'ed vocabulary-only GGUF files, see
// vocab/README.md): the llama shapes use llama.cpp's llama-spm vocabulary
// (32000 SentencePiece tokens with scores and types); the qwen3 shapes use
// the Qwen3 byte-level BPE vocabulary (151669 tokens, merges, pre "qwen2")
// converted from Qwen3's tokenizer.json exactly as `sparkinfer convert`
// does, padded to the model's vocabulary size with "[PAD<id>]" tokens.
package synth

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"

	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sparkinfer/cc/engine/convert"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/quant"
)

// Shape is a model's dimensions.
type Shape struct {
	Dim, Layers, FFN  int
	Heads, KVHeads    int
	HeadDim           int // 0: Dim / Heads
	Vocab, Ctx        int
	RopeBase, NormEps float64
}

// Shapes are the named shapes, with the dimensions of the real models.
var Shapes = map[string]struct {
	Arch  string
	Shape Shape
}{
	"tinyllama-1.1b": {"llama", Shape{Dim: 2048, Layers: 22, FFN: 5632, Heads: 32, KVHeads: 4, Vocab: 32000, Ctx: 2048, RopeBase: 10000, NormEps: 1e-5}},
	"llama2-7b":      {"llama", Shape{Dim: 4096, Layers: 32, FFN: 11008, Heads: 32, KVHeads: 32, Vocab: 32000, Ctx: 4096, RopeBase: 10000, NormEps: 1e-5}},
	"qwen3-8b":       {"qwen3", Shape{Dim: 4096, Layers: 36, FFN: 12288, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Ctx: 40960, RopeBase: 1e6, NormEps: 1e-6}},
}

// ParseShape returns a named shape for arch, or parses DIMS: comma-separated
// key=value pairs dim, layers, ffn, heads, kv_heads, head_dim, vocab, ctx,
// rope_base, eps (dim, layers, ffn and heads required; kv_heads defaults to
// heads, vocab to the architecture's vocabulary, ctx to 2048).
func ParseShape(arch, s string) (Shape, error) {
	if n, ok := Shapes[s]; ok {
		if n.Arch != arch {
			return Shape{}, fmt.Errorf("shape %q is a %s shape, not %s", s, n.Arch, arch)
		}
		return n.Shape, nil
	}
	if !strings.Contains(s, "=") {
		return Shape{}, fmt.Errorf("unknown shape %q (named shapes: tinyllama-1.1b, llama2-7b, qwen3-8b; or DIMS like dim=64,layers=2,ffn=256,heads=4)", s)
	}
	sh := Shape{Ctx: 2048, RopeBase: 10000, NormEps: 1e-5}
	if arch == "qwen3" {
		sh.RopeBase, sh.NormEps = 1e6, 1e-6
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Shape{}, fmt.Errorf("shape: %q is not key=value", kv)
		}
		if k == "rope_base" || k == "eps" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) {
				return Shape{}, fmt.Errorf("shape: %s=%q is not a positive number", k, v)
			}
			if k == "eps" {
				sh.NormEps = f
			} else {
				sh.RopeBase = f
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 1<<20 {
			return Shape{}, fmt.Errorf("shape: %s=%q is not a positive integer up to 2^20", k, v)
		}
		switch k {
		case "dim":
			sh.Dim = n
		case "layers":
			sh.Layers = n
		case "ffn":
			sh.FFN = n
		case "heads":
			sh.Heads = n
		case "kv_heads":
			sh.KVHeads = n
		case "head_dim":
			sh.HeadDim = n
		case "vocab":
			sh.Vocab = n
		case "ctx":
			sh.Ctx = n
		default:
			return Shape{}, fmt.Errorf("shape: unknown key %q (dim, layers, ffn, heads, kv_heads, head_dim, vocab, ctx, rope_base, eps)", k)
		}
	}
	if sh.KVHeads == 0 {
		sh.KVHeads = sh.Heads
	}
	if sh.Dim == 0 || sh.Layers == 0 || sh.FFN == 0 || sh.Heads == 0 {
		return Shape{}, fmt.Errorf("shape %q: dim, layers, ffn and heads are required", s)
	}
	return sh, sh.validate()
}

func (s Shape) headDim() int {
	if s.HeadDim != 0 {
		return s.HeadDim
	}
	return s.Dim / s.Heads
}

func (s Shape) validate() error {
	if s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("shape: heads %d not a multiple of kv_heads %d", s.Heads, s.KVHeads)
	}
	if s.HeadDim == 0 && s.Dim%s.Heads != 0 {
		return fmt.Errorf("shape: dim %d not a multiple of heads %d", s.Dim, s.Heads)
	}
	if s.headDim()%2 != 0 {
		return fmt.Errorf("shape: head dimension %d is odd (RoPE needs pairs)", s.headDim())
	}
	return nil
}

// Options are what a synthetic model is made of.
type Options struct {
	Arch  string // "llama" or "qwen3"
	Shape Shape
	Type  string // "F32", "F16", "Q8_0" or "Q4_K_M"
	Seed  uint64
	// Workers is the number of goroutines quantizing (0: GOMAXPROCS). It
	// does not change the output.
	Workers int
}

// Architectures lists the supported architectures.
var Architectures = []string{"llama", "qwen3"}

// FileTypes maps the supported --type names to llama.cpp's general.file_type.
var FileTypes = map[string]uint32{"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15}

//go:embed vocab/llama-spm.gguf.gz
var llamaSPMVocab []byte

//go:embed vocab/qwen3.gguf.gz
var qwen3Vocab []byte

var vocabFiles sync.Map // arch -> *gguf.File, parsed once

// LoadVocab returns the embedded vocabulary of arch; the caller owns the
// returned slices.
func LoadVocab(arch string) (*convert.Vocab, error) {
	f, ok := vocabFiles.Load(arch)
	if !ok {
		src := llamaSPMVocab
		if arch == "qwen3" {
			src = qwen3Vocab
		}
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			return nil, err
		}
		pf, err := gguf.Parse(raw)
		if err != nil {
			return nil, err
		}
		f, _ = vocabFiles.LoadOrStore(arch, pf)
	}
	v, err := convert.VocabFromGGUF(f.(*gguf.File))
	if err != nil {
		return nil, err
	}
	// The file's slices are shared: give the caller its own.
	v.Tokens, v.Types = slices.Clone(v.Tokens), slices.Clone(v.Types)
	v.Scores, v.Merges = slices.Clone(v.Scores), slices.Clone(v.Merges)
	return v, nil
}

type tensorSpec struct {
	name string
	dims []uint64
	typ  quant.Type
	norm bool
}

func (o *Options) tensors() []tensorSpec {
	s := o.Shape
	hd := s.headDim()
	var ts []tensorSpec
	mat := func(name, kind string, layer, in, out int) {
		ts = append(ts, tensorSpec{name, []uint64{uint64(in), uint64(out)}, convert.TensorType(o.Type, kind, layer, s.Layers, in), false})
	}
	vec := func(name string, n int) {
		ts = append(ts, tensorSpec{name, []uint64{uint64(n)}, quant.F32, true})
	}
	mat("token_embd.weight", "token_embd", 0, s.Dim, s.Vocab)
	vec("output_norm.weight", s.Dim)
	mat("output.weight", "output", 0, s.Dim, s.Vocab)
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		vec(p+"attn_norm.weight", s.Dim)
		mat(p+"attn_q.weight", "attn_q", i, s.Dim, s.Heads*hd)
		mat(p+"attn_k.weight", "attn_k", i, s.Dim, s.KVHeads*hd)
		mat(p+"attn_v.weight", "attn_v", i, s.Dim, s.KVHeads*hd)
		mat(p+"attn_output.weight", "attn_output", i, s.Heads*hd, s.Dim)
		if o.Arch == "qwen3" {
			vec(p+"attn_q_norm.weight", hd)
			vec(p+"attn_k_norm.weight", hd)
		}
		vec(p+"ffn_norm.weight", s.Dim)
		mat(p+"ffn_gate.weight", "ffn_gate", i, s.Dim, s.FFN)
		mat(p+"ffn_up.weight", "ffn_up", i, s.Dim, s.FFN)
		mat(p+"ffn_down.weight", "ffn_down", i, s.FFN, s.Dim)
	}
	return ts
}

// Write writes the synthetic model to w.
func Write(w io.Writer, o Options) error {
	if o.Arch != "llama" && o.Arch != "qwen3" {
		return fmt.Errorf("unknown architecture %q (supported: llama, qwen3)", o.Arch)
	}
	ft, ok := FileTypes[o.Type]
	if !ok {
		return fmt.Errorf("unknown type %q (supported: F32, F16, Q8_0, Q4_K_M)", o.Type)
	}
	s := o.Shape
	if err := s.validate(); err != nil {
		return err
	}
	voc, err := LoadVocab(o.Arch)
	if err != nil {
		return fmt.Errorf("embedded vocabulary: %w", err)
	}
	if s.Vocab == 0 {
		s.Vocab = len(voc.Tokens)
		o.Shape.Vocab = s.Vocab
	}
	if s.Vocab < len(voc.Tokens) {
		voc.Truncate(s.Vocab)
	}
	for i := len(voc.Tokens); i < s.Vocab; i++ {
		voc.Tokens = append(voc.Tokens, fmt.Sprintf("[PAD%d]", i))
		voc.Types = append(voc.Types, convert.TokenUnused)
		if voc.Scores != nil {
			voc.Scores = append(voc.Scores, 0)
		}
	}
	a := o.Arch
	gw := gguf.NewWriter()
	gw.AddKV("general.architecture", gguf.StringValue(a))
	gw.AddKV("general.name", gguf.StringValue(fmt.Sprintf("synthetic %s seed %d", a, o.Seed)))
	gw.AddKV("general.file_type", gguf.Uint32Value(ft))
	gw.AddKV(a+".vocab_size", gguf.Uint32Value(uint32(s.Vocab)))
	gw.AddKV(a+".context_length", gguf.Uint32Value(uint32(s.Ctx)))
	gw.AddKV(a+".embedding_length", gguf.Uint32Value(uint32(s.Dim)))
	gw.AddKV(a+".block_count", gguf.Uint32Value(uint32(s.Layers)))
	gw.AddKV(a+".feed_forward_length", gguf.Uint32Value(uint32(s.FFN)))
	gw.AddKV(a+".attention.head_count", gguf.Uint32Value(uint32(s.Heads)))
	gw.AddKV(a+".attention.head_count_kv", gguf.Uint32Value(uint32(s.KVHeads)))
	gw.AddKV(a+".rope.freq_base", gguf.Float32Value(float32(s.RopeBase)))
	gw.AddKV(a+".attention.layer_norm_rms_epsilon", gguf.Float32Value(float32(s.NormEps)))
	gw.AddKV(a+".rope.dimension_count", gguf.Uint32Value(uint32(s.headDim())))
	if a == "qwen3" || s.HeadDim != 0 {
		gw.AddKV(a+".attention.key_length", gguf.Uint32Value(uint32(s.headDim())))
		gw.AddKV(a+".attention.value_length", gguf.Uint32Value(uint32(s.headDim())))
	}
	voc.AddTo(gw)
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	for i, t := range o.tensors() {
		gw.AddTensorFunc(t.name, t.typ, t.dims, func(w io.Writer) error {
			return fill(w, t, tensorSeed(o.Seed, i), workers)
		})
	}
	_, err = gw.WriteTo(w)
	return err
}

func tensorSeed(seed uint64, i int) uint64 {
	h := fnv.New64a()
	binary.Write(h, binary.LittleEndian, [2]uint64{seed, uint64(i)})
	return h.Sum64()
}

// chunkElems is the target number of elements generated per chunk; each
// chunk has its own random stream, so the output does not depend on how
// chunks are spread over workers.
const chunkElems = 1 << 20

// fill generates and writes one tensor's data, quantizing chunks of rows
// in parallel and writing them in order.
func fill(w io.Writer, t tensorSpec, seed uint64, workers int) error {
	rowLen := int(t.dims[0])
	rows := 1
	for _, d := range t.dims[1:] {
		rows *= int(d)
	}
	rowsPer := max(1, chunkElems/rowLen)
	nChunks := (rows + rowsPer - 1) / rowsPer
	rowBytes, err := quant.RowBytes(t.typ, rowLen)
	if err != nil {
		return err
	}
	type result struct {
		data []byte
		err  error
	}
	results := make([]chan result, nChunks)
	for i := range results {
		results[i] = make(chan result, 1)
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range nChunks {
			select {
			case sem <- struct{}{}:
			case <-stop:
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r0 := c * rowsPer
				n := min(rowsPer, rows-r0)
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				x := make([]float32, n*rowLen)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 0.02)
					if t.norm {
						x[i] += 1
					}
				}
				out := make([]byte, n*rowBytes)
				err := quant.QuantizeInto(t.typ, x, out)
				results[c] <- result{out, err}
			}()
		}
	}()
	for c := range nChunks {
		r := <-results[c]
		<-sem
		if r.err != nil {
			return r.err
		}
		if _, err := w.Write(r.data); err != nil {
			return err
		}
	}
	return nil
}
