package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdChat verifies the appliance, sends one encrypted chat message and
// prints the answer on stdout (the verdict's one-line summary goes to
// stderr). With --completion it sends the prompt to /v1/completions
// instead, without a chat template.
func cmdChat(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "chat", env)
	policyPath := fs.String("policy", "", "appraisal policy file (default: the built-in default policy)")
	prompt := fs.String("prompt", "", "the user message; required")
	model := fs.String("model", "", "model name (default: the appliance's)")
	stream := fs.Bool("stream", false, "stream the answer as it is generated")
	completion := fs.Bool("completion", false, "plain completion of the prompt (/v1/completions) instead of a chat")
	maxTokens := fs.Int("max-tokens", 0, "most tokens to generate (0: the appliance's default)")
	seed := fs.Int64("seed", 0, "sampling seed (0: the appliance's default)")
	temp := fs.Float64("temperature", -1, "sampling temperature (negative: the appliance's default; 0: greedy)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if err := cli.Parse(fs, reorderFlags(args)); err != nil {
		return 2, err
	}
	if fs.NArg() != 1 {
		return 2, &cli.UsageError{Err: fmt.Errorf("want exactly one appliance url, got %d arguments", fs.NArg()), Hint: "sparkctl chat URL --prompt P [--policy P.json] [--stream]"}
	}
	if *prompt == "" {
		return 2, cli.Usagef("--prompt is required")
	}
	c, err := newClient(fs.Arg(0), *policyPath)
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	o := chatOptions{model: *model, prompt: *prompt, stream: *stream, completion: *completion}
	if *maxTokens > 0 {
		o.maxTokens = maxTokens
	}
	if *seed != 0 {
		o.seed = seed
	}
	if *temp >= 0 {
		o.temperature = temp
	}
	return runChat(ctx, c, o, env)
}

type chatOptions struct {
	model, prompt      string
	stream, completion bool
	maxTokens          *int
	seed               *int64
	temperature        *float64
}

// runChat verifies (printing a summary to stderr), sends the request and
// writes the answer to stdout.
func runChat(ctx context.Context, c *client.Client, o chatOptions, env cli.Env) (int, error) {
	att, err := c.Attest(ctx)
	if err != nil {
		var ve *client.VerificationError
		if errors.As(err, &ve) {
			printVerdict(cli.Env{Stdout: env.Stderr}, ve.Verdict)
		}
		return 1, err
	}
	if att.Simulated() {
		fmt.Fprintln(env.Stderr, "verified (SIMULATED evidence: proves nothing); sending encrypted request")
	} else {
		fmt.Fprintln(env.Stderr, "verified; sending encrypted request")
	}
	if o.model == "" {
		ms, err := c.Models(ctx)
		if err != nil {
			return 1, fmt.Errorf("list models (give --model to skip): %w", err)
		}
		if len(ms) == 0 {
			return 1, errors.New("the appliance lists no model")
		}
		o.model = ms[0].ID
	}
	msgs := []client.ChatMessage{{Role: "user", Content: o.prompt}}
	switch {
	case !o.stream && !o.completion:
		r, err := c.ChatCompletion(ctx, client.ChatRequest{Model: o.model, Messages: msgs, MaxTokens: o.maxTokens, Seed: o.seed, Temperature: o.temperature})
		if err != nil {
			return 1, err
		}
		fmt.Fprintln(env.Stdout, r.Text())
	case !o.stream:
		r, err := c.Completion(ctx, client.CompletionRequest{Model: o.model, Prompt: o.prompt, MaxTokens: o.maxTokens, Seed: o.seed, Temperature: o.temperature})
		if err != nil {
			return 1, err
		}
		fmt.Fprintln(env.Stdout, r.Text())
	case !o.completion:
		s, err := c.ChatCompletionStream(ctx, client.ChatRequest{Model: o.model, Messages: msgs, MaxTokens: o.maxTokens, Seed: o.seed, Temperature: o.temperature})
		if err != nil {
			return 1, err
		}
		defer s.Close()
		return printStream(env, s.Next, func(ch *client.ChatChunk) string {
			if len(ch.Choices) == 0 {
				return ""
			}
			return ch.Choices[0].Delta.Content
		})
	default:
		s, err := c.CompletionStream(ctx, client.CompletionRequest{Model: o.model, Prompt: o.prompt, MaxTokens: o.maxTokens, Seed: o.seed, Temperature: o.temperature})
		if err != nil {
			return 1, err
		}
		defer s.Close()
		return printStream(env, s.Next, (*client.CompletionResponse).Text)
	}
	return 0, nil
}

func printStream[T any](env cli.Env, next func() (*T, error), text func(*T) string) (int, error) {
	for {
		ev, err := next()
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(env.Stdout)
			return 0, nil
		}
		if err != nil {
			fmt.Fprintln(env.Stdout)
			return 1, fmt.Errorf("stream rejected after partial output: %w", err)
		}
		fmt.Fprint(env.Stdout, text(ev))
	}
}
