package convert

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sparkinfer/cc/engine/gguf"
)

// ggml token types (llama.cpp's llama_token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// Vocab is a tokenizer in GGUF terms: what goes under tokenizer.ggml.*.
type Vocab struct {
	Model  string // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string // pre-tokenizer: "llama-bpe", "qwen2", "default", ...
	Tokens []string
	Scores []float32 // nil for gpt2
	Types  []int32
	Merges []string // "a b", gpt2 only

	// Special token ids; -1 when absent.
	BOS, EOS, UNK, PAD int
	AddBOS, AddEOS     *bool // nil: not written
	ChatTemplate       string
}

// AddTo writes the vocabulary's metadata keys to w.
func (v *Vocab) AddTo(w *gguf.Writer) {
	w.AddKV("tokenizer.ggml.model", gguf.StringValue(v.Model))
	if v.Pre != "" {
		w.AddKV("tokenizer.ggml.pre", gguf.StringValue(v.Pre))
	}
	w.AddKV("tokenizer.ggml.tokens", gguf.StringsValue(v.Tokens))
	if v.Scores != nil {
		w.AddKV("tokenizer.ggml.scores", gguf.Float32sValue(v.Scores))
	}
	w.AddKV("tokenizer.ggml.token_type", gguf.Int32sValue(v.Types))
	if v.Merges != nil {
		w.AddKV("tokenizer.ggml.merges", gguf.StringsValue(v.Merges))
	}
	for _, s := range []struct {
		key string
		id  int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}, {"padding", v.PAD}} {
		if s.id >= 0 {
			w.AddKV("tokenizer.ggml."+s.key+"_token_id", gguf.Uint32Value(uint32(s.id)))
		}
	}
	if v.AddBOS != nil {
		w.AddKV("tokenizer.ggml.add_bos_token", gguf.BoolValue(*v.AddBOS))
	}
	if v.AddEOS != nil {
		w.AddKV("tokenizer.ggml.add_eos_token", gguf.BoolValue(*v.AddEOS))
	}
	if v.ChatTemplate != "" {
		w.AddKV("tokenizer.chat_template", gguf.StringValue(v.ChatTemplate))
	}
}

// VocabFromGGUF reads the tokenizer.* keys of a GGUF file.
func VocabFromGGUF(f *gguf.File) (*Vocab, error) {
	v := &Vocab{BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	var err error
	if v.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return nil, err
	}
	v.Pre, _ = f.String("tokenizer.ggml.pre")
	if v.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	if _, ok := f.Value("tokenizer.ggml.scores"); ok {
		if v.Scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, err
		}
	}
	if v.Types, err = f.Int32s("tokenizer.ggml.token_type"); err != nil {
		return nil, err
	}
	if _, ok := f.Value("tokenizer.ggml.merges"); ok {
		if v.Merges, err = f.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, err
		}
	}
	for _, s := range []struct {
		key string
		id  *int
	}{{"bos", &v.BOS}, {"eos", &v.EOS}, {"unknown", &v.UNK}, {"padding", &v.PAD}} {
		if u, err := f.Uint("tokenizer.ggml." + s.key + "_token_id"); err == nil && u < uint64(len(v.Tokens)) {
			*s.id = int(u)
		}
	}
	if b, err := f.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		v.AddBOS = &b
	}
	if b, err := f.Bool("tokenizer.ggml.add_eos_token"); err == nil {
		v.AddEOS = &b
	}
	v.ChatTemplate, _ = f.String("tokenizer.chat_template")
	return v, nil
}

// Truncate keeps the first n tokens (for small synthetic models); merges
// whose parts or result fall outside are dropped and special ids past n are
// cleared.
func (v *Vocab) Truncate(n int) {
	if n >= len(v.Tokens) {
		return
	}
	keep := make(map[string]bool, n)
	for _, t := range v.Tokens[:n] {
		keep[t] = true
	}
	v.Tokens = v.Tokens[:n]
	v.Types = v.Types[:n]
	if v.Scores != nil {
		v.Scores = v.Scores[:n]
	}
	if v.Merges != nil {
		var m []string
		for _, mg := range v.Merges {
			a, b, _ := strings.Cut(mg, " ")
			if keep[a] && keep[b] && keep[a+b] {
				m = append(m, mg)
			}
		}
		v.Merges = m
	}
	for _, id := range []*int{&v.BOS, &v.EOS, &v.UNK, &v.PAD} {
		if *id >= n {
			*id = -1
		}
	}
}

// hfTokenizer is the part of a Hugging Face tokenizer.json that matters here.
type hfTokenizer struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type        string          `json:"type"`
		Vocab       map[string]int  `json:"vocab"`
		Merges      json.RawMessage `json:"merges"`
		ByteFallbck bool            `json:"byte_fallback"`
	} `json:"model"`
}

// hfTokenizerConfig is the part of tokenizer_config.json that matters here.
type hfTokenizerConfig struct {
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	PAD          json.RawMessage `json:"pad_token"`
	UNK          json.RawMessage `json:"unk_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// TokenizerError reports a tokenizer.json or tokenizer_config.json that
// cannot be converted.
type TokenizerError struct{ Msg string }

func (e *TokenizerError) Error() string { return "convert: tokenizer: " + e.Msg }

func tokErr(format string, args ...any) error { return &TokenizerError{fmt.Sprintf(format, args...)} }

// SpecialIDs are the special token ids from config.json (-1 when absent);
// tokenizer_config.json's token strings take precedence, as in llama.cpp.
type SpecialIDs struct{ BOS, EOS int }

// VocabFromHF converts a byte-level BPE tokenizer.json (GPT-2 / Llama 3 /
// Qwen2 style) to a gpt2 GGUF vocabulary of vocabSize tokens, the way
// llama.cpp's convert_hf_to_gguf.py does: ids without a token become
// "[PAD<id>]" (unused), added tokens are control tokens when special or
// shaped like "<|...|>" and user-defined otherwise, merges are "a b".
// tokenizerConfig (tokenizer_config.json) may be nil. SentencePiece-style
// tokenizer.json files (Metaspace, byte fallback) are refused.
func VocabFromHF(tokenizerJSON, tokenizerConfig []byte, vocabSize int, pre string, ids SpecialIDs) (*Vocab, error) {
	var tj hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, tokErr("tokenizer.json: %v", err)
	}
	if tj.Model.Type != "BPE" {
		return nil, tokErr("model type %q is not supported (only byte-level BPE)", tj.Model.Type)
	}
	if tj.Model.ByteFallbck || strings.Contains(string(tj.PreTokenizer), `"Metaspace"`) {
		return nil, tokErr("sentencepiece-style tokenizer.json (byte fallback / Metaspace) is not supported; only byte-level BPE")
	}
	if vocabSize <= 0 || vocabSize > 1<<22 {
		return nil, tokErr("vocab size %d out of range", vocabSize)
	}
	tokens := make([]string, vocabSize)
	set := make([]bool, vocabSize)
	types := make([]int32, vocabSize)
	put := func(tok string, id int, typ int32) error {
		if id < 0 || id >= vocabSize {
			return tokErr("token %q has id %d outside the vocabulary size %d", tok, id, vocabSize)
		}
		if set[id] && tokens[id] != tok {
			return tokErr("id %d is both %q and %q", id, tokens[id], tok)
		}
		tokens[id], set[id], types[id] = tok, true, typ
		return nil
	}
	for tok, id := range tj.Model.Vocab {
		if err := put(tok, id, TokenNormal); err != nil {
			return nil, err
		}
	}
	byContent := map[string]int{}
	for _, at := range tj.AddedTokens {
		typ := int32(TokenUserDefined)
		if at.Special || looksSpecial(at.Content) {
			typ = TokenControl
		}
		if err := put(at.Content, at.ID, typ); err != nil {
			return nil, err
		}
		byContent[at.Content] = at.ID
	}
	for i := range tokens {
		if !set[i] {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), TokenUnused
		}
	}
	merges, err := parseMerges(tj.Model.Merges)
	if err != nil {
		return nil, err
	}
	v := &Vocab{Model: "gpt2", Pre: pre, Tokens: tokens, Types: types, Merges: merges, BOS: ids.BOS, EOS: ids.EOS, UNK: -1, PAD: -1}
	if len(tokenizerConfig) > 0 {
		var tc hfTokenizerConfig
		if err := json.Unmarshal(tokenizerConfig, &tc); err != nil {
			return nil, tokErr("tokenizer_config.json: %v", err)
		}
		v.AddBOS, v.AddEOS = tc.AddBOS, tc.AddEOS
		for _, s := range []struct {
			raw json.RawMessage
			id  *int
		}{{tc.BOS, &v.BOS}, {tc.EOS, &v.EOS}, {tc.PAD, &v.PAD}, {tc.UNK, &v.UNK}} {
			if name := tokenString(s.raw); name != "" {
				if id, ok := byContent[name]; ok {
					*s.id = id
				} else if id, ok := tj.Model.Vocab[name]; ok {
					*s.id = id
				}
			}
		}
		if len(tc.ChatTemplate) > 0 {
			if err := json.Unmarshal(tc.ChatTemplate, &v.ChatTemplate); err != nil {
				return nil, tokErr("tokenizer_config.json: chat_template is not a string (named templates are not supported)")
			}
		}
	}
	for _, id := range []*int{&v.BOS, &v.EOS, &v.PAD, &v.UNK} {
		if *id < 0 {
			*id = -1
		}
		if *id >= vocabSize {
			return nil, tokErr("special token id %d outside the vocabulary size %d", *id, vocabSize)
		}
	}
	return v, nil
}

// tokenString reads a tokenizer_config special-token entry: a string or an
// object with "content".
func tokenString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

func looksSpecial(t string) bool {
	return (strings.HasPrefix(t, "<|") && strings.HasSuffix(t, "|>")) ||
		(strings.HasPrefix(t, "<｜") && strings.HasSuffix(t, "｜>"))
}

func parseMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, tokErr("BPE model has no merges")
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		return asStrings, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, tokErr("merges are neither strings nor pairs: %v", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, tokErr("merge %d has %d parts", i, len(p))
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}
