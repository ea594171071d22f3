package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/engine/chat"
	"github.com/sparkinfer/cc/engine/sample"
	"github.com/sparkinfer/cc/internal/cli"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// openEngine loads --model, or the embedded stories260K when it is empty.
func openEngine(path string, opts engine.Options) (*engine.Engine, error) {
	if path == "" {
		return engine.LoadDefault(opts)
	}
	e, err := engine.Open(path, opts)
	if err != nil {
		return nil, &cli.UsageError{Err: err}
	}
	return e, nil
}

// cmdGenerate streams a completion of --prompt (or of the model's chat
// template around it, with --chat) to stdout.
func cmdGenerate(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "generate", env)
	modelPath := fs.String("model", "", "GGUF model file (default: the embedded stories260K)")
	prompt := fs.String("prompt", "", "prompt text (default: empty, i.e. BOS only)")
	maxTokens := fs.Int("max-tokens", 256, "most tokens to generate (0: until the context is full)")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "top-k filter (0: off)")
	topP := fs.Float64("top-p", 1, "top-p (nucleus) filter (1: off)")
	minP := fs.Float64("min-p", 0, "min-p filter (0: off)")
	rep := fs.Float64("repeat-penalty", 1, "repetition penalty over the last --repeat-last-n tokens (1: off)")
	repN := fs.Int("repeat-last-n", sample.DefaultRepeatLastN, "repetition penalty window (-1: whole history)")
	seed := fs.Uint64("seed", 0, "random seed for sampling")
	useChat := fs.Bool("chat", false, "wrap the prompt as a user message in the model's chat template")
	system := fs.String("system", "", "system message (with --chat)")
	var stops stringList
	fs.Var(&stops, "stop", "stop string (repeatable); generation ends before it")
	device := fs.String("device", "cpu", "device: "+strings.Join(engine.Devices, ", "))
	kernels := fs.String("kernels", "", "CUDA kernels library (default: beside the binary, or $SPARKINFER_KERNELS)")
	anyDigest := fs.Bool("kernels-any-digest-unsafe", false, "load a kernels library whatever its digest (development only)")
	threads := fs.Int("threads", 0, "CPU threads (0: all)")
	ctxLen := fs.Int("ctx", 0, fmt.Sprintf("context length in tokens (0: the model's, at most %d)", engine.DefaultContext))
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	params := sample.Params{Temperature: *temp, TopK: *topK, TopP: *topP, MinP: *minP,
		RepeatPenalty: *rep, RepeatLastN: *repN, Seed: *seed}
	if err := params.Validate(); err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	e, err := openEngine(*modelPath, engine.Options{Device: *device, Threads: *threads, Context: *ctxLen,
		Kernels: *kernels, KernelsAnyDigestUnsafe: *anyDigest})
	if err != nil {
		return 2, err
	}
	defer e.Close()
	req := engine.Request{Prompt: *prompt, MaxTokens: *maxTokens, Sampling: params, Stop: stops}
	if *useChat {
		if *system != "" {
			req.Messages = append(req.Messages, chat.Message{Role: "system", Content: *system})
		}
		req.Messages = append(req.Messages, chat.Message{Role: "user", Content: *prompt})
	}
	_, err = e.Generate(context.Background(), req, func(s string) error {
		_, err := fmt.Fprint(env.Stdout, s)
		return err
	})
	fmt.Fprintln(env.Stdout)
	if err != nil {
		return 1, err
	}
	return 0, nil
}

var _ flag.Value = (*stringList)(nil)
