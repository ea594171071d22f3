package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/sevsnp"
	"github.com/sparkinfer/cc/attest/tdx"
	"github.com/sparkinfer/cc/internal/cli"
)

// exitCouldNotVerify is the exit code of `quote verify` when a check could
// not be carried out (collateral unavailable): neither verified nor rejected.
const exitCouldNotVerify = 3

const quoteUsage = "sparkctl quote verify [--collateral F | --offline] [--as-of RFC3339] [--report-data HEX] [--cert VCEK] [--json] QUOTE"

// cmdQuote dispatches `sparkctl quote <subcommand>`.
func cmdQuote(args []string, env cli.Env) (int, error) {
	if len(args) == 0 || args[0] != "verify" {
		return 2, &cli.UsageError{Err: errors.New("want a subcommand: verify"), Hint: quoteUsage}
	}
	return cmdQuoteVerify(args[1:], env)
}

// cmdQuoteVerify verifies a raw TDX quote (v4/v5) or SEV-SNP report.
// Exit 0 verified; 1 rejected; 2 unusable input; 3 could not verify.
func cmdQuoteVerify(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "quote verify", env)
	collPath := fs.String("collateral", "", "offline TDX collateral: a sparkinfer-tdx-collateral-v1 JSON file or a Polaris collateral object (JSON or its base64)")
	offline := fs.Bool("offline", false, "never contact Intel PCS (without --collateral, collateral checks are then skipped: exit 3)")
	cacheDir := fs.String("pcs-cache", "", "Intel PCS response cache directory (default: the user cache dir + /sparkinfer/pcs)")
	asOf := fs.String("as-of", "", "verify as of this time (RFC 3339), e.g. the evidence's capture time; default now")
	rd := fs.String("report-data", "", "expected REPORTDATA / REPORT_DATA, 64 bytes of hex")
	certPath := fs.String("cert", "", "SEV-SNP only: the VCEK or VLEK certificate (DER or PEM)")
	asJSON := fs.Bool("json", false, "print the claims (with every check) as JSON")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 1 {
		return 2, &cli.UsageError{Err: fmt.Errorf("want one quote file, got %d arguments", fs.NArg()), Hint: quoteUsage}
	}
	var when time.Time
	if *asOf != "" {
		t, err := time.Parse(time.RFC3339, *asOf)
		if err != nil {
			return 2, cli.Usagef("--as-of %q is not an RFC 3339 time", *asOf)
		}
		when = t
	}
	var wantRD []byte
	if *rd != "" {
		b, err := hex.DecodeString(*rd)
		if err != nil || len(b) != 64 {
			return 2, cli.Usagef("--report-data %q is not 64 bytes of hex", *rd)
		}
		wantRD = b
	}
	file, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return 2, cli.Usagef("read quote: %v", err)
	}
	raw, err := decodeEvidence(file)
	if err != nil {
		return 2, &cli.UsageError{Err: fmt.Errorf("%q: %v", fs.Arg(0), err), Hint: "give a raw binary quote, or one hex or base64 encoding of it"}
	}

	if !isTDXQuote(raw) {
		if _, perr := sevsnp.ParseReport(raw); perr == nil {
			return verifySNP(raw, *certPath, when, wantRD, *asJSON, env)
		}
	}
	opts := tdx.Options{AsOf: when, ReportData: wantRD}
	switch {
	case *collPath != "":
		b, err := os.ReadFile(*collPath)
		if err != nil {
			return 2, cli.Usagef("read collateral: %v", err)
		}
		if opts.Collateral, err = tdx.ParseCollateral(b); err != nil {
			return 2, cli.Usagef("%q: %v", *collPath, err)
		}
	case !*offline:
		dir := *cacheDir
		if dir == "" {
			if d, err := os.UserCacheDir(); err == nil {
				dir = filepath.Join(d, "sparkinfer", "pcs")
			}
		}
		opts.PCS = &tdx.PCS{CacheDir: dir}
	}
	claims, err := tdx.Verify(raw, opts)
	return report(claims, claimsSummary(claims), err, *asJSON, env)
}

// isTDXQuote reports whether raw starts like a TDX quote header: version 4
// or 5, ECDSA P-256 key, TEE type TDX.
func isTDXQuote(raw []byte) bool {
	if len(raw) < 8 {
		return false
	}
	v := binary.LittleEndian.Uint16(raw)
	return (v == 4 || v == 5) && binary.LittleEndian.Uint16(raw[2:]) == 2 && binary.LittleEndian.Uint32(raw[4:]) == 0x81
}

var hexText = regexp.MustCompile(`^(0x)?[0-9a-fA-F]+$`)

// decodeEvidence accepts raw binary, or hex, or standard base64 text. Text
// is decoded only when the raw bytes are not already a TDX quote or SNP
// report and the text is unambiguously one encoding.
func decodeEvidence(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("empty file")
	}
	if isTDXQuote(b) {
		return b, nil
	}
	if _, err := sevsnp.ParseReport(b); err == nil {
		return b, nil
	}
	t := bytes.Join(bytes.Fields(b), nil)
	if hexText.Match(t) && len(t)%2 == 0 {
		return hex.DecodeString(string(bytes.TrimPrefix(t, []byte("0x"))))
	}
	if d, err := base64.StdEncoding.DecodeString(string(t)); err == nil {
		return d, nil
	}
	return b, nil // let the parser name what is wrong
}

func verifySNP(raw []byte, certPath string, when time.Time, wantRD []byte, asJSON bool, env cli.Env) (int, error) {
	if certPath == "" {
		return 2, &cli.UsageError{Err: errors.New("an SEV-SNP report needs its VCEK or VLEK certificate"), Hint: "add --cert VCEK.der"}
	}
	cert, err := os.ReadFile(certPath)
	if err != nil {
		return 2, cli.Usagef("read certificate: %v", err)
	}
	claims, err := sevsnp.Verify(context.Background(), raw, cert, sevsnp.Options{Now: when})
	var summary []string
	if claims != nil {
		if wantRD != nil {
			if claims.ReportData == hex.EncodeToString(wantRD) {
				claims.Checks.Pass("sevsnp.report_data", "report data matches the expected value")
			} else {
				claims.Checks.Fail("sevsnp.report_data", "report data %s, want %s", claims.ReportData, hex.EncodeToString(wantRD))
				if err == nil {
					err = &check.VerifyError{Check: "sevsnp.report_data", Err: errors.New("report data mismatch")}
				}
			}
		}
		summary = []string{
			fmt.Sprintf("sev-snp report v%d, %s, signed by %s", claims.Version, claims.Product, claims.Signer),
			"measurement " + claims.Measurement,
			"report data " + claims.ReportData,
			fmt.Sprintf("debug allowed %v", claims.Policy.Debug),
			"as of " + claims.AsOf.Format(time.RFC3339),
		}
		return report(claims, summary, err, asJSON, env)
	}
	return report(nil, nil, err, asJSON, env)
}

func claimsSummary(c *tdx.Claims) []string {
	if c == nil {
		return nil
	}
	coll := "no collateral"
	if c.CollateralSource != "" {
		coll = "collateral from " + c.CollateralSource
	}
	s := []string{
		fmt.Sprintf("tdx quote v%d (body type %d), checked as of %s with %s", c.QuoteVersion, c.BodyType, c.AsOf.Format(time.RFC3339), coll),
		"mrtd " + c.MRTD,
	}
	for i, r := range c.RTMR {
		s = append(s, fmt.Sprintf("rtmr%d %s", i, r))
	}
	s = append(s, "report data "+c.ReportData, fmt.Sprintf("debug %v", c.Debug))
	if c.TCBStatus != "" {
		s = append(s, fmt.Sprintf("tcb status %s (tcb date %s), qe tcb %s", c.TCBStatus, c.TCBDate, c.QETCBStatus))
	}
	if c.FMSPC != "" {
		s = append(s, "fmspc "+c.FMSPC)
	}
	return s
}

// report prints the outcome and maps the typed error to the exit code.
func report(claims any, summary []string, err error, asJSON bool, env cli.Env) (int, error) {
	var pe *check.ParseError
	if errors.As(err, &pe) {
		return 2, &cli.UsageError{Err: err}
	}
	var ue *check.UnavailableError
	var ve *check.VerifyError
	code, verdict := 0, "verified"
	switch {
	case errors.As(err, &ve):
		code, verdict = 1, "rejected: "+err.Error()
	case errors.As(err, &ue):
		code, verdict = exitCouldNotVerify, "could not verify: "+err.Error()
	case err != nil:
		code, verdict = 1, "rejected: "+err.Error()
	}
	if asJSON {
		out := struct {
			Verdict string `json:"verdict"`
			Claims  any    `json:"claims"`
		}{verdict, claims}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return 1, err
		}
		return code, nil
	}
	var list check.List
	switch c := claims.(type) {
	case *tdx.Claims:
		if c != nil {
			list = c.Checks
		}
	case *sevsnp.Claims:
		if c != nil {
			list = c.Checks
		}
	}
	fmt.Fprint(env.Stdout, list.String())
	for _, s := range summary {
		fmt.Fprintln(env.Stdout, s)
	}
	fmt.Fprintln(env.Stdout, verdict)
	return code, nil
}
