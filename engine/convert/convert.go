package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/quant"
)

// FileTypes maps the supported output types to llama.cpp's general.file_type.
var FileTypes = map[string]uint32{"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15}

// TensorType picks the GGUF type of a 2-D weight for a file type, following
// llama.cpp's llama-quantize rules for Q4_K_M: Q6_K for output.weight and
// for attn_v and ffn_down on layers where use_more_bits holds (the first and
// last eighth of the layers and every third layer in between), Q4_K for the
// other matrices including token_embd. Rows that are not whole blocks of the
// chosen type fall back to Q8_0, then F16.
func TensorType(fileType, kind string, layer, layers, rowLen int) quant.Type {
	var t quant.Type
	switch fileType {
	case "F32":
		return quant.F32
	case "F16":
		return quant.F16
	case "Q8_0":
		t = quant.Q8_0
	case "Q4_K_M":
		t = quant.Q4_K
		moreBits := layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
		if kind == "output" || ((kind == "attn_v" || kind == "ffn_down") && moreBits) {
			t = quant.Q6_K
		}
	default:
		return quant.F32
	}
	if rowLen%t.BlockSize() != 0 {
		t = quant.Q8_0
	}
	if rowLen%t.BlockSize() != 0 {
		t = quant.F16
	}
	return t
}

// Config is the part of a Hugging Face config.json the converter reads.
type Config struct {
	Architectures         []string        `json:"architectures"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	VocabSize             int             `json:"vocab_size"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
}

// ConfigError reports a config.json the converter cannot use.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return "convert: config.json: " + e.Msg }

func cfgErr(format string, args ...any) error { return &ConfigError{fmt.Sprintf(format, args...)} }

// Architectures maps the supported Hugging Face architectures to GGUF's.
var Architectures = map[string]string{"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}

// ParseConfig reads and validates config.json; it returns the GGUF architecture.
func ParseConfig(data []byte) (*Config, string, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, "", cfgErr("%v", err)
	}
	if len(c.Architectures) != 1 {
		return nil, "", cfgErr("architectures %q: want exactly one of LlamaForCausalLM, Qwen3ForCausalLM", c.Architectures)
	}
	arch, ok := Architectures[c.Architectures[0]]
	if !ok {
		return nil, "", cfgErr("architecture %q is not supported (supported: LlamaForCausalLM, Qwen3ForCausalLM)", c.Architectures[0])
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	for name, v := range map[string]int{"hidden_size": c.HiddenSize, "intermediate_size": c.IntermediateSize, "num_hidden_layers": c.NumHiddenLayers, "num_attention_heads": c.NumAttentionHeads, "vocab_size": c.VocabSize, "max_position_embeddings": c.MaxPositionEmbeddings} {
		if v <= 0 || v > 1<<24 {
			return nil, "", cfgErr("%s = %d is missing or out of range", name, v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, "", cfgErr("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return nil, "", cfgErr("hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim%2 != 0 {
		return nil, "", cfgErr("head_dim %d is odd", c.HeadDim)
	}
	if c.RMSNormEps <= 0 {
		return nil, "", cfgErr("rms_norm_eps %g is missing or not positive", c.RMSNormEps)
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000 // transformers' default for both architectures
	}
	if c.AttentionBias || c.MLPBias {
		return nil, "", cfgErr("attention_bias / mlp_bias are not supported")
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return nil, "", cfgErr("hidden_act %q is not supported (supported: silu)", c.HiddenAct)
	}
	return &c, arch, nil
}

// ropeScaling returns the rope scaling to write, or an error for kinds the
// engine does not implement.
func (c *Config) ropeScaling() (kind string, factor float64, err error) {
	if len(c.RopeScaling) == 0 || string(c.RopeScaling) == "null" {
		return "", 0, nil
	}
	var rs struct {
		Type     string  `json:"type"`
		RopeType string  `json:"rope_type"`
		Factor   float64 `json:"factor"`
	}
	if err := json.Unmarshal(c.RopeScaling, &rs); err != nil {
		return "", 0, cfgErr("rope_scaling: %v", err)
	}
	kind = rs.RopeType
	if kind == "" {
		kind = rs.Type
	}
	switch kind {
	case "default":
		return "", 0, nil
	case "linear":
		if !(rs.Factor > 0) {
			return "", 0, cfgErr("rope_scaling factor %g is not positive", rs.Factor)
		}
		return "linear", rs.Factor, nil
	}
	return "", 0, cfgErr("rope_scaling type %q is not supported (supported: none, linear)", kind)
}

// tokenID reads bos_token_id / eos_token_id: an integer, a list (the first
// is used) or absent (-1).
func tokenID(raw json.RawMessage) int {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	var l []int
	if json.Unmarshal(raw, &l) == nil && len(l) > 0 {
		return l[0]
	}
	return -1
}

// Options control a conversion.
type Options struct {
	Type string // "F32" (default), "F16", "Q8_0" or "Q4_K_M"
	Name string // general.name; default: the directory's base name
}

// Checkpoint is a loaded Hugging Face model directory.
type Checkpoint struct {
	Config          *Config
	Arch            string
	Tensors         map[string]*STTensor
	TokenizerJSON   []byte
	TokenizerConfig []byte // nil when absent
	name            string
	maps            [][]byte
}

// Close unmaps the safetensors files.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, m := range c.maps {
		errs = append(errs, unix.Munmap(m))
	}
	c.maps = nil
	return errors.Join(errs...)
}

// Load reads a checkpoint directory: config.json, tokenizer.json, an
// optional tokenizer_config.json and every *.safetensors file (shards are
// merged; a name in two shards is an error).
func Load(dir string) (*Checkpoint, error) {
	cfgData, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	cfg, arch, err := ParseConfig(cfgData)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Config: cfg, Arch: arch, Tensors: map[string]*STTensor{}, name: filepath.Base(filepath.Clean(dir))}
	if ck.TokenizerJSON, err = os.ReadFile(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		ck.TokenizerConfig = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("convert: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(files) == 0 {
		return nil, fmt.Errorf("convert: no *.safetensors files in %q", dir)
	}
	sort.Strings(files)
	for _, path := range files {
		data, err := mmapFile(path)
		if err != nil {
			ck.Close()
			return nil, err
		}
		ck.maps = append(ck.maps, data)
		ts, _, err := ParseSafetensors(data)
		if err != nil {
			ck.Close()
			return nil, fmt.Errorf("convert: %s: %w", filepath.Base(path), err)
		}
		for i := range ts {
			if _, dup := ck.Tensors[ts[i].Name]; dup {
				ck.Close()
				return nil, fmt.Errorf("convert: tensor %q is in more than one safetensors file", ts[i].Name)
			}
			ck.Tensors[ts[i].Name] = &ts[i]
		}
	}
	return ck, nil
}

func mmapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < 8 || st.Size() > math.MaxInt {
		return nil, &SafetensorsError{Msg: fmt.Sprintf("%s: %d bytes", filepath.Base(path), st.Size())}
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("convert: mmap %q: %w", path, err)
	}
	return data, nil
}

var layerRe = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

var layerNames = map[string]string{
	"input_layernorm.weight":          "attn_norm",
	"self_attn.q_proj.weight":         "attn_q",
	"self_attn.k_proj.weight":         "attn_k",
	"self_attn.v_proj.weight":         "attn_v",
	"self_attn.o_proj.weight":         "attn_output",
	"self_attn.q_norm.weight":         "attn_q_norm",
	"self_attn.k_norm.weight":         "attn_k_norm",
	"post_attention_layernorm.weight": "ffn_norm",
	"mlp.gate_proj.weight":            "ffn_gate",
	"mlp.up_proj.weight":              "ffn_up",
	"mlp.down_proj.weight":            "ffn_down",
}

// MissingTensorError names a tensor the checkpoint lacks.
type MissingTensorError struct{ Name string }

func (e *MissingTensorError) Error() string { return fmt.Sprintf("convert: missing tensor %q", e.Name) }

type plan struct {
	hf, name, kind string
	layer          int
	want           []int // HF shape
}

// plan lists the tensors to convert in llama.cpp's order and checks that
// the checkpoint has exactly these (plus ignorable ones).
func (ck *Checkpoint) plan() ([]plan, error) {
	c := ck.Config
	hd := c.HeadDim
	var ps []plan
	add := func(hf, name, kind string, layer int, shape ...int) {
		ps = append(ps, plan{hf, name, kind, layer, shape})
	}
	add("model.embed_tokens.weight", "token_embd.weight", "token_embd", 0, c.VocabSize, c.HiddenSize)
	for i := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		b := fmt.Sprintf("blk.%d.", i)
		add(p+"input_layernorm.weight", b+"attn_norm.weight", "attn_norm", i, c.HiddenSize)
		add(p+"self_attn.q_proj.weight", b+"attn_q.weight", "attn_q", i, c.NumAttentionHeads*hd, c.HiddenSize)
		add(p+"self_attn.k_proj.weight", b+"attn_k.weight", "attn_k", i, c.NumKeyValueHeads*hd, c.HiddenSize)
		add(p+"self_attn.v_proj.weight", b+"attn_v.weight", "attn_v", i, c.NumKeyValueHeads*hd, c.HiddenSize)
		add(p+"self_attn.o_proj.weight", b+"attn_output.weight", "attn_output", i, c.HiddenSize, c.NumAttentionHeads*hd)
		if ck.Arch == "qwen3" {
			add(p+"self_attn.q_norm.weight", b+"attn_q_norm.weight", "attn_q_norm", i, hd)
			add(p+"self_attn.k_norm.weight", b+"attn_k_norm.weight", "attn_k_norm", i, hd)
		}
		add(p+"post_attention_layernorm.weight", b+"ffn_norm.weight", "ffn_norm", i, c.HiddenSize)
		add(p+"mlp.gate_proj.weight", b+"ffn_gate.weight", "ffn_gate", i, c.IntermediateSize, c.HiddenSize)
		add(p+"mlp.up_proj.weight", b+"ffn_up.weight", "ffn_up", i, c.IntermediateSize, c.HiddenSize)
		add(p+"mlp.down_proj.weight", b+"ffn_down.weight", "ffn_down", i, c.HiddenSize, c.IntermediateSize)
	}
	add("model.norm.weight", "output_norm.weight", "output_norm", 0, c.HiddenSize)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", "output.weight", "output", 0, c.VocabSize, c.HiddenSize)
	}
	used := map[string]bool{}
	for _, p := range ps {
		t, ok := ck.Tensors[p.hf]
		if !ok {
			return nil, &MissingTensorError{p.hf}
		}
		if !equalShape(t.Shape, p.want) {
			return nil, fmt.Errorf("convert: tensor %q has shape %v, config.json implies %v", p.hf, t.Shape, p.want)
		}
		used[p.hf] = true
	}
	for name := range ck.Tensors {
		if used[name] {
			continue
		}
		if name == "lm_head.weight" && c.TieWordEmbeddings {
			continue // tied: the output is token_embd
		}
		if m := layerRe.FindStringSubmatch(name); m != nil && m[2] == "self_attn.rotary_emb.inv_freq" {
			continue // recomputed from rope_theta, as llama.cpp does
		}
		return nil, fmt.Errorf("convert: unexpected tensor %q (not part of a %s model with this config.json)", name, c.Architectures[0])
	}
	return ps, nil
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// PermuteQK reorders the rows of a Llama Q or K projection (heads*headDim
// rows of cols values) from Hugging Face's rotate-half RoPE layout to GGUF's
// adjacent-pair layout, as llama.cpp's converter does: within each head, row
// 2i+j of the result is row j*headDim/2+i of the input.
func PermuteQK(w []float32, heads, headDim, cols int) []float32 {
	out := make([]float32, len(w))
	half := headDim / 2
	for h := range heads {
		for i := range half {
			for j := range 2 {
				dst := (h*headDim + 2*i + j) * cols
				src := (h*headDim + j*half + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// Write converts the checkpoint to GGUF.
func (ck *Checkpoint) Write(w io.Writer, o Options) error {
	if o.Type == "" {
		o.Type = "F32"
	}
	ft, ok := FileTypes[o.Type]
	if !ok {
		return fmt.Errorf("convert: unknown type %q (supported: F32, F16, Q8_0, Q4_K_M)", o.Type)
	}
	c := ck.Config
	scaling, factor, err := c.ropeScaling()
	if err != nil {
		return err
	}
	ps, err := ck.plan()
	if err != nil {
		return err
	}
	pre := map[string]string{"llama": "llama-bpe", "qwen3": "qwen2"}[ck.Arch]
	voc, err := VocabFromHF(ck.TokenizerJSON, ck.TokenizerConfig, c.VocabSize, pre, SpecialIDs{BOS: tokenID(c.BOSTokenID), EOS: tokenID(c.EOSTokenID)})
	if err != nil {
		return err
	}
	if voc.AddBOS == nil && ck.Arch == "llama" {
		t := true // llama.cpp's default for llama-bpe vocabularies
		voc.AddBOS = &t
	}
	name := o.Name
	if name == "" {
		name = ck.name
	}
	a := ck.Arch
	gw := gguf.NewWriter()
	gw.AddKV("general.architecture", gguf.StringValue(a))
	gw.AddKV("general.name", gguf.StringValue(name))
	gw.AddKV("general.file_type", gguf.Uint32Value(ft))
	gw.AddKV(a+".vocab_size", gguf.Uint32Value(uint32(c.VocabSize)))
	gw.AddKV(a+".context_length", gguf.Uint32Value(uint32(c.MaxPositionEmbeddings)))
	gw.AddKV(a+".embedding_length", gguf.Uint32Value(uint32(c.HiddenSize)))
	gw.AddKV(a+".block_count", gguf.Uint32Value(uint32(c.NumHiddenLayers)))
	gw.AddKV(a+".feed_forward_length", gguf.Uint32Value(uint32(c.IntermediateSize)))
	gw.AddKV(a+".attention.head_count", gguf.Uint32Value(uint32(c.NumAttentionHeads)))
	gw.AddKV(a+".attention.head_count_kv", gguf.Uint32Value(uint32(c.NumKeyValueHeads)))
	gw.AddKV(a+".rope.freq_base", gguf.Float32Value(float32(c.RopeTheta)))
	gw.AddKV(a+".attention.layer_norm_rms_epsilon", gguf.Float32Value(float32(c.RMSNormEps)))
	gw.AddKV(a+".rope.dimension_count", gguf.Uint32Value(uint32(c.HeadDim)))
	gw.AddKV(a+".attention.key_length", gguf.Uint32Value(uint32(c.HeadDim)))
	gw.AddKV(a+".attention.value_length", gguf.Uint32Value(uint32(c.HeadDim)))
	if scaling != "" {
		gw.AddKV(a+".rope.scaling.type", gguf.StringValue(scaling))
		gw.AddKV(a+".rope.scaling.factor", gguf.Float32Value(float32(factor)))
	}
	voc.AddTo(gw)
	for _, p := range ps {
		t := ck.Tensors[p.hf]
		var typ quant.Type
		var dims []uint64
		if len(p.want) == 1 {
			typ, dims = quant.F32, []uint64{uint64(p.want[0])}
		} else {
			typ = TensorType(o.Type, p.kind, p.layer, c.NumHiddenLayers, p.want[1])
			dims = []uint64{uint64(p.want[1]), uint64(p.want[0])}
		}
		gw.AddTensorFunc(p.name, typ, dims, func(w io.Writer) error {
			x := t.Float32s()
			if ck.Arch == "llama" {
				switch p.kind {
				case "attn_q":
					x = PermuteQK(x, c.NumAttentionHeads, c.HeadDim, c.HiddenSize)
				case "attn_k":
					x = PermuteQK(x, c.NumKeyValueHeads, c.HeadDim, c.HiddenSize)
				}
			}
			data, err := quant.Quantize(typ, x)
			if err != nil {
				return err
			}
			_, err = w.Write(data)
			return err
		})
	}
	_, err = gw.WriteTo(w)
	return err
}
