package gguf

import (
	"bytes"
	"testing"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/quant"
)

// fuzzSeeds are real files made small: stories260K's metadata with its
// first three tensors, the llama-spm and gpt-2 vocabularies cut to 8 KiB
// (their first few hundred tokens), and a written file with every type.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	st := mustParse(t, embedded.Stories260K)
	w := NewWriter()
	for _, kv := range st.KV {
		w.AddKV(kv.Key, kv.Value)
	}
	for i := range st.Tensors[:3] {
		ti := &st.Tensors[i]
		w.AddTensor(ti.Name, ti.Type, ti.Dims, st.TensorData(ti))
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, buf.Bytes())
	for _, p := range []string{"testdata/ggml-vocab-llama-spm.gguf", "testdata/ggml-vocab-gpt-2.gguf"} {
		seeds = append(seeds, mustRead(t, p)[:8192])
	}
	seeds = append(seeds, allTypesFile(t))
	if len(seeds) == 0 {
		t.Fatal("empty seed corpus")
	}
	return seeds
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			d := file.TensorData(ti)
			if uint64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, size %d", ti.Name, len(d), ti.Size)
			}
			if n := ti.Dims[0]; n <= 4096 {
				x := make([]float32, n)
				if err := quant.Dequantize(ti.Type, d, x); err != nil {
					t.Fatal(err)
				}
				quant.DotRow(ti.Type, d, x)
			}
		}
		for _, kv := range file.KV {
			kv.Value.Array()
			file.Uint(kv.Key)
			file.Strings(kv.Key)
		}
		// What parses must survive a rewrite unchanged in meaning. (Tensors
		// may overlap in a parsed file but not in a written one: skip
		// rewrites that would grow past 16 MiB.)
		var total uint64
		for _, ti := range file.Tensors {
			total += alignUp(ti.Size, file.Alignment)
		}
		if total > 16<<20 {
			return
		}
		again, err := Parse(rewrite(t, file))
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(again.KV) != len(file.KV) || len(again.Tensors) != len(file.Tensors) {
			t.Fatal("rewrite changed the file")
		}
	})
}
