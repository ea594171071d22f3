// Package engine is the generation API over the engine's parts: it loads a
// GGUF model (a file, or bytes such as the embedded default), builds its
// tokenizer, chat template and a backend, and generates text with
// streaming, sampling, stop tokens, stop strings and a token limit.
//
// The HTTP server and the evaluation harness use this package; the backends
// (CPU, the reference, and CUDA) implement [model.Backend].
//
// Generation: the prompt is tokenized (BOS added when the vocabulary asks
// for it; with Messages, the model's chat template is rendered first and
// special-token texts in it are recognised), prefilled in one batch, then
// tokens are sampled one at a time until an end-of-generation token (not
// emitted), a stop string (withheld: its text and anything after it are
// never emitted), MaxTokens, or the end of the context.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sparkinfer/cc/engine/chat"
	"github.com/sparkinfer/cc/engine/cuda"
	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/model"
	"github.com/sparkinfer/cc/engine/sample"
	"github.com/sparkinfer/cc/engine/tokenizer"
)

// Devices lists the supported values of Options.Device: "auto" uses CUDA
// when a GPU and the kernels library are available and the CPU otherwise.
var Devices = []string{"cpu", "cuda", "auto"}

// DefaultContext caps the KV cache when Options.Context is 0, so a model
// trained for a long context does not allocate it all by default.
const DefaultContext = 4096

// Options configures loading.
type Options struct {
	Device  string // "cpu" (default), "cuda" or "auto"
	Threads int    // CPU worker threads; 0: GOMAXPROCS
	Context int    // KV cache length in tokens; 0: min(model context, DefaultContext)
	// Kernels is the CUDA kernels library (default: cuda.DefaultPath()).
	Kernels string
	// KernelsAnyDigestUnsafe loads a kernels library whose digest differs
	// from the one recorded at build time (development only).
	KernelsAnyDigestUnsafe bool
	// ExtendContext allows Context beyond the model's trained context
	// length, as long-context benchmarks of short-context models need (the
	// model's output past its trained length is not meaningful).
	ExtendContext bool
}

// Engine is a loaded model ready to generate. Generate may be called from
// several goroutines; each call has its own sequence.
type Engine struct {
	Name      string
	File      *gguf.File
	Model     *model.Model
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template // nil if the model has no tokenizer.chat_template
	Backend   model.Backend
	Context   int

	closeFile bool
}

// DeviceError reports an unsupported device name.
type DeviceError struct{ Device string }

func (e *DeviceError) Error() string {
	return fmt.Sprintf("engine: unsupported device %q (supported: %v)", e.Device, Devices)
}

// Open loads the GGUF file at path (memory-mapped).
func Open(path string, opts Options) (*Engine, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	e, err := load(path, f, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	e.closeFile = true
	return e, nil
}

// LoadBytes loads a GGUF model held in memory; data must not be modified
// while the engine is in use.
func LoadBytes(name string, data []byte, opts Options) (*Engine, error) {
	f, err := gguf.Parse(data)
	if err != nil {
		return nil, err
	}
	return load(name, f, opts)
}

// LoadDefault loads the embedded stories260K model.
func LoadDefault(opts Options) (*Engine, error) {
	return LoadBytes(embedded.Stories260KName, embedded.Stories260K, opts)
}

func load(name string, f *gguf.File, opts Options) (*Engine, error) {
	m, err := model.Load(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	if tok.VocabSize() != m.Vocab {
		return nil, fmt.Errorf("engine: tokenizer has %d tokens but token_embd.weight has %d rows", tok.VocabSize(), m.Vocab)
	}
	e := &Engine{Name: name, File: f, Model: m, Tokenizer: tok}
	if src, err := f.String("tokenizer.chat_template"); err == nil && src != "" {
		if e.Template, err = chat.New(src, tok.Token(tok.BOS()), tok.Token(tok.EOS())); err != nil {
			return nil, err
		}
	}
	e.Context = min(m.ContextLength, DefaultContext)
	if opts.Context > 0 {
		if opts.Context > m.ContextLength {
			if !opts.ExtendContext {
				return nil, fmt.Errorf("engine: context %d exceeds the model's context length %d", opts.Context, m.ContextLength)
			}
			m.ContextLength = opts.Context
		}
		e.Context = opts.Context
	}
	switch opts.Device {
	case "", "cpu":
		e.Backend = model.NewCPU(m, opts.Threads)
	case "cuda", "auto":
		b, err := cuda.OpenBackend(m, e.Context, opts.Kernels, opts.KernelsAnyDigestUnsafe)
		var ue *cuda.UnavailableError
		if opts.Device == "auto" && errors.As(err, &ue) {
			e.Backend = model.NewCPU(m, opts.Threads)
			break
		}
		if err != nil {
			return nil, err
		}
		e.Backend = b
	default:
		return nil, &DeviceError{Device: opts.Device}
	}
	return e, nil
}

// Close releases the backend and, for Open, unmaps the file.
func (e *Engine) Close() error {
	err := e.Backend.Close()
	if e.closeFile {
		err = errors.Join(err, e.File.Close())
	}
	return err
}

// Request is one generation.
type Request struct {
	Prompt    string         // raw prompt text (used when Messages is nil)
	Messages  []chat.Message // a conversation, rendered with the model's chat template
	MaxTokens int            // most tokens to generate; 0: until the context is full
	Sampling  sample.Params  // zero value: greedy
	Stop      []string       // stop strings
}

// Stop reasons.
const (
	StopEOG     = "eog"     // the model produced an end-of-generation token
	StopString  = "stop"    // a stop string was generated
	StopLength  = "length"  // MaxTokens reached
	StopContext = "context" // the context is full
)

// Result describes a finished generation.
type Result struct {
	PromptTokens int
	Tokens       int // generated tokens (including a final EOG token)
	StopReason   string
	Prefill      time.Duration // time of the prompt's forward pass
	Decode       time.Duration // time of the remaining forward passes and sampling
}

// PromptError reports a prompt that cannot be run.
type PromptError struct {
	Tokens, Context int
	Msg             string
}

func (e *PromptError) Error() string {
	if e.Msg != "" {
		return "engine: " + e.Msg
	}
	return fmt.Sprintf("engine: prompt of %d tokens does not fit the context of %d tokens (one position is needed for the first generated token)", e.Tokens, e.Context)
}

// PromptTokens returns the token ids Generate would feed for req.
func (e *Engine) PromptTokens(req Request) ([]int, error) {
	tok := e.Tokenizer
	var ids []int
	if req.Messages != nil {
		if e.Template == nil {
			return nil, &PromptError{Msg: "the model has no chat template (tokenizer.chat_template)"}
		}
		text, err := e.Template.Render(req.Messages, true, nil)
		if err != nil {
			return nil, err
		}
		ids = tok.Encode(text, true, true)
		// Templates that write bos_token themselves would give two BOS.
		if b := tok.BOS(); len(ids) >= 2 && b >= 0 && ids[0] == b && ids[1] == b {
			ids = ids[1:]
		}
	} else {
		ids = tok.Encode(req.Prompt, true, false)
	}
	if len(ids) == 0 {
		if b := tok.BOS(); b >= 0 {
			ids = []int{b}
		} else {
			return nil, &PromptError{Msg: "empty prompt and the vocabulary has no BOS token"}
		}
	}
	return ids, nil
}

// Generate runs req, calling emit with each piece of text as soon as it is
// final. An error from emit or ctx stops generation and is returned.
func (e *Engine) Generate(ctx context.Context, req Request, emit func(text string) error) (res Result, err error) {
	if req.MaxTokens < 0 {
		return res, fmt.Errorf("engine: max tokens %d is negative", req.MaxTokens)
	}
	smp, err := sample.New(req.Sampling)
	if err != nil {
		return res, err
	}
	ids, err := e.PromptTokens(req)
	if err != nil {
		return res, err
	}
	res.PromptTokens = len(ids)
	if len(ids) >= e.Context {
		return res, &PromptError{Tokens: len(ids), Context: e.Context}
	}
	// The cache holds what this request can use: the prompt and its tokens
	// (the last sampled token is never forwarded), not the whole context,
	// so a short request does not allocate (CPU: zero) a full-context cache.
	need := e.Context
	if req.MaxTokens > 0 && len(ids)+req.MaxTokens < need {
		need = len(ids) + req.MaxTokens
	}
	seq, err := e.Backend.NewSequence(need)
	if err != nil {
		return res, err
	}
	for _, id := range ids {
		smp.Accept(id)
	}
	stops := sample.NewStopStrings(req.Stop)
	dec := e.Tokenizer.NewDecoder()
	out := func(s string) error {
		if s == "" {
			return nil
		}
		return emit(s)
	}
	start := time.Now()
	logits, err := seq.Forward(ids, false)
	if err != nil {
		return res, err
	}
	res.Prefill = time.Since(start)
	start = time.Now()
	defer func() { res.Decode = time.Since(start) }() // res is a named result
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		id, err := smp.Sample(logits)
		if err != nil {
			return res, err
		}
		res.Tokens++
		if e.Tokenizer.IsEOG(id) {
			res.StopReason = StopEOG
			break
		}
		smp.Accept(id)
		text, stopped := stops.Push(dec.Push(id))
		if err := out(text); err != nil {
			return res, err
		}
		if stopped {
			res.StopReason = StopString
			return res, nil
		}
		if req.MaxTokens > 0 && res.Tokens >= req.MaxTokens {
			res.StopReason = StopLength
			break
		}
		if seq.Len() >= seq.Cap() {
			res.StopReason = StopContext
			break
		}
		if logits, err = seq.Forward([]int{id}, false); err != nil {
			return res, err
		}
	}
	tail, stopped := stops.Push(dec.Flush())
	if err := out(tail); err != nil {
		return res, err
	}
	if stopped {
		res.StopReason = StopString
		return res, nil
	}
	if err := out(stops.Flush()); err != nil {
		return res, err
	}
	return res, nil
}
