package tokenizer

import (
	"testing"
)

func TestLlama3Pairs(t *testing.T) {
	tok, err := FromHF(readNPM(t, "tokenizer-llama3/models/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkPairs(t, tok, readPairs(t, "testdata/ggml-vocab-llama-bpe.gguf"))
}

func TestQwen2Pairs(t *testing.T) {
	tok, err := FromHF(readNPM(t, "tokenizer-qwen3/models/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkPairs(t, tok, readPairs(t, "testdata/ggml-vocab-qwen2.gguf"))
}
