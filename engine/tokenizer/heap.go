package tokenizer

// ordered is an element of a binary min-heap: a.before(b) when a must be
// popped first. Both tokenizers keep their candidate merges in one.
type ordered[T any] interface{ before(T) bool }

// heapPush adds b to the heap h and returns the grown heap.
func heapPush[T ordered[T]](h []T, b T) []T {
	h = append(h, b)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// heapPop removes and returns the first element of the non-empty heap h.
func heapPop[T ordered[T]](h []T) ([]T, T) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			c = r
		}
		if !h[c].before(h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return h, top
}
