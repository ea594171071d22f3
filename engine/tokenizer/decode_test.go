package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// allTokenizers loads the four vocabularies of the test pairs.
func allTokenizers(t *testing.T) map[string]*Tokenizer {
	t.Helper()
	m := map[string]*Tokenizer{
		"llama-spm": openGGUF(t, "testdata/ggml-vocab-llama-spm.gguf"),
		"gpt-2":     openGGUF(t, "testdata/ggml-vocab-gpt-2.gguf"),
	}
	if testing.Short() {
		return m
	}
	m["llama-bpe"] = hfTokenizer(t, "llama3")
	m["qwen2"] = hfTokenizer(t, "qwen3")
	return m
}

// TestRoundTrip: decoding the encoding of every test input gives the input
// back, for all four tokenizers (no normalisation is applied, and byte
// fallback / byte-level BPE cover every byte).
func TestRoundTrip(t *testing.T) {
	for name, tok := range allTokenizers(t) {
		for i, p := range readPairs(t, "testdata/ggml-vocab-"+name+".gguf") {
			if got := tok.Decode(tok.Encode(p.in, false, false)); got != p.in {
				t.Errorf("%s input %d: decode(encode(%q)) = %q", name, i, p.in, got)
			}
			// The expected ids decode to the input too.
			if got := tok.Decode(p.ids); got != p.in {
				t.Errorf("%s input %d: decode(expected ids) = %q, want %q", name, i, got, p.in)
			}
			// With BOS/EOS added the text is the same.
			if got := tok.Decode(tok.Encode(p.in, true, false)); got != p.in {
				t.Errorf("%s input %d: decode(encode(add special)) = %q", name, i, got)
			}
		}
	}
}

// TestStreamDecoder: feeding ids one at a time yields only whole UTF-8
// characters, and the pieces join to Decode's result; multi-byte text is
// also split at every byte position into two encodings.
func TestStreamDecoder(t *testing.T) {
	texts := []string{
		"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
		"🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅",
		"កាន់តែពិសេសអាចខលចេញ",
		"нещо на Български ½ Führer Cửa Việt",
	}
	for name, tok := range allTokenizers(t) {
		for _, text := range texts {
			ids := tok.Encode(text, true, false)
			d := tok.NewDecoder()
			var b strings.Builder
			for _, id := range ids {
				s := d.Push(id)
				if !utf8.ValidString(s) {
					t.Fatalf("%s: Push returned invalid UTF-8 %q", name, s)
				}
				b.WriteString(s)
			}
			if rest := d.Flush(); rest != "" {
				t.Errorf("%s: Flush left %q after complete text", name, rest)
			}
			if b.String() != text {
				t.Errorf("%s: streamed %q, want %q", name, b.String(), text)
			}
			// Split the text at every byte: the two halves' ids, streamed
			// through one decoder, give the bytes back, and nothing but
			// whole characters comes out before Flush.
			for cut := 1; cut < len(text); cut++ {
				ids := append(tok.Encode(text[:cut], false, false), tok.Encode(text[cut:], false, false)...)
				d := tok.NewDecoder()
				var b strings.Builder
				for _, id := range ids {
					s := d.Push(id)
					// With SPM the second half starts with its own space
					// prefix, which makes a cut character invalid UTF-8.
					if !utf8.ValidString(s) && !tok.stripsLeadingSpace() {
						t.Fatalf("%s cut %d: Push returned invalid UTF-8 %q", name, cut, s)
					}
					b.WriteString(s)
				}
				b.WriteString(d.Flush())
				want := text[:cut] + text[cut:]
				if tok.stripsLeadingSpace() {
					// The second half was encoded with its own space prefix.
					want = text[:cut] + " " + text[cut:]
				}
				if b.String() != want {
					t.Fatalf("%s cut %d: streamed %q, want %q", name, cut, b.String(), want)
				}
			}
		}
	}
}

// TestStreamDecoderHoldsPartialRune checks the hold-back rule directly on
// byte tokens: a 4-byte character arriving one byte token at a time comes
// out whole with its last byte.
func TestStreamDecoderHoldsPartialRune(t *testing.T) {
	tok := openGGUF(t, "testdata/ggml-vocab-llama-spm.gguf")
	ids := tok.Encode("a🦙b", false, false) // ▁a, 4 byte tokens, b
	d := tok.NewDecoder()
	var got []string
	for _, id := range ids {
		got = append(got, d.Push(id))
	}
	want := []string{"a", "", "", "", "🦙", "b"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("pushes = %q, want %q (ids %v)", got, want, ids)
	}
	// An incomplete character at the end is returned by Flush.
	d = tok.NewDecoder()
	d.Push(ids[0])
	if s := d.Push(ids[1]); s != "" {
		t.Fatalf("partial byte came out: %q", s)
	}
	if s := d.Flush(); s != "\xf0" {
		t.Fatalf("Flush = %q", s)
	}
	// An invalid byte is not held back.
	d = tok.NewDecoder()
	if s := d.Push(tok.spm.byteTok[0xff]); s != "\xff" {
		t.Fatalf("invalid byte: Push = %q", s)
	}
}
