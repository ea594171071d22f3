package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Hugging Face tokenizer.json support.
//
// Accepted: model type "BPE" with
//   - a ByteLevel pre-tokenizer (byte-level BPE, ModelBPE): either preceded
//     by a Split whose regex is Llama 3's or Qwen2's (Pre "llama-bpe" /
//     "qwen2"), or on its own with use_regex (Pre "gpt-2");
//   - or SentencePiece-style (ModelSPM): byte_fallback, or a normalizer or
//     pre-tokenizer that turns spaces into U+2581. Scores are derived from
//     the merges: a token made by merge rank r scores -r, so that merging by
//     score follows the merge order.
//
// Not applied: normalizers other than the space escaping (Qwen's NFC: the
// text is tokenized as given, as llama.cpp does), added tokens' lstrip /
// rstrip / single_word flags, and post-processor templates other than
// reading which token is BOS.

const (
	maxJSON  = 256 << 20
	maxHoles = 1 << 16
)

// The two pre-tokenizer regular expressions recognised in a Split.
const (
	hfRegexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

type hfFile struct {
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         *hfModel        `json:"model"`
}

type hfAdded struct {
	ID      *int    `json:"id"`
	Content *string `json:"content"`
	Special bool    `json:"special"`
}

type hfModel struct {
	Type         string          `json:"type"`
	Vocab        map[string]int  `json:"vocab"`
	Merges       json.RawMessage `json:"merges"`
	ByteFallback bool            `json:"byte_fallback"`
	IgnoreMerges bool            `json:"ignore_merges"`
	UnkToken     *string         `json:"unk_token"`
}

// hfComponent is any normalizer, pre-tokenizer or post-processor node; only
// the fields this package reads.
type hfComponent struct {
	Type          string            `json:"type"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pattern       *struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content       *string           `json:"content"`
	Prepend       *string           `json:"prepend"`
	UseRegex      *bool             `json:"use_regex"`
	Replacement   *string           `json:"replacement"`
	PrependScheme *string           `json:"prepend_scheme"`
	AddPrefixSpc  *bool             `json:"add_prefix_space"`
	Single        []json.RawMessage `json:"single"`
	Processors    []json.RawMessage `json:"processors"`
}

// walk decodes a component tree and calls fn on every node.
func walk(raw json.RawMessage, field string, fn func(c *hfComponent)) error {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return vocabErr(field, "%v", err)
	}
	fn(&c)
	for i, sub := range append(append(c.Pretokenizers, c.Normalizers...), c.Processors...) {
		if err := walk(sub, fmt.Sprintf("%s[%d]", field, i), fn); err != nil {
			return err
		}
	}
	return nil
}

// hfConfig is the part of tokenizer_config.json read here.
type hfConfig struct {
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	UNK          json.RawMessage `json:"unk_token"`
	PAD          json.RawMessage `json:"pad_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// tokenText reads a special token entry: a string, {"content": "..."} or null.
func tokenText(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", false, fmt.Errorf("want a string or an object with content, got %.40q", raw)
	}
	return *o.Content, true, nil
}

// FromHF builds a tokenizer from a Hugging Face tokenizer.json.
func FromHF(tokenizerJSON []byte) (*Tokenizer, error) {
	v, err := HFVocab(tokenizerJSON, nil)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// FromHFConfig is FromHF with the model's tokenizer_config.json, which says
// which tokens are BOS / EOS / PAD, whether BOS / EOS are added, and holds
// the chat template.
func FromHFConfig(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	v, err := HFVocab(tokenizerJSON, tokenizerConfigJSON)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// HFVocab reads a tokenizer.json (and, when not nil, tokenizer_config.json)
// into a Vocab.
func HFVocab(tokenizerJSON, tokenizerConfigJSON []byte) (*Vocab, error) {
	if len(tokenizerJSON) > maxJSON {
		return nil, vocabErr("tokenizer.json", "%d bytes, more than the limit %d", len(tokenizerJSON), maxJSON)
	}
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, vocabErr("tokenizer.json", "%v", err)
	}
	if f.Model == nil {
		return nil, vocabErr("tokenizer.json: model", "missing")
	}
	if f.Model.Type != "BPE" {
		return nil, &UnsupportedError{What: "tokenizer.json model type", Name: f.Model.Type, Supported: []string{"BPE"}}
	}
	v := &Vocab{BOS: NoToken, EOS: NoToken, UNK: NoToken, PAD: NoToken, EOT: NoToken, EOM: NoToken}

	// Tokens: the model's vocabulary plus the added tokens; ids not used by
	// either become unused "[PADn]" tokens, as llama.cpp's converter does.
	n := 0
	for s, id := range f.Model.Vocab {
		if id < 0 || id >= maxTokens {
			return nil, vocabErr("tokenizer.json: model.vocab", "token %q has id %d outside [0, %d)", s, id, maxTokens)
		}
		n = max(n, id+1)
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil || a.Content == nil {
			return nil, vocabErr(fmt.Sprintf("tokenizer.json: added_tokens[%d]", i), "missing id or content")
		}
		if *a.ID < 0 || *a.ID >= maxTokens {
			return nil, vocabErr(fmt.Sprintf("tokenizer.json: added_tokens[%d]", i), "id %d outside [0, %d)", *a.ID, maxTokens)
		}
		n = max(n, *a.ID+1)
	}
	if n == 0 {
		return nil, vocabErr("tokenizer.json: model.vocab", "empty vocabulary")
	}
	// Ids are dense in real files; a bounded number of holes keeps a small
	// hostile file from asking for millions of filler tokens.
	if entries := len(f.Model.Vocab) + len(f.AddedTokens); n > entries+maxHoles {
		return nil, vocabErr("tokenizer.json: model.vocab", "largest id %d for only %d tokens (more than %d unused ids)", n-1, entries, maxHoles)
	}
	v.Tokens = make([]string, n)
	v.Types = make([]TokenType, n)
	have := make([]bool, n)
	for s, id := range f.Model.Vocab {
		if have[id] {
			return nil, vocabErr("tokenizer.json: model.vocab", "id %d used by %q and %q", id, v.Tokens[id], s)
		}
		v.Tokens[id], v.Types[id], have[id] = s, TypeNormal, true
	}
	for _, a := range f.AddedTokens {
		id, s := *a.ID, *a.Content
		v.Tokens[id], have[id] = s, true
		switch {
		case a.Special || looksSpecial(s):
			v.Types[id] = TypeControl
		default:
			v.Types[id] = TypeUserDefined
		}
	}
	for id := range v.Tokens {
		if !have[id] {
			v.Tokens[id], v.Types[id] = fmt.Sprintf("[PAD%d]", id), TypeUnused
		}
	}

	merges, err := hfMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}

	// Which kind of tokenizer: look at the normalizer and pre-tokenizer.
	var byteLevel, byteLevelRegex, spaceEscaped bool
	var splitRegex []string
	visit := func(c *hfComponent) {
		switch c.Type {
		case "ByteLevel":
			byteLevel = true
			if c.UseRegex == nil || *c.UseRegex {
				byteLevelRegex = true
			}
		case "Split":
			if c.Pattern != nil && c.Pattern.Regex != nil {
				splitRegex = append(splitRegex, *c.Pattern.Regex)
			}
		case "Replace":
			if c.Pattern != nil && c.Pattern.String != nil && *c.Pattern.String == " " && c.Content != nil && *c.Content == spaceEscape {
				spaceEscaped = true
			}
		case "Prepend":
			if c.Prepend != nil && *c.Prepend == spaceEscape {
				v.AddSpacePrefix = true
			}
		case "Metaspace":
			spaceEscaped = true
			if c.PrependScheme == nil || *c.PrependScheme != "never" {
				if c.AddPrefixSpc == nil || *c.AddPrefixSpc {
					v.AddSpacePrefix = true
				}
			}
		}
	}
	if err := walk(f.Normalizer, "tokenizer.json: normalizer", visit); err != nil {
		return nil, err
	}
	if err := walk(f.PreTokenizer, "tokenizer.json: pre_tokenizer", visit); err != nil {
		return nil, err
	}

	switch {
	case byteLevel:
		v.Model = ModelBPE
		v.Merges = merges
		v.IgnoreMerges = f.Model.IgnoreMerges
		switch {
		case len(splitRegex) == 1 && splitRegex[0] == hfRegexLlama3:
			v.Pre = PreLlama3
			v.AddBOS = true // llama.cpp's default for this pre-tokenizer
		case len(splitRegex) == 1 && splitRegex[0] == hfRegexQwen2:
			v.Pre = PreQwen2
		case len(splitRegex) == 0 && byteLevelRegex:
			v.Pre = PreGPT2
		case len(splitRegex) > 0:
			return nil, &UnsupportedError{What: "tokenizer.json pre-tokenizer regex", Name: strings.Join(splitRegex, " | "), Supported: []string{"Llama 3's", "Qwen2's"}}
		default:
			return nil, &UnsupportedError{What: "tokenizer.json pre-tokenizer", Name: "ByteLevel without a regex", Supported: SupportedPre()}
		}
	case f.Model.ByteFallback || spaceEscaped:
		v.Model = ModelSPM
		v.AddBOS = true
		v.Scores = spmScoresFromMerges(v.Tokens, merges)
		for id, s := range v.Tokens {
			if v.Types[id] == TypeNormal {
				if _, ok := parseByteToken(s); ok && f.Model.ByteFallback {
					v.Types[id] = TypeByte
				}
			}
		}
	default:
		return nil, &UnsupportedError{What: "tokenizer.json BPE variant", Name: "neither byte-level nor SentencePiece-style", Supported: []string{"ByteLevel", "byte_fallback / Metaspace"}}
	}

	ids := make(map[string]int, n)
	for id, s := range v.Tokens {
		ids[s] = id
	}
	lookup := func(s string) int {
		if id, ok := ids[s]; ok {
			return id
		}
		return NoToken
	}
	if f.Model.UnkToken != nil {
		v.UNK = lookup(*f.Model.UnkToken)
		if v.UNK != NoToken {
			v.Types[v.UNK] = TypeUnknown
		}
	}
	// BOS from the post-processor template (the special token before $A).
	var bosText string
	_ = walk(f.PostProcessor, "tokenizer.json: post_processor", func(c *hfComponent) {
		if c.Type != "TemplateProcessing" || bosText != "" {
			return
		}
		for _, item := range c.Single {
			var it struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *json.RawMessage `json:"Sequence"`
			}
			if json.Unmarshal(item, &it) != nil || it.Sequence != nil {
				return
			}
			if it.SpecialToken != nil {
				bosText = it.SpecialToken.ID
				return
			}
		}
	})
	if bosText != "" {
		v.BOS = lookup(bosText)
		v.AddBOS = v.BOS != NoToken
	}
	// Otherwise the usual names.
	first := func(names ...string) int {
		for _, s := range names {
			if id := lookup(s); id != NoToken {
				return id
			}
		}
		return NoToken
	}
	if v.BOS == NoToken {
		v.BOS = first("<|begin_of_text|>", "<s>", "<bos>")
	}
	v.EOS = first("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")
	v.EOT = first("<|eot_id|>", "<|im_end|>", "<end_of_turn>")
	v.EOM = first("<|eom_id|>")

	if tokenizerConfigJSON != nil {
		if err := applyHFConfig(v, tokenizerConfigJSON, lookup); err != nil {
			return nil, err
		}
	}
	if v.BOS == NoToken {
		v.AddBOS = false
	}
	return v, nil
}

func applyHFConfig(v *Vocab, data []byte, lookup func(string) int) error {
	if len(data) > maxJSON {
		return vocabErr("tokenizer_config.json", "%d bytes, more than the limit %d", len(data), maxJSON)
	}
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return vocabErr("tokenizer_config.json", "%v", err)
	}
	for _, sp := range []struct {
		name string
		raw  json.RawMessage
		id   *int
	}{{"bos_token", c.BOS, &v.BOS}, {"eos_token", c.EOS, &v.EOS}, {"unk_token", c.UNK, &v.UNK}, {"pad_token", c.PAD, &v.PAD}} {
		if sp.raw == nil {
			continue
		}
		s, ok, err := tokenText(sp.raw)
		if err != nil {
			return vocabErr("tokenizer_config.json: "+sp.name, "%v", err)
		}
		if !ok {
			*sp.id = NoToken
			continue
		}
		id := lookup(s)
		if id == NoToken {
			return vocabErr("tokenizer_config.json: "+sp.name, "token %q is not in the vocabulary", s)
		}
		*sp.id = id
	}
	if c.AddBOS != nil {
		v.AddBOS = *c.AddBOS
	}
	if c.AddEOS != nil {
		v.AddEOS = *c.AddEOS
	}
	if len(c.ChatTemplate) > 0 && !bytes.Equal(bytes.TrimSpace(c.ChatTemplate), []byte("null")) {
		var s string
		if err := json.Unmarshal(c.ChatTemplate, &s); err == nil {
			v.ChatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(c.ChatTemplate, &named); err != nil {
				return vocabErr("tokenizer_config.json: chat_template", "want a string or a list of {name, template}")
			}
			for i, t := range named {
				if t.Name == "default" || i == 0 {
					v.ChatTemplate = t.Template
				}
			}
		}
	}
	if v.AddEOS && v.EOS == NoToken {
		return vocabErr("tokenizer_config.json: add_eos_token", "set but there is no EOS token")
	}
	return nil
}

// hfMerges reads merges written as "a b" strings or as ["a", "b"] pairs.
func hfMerges(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, vocabErr("tokenizer.json: model.merges", "want strings \"a b\" or pairs [\"a\", \"b\"]: %v", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, vocabErr(fmt.Sprintf("tokenizer.json: model.merges[%d]", i), "want a pair of non-empty strings, got %q", p)
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// spmScoresFromMerges gives each token made by a merge the score -rank of
// the first merge that makes it, and every other token a score below all of
// those (byte and single-character tokens are never the result of merging
// two symbols, so their score does not matter).
func spmScoresFromMerges(tokens []string, merges []string) []float32 {
	ids := make(map[string]int, len(tokens))
	for id, s := range tokens {
		ids[s] = id
	}
	scores := make([]float32, len(tokens))
	set := make([]bool, len(tokens))
	for rank, m := range merges {
		a, b, ok := splitMerge(m)
		if !ok {
			continue
		}
		if id, ok := ids[a+b]; ok && !set[id] {
			scores[id], set[id] = -float32(rank), true
		}
	}
	floor := -float32(len(merges))
	for id := range scores {
		if !set[id] {
			scores[id] = floor - 1
		}
	}
	return scores
}

// looksSpecial is llama.cpp's converter's rule for added tokens that are
// not flagged special but are control tokens by their look.
func looksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return (strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") && len(s) >= 4) ||
		(strings.HasPrefix(s, "<\uff5c") && strings.HasSuffix(s, "\uff5c>")) ||
		(strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">"))
}
