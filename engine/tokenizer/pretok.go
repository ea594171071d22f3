package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizers: hand-written scanners equivalent to the regular
// expressions of the Hugging Face tokenizers (Go's regexp has no
// look-ahead). Each appends the end offset of every word of text to dst;
// the words cover text without gaps. Invalid UTF-8 bytes count as one
// character each, of the "other" class (not letter, number or space).
//
// GPT-2:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Llama 3 (llama-bpe), with n = 3; Qwen2 with \p{N} alone (n = 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,n}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+

type class uint8

const (
	clOther class = iota
	clLetter
	clNumber
	clSpace
)

// classify returns the class of the character at text[i] and its length.
func classify(text string, i int) (class, rune, int) {
	c := text[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(text[i:])
	if r == utf8.RuneError && n == 1 {
		return clOther, r, 1
	}
	switch {
	case unicode.IsLetter(r):
		return clLetter, r, n
	case unicode.IsNumber(r):
		return clNumber, r, n
	case unicode.IsSpace(r):
		return clSpace, r, n
	}
	return clOther, r, n
}

var asciiClass = func() (t [128]class) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clLetter
		case c >= '0' && c <= '9':
			t[c] = clNumber
		case c == ' ', c == '\t', c == '\n', c == '\v', c == '\f', c == '\r':
			t[c] = clSpace
		default:
			t[c] = clOther
		}
	}
	return t
}()

// classAt is classify with an end-of-text sentinel (ok false).
func classAt(text string, i int) (cl class, r rune, n int, ok bool) {
	if i >= len(text) {
		return 0, 0, 0, false
	}
	cl, r, n = classify(text, i)
	return cl, r, n, true
}

// runOf returns the end of the run of class cl starting at i.
func runOf(text string, i int, cl class) int {
	for i < len(text) {
		c, _, n := classify(text, i)
		if c != cl {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at i (0 if
// none), ignoring ASCII case when fold is set.
func contraction(text string, i int, fold bool) int {
	if text[i] != '\'' || i+1 >= len(text) {
		return 0
	}
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(text[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(text) && lower(text[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(text) && lower(text[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// spaceRunTail handles \s+(?!\S)|\s+ for the whitespace run [i, j): the
// whole run at the end of text, otherwise all but its last character (so
// that the last space joins the next word), or the single character.
func spaceRunTail(text string, i, j int) int {
	if j >= len(text) {
		return j
	}
	_, last := utf8.DecodeLastRuneInString(text[i:j])
	if j-last > i {
		return j - last
	}
	return j
}

func splitGPT2(text string, dst []int) []int {
	for i := 0; i < len(text); {
		i = gpt2Word(text, i)
		dst = append(dst, i)
	}
	return dst
}

func gpt2Word(text string, i int) int {
	if n := contraction(text, i, false); n > 0 {
		return i + n
	}
	cl, _, n := classify(text, i)
	if cl == clLetter || cl == clNumber || cl == clOther {
		return runOf(text, i+n, cl)
	}
	// cl == clSpace
	if text[i] == ' ' {
		if next, _, m, ok := classAt(text, i+1); ok && next != clSpace {
			return runOf(text, i+1+m, next)
		}
	}
	return spaceRunTail(text, i, runOf(text, i, clSpace))
}

func splitLlama3(text string, dst []int) []int {
	for i := 0; i < len(text); {
		i = llama3Word(text, i, 3)
		dst = append(dst, i)
	}
	return dst
}

func splitQwen2(text string, dst []int) []int {
	for i := 0; i < len(text); {
		i = llama3Word(text, i, 1)
		dst = append(dst, i)
	}
	return dst
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// crlfRun returns the end of the run of \r and \n at i.
func crlfRun(text string, i int) int {
	for i < len(text) && (text[i] == '\r' || text[i] == '\n') {
		i++
	}
	return i
}

func llama3Word(text string, i, maxDigits int) int {
	if n := contraction(text, i, true); n > 0 {
		return i + n
	}
	cl, r, n := classify(text, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cl == clLetter {
		return runOf(text, i+n, clLetter)
	}
	if cl != clNumber && !isCRLF(r) {
		if next, _, m, ok := classAt(text, i+n); ok && next == clLetter {
			return runOf(text, i+n+m, clLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if cl == clNumber {
		j := i + n
		for k := 1; k < maxDigits; k++ {
			c, _, m, ok := classAt(text, j)
			if !ok || c != clNumber {
				break
			}
			j += m
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if cl == clOther {
		return crlfRun(text, runOf(text, i+n, clOther))
	}
	if text[i] == ' ' {
		if next, _, m, ok := classAt(text, i+1); ok && next == clOther {
			return crlfRun(text, runOf(text, i+1+m, clOther))
		}
	}
	// cl == clSpace. \s*[\r\n]+ : up to the last \r or \n of the run.
	j := runOf(text, i, clSpace)
	for k := j - 1; k >= i; k-- {
		if text[k] == '\r' || text[k] == '\n' {
			return k + 1
		}
	}
	// \s+(?!\S) | \s+
	return spaceRunTail(text, i, j)
}
