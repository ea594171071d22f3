package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/enclave/server"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdDemo runs the whole product on this machine, in one process: it boots
// the appliance in simulation mode with the embedded stories260K model on a
// loopback port, verifies it with the client (fresh nonce, the
// dev-simulated policy), prints the checklist, sends an encrypted chat and
// prints the answer.
func cmdDemo(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "demo", env)
	policyPath := fs.String("policy", "policy/dev-simulated.json", "appraisal policy file (must allow simulated evidence)")
	prompt := fs.String("prompt", "Tell me a story about a little bird.", "the user message")
	maxTokens := fs.Int("max-tokens", 64, "most tokens to generate")
	seed := fs.Int64("seed", 1, "sampling seed")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0: greedy)")
	stream := fs.Bool("stream", true, "stream the answer")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if _, err := loadPolicy(*policyPath); err != nil {
		var ue *cli.UsageError
		if errors.As(err, &ue) {
			ue.Hint = "run the demo from the repository root, or give --policy"
		}
		return 2, err
	}

	fmt.Fprintln(env.Stdout, "== 1. appliance: booting `sparkinfer serve --tee sim` in this process (no TEE here: the evidence is SIMULATED and proves nothing)")
	e, err := enclave.Boot(enclave.Config{TEE: enclave.TEESim})
	if err != nil {
		return 1, fmt.Errorf("boot: %w", err)
	}
	defer e.Close()
	srv, err := server.New(server.Config{Enclave: e})
	if err != nil {
		return 1, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, 5*time.Second) }()
	defer func() {
		cancel()
		<-served
	}()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(env.Stdout, "   listening on %s\n\n", url)

	fmt.Fprintf(env.Stdout, "== 2. client: GET %s/v1/attestation with a fresh nonce, verified against %s\n", url, *policyPath)
	c, err := newClient(url, *policyPath)
	if err != nil {
		return 2, err
	}
	att, err := c.Attest(ctx)
	if err != nil {
		return 1, err
	}
	printVerdict(env, att.Verdict)
	if cfg, suite, err := att.Key(); err == nil {
		fmt.Fprintf(env.Stdout, "   requests are encrypted to HPKE key id %d (%s) from the verified statement\n\n", cfg.KeyID, suite)
	}

	fmt.Fprintf(env.Stdout, "== 3. encrypted chat: %q\n", *prompt)
	o := chatOptions{prompt: *prompt, stream: *stream, maxTokens: maxTokens, seed: seed, temperature: temp}
	return runChat(ctx, c, o, cli.Env{Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stdout})
}
