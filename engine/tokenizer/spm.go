package tokenizer

import (
	"fmt"
	"strings"
)

// spmModel is the SentencePiece-style tokenizer (llama.cpp's
// llm_tokenizer_spm): the text, with spaces escaped as U+2581, starts as
// one symbol per UTF-8 character; the adjacent pair whose concatenation is
// the highest-scoring token is merged, repeatedly; symbols that are not
// tokens are emitted as byte tokens <0xHH>.
type spmModel struct {
	t       *Tokenizer
	scores  []float32
	byteTok [256]int
}

const spaceEscape = "\u2581" // ▁

func newSPM(t *Tokenizer) (*spmModel, error) {
	m := &spmModel{t: t, scores: t.v.Scores}
	if m.scores == nil {
		m.scores = make([]float32, len(t.v.Tokens))
	}
	for b := 0; b < 256; b++ {
		m.byteTok[b] = NoToken
		if id, ok := t.tokenID[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTok[b] = id
		} else if id, ok := t.tokenID[string([]byte{byte(b)})]; ok {
			m.byteTok[b] = id
		} else if t.v.UNK != NoToken {
			m.byteTok[b] = t.v.UNK
		} else {
			return nil, vocabErr("tokens", "no byte token <0x%02X> and no unknown token to stand for it", b)
		}
	}
	return m, nil
}

func (m *spmModel) encodeFragments(text string, frags []fragment, out []int) []int {
	prevSpecial := true // a space is prefixed to the first fragment
	var s spmSession
	var b strings.Builder
	for _, f := range frags {
		if f.tok != NoToken {
			out = append(out, f.tok)
			prevSpecial = true
			continue
		}
		b.Reset()
		if m.t.v.AddSpacePrefix && prevSpecial {
			b.WriteString(spaceEscape)
		}
		raw := text[f.start:f.end]
		for {
			i := strings.IndexByte(raw, ' ')
			if i < 0 {
				b.WriteString(raw)
				break
			}
			b.WriteString(raw[:i])
			b.WriteString(spaceEscape)
			raw = raw[i+1:]
		}
		out = s.tokenize(m, b.String(), out)
		prevSpecial = false
	}
	return out
}

type spmSymbol struct {
	prev, next int
	start, n   int
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// less orders the queue: highest score first, then leftmost.
func (a spmBigram) before(b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

type spmSession struct {
	sym  []spmSymbol
	heap []spmBigram
}

// utf8Len is the length of a UTF-8 sequence from its first byte (1 for
// continuation and invalid bytes), as llama.cpp's unicode_len_utf8.
func utf8Len(c byte) int {
	switch {
	case c < 0xC0:
		return 1
	case c < 0xE0:
		return 2
	case c < 0xF0:
		return 3
	}
	return 4
}

func (s *spmSession) tokenize(m *spmModel, text string, out []int) []int {
	if text == "" {
		return out
	}
	s.sym = s.sym[:0]
	s.heap = s.heap[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		idx := len(s.sym)
		next := idx + 1
		if off+n == len(text) {
			next = -1
		}
		s.sym = append(s.sym, spmSymbol{prev: idx - 1, next: next, start: off, n: n})
		off += n
	}
	for i := 1; i < len(s.sym); i++ {
		s.tryAdd(m, text, i-1, i)
	}
	for len(s.heap) > 0 {
		bg := s.pop()
		l, r := &s.sym[bg.left], &s.sym[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			s.sym[r.next].prev = bg.left
		}
		s.tryAdd(m, text, l.prev, bg.left)
		s.tryAdd(m, text, bg.left, l.next)
	}
	for i := 0; i != -1; i = s.sym[i].next {
		sy := s.sym[i]
		piece := text[sy.start : sy.start+sy.n]
		if id, ok := m.t.tokenID[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			out = append(out, m.byteTok[piece[j]])
		}
	}
	return out
}

func (s *spmSession) tryAdd(m *spmModel, text string, left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.sym[left], s.sym[right]
	str := text[l.start : r.start+r.n]
	id, ok := m.t.tokenID[str]
	if !ok {
		return
	}
	s.push(spmBigram{left: left, right: right, score: m.scores[id], size: len(str)})
}

func (s *spmSession) push(b spmBigram) { s.heap = heapPush(s.heap, b) }

func (s *spmSession) pop() spmBigram {
	var top spmBigram
	s.heap, top = heapPop(s.heap)
	return top
}
