package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

func validSPM() *Vocab {
	v := &Vocab{Model: ModelSPM, BOS: 1, EOS: 2, UNK: 0, PAD: NoToken, EOT: NoToken, EOM: NoToken, AddBOS: true, AddSpacePrefix: true}
	v.Tokens = []string{"<unk>", "<s>", "</s>", "\u2581a", "a"}
	v.Types = []TokenType{TypeUnknown, TypeControl, TypeControl, TypeNormal, TypeNormal}
	return v
}

// TestVocabErrors: malformed vocabularies give typed errors naming the field.
func TestVocabErrors(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(v *Vocab)
		field string
	}{
		{"empty", func(v *Vocab) { v.Tokens, v.Types = nil, nil }, "tokens"},
		{"scores length", func(v *Vocab) { v.Scores = []float32{1} }, "scores"},
		{"types length", func(v *Vocab) { v.Types = v.Types[:2] }, "token_type"},
		{"bad type", func(v *Vocab) { v.Types[3] = 9 }, "token_type[3]"},
		{"bad byte token", func(v *Vocab) { v.Types[3] = TypeByte }, "tokens[3]"},
		{"bos out of range", func(v *Vocab) { v.BOS = 5 }, "bos_token_id"},
		{"eos negative", func(v *Vocab) { v.EOS = -7 }, "eos_token_id"},
		{"add_bos without bos", func(v *Vocab) { v.BOS = NoToken }, "add_bos_token"},
		{"no byte fallback", func(v *Vocab) { v.UNK = NoToken }, "tokens"},
		{"bad merge", func(v *Vocab) { v.Model, v.Pre, v.Merges = ModelBPE, PreGPT2, []string{"ab"} }, "merges[0]"},
	}
	for _, c := range cases {
		v := validSPM()
		c.edit(v)
		_, err := New(v)
		var ve *VocabError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: got %v, want a *VocabError for %s", c.name, err, c.field)
		}
	}
	if _, err := New(validSPM()); err != nil {
		t.Fatal(err)
	}

	var ue *UnsupportedError
	v := validSPM()
	v.Model = "bert"
	if _, err := New(v); !errors.As(err, &ue) || ue.Name != "bert" {
		t.Errorf("model bert: %v", err)
	}
	v = validSPM()
	v.Model, v.Pre = ModelBPE, "default"
	if _, err := New(v); !errors.As(err, &ue) || !strings.Contains(err.Error(), "llama-bpe") {
		t.Errorf("pre default: %v", err)
	}
}

// TestHFErrors: malformed tokenizer.json files give typed errors.
func TestHFErrors(t *testing.T) {
	cases := map[string]string{
		"not json":      `{"model":`,
		"no model":      `{}`,
		"wordpiece":     `{"model":{"type":"WordPiece","vocab":{"a":0}}}`,
		"negative id":   `{"model":{"type":"BPE","vocab":{"a":-1}},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"duplicate id":  `{"model":{"type":"BPE","vocab":{"a":0,"b":0}},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"bad merges":    `{"model":{"type":"BPE","vocab":{"a":0},"merges":[1,2]},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"bad pair":      `{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a"]]},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"unknown regex": `{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"x"}},{"type":"ByteLevel","use_regex":false}]}}`,
		"plain BPE":     `{"model":{"type":"BPE","vocab":{"a":0}}}`,
		"added no id":   `{"added_tokens":[{"content":"x"}],"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"huge id":       `{"model":{"type":"BPE","vocab":{"a":99999999}},"pre_tokenizer":{"type":"ByteLevel"}}`,
		"bad pretok":    `{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":[1]}`,
		"empty vocab":   `{"model":{"type":"BPE","vocab":{}},"pre_tokenizer":{"type":"ByteLevel"}}`,
	}
	for name, js := range cases {
		_, err := FromHF([]byte(js))
		var ve *VocabError
		var ue *UnsupportedError
		if !errors.As(err, &ve) && !errors.As(err, &ue) {
			t.Errorf("%s: got %v (%T), want a typed error", name, err, err)
		}
	}
	good := `{"model":{"type":"BPE","vocab":{"a":0,"<s>":1}},"pre_tokenizer":{"type":"ByteLevel"}}`
	if _, err := FromHF([]byte(good)); err != nil {
		t.Fatalf("minimal byte-level file: %v", err)
	}
	for name, cfg := range map[string]string{
		"not json":       `[`,
		"unknown bos":    `{"bos_token":"<nope>"}`,
		"bad bos":        `{"bos_token":7}`,
		"bad template":   `{"chat_template":7}`,
		"add_eos no eos": `{"add_eos_token":true,"eos_token":null}`,
	} {
		_, err := FromHFConfig([]byte(good), []byte(cfg))
		var ve *VocabError
		if !errors.As(err, &ve) {
			t.Errorf("config %s: got %v, want a *VocabError", name, err)
		}
	}
}
