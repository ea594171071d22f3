package tokenizer

import (
	"cmp"
	"slices"
	"strings"
)

// Tokenizer encodes text to token ids and decodes ids to text. It is
// immutable after New and safe for concurrent use.
type Tokenizer struct {
	v       Vocab       // copy of the checked vocabulary (slices shared, never written)
	types   []TokenType // per token, never nil
	tokenID map[string]int
	pieces  []string // decoded bytes of each token when rendered as text (control tokens: "")
	eog     []bool
	special []int // ids split out of the text before tokenizing, longest text first

	spm *spmModel
	bpe *bpeModel
}

// New checks v and builds its tokenizer. The Tokenizer keeps v's slices:
// the caller must not modify them afterwards.
func New(v *Vocab) (*Tokenizer, error) {
	if v == nil {
		return nil, vocabErr("vocab", "missing")
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	t := &Tokenizer{v: *v}
	n := len(v.Tokens)
	t.types = make([]TokenType, n)
	for i := range t.types {
		t.types[i] = TypeNormal
		if v.Types != nil {
			t.types[i] = v.Types[i]
		}
	}
	t.tokenID = make(map[string]int, n)
	for i, s := range v.Tokens {
		t.tokenID[s] = i // the last of duplicate texts wins, as in llama.cpp
	}
	// End-of-generation set: EOS, EOT, EOM and the tokens named in eogNames,
	// which are treated as control tokens (llama.cpp does the same).
	t.eog = make([]bool, n)
	for _, id := range []int{v.EOS, v.EOT, v.EOM} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	for name := range eogNames {
		if id, ok := t.tokenID[name]; ok {
			t.eog[id] = true
			if t.types[id] != TypeControl {
				t.types[id] = TypeControl
			}
		}
	}
	for id, typ := range t.types {
		if (typ == TypeControl || typ == TypeUserDefined || typ == TypeUnknown) && v.Tokens[id] != "" {
			t.special = append(t.special, id)
		}
	}
	slices.SortStableFunc(t.special, func(a, b int) int {
		return cmp.Compare(len(v.Tokens[b]), len(v.Tokens[a]))
	})
	var err error
	switch v.Model {
	case ModelSPM:
		t.spm, err = newSPM(t)
	case ModelBPE:
		t.bpe, err = newBPE(t)
	}
	if err != nil {
		return nil, err
	}
	t.pieces = make([]string, n)
	for id := range t.pieces {
		t.pieces[id] = t.renderPiece(id)
	}
	return t, nil
}

// Vocab returns a copy of the vocabulary's scalar fields; the slices are
// shared and must not be modified.
func (t *Tokenizer) Vocab() Vocab { return t.v }

// BOS returns the beginning-of-sequence id, or NoToken.
func (t *Tokenizer) BOS() int { return t.v.BOS }

// EOS returns the end-of-sequence id, or NoToken.
func (t *Tokenizer) EOS() int { return t.v.EOS }

// IsEOG reports whether id ends generation (EOS, end of turn, ...).
func (t *Tokenizer) IsEOG(id int) bool { return id >= 0 && id < len(t.eog) && t.eog[id] }

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.v.Tokens) }

// Token returns the token's text as stored in the vocabulary ("" for an id
// outside it).
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.v.Tokens) {
		return ""
	}
	return t.v.Tokens[id]
}

// TokenType returns the token's type (TypeUndefined for an id outside the
// vocabulary).
func (t *Tokenizer) TokenType(id int) TokenType {
	if id < 0 || id >= len(t.types) {
		return TypeUndefined
	}
	return t.types[id]
}

// Encode tokenizes text. With addSpecial the vocabulary's BOS / EOS are
// added when its AddBOS / AddEOS say so. With parseSpecial the texts of
// control tokens (e.g. "<|eot_id|>") in text become those tokens; without
// it they are tokenized as plain text. User-defined tokens are always
// recognised, as in llama.cpp and Hugging Face tokenizers.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int {
	frags := t.partition(text, parseSpecial)
	out := make([]int, 0, len(text)/3+2)
	if addSpecial && t.v.AddBOS {
		out = append(out, t.v.BOS)
	}
	if t.spm != nil {
		out = t.spm.encodeFragments(text, frags, out)
	} else {
		out = t.bpe.encodeFragments(text, frags, out)
	}
	if addSpecial && t.v.AddEOS {
		out = append(out, t.v.EOS)
	}
	return out
}

// fragment is a piece of the input: raw text [start, end) or a special token.
type fragment struct {
	tok        int // NoToken for raw text
	start, end int
}

// partition splits text at occurrences of special tokens, longest token
// first (llama.cpp's tokenizer_st_partition). Control and unknown tokens
// are only split out with parseSpecial; user-defined ones always.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{tok: NoToken, start: 0, end: len(text)}}
	if text == "" {
		return nil
	}
	for _, id := range t.special {
		typ := t.types[id]
		if !parseSpecial && (typ == TypeControl || typ == TypeUnknown) {
			continue
		}
		s := t.v.Tokens[id]
		if !strings.Contains(text, s) {
			continue
		}
		var next []fragment
		for _, f := range frags {
			if f.tok != NoToken {
				next = append(next, f)
				continue
			}
			start := f.start
			for {
				i := strings.Index(text[start:f.end], s)
				if i < 0 {
					break
				}
				if i > 0 {
					next = append(next, fragment{tok: NoToken, start: start, end: start + i})
				}
				next = append(next, fragment{tok: id, start: start + i, end: start + i + len(s)})
				start += i + len(s)
			}
			if start < f.end {
				next = append(next, fragment{tok: NoToken, start: start, end: f.end})
			}
		}
		frags = next
	}
	return frags
}
