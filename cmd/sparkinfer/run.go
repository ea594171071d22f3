package main

import (
	"io"

	"github.com/sparkinfer/cc/internal/cli"
)

// commands lists every subcommand in the order the usage text shows them.
// Each lives in its own file of this directory. Wired explicitly: no init()
// registries in a measured binary.
var commands = []cli.Command{
	{Name: "generate", Summary: "generate text with a GGUF model (default: the embedded stories260K)", Run: cmdGenerate},
	{Name: "bench", Summary: "measure decode and prefill tokens per second", Run: cmdBench},
	{Name: "parity", Summary: "compare a GPU backend with the CPU reference (top-1 agreement, KL)", Run: cmdParity},
	{Name: "tokenize", Summary: "print the token ids of text on stdin (GGUF or tokenizer.json vocabulary)", Run: cmdTokenize},
	{Name: "synth", Summary: "write a synthetic model (random weights, real vocabulary) for benchmarks and parity", Run: cmdSynth},
	{Name: "convert", Summary: "convert a Hugging Face checkpoint (safetensors) to GGUF", Run: cmdConvert},
	{Name: "serve", Summary: "boot the appliance (TEE, keys, evidence) and serve the encrypted OpenAI API", Run: cmdServe},
	{Name: "attest", Summary: "print a fresh evidence bundle (statement, TEE quote, GPU reports)", Run: cmdAttest},
	{Name: "version", Summary: "print the source hash, binary digest, toolchain and kernels digest", Run: cmdVersion},
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main("sparkinfer", commands, args, cli.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}
