package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedInputs adds every test input of the named vocabularies to f's corpus
// and fails when there are none.
func seedInputs(f *testing.F, names ...string) {
	n := 0
	for _, name := range names {
		for _, p := range readPairs(f, "testdata/ggml-vocab-"+name+".gguf") {
			f.Add(p.in)
			n++
		}
	}
	if n == 0 {
		f.Fatal("empty seed corpus")
	}
}

// checkEncode encodes text every way and checks ids are in range, Decode
// round-trips (when roundTrip) and streaming gives Decode's bytes.
func checkEncode(t *testing.T, tok *Tokenizer, text string, roundTrip bool) {
	for _, parse := range []bool{false, true} {
		for _, add := range []bool{false, true} {
			ids := tok.Encode(text, add, parse)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("id %d outside the vocabulary", id)
				}
			}
			d := tok.NewDecoder()
			var b strings.Builder
			for _, id := range ids {
				s := d.Push(id)
				if utf8.ValidString(text) && !utf8.ValidString(s) && !tok.stripsLeadingSpace() {
					t.Fatalf("Push(%d) returned a partial character %q", id, s)
				}
				b.WriteString(s)
			}
			b.WriteString(d.Flush())
			dec := tok.Decode(ids)
			if b.String() != dec {
				t.Fatalf("streamed %q, Decode %q", b.String(), dec)
			}
			if roundTrip && !parse && dec != text {
				t.Fatalf("decode(encode(%q)) = %q (ids %v)", text, dec, ids)
			}
		}
	}
}

func FuzzSPM(f *testing.F) {
	seedInputs(f, "llama-spm")
	tok := openGGUF(f, "testdata/ggml-vocab-llama-spm.gguf")
	st := stories(f)
	f.Fuzz(func(t *testing.T, text string) {
		// SPM splits the escaped text into characters by their first byte,
		// so with invalid UTF-8 a truncated sequence swallows the next bytes
		// (as in llama.cpp): the bytes come back, not necessarily the text.
		valid := utf8.ValidString(text)
		checkEncode(t, tok, text, valid)
		checkEncode(t, st, text, valid)
	})
}

func FuzzBPE(f *testing.F) {
	seedInputs(f, "gpt-2", "llama-bpe", "qwen2")
	gpt2 := openGGUF(f, "testdata/ggml-vocab-gpt-2.gguf")
	// The same vocabulary under the Llama 3 and Qwen2 pre-tokenizers, to
	// exercise their scanners without loading the 10 MB files per worker.
	toks := []*Tokenizer{gpt2}
	for _, pre := range []string{PreLlama3, PreQwen2} {
		v := gpt2.Vocab()
		v.Pre = pre
		tok, err := New(&v)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, tok := range toks {
			checkEncode(t, tok, text, true)
		}
	})
}

func FuzzHFTokenizerJSON(f *testing.F) {
	files, _ := filepath.Glob("testdata/hf/*.tokenizer.json")
	configs := []string{"", `{"add_bos_token":true,"bos_token":"<|begin_of_text|>","eos_token":{"content":"<|end_of_text|>"},"chat_template":"{{x}}"}`}
	n := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, c := range configs {
			f.Add(b, []byte(c))
			n++
		}
	}
	if n == 0 {
		f.Fatal("empty seed corpus: testdata/hf/*.tokenizer.json")
	}
	f.Fuzz(func(t *testing.T, tokJSON, cfgJSON []byte) {
		var cfg []byte
		if len(cfgJSON) > 0 {
			cfg = cfgJSON
		}
		tok, err := FromHFConfig(tokJSON, cfg)
		if err != nil {
			return
		}
		for _, text := range []string{"Hello, y'all! 1234 😁\n\n  <|begin_of_text|><think>", "\xff\xfe x"} {
			ids := tok.Encode(text, true, true)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("id %d outside the vocabulary of %d", id, tok.VocabSize())
				}
			}
			_ = tok.Decode(ids)
		}
	})
}

// TestHFMiniFiles: the fuzz seeds (cut-down copies of the real files) load
// and tokenize like the full vocabularies on text they cover.
func TestHFMiniFiles(t *testing.T) {
	for _, name := range []string{"llama3", "qwen3"} {
		b, err := os.ReadFile("testdata/hf/" + name + "-mini.tokenizer.json")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := FromHF(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := map[string]Vocab{"llama3": {Model: ModelBPE, Pre: PreLlama3}, "qwen3": {Model: ModelBPE, Pre: PreQwen2}}[name]
		if v := tok.Vocab(); v.Model != want.Model || v.Pre != want.Pre {
			t.Errorf("%s: model %q pre %q", name, v.Model, v.Pre)
		}
		text := "the cat in the hat\n\n 123"
		if got := tok.Decode(tok.Encode(text, false, false)); got != text {
			t.Errorf("%s: round trip %q", name, got)
		}
	}
}
