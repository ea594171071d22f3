package model

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/sparkinfer/cc/engine/gguf"
)

// Architectures lists the supported values of general.architecture.
var Architectures = []string{"llama", "qwen3"}

// Config is the shape of a model, read from GGUF metadata.
type Config struct {
	Arch          string  // "llama" or "qwen3"
	ContextLength int     // {arch}.context_length: the longest sequence the model was trained for
	Dim           int     // {arch}.embedding_length
	Layers        int     // {arch}.block_count
	FFN           int     // {arch}.feed_forward_length
	Heads         int     // {arch}.attention.head_count
	KVHeads       int     // {arch}.attention.head_count_kv (default Heads)
	HeadDim       int     // {arch}.attention.key_length (default Dim/Heads)
	RMSEps        float32 // {arch}.attention.layer_norm_rms_epsilon
	RopeBase      float64 // {arch}.rope.freq_base (default 10000)
	RopeDim       int     // {arch}.rope.dimension_count (default HeadDim): the rotated leading dims of each head
	RopeScale     float64 // linear position scaling factor ({arch}.rope.scaling.factor when type is linear); 1: none
	RopeNeox      bool    // true: rotate pairs (i, i+RopeDim/2) (qwen3); false: adjacent pairs (2i, 2i+1) (llama)
	QKNorm        bool    // per-head RMSNorm of Q and K before RoPE (qwen3)
	Vocab         int     // rows of token_embd.weight
}

// UnsupportedArchError reports a general.architecture this package does not run.
type UnsupportedArchError struct{ Arch string }

func (e *UnsupportedArchError) Error() string {
	return fmt.Sprintf("model: unsupported architecture %q (supported: %s)", e.Arch, strings.Join(Architectures, ", "))
}

// MetadataError reports a missing or invalid metadata value.
type MetadataError struct {
	Key string
	Err error
}

func (e *MetadataError) Error() string { return fmt.Sprintf("model: metadata %q: %v", e.Key, e.Err) }
func (e *MetadataError) Unwrap() error { return e.Err }

// TensorError reports a missing tensor or one with the wrong shape or type.
type TensorError struct {
	Name string
	Msg  string
}

func (e *TensorError) Error() string { return fmt.Sprintf("model: tensor %q: %s", e.Name, e.Msg) }

// maxDim bounds every size read from metadata, so a hostile file cannot ask
// for absurd allocations before any tensor is checked.
const maxDim = 1 << 20

// ConfigFromGGUF reads the model shape from f's metadata.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Config{}, &MetadataError{Key: "general.architecture", Err: err}
	}
	var c Config
	switch arch {
	case "llama":
	case "qwen3":
		c.RopeNeox, c.QKNorm = true, true
	default:
		return Config{}, &UnsupportedArchError{Arch: arch}
	}
	c.Arch = arch
	key := func(k string) string { return arch + "." + k }
	getInt := func(k string, def int, required bool) (int, error) {
		v, err := f.Uint(key(k))
		if err != nil {
			if _, ok := f.Value(key(k)); !ok && !required {
				return def, nil
			}
			return 0, &MetadataError{Key: key(k), Err: err}
		}
		if v == 0 || v > maxDim {
			return 0, &MetadataError{Key: key(k), Err: fmt.Errorf("value %d out of range [1, %d]", v, maxDim)}
		}
		return int(v), nil
	}
	if c.ContextLength, err = getInt("context_length", 0, true); err != nil {
		return Config{}, err
	}
	if c.Dim, err = getInt("embedding_length", 0, true); err != nil {
		return Config{}, err
	}
	if c.Layers, err = getInt("block_count", 0, true); err != nil {
		return Config{}, err
	}
	if c.FFN, err = getInt("feed_forward_length", 0, true); err != nil {
		return Config{}, err
	}
	if c.Heads, err = getInt("attention.head_count", 0, true); err != nil {
		return Config{}, err
	}
	if c.KVHeads, err = getInt("attention.head_count_kv", c.Heads, false); err != nil {
		return Config{}, err
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, &MetadataError{Key: key("attention.head_count_kv"), Err: fmt.Errorf("%d query heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)}
	}
	if c.Dim%c.Heads != 0 {
		if _, ok := f.Value(key("attention.key_length")); !ok {
			return Config{}, &MetadataError{Key: key("attention.head_count"), Err: fmt.Errorf("embedding length %d not divisible by %d heads", c.Dim, c.Heads)}
		}
	}
	if c.HeadDim, err = getInt("attention.key_length", c.Dim/c.Heads, false); err != nil {
		return Config{}, err
	}
	vl, err := getInt("attention.value_length", c.HeadDim, false)
	if err != nil {
		return Config{}, err
	}
	if vl != c.HeadDim {
		return Config{}, &MetadataError{Key: key("attention.value_length"), Err: fmt.Errorf("value length %d differs from key length %d (not supported)", vl, c.HeadDim)}
	}
	eps, err := f.Float(key("attention.layer_norm_rms_epsilon"))
	if err != nil {
		return Config{}, &MetadataError{Key: key("attention.layer_norm_rms_epsilon"), Err: err}
	}
	if !(eps > 0 && eps < 1) {
		return Config{}, &MetadataError{Key: key("attention.layer_norm_rms_epsilon"), Err: fmt.Errorf("value %v out of range (0, 1)", eps)}
	}
	c.RMSEps = float32(eps)
	c.RopeBase = 10000
	if _, ok := f.Value(key("rope.freq_base")); ok {
		if c.RopeBase, err = f.Float(key("rope.freq_base")); err != nil {
			return Config{}, &MetadataError{Key: key("rope.freq_base"), Err: err}
		}
		if !(c.RopeBase > 1) || math.IsInf(c.RopeBase, 0) {
			return Config{}, &MetadataError{Key: key("rope.freq_base"), Err: fmt.Errorf("value %v out of range (1, inf)", c.RopeBase)}
		}
	}
	if c.RopeDim, err = getInt("rope.dimension_count", c.HeadDim, false); err != nil {
		return Config{}, err
	}
	if c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
		return Config{}, &MetadataError{Key: key("rope.dimension_count"), Err: fmt.Errorf("value %d must be even and at most the head dimension %d", c.RopeDim, c.HeadDim)}
	}
	c.RopeScale = 1
	if _, ok := f.Value(key("rope.scaling.type")); ok {
		typ, err := f.String(key("rope.scaling.type"))
		if err != nil {
			return Config{}, &MetadataError{Key: key("rope.scaling.type"), Err: err}
		}
		switch typ {
		case "none", "":
		case "linear":
			fac, err := f.Float(key("rope.scaling.factor"))
			if err != nil {
				return Config{}, &MetadataError{Key: key("rope.scaling.factor"), Err: err}
			}
			if !(fac >= 1) || math.IsInf(fac, 0) {
				return Config{}, &MetadataError{Key: key("rope.scaling.factor"), Err: fmt.Errorf("linear factor %v must be >= 1", fac)}
			}
			c.RopeScale = fac
		default:
			return Config{}, &MetadataError{Key: key("rope.scaling.type"), Err: fmt.Errorf("rope scaling %q is not supported (supported: none, linear)", typ)}
		}
	}
	if c.Heads*c.HeadDim > maxDim || c.KVHeads*c.HeadDim > maxDim {
		return Config{}, &MetadataError{Key: key("attention.key_length"), Err: errors.New("attention width too large")}
	}
	return c, nil
}
