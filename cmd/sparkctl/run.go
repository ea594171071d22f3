package main

import (
	"io"

	"github.com/sparkinfer/cc/internal/cli"
)

// commands lists every subcommand in the order the usage text shows them.
// Each lives in its own file of this directory. Wired explicitly: no init()
// registries in a measured binary.
var commands = []cli.Command{
	{Name: "demo", Summary: "boot a simulated appliance in this process, verify it, send an encrypted chat", Run: cmdDemo},
	{Name: "verify", Summary: "verify an appliance's evidence with a fresh nonce and print the checklist: verify URL [--policy P.json]", Run: cmdVerify},
	{Name: "chat", Summary: "verify an appliance, then send an encrypted chat: chat URL --prompt P [--policy P.json] [--stream]", Run: cmdChat},
	{Name: "proxy", Summary: "local OpenAI endpoint forwarding encrypted to a verified appliance: proxy --upstream URL --policy P.json", Run: cmdProxy},
	{Name: "evidence", Summary: "verify an evidence bundle against a policy: evidence verify --policy P.json BUNDLE.json", Run: cmdEvidence},
	{Name: "gpu", Summary: "verify an NVIDIA GPU attestation report: gpu verify --report R --chain C", Run: cmdGPU},
	{Name: "quote", Summary: "verify a TDX quote (v4/v5) or SEV-SNP report: quote verify [--collateral F] [--as-of T] QUOTE", Run: cmdQuote},
	{Name: "source-hash", Summary: "print the source hash of a checkout or source tree", Run: cmdSourceHash},
	{Name: "release", Summary: "reproducible release build into dist/ with measurements.json", Run: cmdRelease},
	{Name: "reproduce", Summary: "rebuild a release from source in a fresh directory and compare digests", Run: cmdReproduce},
	{Name: "keygen", Summary: "create a cosign-compatible signing key pair", Run: cmdKeygen},
	{Name: "sign", Summary: "sign a file in cosign's blob signature format", Run: cmdSign},
	{Name: "verify-artifact", Summary: "verify a cosign blob signature with a public key", Run: cmdVerifyArtifact},
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main("sparkctl", commands, args, cli.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}
