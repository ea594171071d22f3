package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// polarisFiles writes a Polaris receipt's quote (raw and base64) and
// collateral to a temp dir.
func polarisFiles(t *testing.T) (dir, asOf string) {
	t.Helper()
	b, err := os.ReadFile("../../attest/tdx/testdata/polaris/0000-51467dd.json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Attestation struct {
			Timestamp string `json:"timestamp_utc"`
		} `json:"attestation"`
		TDX struct {
			Quote      string `json:"quote_b64"`
			Collateral string `json:"collateral_b64"`
		} `json:"tdx"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	q, _ := base64.StdEncoding.DecodeString(r.TDX.Quote)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "quote.bin"), q, 0o644))
	must(os.WriteFile(filepath.Join(dir, "quote.b64"), []byte(r.TDX.Quote+"\n"), 0o644))
	bad := append([]byte(nil), q...)
	bad[100] ^= 1
	must(os.WriteFile(filepath.Join(dir, "tampered.bin"), bad, 0o644))
	must(os.WriteFile(filepath.Join(dir, "garbage.bin"), []byte("hello, not a quote"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "coll.b64"), []byte(r.TDX.Collateral), 0o644))
	return dir, r.Attestation.Timestamp
}

func TestQuoteVerifyCLI(t *testing.T) {
	dir, asOf := polarisFiles(t)
	coll := filepath.Join(dir, "coll.b64")
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"verified", []string{"quote", "verify", "--collateral", coll, "--as-of", asOf, filepath.Join(dir, "quote.bin")}, 0, "\nverified\n"},
		{"base64 input", []string{"quote", "verify", "--collateral", coll, "--as-of", asOf, filepath.Join(dir, "quote.b64")}, 0, "checked as of " + asOf},
		{"json", []string{"quote", "verify", "--json", "--collateral", coll, "--as-of", asOf, filepath.Join(dir, "quote.bin")}, 0, `"tcb_status": "UpToDate"`},
		{"tampered", []string{"quote", "verify", "--collateral", coll, "--as-of", asOf, filepath.Join(dir, "tampered.bin")}, 1, "[FAIL] tdx.quote.signature"},
		{"expired collateral", []string{"quote", "verify", "--collateral", coll, "--as-of", "2030-01-01T00:00:00Z", filepath.Join(dir, "quote.bin")}, 1, "rejected: tdx.collateral.validity"},
		{"no collateral offline", []string{"quote", "verify", "--offline", "--as-of", asOf, filepath.Join(dir, "quote.bin")}, 3, "could not verify"},
		{"garbage", []string{"quote", "verify", "--offline", filepath.Join(dir, "garbage.bin")}, 2, ""},
		{"missing file", []string{"quote", "verify", "--offline", filepath.Join(dir, "nope.bin")}, 2, ""},
		{"sev-snp report", []string{"quote", "verify", "--cert", "../../attest/sevsnp/testdata/go-sev-guest-vcek.der", "../../attest/sevsnp/testdata/go-sev-guest-attestation.bin"}, 0, "sev-snp report v2"},
		{"sev-snp without cert", []string{"quote", "verify", "../../attest/sevsnp/testdata/go-sev-guest-attestation.bin"}, 2, ""},
		{"bad collateral", []string{"quote", "verify", "--collateral", filepath.Join(dir, "quote.bin"), filepath.Join(dir, "quote.bin")}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, nil, &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.out) || strings.Contains(out.String(), "WARN") {
				t.Errorf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errb.String())
			}
		})
	}
}
