package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/quant"
)

func mustParse(t testing.TB, b []byte) *File {
	t.Helper()
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Facts below were read from the files with an independent Python reader.
func TestParseStories260K(t *testing.T) {
	f := mustParse(t, embedded.Stories260K)
	if f.Version != 3 || f.Alignment != 32 || len(f.KV) != 19 || len(f.Tensors) != 48 {
		t.Fatalf("version %d alignment %d kv %d tensors %d", f.Version, f.Alignment, len(f.KV), len(f.Tensors))
	}
	if a, err := f.Architecture(); err != nil || a != "llama" {
		t.Errorf("architecture %q, %v", a, err)
	}
	if n, err := f.Uint("llama.embedding_length"); err != nil || n != 64 {
		t.Errorf("embedding_length %d, %v", n, err)
	}
	if n, err := f.Int("llama.feed_forward_length"); err != nil || n != 172 {
		t.Errorf("feed_forward_length %d, %v", n, err)
	}
	if n, err := f.Uint("tokenizer.ggml.padding_token_id"); err != nil || n != 4294967295 {
		t.Errorf("padding_token_id %d, %v", n, err)
	}
	if eps, err := f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil || float32(eps) != 1e-5 {
		t.Errorf("eps %g, %v", eps, err)
	}
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 512 || toks[0] != "<unk>" || toks[2] != "</s>" {
		t.Errorf("tokens %d %v", len(toks), err)
	}
	types, err := f.Int32s("tokenizer.ggml.token_type")
	if err != nil || len(types) != 512 || types[0] != 2 || types[1] != 3 {
		t.Errorf("token_type %v %v", types[:3], err)
	}
	if s, err := f.Float32s("tokenizer.ggml.scores"); err != nil || len(s) != 512 {
		t.Errorf("scores %d %v", len(s), err)
	}
	ti, ok := f.Tensor("blk.0.ffn_down.weight")
	if !ok || ti.Offset != 355840 || len(ti.Dims) != 2 || ti.Dims[0] != 172 || ti.Dims[1] != 64 || ti.Type != quant.F32 || ti.Size != 172*64*4 {
		t.Fatalf("ffn_down %+v", ti)
	}
	if f.DataOffset != 14176 { // header ends at 14152, aligned to 32
		t.Errorf("data offset %d", f.DataOffset)
	}
	norm, _ := f.Tensor("output_norm.weight")
	w := make([]float32, 64)
	if err := quant.Dequantize(norm.Type, f.TensorData(norm), w); err != nil {
		t.Fatal(err)
	}
	for i, v := range w {
		if v <= 0 || v > 20 || math.IsNaN(float64(v)) {
			t.Errorf("output_norm[%d] = %g, want a positive norm weight", i, v)
		}
	}
	// Typed accessor errors name the key and the types.
	var ke *KeyError
	if _, err := f.String("llama.block_count"); !errors.As(err, &ke) || ke.Key != "llama.block_count" || ke.Got != "uint32" {
		t.Errorf("String(uint32 key) error = %v", err)
	}
	if _, err := f.Uint("no.such.key"); !errors.As(err, &ke) || ke.Got != "" || !strings.Contains(err.Error(), `"no.such.key"`) {
		t.Errorf("missing key error = %v", err)
	}
	if _, err := f.Strings("tokenizer.ggml.scores"); !errors.As(err, &ke) || ke.Got != "array of float32" {
		t.Errorf("Strings(scores) error = %v", err)
	}
}

func TestOpenMatchesParse(t *testing.T) {
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"} {
		path := filepath.Join("testdata", name)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(path)
		g := mustParse(t, raw)
		if len(f.KV) != len(g.KV) || !bytes.Equal(f.Bytes(), raw) {
			t.Errorf("%s: Open and Parse differ", name)
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
	gp := mustParse(t, mustRead(t, "testdata/ggml-vocab-gpt-2.gguf"))
	if m, err := gp.Strings("tokenizer.ggml.merges"); err != nil || len(m) != 50000 || m[0] != "Ġ t" {
		t.Errorf("gpt-2 merges: %d %v", len(m), err)
	}
	if toks, _ := gp.Strings("tokenizer.ggml.tokens"); len(toks) != 50257 {
		t.Errorf("gpt-2 tokens %d", len(toks))
	}
	sp := mustParse(t, mustRead(t, "testdata/ggml-vocab-llama-spm.gguf"))
	if toks, _ := sp.Strings("tokenizer.ggml.tokens"); len(toks) != 32000 {
		t.Errorf("llama-spm tokens %d", len(toks))
	}
	if _, err := Open("testdata/does-not-exist.gguf"); err == nil {
		t.Error("Open of a missing file succeeded")
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rewrite copies a parsed file through the Writer.
func rewrite(t testing.TB, f *File) []byte {
	t.Helper()
	w := NewWriter()
	w.Alignment = f.Alignment
	for _, kv := range f.KV {
		if kv.Key != "general.alignment" {
			w.AddKV(kv.Key, kv.Value)
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		w.AddTensor(ti.Name, ti.Type, ti.Dims, f.TensorData(ti))
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The writer reproduces real llama.cpp files byte for byte.
func TestWriterReproducesRealFiles(t *testing.T) {
	for name, raw := range map[string][]byte{
		"stories260K": embedded.Stories260K,
		"llama-spm":   mustRead(t, "testdata/ggml-vocab-llama-spm.gguf"),
		"gpt-2":       mustRead(t, "testdata/ggml-vocab-gpt-2.gguf"),
	} {
		if got := rewrite(t, mustParse(t, raw)); !bytes.Equal(got, raw) {
			t.Errorf("%s: rewritten file differs (%d vs %d bytes)", name, len(got), len(raw))
		}
	}
}

// allTypesFile builds a small file with every value type, nested arrays,
// every tensor type and a non-default alignment.
func allTypesFile(t testing.TB) []byte {
	w := NewWriter()
	w.Alignment = 64
	w.AddKV("u8", Uint8Value(200))
	w.AddKV("i8", Int8Value(-100))
	w.AddKV("u16", Uint16Value(60000))
	w.AddKV("i16", Int16Value(-30000))
	w.AddKV("u32", Uint32Value(4e9))
	w.AddKV("i32", Int32Value(-2e9))
	w.AddKV("f32", Float32Value(1.5))
	w.AddKV("bool", BoolValue(true))
	w.AddKV("str", StringValue("héllo\x00"))
	w.AddKV("u64", Uint64Value(math.MaxUint64))
	w.AddKV("i64", Int64Value(math.MinInt64))
	w.AddKV("f64", Float64Value(-2.25))
	w.AddKV("strs", StringsValue([]string{"a", "", "ccc"}))
	w.AddKV("f32s", Float32sValue([]float32{1, -2, 3.5}))
	w.AddKV("i32s", Int32sValue([]int32{-1, 7}))
	w.AddKV("u8s", Uint8sValue([]uint8{1, 2, 3}))
	w.AddKV("nested", ArrayValue(TypeArray, []Value{Int32sValue([]int32{1, 2}), Int32sValue(nil), ArrayValue(TypeArray, nil)}))
	w.AddKV("bools", ArrayValue(TypeBool, []Value{BoolValue(false), BoolValue(true)}))
	w.AddKV("empty", StringsValue(nil))
	for i, typ := range quant.SupportedTypes {
		n := typ.BlockSize() * 2
		x := make([]float32, n)
		for j := range x {
			x[j] = float32(math.Sin(float64(i*1000 + j)))
		}
		data, err := quant.Quantize(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		w.AddTensor("t."+typ.String(), typ, []uint64{uint64(n / 2), 2}, data)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriterRoundTrip(t *testing.T) {
	raw := allTypesFile(t)
	f := mustParse(t, raw)
	if f.Alignment != 64 || f.DataOffset%64 != 0 || len(f.Tensors) != len(quant.SupportedTypes) {
		t.Fatalf("alignment %d data offset %d tensors %d", f.Alignment, f.DataOffset, len(f.Tensors))
	}
	if !bytes.Equal(rewrite(t, f), raw) {
		t.Error("rewrite of a parsed file is not identical")
	}
	if !bytes.Equal(allTypesFile(t), raw) {
		t.Error("writer output is not deterministic")
	}
	check := func(key string, want any) {
		t.Helper()
		v, ok := f.Value(key)
		if !ok {
			t.Fatalf("missing %q", key)
		}
		var got any
		switch v.Type {
		case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
			got, _ = v.AsInt()
		case TypeUint8, TypeUint16, TypeUint32, TypeUint64:
			got, _ = v.AsUint()
		case TypeFloat32, TypeFloat64:
			got, _ = v.AsFloat()
		case TypeBool:
			got, _ = v.AsBool()
		case TypeString:
			got, _ = v.AsString()
		}
		if got != want {
			t.Errorf("%s = %v (%T), want %v", key, got, got, want)
		}
	}
	check("u8", uint64(200))
	check("i8", int64(-100))
	check("u16", uint64(60000))
	check("i16", int64(-30000))
	check("u32", uint64(4e9))
	check("i32", int64(-2e9))
	check("f32", 1.5)
	check("bool", true)
	check("str", "héllo\x00")
	check("u64", uint64(math.MaxUint64))
	check("i64", int64(math.MinInt64))
	check("f64", -2.25)
	if _, err := f.Int("u64"); err == nil {
		t.Error("Int of MaxUint64 succeeded")
	}
	if _, err := f.Uint("i8"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Uint of a negative: %v", err)
	}
	nested, _ := f.Value("nested")
	if nested.Len() != 3 || nested.Index(0).Len() != 2 || nested.Index(2).ElemType != TypeArray {
		t.Errorf("nested = %+v", nested)
	}
	if a, _ := nested.Index(0).Int32s(); a[1] != 2 {
		t.Errorf("nested[0] = %v", a)
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data := f.TensorData(ti)
		if uint64(len(data)) != ti.Size || (f.DataOffset+ti.Offset)%64 != 0 {
			t.Errorf("%s: %d bytes at %d", ti.Name, len(data), ti.Offset)
		}
		x := make([]float32, ti.Elements())
		if err := quant.Dequantize(ti.Type, data, x); err != nil {
			t.Error(err)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	cases := map[string]func(w *Writer){
		"duplicate key": func(w *Writer) { w.AddKV("a", BoolValue(true)); w.AddKV("a", BoolValue(true)) },
		"duplicate tensor": func(w *Writer) {
			w.AddTensor("t", quant.F32, []uint64{1}, make([]byte, 4))
			w.AddTensor("t", quant.F32, []uint64{1}, make([]byte, 4))
		},
		"wrong size":    func(w *Writer) { w.AddTensor("t", quant.F32, []uint64{2}, make([]byte, 4)) },
		"partial block": func(w *Writer) { w.AddTensor("t", quant.Q8_0, []uint64{16}, make([]byte, 17)) },
		"bad type":      func(w *Writer) { w.AddTensor("t", quant.Type(2), []uint64{32}, make([]byte, 18)) },
		"mixed array":   func(w *Writer) { w.AddKV("a", ArrayValue(TypeArray, []Value{BoolValue(true)})) },
		"short fill": func(w *Writer) {
			w.AddTensorFunc("t", quant.F32, []uint64{4}, func(w io.Writer) error { _, err := w.Write(make([]byte, 12)); return err })
		},
	}
	for name, add := range cases {
		w := NewWriter()
		add(w)
		if _, err := w.WriteTo(io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// header builds the start of a hand-made file.
func header(version uint32, nt, nkv uint64) []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, nt)
	return binary.LittleEndian.AppendUint64(b, nkv)
}

func TestMalformed(t *testing.T) {
	kv := func(b []byte, key string, typ uint32, val ...byte) []byte {
		b = appendString(b, key)
		b = binary.LittleEndian.AppendUint32(b, typ)
		return append(b, val...)
	}
	tensor := func(b []byte, name string, dims []uint64, typ uint32, off uint64) []byte {
		b = appendString(b, name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, typ)
		return binary.LittleEndian.AppendUint64(b, off)
	}
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	pad := func(b []byte, n int) []byte { return append(b, make([]byte, n)...) }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "truncated", nil},
		{"magic", "bad magic", []byte("GGML\x03\x00\x00\x00")},
		{"v1", "version 1 is not supported", header(1, 0, 0)},
		{"v2", "version 2 is not supported", header(2, 0, 0)},
		{"v4", "unknown gguf version 4", header(4, 0, 0)},
		{"big-endian", "big-endian", header(3<<24, 0, 0)},
		{"huge kv count", "metadata count", header(3, 0, 1<<60)},
		{"huge tensor count", "tensor count", header(3, 1<<60, 0)},
		{"huge key", "key 0 length", pad(append(header(3, 0, 1), u64(1<<40)...), 16)},
		{"huge array", `key "a": array length`, kv(header(3, 0, 1), "a", 9, append(u32(4), u64(1<<50)...)...)},
		{"huge string array", `key "a": array length`, kv(header(3, 0, 1), "a", 9, append(u32(8), u64(1<<40)...)...)},
		{"huge string", `key "a": string length`, kv(header(3, 0, 1), "a", 8, u64(1<<40)...)},
		{"bad value type", `key "a": unknown value type 13`, kv(header(3, 0, 1), "a", 13)},
		{"bad elem type", `key "a": unknown array element type 99`, kv(header(3, 0, 1), "a", 9, u32(99)...)},
		{"bad bool", `key "a": bool value 2`, kv(header(3, 0, 1), "a", 7, 2)},
		{"deep nesting", "nested deeper", kv(header(3, 0, 1), "a", 9, bytes.Repeat(append(u32(9), u64(1)...), 6)...)},
		{"duplicate key", `key "a": duplicate key`, kv(kv(header(3, 0, 2), "a", 0, 1), "a", 0, 1)},
		{"alignment type", `key "general.alignment": type uint64`, kv(header(3, 0, 1), "general.alignment", 10, u64(32)...)},
		{"alignment value", `key "general.alignment": alignment 48`, kv(header(3, 0, 1), "general.alignment", 4, u32(48)...)},
		{"unknown tensor type", `tensor "w": unsupported tensor type type(2) (supported: F32, F16, Q8_0, Q4_K, Q6_K, BF16)`, pad(tensor(header(3, 1, 0), "w", []uint64{32}, 2, 0), 64)},
		{"zero dims", `tensor "w": 0 dimensions`, pad(tensor(header(3, 1, 0), "w", nil, 0, 0), 64)},
		{"five dims", `tensor "w": 5 dimensions`, pad(tensor(header(3, 1, 0), "w", []uint64{1, 1, 1, 1, 1}, 0, 0), 64)},
		{"zero dim", `tensor "w": dimension 1 is 0`, pad(tensor(header(3, 1, 0), "w", []uint64{1, 0}, 0, 0), 64)},
		{"overflow", `tensor "w": element count overflows`, pad(tensor(header(3, 1, 0), "w", []uint64{1 << 40, 1 << 40}, 0, 0), 64)},
		{"partial block", `tensor "w": row length 16 is not a multiple of the Q8_0 block size 32`, pad(tensor(header(3, 1, 0), "w", []uint64{16}, 8, 0), 64)},
		{"too big", `tensor "w": size`, pad(tensor(header(3, 1, 0), "w", []uint64{1 << 30, 1 << 20}, 0, 0), 64)},
		{"out of range", `tensor "w": data [0, +80)`, pad(tensor(header(3, 1, 0), "w", []uint64{20}, 0, 0), 64)},
		{"misaligned", `tensor "w": offset 4 is not a multiple`, pad(tensor(header(3, 1, 0), "w", []uint64{1}, 0, 4), 64)},
		{"offset past end", `tensor "w": data [1024, +4)`, pad(tensor(header(3, 1, 0), "w", []uint64{1}, 0, 1024), 64)},
		{"duplicate tensor", `tensor "w": duplicate tensor name`, pad(tensor(tensor(header(3, 2, 0), "w", []uint64{1}, 0, 0), "w", []uint64{1}, 0, 32), 64)},
	}
	for _, c := range cases {
		_, err := Parse(c.data)
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want a *FormatError containing %q", c.name, err, c.want)
		}
	}
}

// Every prefix of a file with every value and tensor type is an error, never
// a panic; for the real files every prefix through the first 4 KiB, then
// every 997th and the last 64 (the full sweep of a 1 MB file takes minutes).
func TestTruncation(t *testing.T) {
	files := map[string][]byte{
		"all-types":   allTypesFile(t),
		"stories260K": embedded.Stories260K,
		"llama-spm":   mustRead(t, "testdata/ggml-vocab-llama-spm.gguf"),
	}
	for name, raw := range files {
		step := func(n int) int {
			if name == "all-types" || n < 4096 || n > len(raw)-64 {
				return 1
			}
			return 997
		}
		for n := 0; n < len(raw); n += step(n) {
			f, err := Parse(raw[:n])
			if err == nil {
				// A prefix may parse only if it lost nothing but trailing padding.
				full := mustParse(t, raw)
				end := full.DataOffset
				for _, ti := range full.Tensors {
					end = max(end, full.DataOffset+ti.Offset+ti.Size)
				}
				if len(f.KV) != len(full.KV) || len(f.Tensors) != len(full.Tensors) || uint64(n) < end {
					t.Fatalf("%s: prefix of %d bytes parsed", name, n)
				}
				continue
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%s: prefix %d: error %T %v", name, n, err, err)
			}
		}
	}
}
