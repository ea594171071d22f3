package synth

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/quant"
)

func write(t *testing.T, o Options) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tiny(t *testing.T, arch string) Shape {
	s, err := ParseShape(arch, "dim=256,layers=8,ffn=512,heads=4,kv_heads=2,vocab=1000,ctx=256")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDeterministic(t *testing.T) {
	o := Options{Arch: "llama", Shape: tiny(t, "llama"), Type: "Q4_K_M", Seed: 7, Workers: 1}
	a := write(t, o)
	o.Workers = 3
	if !bytes.Equal(a, write(t, o)) {
		t.Error("output depends on the number of workers")
	}
	o.Seed = 8
	if bytes.Equal(a, write(t, o)) {
		t.Error("different seeds gave the same file")
	}
}

func TestSyntheticModel(t *testing.T) {
	for _, arch := range Architectures {
		for _, typ := range []string{"F32", "F16", "Q8_0", "Q4_K_M"} {
			t.Run(arch+"/"+typ, func(t *testing.T) {
				f, err := gguf.Parse(write(t, Options{Arch: arch, Shape: tiny(t, arch), Type: typ, Seed: 1}))
				if err != nil {
					t.Fatal(err)
				}
				if a, _ := f.Architecture(); a != arch {
					t.Errorf("architecture %q", a)
				}
				for key, want := range map[string]uint64{
					".embedding_length": 256, ".block_count": 8, ".feed_forward_length": 512,
					".attention.head_count": 4, ".attention.head_count_kv": 2, ".context_length": 256,
					".rope.dimension_count": 64, ".vocab_size": 1000,
				} {
					if got, err := f.Uint(arch + key); err != nil || got != want {
						t.Errorf("%s%s = %d, %v; want %d", arch, key, got, err, want)
					}
				}
				if ft, _ := f.Uint("general.file_type"); ft != uint64(FileTypes[typ]) {
					t.Errorf("file_type %d", ft)
				}
				toks, _ := f.Strings("tokenizer.ggml.tokens")
				if len(toks) != 1000 {
					t.Errorf("%d tokens", len(toks))
				}
				perLayer := 9
				if arch == "qwen3" {
					perLayer = 11
					if kl, _ := f.Uint("qwen3.attention.key_length"); kl != 64 {
						t.Errorf("key_length %d", kl)
					}
					if b, _ := f.Float("qwen3.rope.freq_base"); b != 1e6 {
						t.Errorf("rope base %g", b)
					}
				}
				if len(f.Tensors) != 3+8*perLayer {
					t.Errorf("%d tensors", len(f.Tensors))
				}
				for i := range f.Tensors {
					ti := &f.Tensors[i]
					x := make([]float32, ti.Elements())
					if err := quant.Dequantize(ti.Type, f.TensorData(ti), x); err != nil {
						t.Fatal(err)
					}
					var s, ss float64
					for _, v := range x {
						s += float64(v)
						ss += float64(v) * float64(v)
					}
					mean := s / float64(len(x))
					std := math.Sqrt(ss/float64(len(x)) - mean*mean)
					isNorm := len(ti.Dims) == 1
					if isNorm && (ti.Type != quant.F32 || math.Abs(mean-1) > 0.01 || std > 0.03) {
						t.Errorf("%s: norm weights %s mean %g std %g", ti.Name, ti.Type, mean, std)
					}
					if !isNorm && (math.Abs(mean) > 0.002 || math.Abs(std-0.02) > 0.002) {
						t.Errorf("%s: %s mean %g std %g, want about 0 and 0.02", ti.Name, ti.Type, mean, std)
					}
				}
				if typ == "Q4_K_M" {
					checkQ4KMMix(t, f)
				}
			})
		}
	}
}

// With 8 layers llama.cpp's use_more_bits holds for layers 0, 3, 6 and 7.
func checkQ4KMMix(t *testing.T, f *gguf.File) {
	t.Helper()
	want := map[string]quant.Type{"token_embd.weight": quant.Q4_K, "output.weight": quant.Q6_K}
	for i := range 8 {
		more := i == 0 || i == 3 || i == 6 || i == 7
		for _, k := range []string{"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"} {
			want[fmt.Sprintf("blk.%d.%s.weight", i, k)] = quant.Q4_K
		}
		for _, k := range []string{"attn_v", "ffn_down"} {
			typ := quant.Q4_K
			if more {
				typ = quant.Q6_K
			}
			want[fmt.Sprintf("blk.%d.%s.weight", i, k)] = typ
		}
	}
	for name, typ := range want {
		if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
			t.Errorf("%s: %v, want %s", name, ti, typ)
		}
	}
}

func TestNamedShapes(t *testing.T) {
	for name, want := range map[string][3]int{"tinyllama-1.1b": {2048, 22, 4}, "llama2-7b": {4096, 32, 32}, "qwen3-8b": {4096, 36, 8}} {
		n := Shapes[name]
		s, err := ParseShape(n.Arch, name)
		if err != nil || s.Dim != want[0] || s.Layers != want[1] || s.KVHeads != want[2] {
			t.Errorf("%s: %+v %v", name, s, err)
		}
	}
	o := Options{Arch: "qwen3", Shape: Shapes["qwen3-8b"].Shape, Type: "Q4_K_M"}
	var params uint64
	for _, ts := range o.tensors() {
		n := uint64(1)
		for _, d := range ts.dims {
			n *= d
		}
		params += n
	}
	if params != 8190735360 { // Qwen3-8B: 8.19B parameters with the untied output
		t.Errorf("qwen3-8b has %d parameters", params)
	}
	for _, bad := range []string{"dim=64", "dim=64,layers=1,ffn=1,heads=3", "dim=64,layers=1,ffn=1,heads=4,kv_heads=3", "nonsense", "dim=x,layers=1,ffn=1,heads=1", "llama2-7b,foo=1"} {
		if _, err := ParseShape("llama", bad); err == nil {
			t.Errorf("ParseShape(%q) succeeded", bad)
		}
	}
	if _, err := ParseShape("llama", "qwen3-8b"); err == nil {
		t.Error("qwen3 shape accepted for llama")
	}
	if err := Write(new(bytes.Buffer), Options{Arch: "gpt2", Shape: tiny(t, "llama"), Type: "F16"}); err == nil {
		t.Error("unknown architecture accepted")
	}
	if err := Write(new(bytes.Buffer), Options{Arch: "llama", Shape: tiny(t, "llama"), Type: "Q5_K"}); err == nil {
		t.Error("unknown type accepted")
	}
}

func BenchmarkSynthTinyQ4KM(b *testing.B) {
	s, _ := ParseShape("llama", "dim=512,layers=2,ffn=1024,heads=8,vocab=1024")
	for b.Loop() {
		var buf bytes.Buffer
		if err := Write(&buf, Options{Arch: "llama", Shape: s, Type: "Q4_K_M"}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(buf.Len()))
	}
}
