package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// renderPiece is the text of one token when decoding: normal tokens are
// unescaped (SPM: U+2581 -> space; BPE: byte characters -> bytes), byte
// tokens give their byte, user-defined tokens their text as is; control,
// unknown, unused and undefined tokens give nothing (llama.cpp's
// token_to_piece with special=false).
func (t *Tokenizer) renderPiece(id int) string {
	s := t.v.Tokens[id]
	switch t.types[id] {
	case TypeUserDefined:
		return s
	case TypeByte:
		if t.spm != nil {
			b, _ := parseByteToken(s) // checked in Vocab.check
			return string([]byte{b})
		}
		return ""
	case TypeNormal:
		if t.spm != nil {
			return strings.ReplaceAll(s, spaceEscape, " ")
		}
		// Byte-level BPE: each character stands for one byte; a character
		// outside the table (only in malformed vocabularies) is kept as is.
		buf := make([]byte, 0, len(s))
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if b, ok := runeByte(r); ok && !(r == utf8.RuneError && n == 1) {
				buf = append(buf, b)
			} else {
				buf = append(buf, s[i:i+n]...)
			}
			i += n
		}
		return string(buf)
	}
	return ""
}

// Piece returns the bytes token id contributes to decoded text ("" for
// control tokens and ids outside the vocabulary). The result may be part of
// a UTF-8 sequence.
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// stripsLeadingSpace: with an SPM vocabulary that prefixes a space when
// encoding, the first piece's leading space is dropped when decoding, as
// SentencePiece's decoder does (also after a BOS, which renders as
// nothing).
func (t *Tokenizer) stripsLeadingSpace() bool { return t.spm != nil && t.v.AddSpacePrefix }

// Decode returns the text of ids: the concatenation of their pieces (see
// Piece), without the leading space the SPM encoder added. Control tokens
// (BOS, EOS, ...) and ids outside the vocabulary give nothing. The result
// is the exact bytes, which may be invalid UTF-8 when ids end inside a
// character.
func (t *Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	strip := t.stripsLeadingSpace()
	for _, id := range ids {
		p := t.Piece(id)
		if p == "" {
			continue
		}
		if strip {
			p = strings.TrimPrefix(p, " ")
			strip = false
		}
		b.WriteString(p)
	}
	return b.String()
}

// StreamDecoder turns ids into text one at a time, as they are generated:
// Push returns only complete UTF-8 characters, holding back the bytes of a
// character split across tokens until its last byte arrives. Bytes that can
// never form a character (invalid UTF-8) are passed through when seen.
// The text of all Push results followed by Flush equals Decode of all ids.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
	strip   bool
}

// NewDecoder returns a StreamDecoder for text starting at the beginning of
// a sequence (the first piece's SPM leading space is dropped, as in Decode).
func (t *Tokenizer) NewDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, strip: t.stripsLeadingSpace()}
}

// Push adds one token and returns the text that is complete so far.
func (d *StreamDecoder) Push(id int) string {
	p := d.t.Piece(id)
	if p == "" {
		return ""
	}
	if d.strip {
		p = strings.TrimPrefix(p, " ")
		d.strip = false
	}
	d.pending = append(d.pending, p...)
	cut := completePrefix(d.pending)
	if cut == 0 {
		return ""
	}
	out := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns the bytes still held back (an incomplete character at the
// end of the stream) and empties the decoder's buffer.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completePrefix returns the length of the longest prefix of b that does
// not end inside a UTF-8 sequence that may still be completed.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes: look for its start among the last 3.
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return len(b) // ASCII: nothing pending
		}
		if c >= 0xC0 { // a leading byte
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}
