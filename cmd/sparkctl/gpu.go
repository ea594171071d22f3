package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/nvgpu"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdGPU dispatches `sparkctl gpu <subcommand>`.
func cmdGPU(args []string, env cli.Env) (int, error) {
	if len(args) == 0 || args[0] != "verify" {
		return 2, &cli.UsageError{Err: errors.New("want a subcommand: verify"), Hint: "sparkctl gpu verify --report R --chain C [--nonce HEX] [--rims DIR] [--as-of T] [--json]"}
	}
	return cmdGPUVerify(args[1:], env)
}

// cmdGPUVerify verifies an NVIDIA GPU attestation report locally.
// Exit 0: verified (skipped checks are listed); 1: rejected; 2: unusable input.
func cmdGPUVerify(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "gpu verify", env)
	reportPath := fs.String("report", "", "attestation report file: hex (as nvtrust/NVML tools write it) or raw bytes")
	chainPath := fs.String("chain", "", "device certificate chain, PEM, leaf first")
	nonceHex := fs.String("nonce", "", "expected 32-byte request nonce, hex; without it freshness is not checked")
	rims := fs.String("rims", "", "RIM cache directory (files named by RIM id, e.g. NV_GPU_DRIVER_GH100_550.90.07)")
	asOf := fs.String("as-of", "", "check certificate validity at this time (RFC 3339 or YYYY-MM-DD) instead of now")
	online := fs.Bool("online", false, "check certificate revocation with NVIDIA's OCSP responder")
	asJSON := fs.Bool("json", false, "print the claims as JSON")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected arguments %q", fs.Args())
	}
	if *reportPath == "" || *chainPath == "" {
		return 2, &cli.UsageError{Err: errors.New("--report and --chain are required"), Hint: "sparkctl gpu verify --report R --chain C"}
	}
	var opts nvgpu.Options
	if *nonceHex != "" {
		n, err := hex.DecodeString(strings.TrimPrefix(*nonceHex, "0x"))
		if err != nil || len(n) != 32 {
			return 2, cli.Usagef("--nonce %q is not 32 bytes of hex", *nonceHex)
		}
		opts.Nonce = n
	}
	if *asOf != "" {
		t, err := time.Parse(time.RFC3339, *asOf)
		if err != nil {
			if t, err = time.Parse("2006-01-02", *asOf); err != nil {
				return 2, cli.Usagef("--as-of %q is neither RFC 3339 nor YYYY-MM-DD", *asOf)
			}
		}
		opts.AsOf = t
	}
	if *rims != "" {
		if st, err := os.Stat(*rims); err != nil || !st.IsDir() {
			return 2, cli.Usagef("--rims %q is not a directory", *rims)
		}
		opts.RIMDir = *rims
	}
	if *online {
		opts.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	rawFile, err := os.ReadFile(*reportPath)
	if err != nil {
		return 2, cli.Usagef("read report: %v", err)
	}
	chain, err := os.ReadFile(*chainPath)
	if err != nil {
		return 2, cli.Usagef("read chain: %v", err)
	}
	report, err := nvgpu.DecodeReportFile(rawFile)
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	claims, err := nvgpu.Verify(report, chain, opts)
	var pe *check.ParseError
	if errors.As(err, &pe) {
		return 2, &cli.UsageError{Err: err}
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if e := enc.Encode(claims); e != nil {
			return 1, e
		}
	} else {
		printGPUClaims(env, claims)
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

func printGPUClaims(env cli.Env, c *nvgpu.Claims) {
	w := env.Stdout
	verdict := "VERIFIED"
	if !c.Verified {
		verdict = "REJECTED"
	}
	fmt.Fprintf(w, "nvidia gpu report: %s\n", verdict)
	fmt.Fprintf(w, "  arch:     %s\n  driver:   %s\n  vbios:    %s\n  nonce:    %s\n  fwid:     %s\n",
		c.Arch, c.DriverVersion, c.VBIOSVersion, c.Nonce, c.FWID)
	fmt.Fprintf(w, "  leaf:     %s (serial %s)\n  cc mode:  %s, dev-tools mode: %s\n  as of:    %s\n",
		c.Chain.LeafSubject, c.Chain.LeafSerial, c.CCMode, c.DevToolsMode, c.AsOf.Format(time.RFC3339))
	for _, r := range c.RIMs {
		fmt.Fprintf(w, "  rim %-6s %s found=%v valid=%v %s\n", r.Kind+":", r.ID, r.Found, r.Valid, r.Error)
	}
	if c.Measurement.Compared {
		fmt.Fprintf(w, "  measurements: matched %v, mismatched %v, missing %v, not covered %v\n",
			c.Measurement.Matched, c.Measurement.Mismatched, c.Measurement.Missing, c.Measurement.NotCovered)
	}
	fmt.Fprintf(w, "checks:\n%s", c.Checks)
}
