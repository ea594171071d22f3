package tokenizer

import (
	"fmt"
	"strings"
)

// TokenType is a token's kind, with the numeric values of the GGUF key
// tokenizer.ggml.token_type (llama.cpp's llama_token_type).
type TokenType int32

// Token types.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

func (t TokenType) String() string {
	switch t {
	case TypeUndefined:
		return "undefined"
	case TypeNormal:
		return "normal"
	case TypeUnknown:
		return "unknown"
	case TypeControl:
		return "control"
	case TypeUserDefined:
		return "user-defined"
	case TypeUnused:
		return "unused"
	case TypeByte:
		return "byte"
	}
	return fmt.Sprintf("type(%d)", int32(t))
}

// Tokenizer model kinds (tokenizer.ggml.model).
const (
	ModelSPM = "llama" // SentencePiece-style: merge by score, byte fallback
	ModelBPE = "gpt2"  // byte-level BPE: merge by rank, pre-tokenizer regex
)

// Pre-tokenizer names (tokenizer.ggml.pre) supported for ModelBPE.
const (
	PreGPT2     = "gpt-2"
	PreLlama3   = "llama-bpe"
	PreQwen2    = "qwen2"
	preDefault  = "default"
	maxTokens   = 1 << 22 // 4M tokens: far above any real vocabulary
	maxMerges   = 1 << 23
	maxTokenLen = 1 << 16
)

// preAliases maps the other names llama.cpp accepts for the same splitting
// rules to the canonical ones above.
var preAliases = map[string]string{
	"gpt-2":            PreGPT2,
	"gpt2":             PreGPT2,
	"phi-2":            PreGPT2,
	"llama-bpe":        PreLlama3,
	"llama3":           PreLlama3,
	"llama-v3":         PreLlama3,
	"qwen2":            PreQwen2,
	"deepseek-r1-qwen": PreQwen2,
}

// SupportedPre lists the pre-tokenizer names a byte-level BPE vocabulary may
// carry.
func SupportedPre() []string { return []string{PreGPT2, PreLlama3, PreQwen2} }

// NoToken marks an absent special token id.
const NoToken = -1

// Vocab is a tokenizer vocabulary independent of where it came from (GGUF
// metadata or a Hugging Face tokenizer.json). New checks it and builds a
// Tokenizer from it.
type Vocab struct {
	Model  string      // ModelSPM or ModelBPE
	Pre    string      // pre-tokenizer for ModelBPE: see SupportedPre; ignored for ModelSPM
	Tokens []string    // token texts, indexed by id
	Scores []float32   // per token (ModelSPM merge priority); nil means all 0
	Types  []TokenType // per token; nil means all TypeNormal
	Merges []string    // ModelBPE: "left right", lowest rank first

	BOS, EOS, UNK, PAD, EOT, EOM int // special ids, NoToken when absent

	AddBOS, AddEOS bool // Encode with addSpecial prepends BOS / appends EOS
	// AddSpacePrefix (ModelSPM): a space is prepended to the text before
	// encoding (at the start and after each special token), and the first
	// piece's leading space is dropped when decoding.
	AddSpacePrefix bool
	// IgnoreMerges (ModelBPE): a pre-tokenized word that is itself a token
	// is emitted whole (Llama 3's tokenizer.json sets ignore_merges).
	IgnoreMerges bool

	ChatTemplate string // tokenizer.chat_template, when known
}

// VocabError reports a vocabulary that cannot be used: the field and why.
type VocabError struct {
	Field  string // e.g. "tokenizer.ggml.tokens[17]", "model.merges"
	Reason string
}

func (e *VocabError) Error() string {
	return fmt.Sprintf("tokenizer: %s: %s", e.Field, e.Reason)
}

// UnsupportedError reports a tokenizer model or pre-tokenizer this package
// does not implement.
type UnsupportedError struct {
	What      string // "tokenizer model", "pre-tokenizer", ...
	Name      string
	Supported []string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("tokenizer: unsupported %s %q (supported: %s)", e.What, e.Name, strings.Join(e.Supported, ", "))
}

func vocabErr(field, format string, args ...any) error {
	return &VocabError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// eogNames are token texts that end generation whatever the metadata says
// (the list llama.cpp keeps for chat models whose EOS is not the turn end).
var eogNames = map[string]bool{
	"<|eot_id|>":         true,
	"<|im_end|>":         true,
	"<|end|>":            true,
	"<end_of_turn>":      true,
	"<|endoftext|>":      true,
	"<|eom_id|>":         true,
	"<EOT>":              true,
	"_<EOT>":             true,
	"<|end_of_text|>":    true,
	"<end_of_utterance>": true,
}

// check validates v in place of a later panic or out-of-range read.
func (v *Vocab) check() error {
	n := len(v.Tokens)
	if n == 0 {
		return vocabErr("tokens", "empty vocabulary")
	}
	if n > maxTokens {
		return vocabErr("tokens", "%d tokens, more than the limit %d", n, maxTokens)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return vocabErr("scores", "%d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return vocabErr("token_type", "%d token types for %d tokens", len(v.Types), n)
	}
	if len(v.Merges) > maxMerges {
		return vocabErr("merges", "%d merges, more than the limit %d", len(v.Merges), maxMerges)
	}
	for i, s := range v.Tokens {
		if len(s) > maxTokenLen {
			return vocabErr(fmt.Sprintf("tokens[%d]", i), "token of %d bytes, more than the limit %d", len(s), maxTokenLen)
		}
	}
	for i, t := range v.Types {
		if t < TypeUndefined || t > TypeByte {
			return vocabErr(fmt.Sprintf("token_type[%d]", i), "unknown token type %d", int32(t))
		}
		if t == TypeByte {
			if _, ok := parseByteToken(v.Tokens[i]); !ok {
				return vocabErr(fmt.Sprintf("tokens[%d]", i), "byte token %q is not of the form <0xHH>", v.Tokens[i])
			}
		}
	}
	for _, sp := range []struct {
		name string
		id   *int
	}{{"bos_token_id", &v.BOS}, {"eos_token_id", &v.EOS}, {"unknown_token_id", &v.UNK}, {"padding_token_id", &v.PAD}, {"eot_token_id", &v.EOT}, {"eom_token_id", &v.EOM}} {
		if *sp.id < NoToken || *sp.id >= n {
			return vocabErr(sp.name, "id %d outside the vocabulary of %d tokens", *sp.id, n)
		}
	}
	if v.AddBOS && v.BOS == NoToken {
		return vocabErr("add_bos_token", "set but the vocabulary has no BOS token")
	}
	if v.AddEOS && v.EOS == NoToken {
		return vocabErr("add_eos_token", "set but the vocabulary has no EOS token")
	}
	switch v.Model {
	case ModelSPM:
	case ModelBPE:
		if _, ok := preAliases[v.Pre]; !ok {
			return &UnsupportedError{What: "pre-tokenizer", Name: v.Pre, Supported: SupportedPre()}
		}
		for i, m := range v.Merges {
			if _, _, ok := splitMerge(m); !ok {
				return vocabErr(fmt.Sprintf("merges[%d]", i), "merge %q is not two parts separated by a space", m)
			}
		}
	default:
		return &UnsupportedError{What: "tokenizer model", Name: v.Model, Supported: []string{ModelSPM, ModelBPE}}
	}
	return nil
}

// splitMerge splits "left right" at the first space after the first byte,
// as llama.cpp does (so a left part may itself start with a space).
func splitMerge(m string) (string, string, bool) {
	if len(m) < 3 {
		return "", "", false
	}
	i := strings.IndexByte(m[1:], ' ')
	if i < 0 {
		return "", "", false
	}
	i++
	if i+1 >= len(m) {
		return "", "", false
	}
	return m[:i], m[i+1:], true
}

// parseByteToken parses "<0xHH>" (either case of hex digit).
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
