package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/tdx"
	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/policy"
)

// cmdEvidence dispatches `sparkctl evidence <subcommand>`.
func cmdEvidence(args []string, env cli.Env) (int, error) {
	if len(args) == 0 || args[0] != "verify" {
		return 2, &cli.UsageError{Err: errors.New("want a subcommand: verify"), Hint: "sparkctl evidence verify --policy P.json [--nonce HEX] [--json] BUNDLE.json"}
	}
	return cmdEvidenceVerify(args[1:], env)
}

// evidenceOutput is the --json output of `sparkctl evidence verify`.
type evidenceOutput struct {
	Verdict policy.Verdict `json:"verdict"`
	Claims  *attest.Claims `json:"claims"`
}

// cmdEvidenceVerify verifies an evidence bundle and appraises it against a
// policy. Exit 0: verified; 1: rejected (or could not be checked); 2:
// unusable input (flags, policy file, bundle, unsupported evidence kind).
func cmdEvidenceVerify(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "evidence verify", env)
	policyPath := fs.String("policy", "", "appraisal policy file (JSON, see docs/POLICY.md); required")
	nonceHex := fs.String("nonce", "", "the nonce sent with GET /v1/attestation, hex (16 to 64 bytes); without it freshness is not checked")
	asOf := fs.String("as-of", "", "verify as of this time (RFC 3339) instead of now: certificate and collateral validity, evidence age")
	rims := fs.String("rims", "", "offline NVIDIA RIM cache directory (files named by RIM id) for GPUs whose bundle entry has no RIMs")
	online := fs.Bool("online", false, "fetch missing Intel PCS collateral and check revocation (AMD CRLs, NVIDIA OCSP) online")
	asJSON := fs.Bool("json", false, "print the verdict and claims as JSON")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 1 {
		return 2, &cli.UsageError{Err: fmt.Errorf("want exactly one bundle file, got %d arguments", fs.NArg()), Hint: "sparkctl evidence verify --policy P.json BUNDLE.json"}
	}
	if *policyPath == "" {
		return 2, &cli.UsageError{Err: errors.New("--policy is required"), Hint: "start from policy/default.json (enforces everything) or policy/dev-simulated.json"}
	}
	pf, err := os.ReadFile(*policyPath)
	if err != nil {
		return 2, cli.Usagef("read policy: %v", err)
	}
	pol, err := policy.Parse(pf)
	if err != nil {
		return 2, cli.Usagef("%q: %v", *policyPath, err)
	}
	var exp attest.Expectations
	if *nonceHex != "" {
		n, err := hex.DecodeString(strings.TrimPrefix(*nonceHex, "0x"))
		if err != nil || len(n) < attest.MinNonceSize || len(n) > attest.MaxNonceSize {
			return 2, cli.Usagef("--nonce %q is not %d to %d bytes of hex", *nonceHex, attest.MinNonceSize, attest.MaxNonceSize)
		}
		exp.Nonce = n
	}
	opts := attest.Options{GPURIMDir: *rims}
	if *asOf != "" {
		t, err := time.Parse(time.RFC3339, *asOf)
		if err != nil {
			return 2, cli.Usagef("--as-of %q is not an RFC 3339 time", *asOf)
		}
		opts.Now = func() time.Time { return t }
	}
	if *rims != "" {
		if st, err := os.Stat(*rims); err != nil || !st.IsDir() {
			return 2, cli.Usagef("--rims %q is not a directory", *rims)
		}
	}
	if *online {
		opts.TDXPCS = &tdx.PCS{}
		opts.SNPGetter = trust.DefaultHTTPSGetter()
		opts.GPUHTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return 2, cli.Usagef("read bundle: %v", err)
	}
	b, err := attest.DecodeBundle(f)
	f.Close()
	if err != nil {
		return 2, cli.Usagef("%q: %v", fs.Arg(0), err)
	}
	v, err := attest.NewVerifier(opts)
	if err != nil {
		return 2, err
	}
	res, verr := v.Verify(context.Background(), b, exp)
	var pe *check.ParseError
	var uk *attest.UnsupportedKindError
	if errors.As(verr, &pe) || errors.As(verr, &uk) {
		if res != nil && !*asJSON {
			fmt.Fprint(env.Stdout, res.Checks.String())
		}
		return 2, &cli.UsageError{Err: fmt.Errorf("%q: %w", fs.Arg(0), verr)}
	}
	verdict := policy.Appraise(res, verr, pol)
	if *asJSON {
		out := evidenceOutput{Verdict: verdict}
		if res != nil {
			out.Claims = &res.Claims
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return 1, err
		}
	} else {
		printVerdict(env, verdict)
	}
	if !verdict.Verified {
		return 1, nil
	}
	return 0, nil
}

func printVerdict(env cli.Env, v policy.Verdict) {
	if v.Simulated {
		fmt.Fprintln(env.Stdout, "SIMULATED evidence: signed by a simulation root, it proves nothing")
	}
	fmt.Fprint(env.Stdout, v.Checks.String())
	failed := 0
	for _, c := range v.Checks {
		if c.Status == check.Fail {
			failed++
		}
	}
	switch {
	case v.Verified && v.Simulated:
		fmt.Fprintln(env.Stdout, "verdict: verified (SIMULATED)")
	case v.Verified:
		fmt.Fprintln(env.Stdout, "verdict: verified")
	default:
		fmt.Fprintf(env.Stdout, "verdict: rejected (%d checks failed)\n", failed)
	}
}
