package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// benchText is real prose (the stories260K reference text) plus every
// test input, repeated to about 64 KiB.
func benchText(b *testing.B) string {
	b.Helper()
	story, err := os.ReadFile("testdata/stories260K.greedy.txt")
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		sb.Write(story)
		for _, p := range readPairs(b, "testdata/ggml-vocab-llama-spm.gguf") {
			sb.WriteString(p.in)
		}
	}
	return sb.String()
}

func benchEncode(b *testing.B, tok *Tokenizer) {
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text, true, false)
	}
}

func BenchmarkEncodeSPM(b *testing.B) {
	benchEncode(b, openGGUF(b, "testdata/ggml-vocab-llama-spm.gguf"))
}

func BenchmarkEncodeBPEGPT2(b *testing.B) {
	benchEncode(b, openGGUF(b, "testdata/ggml-vocab-gpt-2.gguf"))
}

func BenchmarkEncodeBPELlama3(b *testing.B) { benchEncode(b, hfTokenizer(b, "llama3")) }

func BenchmarkEncodeBPEQwen2(b *testing.B) { benchEncode(b, hfTokenizer(b, "qwen3")) }

func BenchmarkStreamDecode(b *testing.B) {
	tok := openGGUF(b, "testdata/ggml-vocab-gpt-2.gguf")
	text := benchText(b)
	ids := tok.Encode(text, false, false)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		d := tok.NewDecoder()
		for _, id := range ids {
			d.Push(id)
		}
	}
}
