package model

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
)

func TestLoadStories260K(t *testing.T) {
	f, err := gguf.Parse(embedded.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	// Shapes from /work/shared/models/README.md.
	c := m.Config
	if c.Arch != "llama" || c.Dim != 64 || c.Layers != 5 || c.FFN != 172 || c.Heads != 8 || c.KVHeads != 4 ||
		c.HeadDim != 8 || c.Vocab != 512 || c.RopeNeox || c.QKNorm || c.RMSEps != 1e-5 {
		t.Fatalf("config %+v", c)
	}
	if len(m.Blocks) != 5 || m.Embed.Rows != 512 {
		t.Fatalf("blocks %d, embedding rows %d", len(m.Blocks), m.Embed.Rows)
	}
}

// rewrite copies stories260K through the GGUF writer, letting edit change
// metadata values and drop tensors.
func rewrite(t *testing.T, kv func(key string, v gguf.Value) (gguf.Value, bool), dropTensor string, extra ...map[string]gguf.Value) *gguf.File {
	t.Helper()
	src, err := gguf.Parse(embedded.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, x := range src.KV {
		if v, ok := kv(x.Key, x.Value); ok {
			w.AddKV(x.Key, v)
		}
	}
	for _, e := range extra {
		for k, v := range e {
			w.AddKV(k, v)
		}
	}
	for i := range src.Tensors {
		ti := &src.Tensors[i]
		if ti.Name != dropTensor {
			w.AddTensor(ti.Name, ti.Type, ti.Dims, src.TensorData(ti))
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func keep(_ string, v gguf.Value) (gguf.Value, bool) { return v, true }

func TestLoadErrors(t *testing.T) {
	var ae *UnsupportedArchError
	f := rewrite(t, func(k string, v gguf.Value) (gguf.Value, bool) {
		if k == "general.architecture" {
			return gguf.StringValue("mamba"), true
		}
		return v, true
	}, "")
	if _, err := Load(f); !errors.As(err, &ae) || ae.Arch != "mamba" {
		t.Fatalf("unknown architecture: %v", err)
	}
	var te *TensorError
	if _, err := Load(rewrite(t, keep, "blk.3.ffn_up.weight")); !errors.As(err, &te) || te.Name != "blk.3.ffn_up.weight" {
		t.Fatalf("missing tensor: %v", err)
	}
	if _, err := Load(rewrite(t, keep, "output_norm.weight")); !errors.As(err, &te) || te.Name != "output_norm.weight" {
		t.Fatalf("missing tensor: %v", err)
	}
	var me *MetadataError
	if _, err := Load(rewrite(t, func(k string, v gguf.Value) (gguf.Value, bool) {
		return v, k != "llama.embedding_length"
	}, "")); !errors.As(err, &me) || me.Key != "llama.embedding_length" {
		t.Fatalf("missing metadata: %v", err)
	}
	// RoPE scaling: linear is read, other types are refused by name.
	withKV := func(extra map[string]gguf.Value) *gguf.File {
		return rewrite(t, keep, "", extra)
	}
	m, err := Load(withKV(map[string]gguf.Value{"llama.rope.scaling.type": gguf.StringValue("linear"), "llama.rope.scaling.factor": gguf.Float32Value(4)}))
	if err != nil || m.RopeScale != 4 {
		t.Fatalf("linear scaling: %v", err)
	}
	if _, err := Load(withKV(map[string]gguf.Value{"llama.rope.scaling.type": gguf.StringValue("yarn")})); !errors.As(err, &me) || me.Key != "llama.rope.scaling.type" {
		t.Fatalf("yarn scaling: %v", err)
	}
}
