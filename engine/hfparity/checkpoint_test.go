package hfparity

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/sparkinfer/cc/engine/convert"
)

// spec is one generated checkpoint.
type spec struct {
	name                         string // "llama" or "qwen3"
	hidden, inter, layers, vocab int
	heads, kvHeads, headDim      int
	ropeTheta                    float64
	tied                         bool
	seed                         uint64
}

var specs = []spec{
	{name: "llama", hidden: 256, inter: 688, layers: 4, vocab: 1024, heads: 8, kvHeads: 4, headDim: 32, ropeTheta: 10000, seed: 1},
	{name: "qwen3", hidden: 256, inter: 512, layers: 4, vocab: 1024, heads: 8, kvHeads: 4, headDim: 64, ropeTheta: 1e6, tied: true, seed: 2},
}

const (
	promptLen = 64
	greedyLen = 32
	rmsEps    = 1e-6
)

// prompt is the fixed prompt: promptLen ids from a seeded generator.
func prompt(vocab int) []int {
	r := rand.New(rand.NewPCG(64, 64))
	p := make([]int, promptLen)
	for i := range p {
		p[i] = r.IntN(vocab)
	}
	return p
}

func f32tensor(name string, shape []int, v []float32) convert.STTensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return convert.STTensor{Name: name, DType: "F32", Shape: shape, Data: b}
}

// writeCheckpoint writes s as a Hugging Face model directory.
func writeCheckpoint(dir string, s spec) error {
	r := rand.New(rand.NewPCG(s.seed, 0xcafe))
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		return v
	}
	norm := func(n int) []float32 {
		v := normal(n, 0.1)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	var ts []convert.STTensor
	add := func(name string, shape []int, v []float32) { ts = append(ts, f32tensor(name, shape, v)) }
	H, I, V := s.hidden, s.inter, s.vocab
	q, kv := s.heads*s.headDim, s.kvHeads*s.headDim
	add("model.embed_tokens.weight", []int{V, H}, normal(V*H, 0.5))
	for l := 0; l < s.layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", []int{H}, norm(H))
		add(p+"self_attn.q_proj.weight", []int{q, H}, normal(q*H, 0.08))
		add(p+"self_attn.k_proj.weight", []int{kv, H}, normal(kv*H, 0.08))
		add(p+"self_attn.v_proj.weight", []int{kv, H}, normal(kv*H, 0.08))
		add(p+"self_attn.o_proj.weight", []int{H, q}, normal(H*q, 0.05))
		if s.name == "qwen3" {
			add(p+"self_attn.q_norm.weight", []int{s.headDim}, norm(s.headDim))
			add(p+"self_attn.k_norm.weight", []int{s.headDim}, norm(s.headDim))
		}
		add(p+"post_attention_layernorm.weight", []int{H}, norm(H))
		add(p+"mlp.gate_proj.weight", []int{I, H}, normal(I*H, 0.08))
		add(p+"mlp.up_proj.weight", []int{I, H}, normal(I*H, 0.08))
		add(p+"mlp.down_proj.weight", []int{H, I}, normal(H*I, 0.05))
	}
	add("model.norm.weight", []int{H}, norm(H))
	if !s.tied {
		add("lm_head.weight", []int{V, H}, normal(V*H, 0.1))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	if err := convert.WriteSafetensors(f, ts, map[string]string{"format": "pt"}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	cfg := map[string]any{
		"hidden_size": H, "intermediate_size": I, "num_hidden_layers": s.layers,
		"num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads, "head_dim": s.headDim,
		"rms_norm_eps": rmsEps, "rope_theta": s.ropeTheta, "max_position_embeddings": 512,
		"vocab_size": V, "tie_word_embeddings": s.tied, "hidden_act": "silu",
		"bos_token_id": 1000, "eos_token_id": 1001, "torch_dtype": "float32",
		"attention_bias": false, "attention_dropout": 0.0, "initializer_range": 0.02,
	}
	if s.name == "llama" {
		cfg["architectures"] = []string{"LlamaForCausalLM"}
		cfg["model_type"] = "llama"
		cfg["mlp_bias"] = false
		cfg["pretraining_tp"] = 1
	} else {
		cfg["architectures"] = []string{"Qwen3ForCausalLM"}
		cfg["model_type"] = "qwen3"
		cfg["use_sliding_window"] = false
		cfg["max_window_layers"] = s.layers
	}
	cb, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cb, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokenizerJSON(), 0o644)
}

// tokenizerJSON is a byte-level BPE tokenizer: the 256 GPT-2 byte symbols,
// a few merges and the two special tokens the config names (ids 1000,
// 1001); the converter fills the rest of the 1024 ids with unused tokens.
// The parity check feeds token ids directly, so the tokenizer only has to
// be valid.
func tokenizerJSON() []byte {
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	vocab["Ġt"], vocab["he"], vocab["Ġthe"] = 256, 257, 258
	tj := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 1000, "content": "<|begin_of_text|>", "special": true},
			{"id": 1001, "content": "<|end_of_text|>", "special": true},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"Ġ t", "h e", "Ġt he"}, "byte_fallback": false},
	}
	b, _ := json.Marshal(tj)
	return b
}
