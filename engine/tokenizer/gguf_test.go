package tokenizer

import (
	"os"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
)

func openGGUF(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func stories(t testing.TB) *Tokenizer {
	t.Helper()
	f, err := gguf.Parse(embedded.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestLlamaSPMPairs(t *testing.T) {
	tok := openGGUF(t, "testdata/ggml-vocab-llama-spm.gguf")
	checkPairs(t, tok, readPairs(t, "testdata/ggml-vocab-llama-spm.gguf"))
}

func TestGPT2Pairs(t *testing.T) {
	tok := openGGUF(t, "testdata/ggml-vocab-gpt-2.gguf")
	checkPairs(t, tok, readPairs(t, "testdata/ggml-vocab-gpt-2.gguf"))
}

// TestStories260K: the embedded model's own vocabulary (512 SentencePiece
// tokens with byte fallback).
func TestStories260K(t *testing.T) {
	tok := stories(t)
	if tok.VocabSize() != 512 || tok.BOS() != 1 || tok.EOS() != 2 || !tok.IsEOG(2) || tok.IsEOG(1) {
		t.Fatalf("vocab %d bos %d eos %d", tok.VocabSize(), tok.BOS(), tok.EOS())
	}
	text, err := os.ReadFile("testdata/stories260K.greedy.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(string(text), true, false)
	if ids[0] != 1 {
		t.Fatalf("no BOS: %v", ids[:4])
	}
	// Every id is a real token of the model, and decoding (also streamed,
	// from BOS as the generator does) gives the text back with the SPM
	// leading space dropped.
	d := tok.NewDecoder()
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id >= 512 {
			t.Fatalf("id %d out of range", id)
		}
		b.WriteString(d.Push(id))
	}
	b.WriteString(d.Flush())
	if b.String() != string(text) || tok.Decode(ids) != string(text) {
		t.Fatalf("streamed decode differs from the text")
	}
	// The first words merge into whole tokens ("▁Once", "▁upon", ...).
	first := tok.Encode("Once upon a time", false, false)
	for _, id := range first {
		if tok.TokenType(id) != TypeNormal {
			t.Errorf("Once upon a time -> %v: token %d %q is %v", first, id, tok.Token(id), tok.TokenType(id))
		}
	}
	if got := tok.Token(first[0]); !strings.HasPrefix(got, "\u2581") {
		t.Errorf("first token %q lacks the space prefix", got)
	}
}
