package model

import "fmt"

// Backend runs a Model's forward pass on some device. The CPU backend
// ([CPU]) is the reference implementation; a GPU backend implements the same
// interface and is checked against it.
type Backend interface {
	// Name identifies the backend and its configuration, e.g. "cpu (2 threads)".
	Name() string
	// Model returns the model the backend runs.
	Model() *Model
	// NewSequence allocates the state of one sequence (its KV cache) for up
	// to ctx tokens (ctx <= 0: the model's context length).
	NewSequence(ctx int) (Sequence, error)
	// Close releases the backend's resources; its sequences become unusable.
	Close() error
}

// Sequence is one token sequence being decoded: the tokens fed so far live
// in its KV cache. It is not safe for concurrent use.
type Sequence interface {
	// Len is the number of tokens in the cache (the position of the next token).
	Len() int
	// Cap is the most tokens the sequence can hold.
	Cap() int
	// Forward appends tokens at positions Len()..Len()+len(tokens)-1 and
	// returns the logits: Vocab values for the last token, or with all,
	// len(tokens)*Vocab values, one row per token. Several tokens are
	// processed together (prefill). The slice is valid until the next call.
	// A batch that does not fit gives a *ContextError and changes nothing.
	Forward(tokens []int, all bool) ([]float32, error)
	// Truncate drops cached tokens from position n on (0 <= n <= Len()).
	Truncate(n int) error
}

// ContextError reports tokens that do not fit the sequence's context.
type ContextError struct {
	Have, Add, Cap int
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("model: %d tokens do not fit the context: %d already used of %d", e.Add, e.Have, e.Cap)
}

// TokenError reports a token id outside the vocabulary.
type TokenError struct {
	Token, Vocab int
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("model: token id %d out of range [0, %d)", e.Token, e.Vocab)
}

// GreedySequence is implemented by sequences that can pick the next token
// by argmax on their device, so that only the token id is transferred (the
// CUDA backend). Greedy feeds tok and returns the argmax of the next-token
// logits; it is equivalent to Forward([]int{tok}, false) followed by an
// argmax with the lowest index winning ties.
type GreedySequence interface {
	Sequence
	Greedy(tok int) (int, error)
}
