package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"github.com/sparkinfer/cc/engine/gguf"
)

// GGUF metadata keys read by GGUFVocab (llama.cpp's names).
const (
	keyModel          = "tokenizer.ggml.model"
	keyPre            = "tokenizer.ggml.pre"
	keyTokens         = "tokenizer.ggml.tokens"
	keyScores         = "tokenizer.ggml.scores"
	keyTypes          = "tokenizer.ggml.token_type"
	keyMerges         = "tokenizer.ggml.merges"
	keyBOS            = "tokenizer.ggml.bos_token_id"
	keyEOS            = "tokenizer.ggml.eos_token_id"
	keyUNK            = "tokenizer.ggml.unknown_token_id"
	keyPAD            = "tokenizer.ggml.padding_token_id"
	keyEOT            = "tokenizer.ggml.eot_token_id"
	keyEOM            = "tokenizer.ggml.eom_token_id"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyChatTemplate   = "tokenizer.chat_template"
)

// FromGGUF builds the tokenizer described by a GGUF file's metadata.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := GGUFVocab(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// GGUFVocab reads the tokenizer.ggml.* metadata into a Vocab. Absent
// optional keys take llama.cpp's defaults: for "llama" BOS 1, EOS 2, UNK 0,
// add_bos true, add_space_prefix true; for "gpt2" no BOS/EOS, add_bos true
// only for the llama-bpe pre-tokenizer. A special id of 0xFFFFFFFF (or -1)
// means "none".
func GGUFVocab(f *gguf.File) (*Vocab, error) {
	if f == nil {
		return nil, vocabErr("gguf", "no file")
	}
	v := &Vocab{BOS: NoToken, EOS: NoToken, UNK: NoToken, PAD: NoToken, EOT: NoToken, EOM: NoToken}
	var err error
	if v.Model, err = f.String(keyModel); err != nil {
		return nil, ggufErr(keyModel, err)
	}
	switch v.Model {
	case ModelSPM:
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case ModelBPE:
		v.Pre = preDefault
		if _, ok := f.Value(keyPre); ok {
			if v.Pre, err = f.String(keyPre); err != nil {
				return nil, ggufErr(keyPre, err)
			}
		}
		if preAliases[v.Pre] == PreLlama3 {
			v.AddBOS, v.IgnoreMerges = true, true
		}
	default:
		return nil, &UnsupportedError{What: "tokenizer model", Name: v.Model, Supported: []string{ModelSPM, ModelBPE}}
	}
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return nil, ggufErr(keyTokens, err)
	}
	if _, ok := f.Value(keyScores); ok {
		if v.Scores, err = f.Float32s(keyScores); err != nil {
			return nil, ggufErr(keyScores, err)
		}
	}
	if _, ok := f.Value(keyTypes); ok {
		types, err := f.Int32s(keyTypes)
		if err != nil {
			return nil, ggufErr(keyTypes, err)
		}
		v.Types = make([]TokenType, len(types))
		for i, t := range types {
			v.Types[i] = TokenType(t)
		}
	}
	if _, ok := f.Value(keyMerges); ok {
		if v.Merges, err = f.Strings(keyMerges); err != nil {
			return nil, ggufErr(keyMerges, err)
		}
	}
	for _, sp := range []struct {
		key string
		id  *int
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyUNK, &v.UNK}, {keyPAD, &v.PAD}, {keyEOT, &v.EOT}, {keyEOM, &v.EOM}} {
		if _, ok := f.Value(sp.key); !ok {
			continue
		}
		id, err := f.Int(sp.key)
		if err != nil {
			return nil, ggufErr(sp.key, err)
		}
		switch {
		case id == -1 || id == math.MaxUint32:
			*sp.id = NoToken
		case id < 0 || id >= int64(len(v.Tokens)):
			return nil, vocabErr(sp.key, "id %d outside the vocabulary of %d tokens", id, len(v.Tokens))
		default:
			*sp.id = int(id)
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}, {keyAddSpacePrefix, &v.AddSpacePrefix}} {
		if _, ok := f.Value(b.key); !ok {
			continue
		}
		if *b.dst, err = f.Bool(b.key); err != nil {
			return nil, ggufErr(b.key, err)
		}
	}
	if _, ok := f.Value(keyChatTemplate); ok {
		if v.ChatTemplate, err = f.String(keyChatTemplate); err != nil {
			return nil, ggufErr(keyChatTemplate, err)
		}
	}
	if v.BOS == NoToken {
		v.AddBOS = false
	}
	if v.EOS == NoToken {
		v.AddEOS = false
	}
	return v, nil
}

func ggufErr(key string, err error) error {
	var ke *gguf.KeyError
	if errors.As(err, &ke) {
		return vocabErr(key, "%s", ke.Error())
	}
	return vocabErr(key, "%v", fmt.Sprint(err))
}
