package tokenizer

import (
	"unicode/utf8"
)

// bpeModel is byte-level BPE (GPT-2 style, llama.cpp's llm_tokenizer_bpe):
// the text is split into words by the pre-tokenizer, each word's bytes
// start as one symbol each (in the vocabulary a byte b is spelt as the
// character byteRune[b]), and the adjacent pair with the lowest merge rank
// is merged, repeatedly.
//
// Merging works on interned ids rather than strings: every token text,
// every merge part and every merge result has an id (ids from len(Tokens)
// up name merge results that are not tokens), so a merge is a map lookup on
// a pair of ints.
type bpeModel struct {
	t       *Tokenizer
	split   func(text string, dst []int) []int // pre-tokenizer: appends word end offsets
	byteSym [256]int32                         // interned id of each byte's symbol, -1 if none
	merges  map[uint64]bpeMerge
	extra   []string         // texts of interned ids >= len(Tokens)
	wordID  map[string]int32 // IgnoreMerges: a word's raw bytes -> token id
}

type bpeMerge struct {
	rank   int32
	result int32
}

func newBPE(t *Tokenizer) (*bpeModel, error) {
	m := &bpeModel{t: t}
	switch preAliases[t.v.Pre] {
	case PreGPT2:
		m.split = splitGPT2
	case PreLlama3:
		m.split = splitLlama3
	case PreQwen2:
		m.split = splitQwen2
	}
	n := len(t.v.Tokens)
	intern := make(map[string]int32, n+len(t.v.Merges))
	for s, id := range t.tokenID {
		intern[s] = int32(id)
	}
	get := func(s string) int32 {
		if id, ok := intern[s]; ok {
			return id
		}
		id := int32(n + len(m.extra))
		m.extra = append(m.extra, s)
		intern[s] = id
		return id
	}
	m.merges = make(map[uint64]bpeMerge, len(t.v.Merges))
	for rank, mg := range t.v.Merges {
		a, b, _ := splitMerge(mg) // checked in Vocab.check
		l, r := get(a), get(b)
		key := uint64(uint32(l))<<32 | uint64(uint32(r))
		if _, dup := m.merges[key]; dup {
			continue // the first (lowest) rank of a repeated merge counts
		}
		m.merges[key] = bpeMerge{rank: int32(rank), result: get(a + b)}
	}
	for b := 0; b < 256; b++ {
		m.byteSym[b] = -1
		if id, ok := intern[string(byteRune[b])]; ok {
			m.byteSym[b] = id
		}
	}
	if t.v.IgnoreMerges {
		m.wordID = make(map[string]int32)
		for s, id := range t.tokenID {
			if raw, ok := unmapBytes(s); ok {
				m.wordID[raw] = int32(id)
			}
		}
	}
	return m, nil
}

// unmapBytes turns a token text spelt in byte characters back into bytes;
// ok is false when a character is not a byte character.
func unmapBytes(s string) (string, bool) {
	buf := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeByte(r)
		if !ok {
			return "", false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}

func (m *bpeModel) encodeFragments(text string, frags []fragment, out []int) []int {
	var s bpeSession
	for _, f := range frags {
		if f.tok != NoToken {
			out = append(out, f.tok)
			continue
		}
		raw := text[f.start:f.end]
		s.ends = m.split(raw, s.ends[:0])
		start := 0
		for _, end := range s.ends {
			out = s.word(m, raw[start:end], out)
			start = end
		}
	}
	return out
}

type bpeSymbol struct {
	prev, next int
	start, end int // byte range in the word
	id         int32
}

type bpeBigram struct {
	left, right int
	l, r        int32 // the pair's ids when queued
	rank        int32
}

func (a bpeBigram) before(b bpeBigram) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

type bpeSession struct {
	ends []int
	sym  []bpeSymbol
	heap []bpeBigram
}

func (s *bpeSession) word(m *bpeModel, w string, out []int) []int {
	if w == "" {
		return out
	}
	if m.wordID != nil {
		if id, ok := m.wordID[w]; ok {
			return append(out, int(id))
		}
	}
	s.sym = s.sym[:0]
	s.heap = s.heap[:0]
	for i := 0; i < len(w); i++ {
		next := i + 1
		if next == len(w) {
			next = -1
		}
		s.sym = append(s.sym, bpeSymbol{prev: i - 1, next: next, start: i, end: i + 1, id: m.byteSym[w[i]]})
	}
	for i := 1; i < len(s.sym); i++ {
		s.tryAdd(m, i-1, i)
	}
	for len(s.heap) > 0 {
		bg := s.pop()
		l, r := &s.sym[bg.left], &s.sym[bg.right]
		if l.end == l.start || r.end == r.start || l.id != bg.l || r.id != bg.r {
			continue // outdated
		}
		l.end = r.end
		l.id = m.merges[pairKey(bg.l, bg.r)].result
		r.start, r.end = 0, 0
		l.next = r.next
		if r.next >= 0 {
			s.sym[r.next].prev = bg.left
		}
		s.tryAdd(m, l.prev, bg.left)
		s.tryAdd(m, bg.left, l.next)
	}
	n := len(m.t.v.Tokens)
	for i := 0; i != -1; i = s.sym[i].next {
		sy := s.sym[i]
		if sy.id >= 0 && int(sy.id) < n {
			out = append(out, int(sy.id))
			continue
		}
		// Not a token: emit the single-byte tokens among the bytes of its
		// spelling, as llama.cpp does (only reachable with vocabularies that
		// lack byte characters or merge into non-tokens).
		mapped := mapBytes(w[sy.start:sy.end])
		for j := 0; j < len(mapped); j++ {
			if id, ok := m.t.tokenID[mapped[j:j+1]]; ok {
				out = append(out, id)
			}
		}
	}
	return out
}

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

func (s *bpeSession) tryAdd(m *bpeModel, left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.sym[left].id, s.sym[right].id
	if l < 0 || r < 0 {
		return
	}
	mg, ok := m.merges[pairKey(l, r)]
	if !ok {
		return
	}
	s.push(bpeBigram{left: left, right: right, l: l, r: r, rank: mg.rank})
}

func (s *bpeSession) push(b bpeBigram) { s.heap = heapPush(s.heap, b) }

func (s *bpeSession) pop() bpeBigram {
	var top bpeBigram
	s.heap, top = heapPop(s.heap)
	return top
}

// byteRune is GPT-2's byte-to-character table: printable Latin-1 bytes
// stand for themselves, the other 68 bytes for U+0100 onwards in order.
var byteRune = func() (t [256]rune) {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = next
			next++
		}
	}
	return t
}()

// runeByte inverts byteRune.
func runeByte(r rune) (byte, bool) {
	switch {
	case r < 0 || r >= 256+68:
		return 0, false
	case r >= 256:
		return runeToByteHigh[r-256], true
	case byteRune[r] == r:
		return byte(r), true
	}
	return 0, false
}

var runeToByteHigh = func() (t [68]byte) {
	for b := 0; b < 256; b++ {
		if r := byteRune[b]; r >= 256 {
			t[r-256] = byte(b)
		}
	}
	return t
}()

// mapBytes spells bytes in byte characters.
func mapBytes(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteRune[s[i]])
	}
	return string(buf)
}
