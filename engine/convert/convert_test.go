package convert

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/quant"
)

// byteLevelTokenizer builds a small byte-level BPE tokenizer.json: the 256
// GPT-2 byte symbols, a few merges, and two special tokens.
func byteLevelTokenizer() []byte {
	var syms []rune
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			syms = append(syms, rune(b))
		}
	}
	n := 0
	byteRune := map[int]rune{}
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = rune(256 + n)
			n++
		}
	}
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRune[b])] = b
	}
	merges := []string{"Ġ t", "h e", "Ġt he"}
	vocab["Ġt"], vocab["he"], vocab["Ġthe"] = 256, 257, 258
	tj := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 259, "content": "<|begin_of_text|>", "special": true},
			{"id": 260, "content": "<|end_of_text|>", "special": true},
			{"id": 261, "content": "<think>", "special": false},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": false},
	}
	b, _ := json.Marshal(tj)
	return b
}

type tinyModel struct {
	arch                            string
	dim, layers, ffn, heads, kv, hd int
	vocab                           int
	tied                            bool
	ropeScaling                     string
	tensors                         map[string][]float32
}

// writeCheckpoint writes config.json, tokenizer files and model.safetensors
// (split in two shards) for a random model.
func writeCheckpoint(t testing.TB, m *tinyModel, seed uint64) string {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 1))
	m.tensors = map[string][]float32{}
	var sts []STTensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.05)
			if len(shape) == 1 {
				x[i] += 1
			}
		}
		// Store the norms as BF16 and one matrix as F16 to cover the dtypes;
		// keep the exact values they represent as the reference.
		dt := "F32"
		data := make([]byte, 4*n)
		switch {
		case len(shape) == 1:
			dt, data = "BF16", make([]byte, 2*n)
			for i, v := range x {
				h := quant.F32ToBF16(v)
				binary.LittleEndian.PutUint16(data[2*i:], h)
				x[i] = quant.BF16ToF32(h)
			}
		case strings.HasSuffix(name, "up_proj.weight"):
			dt, data = "F16", make([]byte, 2*n)
			for i, v := range x {
				h := quant.F32ToF16(v)
				binary.LittleEndian.PutUint16(data[2*i:], h)
				x[i] = quant.F16ToF32(h)
			}
		default:
			for i, v := range x {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
		}
		m.tensors[name] = x
		sts = append(sts, STTensor{Name: name, DType: dt, Shape: shape, Data: data})
	}
	add("model.embed_tokens.weight", m.vocab, m.dim)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", m.dim)
		add(p+"self_attn.q_proj.weight", m.heads*m.hd, m.dim)
		add(p+"self_attn.k_proj.weight", m.kv*m.hd, m.dim)
		add(p+"self_attn.v_proj.weight", m.kv*m.hd, m.dim)
		add(p+"self_attn.o_proj.weight", m.dim, m.heads*m.hd)
		if m.arch == "Qwen3ForCausalLM" {
			add(p+"self_attn.q_norm.weight", m.hd)
			add(p+"self_attn.k_norm.weight", m.hd)
		}
		add(p+"post_attention_layernorm.weight", m.dim)
		add(p+"mlp.gate_proj.weight", m.ffn, m.dim)
		add(p+"mlp.up_proj.weight", m.ffn, m.dim)
		add(p+"mlp.down_proj.weight", m.dim, m.ffn)
	}
	add("model.norm.weight", m.dim)
	if !m.tied {
		add("lm_head.weight", m.vocab, m.dim)
	}
	half := len(sts) / 2
	for i, part := range [][]STTensor{sts[:half], sts[half:]} {
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, part, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)), buf.Bytes(), 0o644)
	}
	rs := "null"
	if m.ropeScaling != "" {
		rs = m.ropeScaling
	}
	cfg := fmt.Sprintf(`{"architectures": [%q], "hidden_size": %d, "intermediate_size": %d, "num_hidden_layers": %d,
		"num_attention_heads": %d, "num_key_value_heads": %d, "head_dim": %d, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
		"rope_scaling": %s, "max_position_embeddings": 512, "tie_word_embeddings": %v, "vocab_size": %d,
		"bos_token_id": 259, "eos_token_id": [260, 261], "hidden_act": "silu", "torch_dtype": "float32"}`,
		m.arch, m.dim, m.ffn, m.layers, m.heads, m.kv, m.hd, rs, m.tied, m.vocab)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), byteLevelTokenizer(), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}, "chat_template": "{{ messages }}"}`), 0o644)
	return dir
}

func convertDir(t *testing.T, dir, typ string) *gguf.File {
	t.Helper()
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var buf bytes.Buffer
	if err := ck.Write(&buf, Options{Type: typ}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func tensorF32(t *testing.T, f *gguf.File, name string) []float32 {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("missing %s", name)
	}
	x := make([]float32, ti.Elements())
	if err := quant.Dequantize(ti.Type, f.TensorData(ti), x); err != nil {
		t.Fatal(err)
	}
	return x
}

// ropeNeox rotates pairs (i, i+half) of each head; ropeNorm rotates (2i, 2i+1).
func rope(v []float32, heads, hd, pos int, neox bool) []float32 {
	out := append([]float32(nil), v...)
	for h := range heads {
		for i := range hd / 2 {
			theta := float64(pos) * math.Pow(10000, -2*float64(i)/float64(hd))
			a, b := h*hd+2*i, h*hd+2*i+1
			if neox {
				a, b = h*hd+i, h*hd+i+hd/2
			}
			c, s := math.Cos(theta), math.Sin(theta)
			out[a] = float32(float64(v[a])*c - float64(v[b])*s)
			out[b] = float32(float64(v[a])*s + float64(v[b])*c)
		}
	}
	return out
}

func matVec(w []float32, x []float32) []float32 {
	out := make([]float32, len(w)/len(x))
	for r := range out {
		var s float64
		for c := range x {
			s += float64(w[r*len(x)+c]) * float64(x[c])
		}
		out[r] = float32(s)
	}
	return out
}

func TestConvertLlamaF32Exact(t *testing.T) {
	m := &tinyModel{arch: "LlamaForCausalLM", dim: 64, layers: 2, ffn: 96, heads: 4, kv: 2, hd: 16, vocab: 300}
	f := convertDir(t, writeCheckpoint(t, m, 1), "F32")
	if a, _ := f.Architecture(); a != "llama" {
		t.Fatalf("arch %q", a)
	}
	for key, want := range map[string]uint64{"llama.embedding_length": 64, "llama.block_count": 2, "llama.feed_forward_length": 96,
		"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.context_length": 512, "llama.rope.dimension_count": 16,
		"tokenizer.ggml.bos_token_id": 259, "tokenizer.ggml.eos_token_id": 260, "general.file_type": 0} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, err, want)
		}
	}
	if b, _ := f.Float("llama.rope.freq_base"); b != 500000 {
		t.Errorf("freq_base %g", b)
	}
	if s, _ := f.String("tokenizer.ggml.pre"); s != "llama-bpe" {
		t.Errorf("pre %q", s)
	}
	if s, _ := f.String("tokenizer.ggml.model"); s != "gpt2" {
		t.Errorf("model %q", s)
	}
	if b, err := f.Bool("tokenizer.ggml.add_bos_token"); err != nil || !b {
		t.Errorf("add_bos_token %v %v", b, err)
	}
	if s, _ := f.String("tokenizer.chat_template"); s != "{{ messages }}" {
		t.Errorf("chat_template %q", s)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	merges, _ := f.Strings("tokenizer.ggml.merges")
	if len(toks) != 300 || toks[65] != "A" || toks[258] != "Ġthe" || toks[299] != "[PAD299]" ||
		types[259] != TokenControl || types[261] != TokenUserDefined || types[299] != TokenUnused || types[65] != TokenNormal || len(merges) != 3 {
		t.Errorf("vocab: %d tokens %q %q types %v merges %v", len(toks), toks[258], toks[299], types[259:262], merges)
	}
	if _, ok := f.Tensor("output.weight"); !ok {
		t.Error("untied model has no output.weight")
	}
	// Every tensor is F32 and bit-exact, Q and K permuted.
	for i := range f.Tensors {
		if f.Tensors[i].Type != quant.F32 {
			t.Errorf("%s is %s", f.Tensors[i].Name, f.Tensors[i].Type)
		}
	}
	same := func(gg, hf string) {
		t.Helper()
		a, b := tensorF32(t, f, gg), m.tensors[hf]
		if len(a) != len(b) {
			t.Fatalf("%s: %d elements, want %d", gg, len(a), len(b))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s[%d] = %g, want %g", gg, i, a[i], b[i])
			}
		}
	}
	same("token_embd.weight", "model.embed_tokens.weight")
	same("output.weight", "lm_head.weight")
	same("output_norm.weight", "model.norm.weight")
	same("blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight")
	same("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight")
	same("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight")
	same("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight")
	// The permutation makes adjacent-pair RoPE on the GGUF weights equal to
	// Hugging Face's rotate-half RoPE, up to the same reordering of outputs.
	x := make([]float32, m.dim)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	for _, c := range []struct {
		gg, hf string
		heads  int
	}{{"blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 4}, {"blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 2}} {
		hf := rope(matVec(m.tensors[c.hf], x), c.heads, m.hd, 7, true)
		gg := rope(matVec(tensorF32(t, f, c.gg), x), c.heads, m.hd, 7, false)
		// Attention scores are dot products of q and k: they agree when the
		// per-head vectors are permutations of each other.
		hfP := PermuteQK(hf, c.heads, m.hd, 1)
		for i := range gg {
			if math.Abs(float64(gg[i]-hfP[i])) > 1e-5 {
				t.Fatalf("%s: roped[%d] = %g, hf %g", c.gg, i, gg[i], hfP[i])
			}
		}
	}
}

func TestConvertQwen3(t *testing.T) {
	m := &tinyModel{arch: "Qwen3ForCausalLM", dim: 256, layers: 8, ffn: 512, heads: 4, kv: 2, hd: 32, vocab: 300, tied: true}
	dir := writeCheckpoint(t, m, 2)
	f := convertDir(t, dir, "F32")
	if s, _ := f.String("tokenizer.ggml.pre"); s != "qwen2" {
		t.Errorf("pre %q", s)
	}
	if _, err := f.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		t.Error("qwen3 without add_bos_token in tokenizer_config got one")
	}
	if _, ok := f.Tensor("output.weight"); ok {
		t.Error("tied model has output.weight")
	}
	if kl, _ := f.Uint("qwen3.attention.key_length"); kl != 32 {
		t.Errorf("key_length %d", kl)
	}
	for _, n := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.q_norm", "self_attn.k_norm"} {
		gg := "blk.3." + map[string]string{"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}[n] + ".weight"
		a, b := tensorF32(t, f, gg), m.tensors["model.layers.3."+n+".weight"]
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s differs at %d (qwen3 must not be permuted)", gg, i)
			}
		}
	}
	// Quantized outputs: the Q4_K_M mix and errors within the quant bounds.
	q := convertDir(t, dir, "Q4_K_M")
	for name, want := range map[string]quant.Type{"token_embd.weight": quant.Q4_K, "blk.0.attn_v.weight": quant.Q6_K, "blk.1.attn_v.weight": quant.Q4_K,
		"blk.7.ffn_down.weight": quant.Q6_K, "blk.2.ffn_down.weight": quant.Q4_K, "blk.0.attn_q_norm.weight": quant.F32} {
		if ti, ok := q.Tensor(name); ok && ti.Type != want {
			t.Errorf("%s: %s, want %s", name, ti.Type, want)
		}
	}
	q8 := convertDir(t, dir, "Q8_0")
	for _, name := range []string{"blk.5.ffn_gate.weight", "token_embd.weight"} {
		a := tensorF32(t, q8, name)
		ti, _ := q8.Tensor(name)
		if ti.Type != quant.Q8_0 {
			t.Errorf("%s: %s", name, ti.Type)
		}
		ref := tensorF32(t, f, name)
		for i := range a {
			if math.Abs(float64(a[i]-ref[i])) > 0.005 {
				t.Fatalf("%s[%d] = %g, want about %g", name, i, a[i], ref[i])
			}
		}
	}
}

func TestConvertErrors(t *testing.T) {
	base := func() *tinyModel {
		return &tinyModel{arch: "LlamaForCausalLM", dim: 32, layers: 1, ffn: 64, heads: 2, kv: 2, hd: 16, vocab: 300}
	}
	write := func(dir string) error {
		ck, err := Load(dir)
		if err != nil {
			return err
		}
		defer ck.Close()
		return ck.Write(new(bytes.Buffer), Options{})
	}
	m := base()
	m.ropeScaling = `{"rope_type": "yarn", "factor": 4}`
	if err := write(writeCheckpoint(t, m, 3)); err == nil || !strings.Contains(err.Error(), `rope_scaling type "yarn" is not supported (supported: none, linear)`) {
		t.Errorf("yarn: %v", err)
	}
	m = base()
	m.ropeScaling = `{"type": "linear", "factor": 2}`
	if err := write(writeCheckpoint(t, m, 3)); err != nil {
		t.Errorf("linear: %v", err)
	}
	m = base()
	m.arch = "MistralForCausalLM"
	var ce *ConfigError
	if err := write(writeCheckpoint(t, m, 3)); !errors.As(err, &ce) || !strings.Contains(err.Error(), `"MistralForCausalLM" is not supported`) {
		t.Errorf("mistral: %v", err)
	}
	// A missing tensor is named.
	m = base()
	dir := writeCheckpoint(t, m, 3)
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	delete(ck.Tensors, "model.layers.0.mlp.up_proj.weight")
	var me *MissingTensorError
	if err := ck.Write(new(bytes.Buffer), Options{}); !errors.As(err, &me) || me.Name != "model.layers.0.mlp.up_proj.weight" {
		t.Errorf("missing tensor: %v", err)
	}
	ck.Tensors["model.layers.0.mlp.up_proj.weight"] = ck.Tensors["model.layers.0.mlp.gate_proj.weight"]
	ck.Tensors["model.layers.0.self_attn.q_proj.bias"] = ck.Tensors["model.norm.weight"]
	if err := ck.Write(new(bytes.Buffer), Options{}); err == nil || !strings.Contains(err.Error(), `unexpected tensor "model.layers.0.self_attn.q_proj.bias"`) {
		t.Errorf("unexpected tensor: %v", err)
	}
	if err := ck.Write(new(bytes.Buffer), Options{Type: "Q5_K"}); err == nil {
		t.Error("unknown type accepted")
	}
	ck.Close()
	// SentencePiece-style tokenizer.json is refused clearly.
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}}`), 0o644)
	var te *TokenizerError
	if err := write(dir); !errors.As(err, &te) {
		t.Errorf("spm tokenizer: %v", err)
	}
}
