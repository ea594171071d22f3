package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateEvidence = flag.Bool("update", false, "rewrite golden files")

const (
	evNonce = "3031323334353637383961626364656630313233343536373839616263646566"
	evAsOf  = "2026-07-10T01:48:00Z"
	evDir   = "testdata/evidence"
)

func TestEvidenceVerifyGolden(t *testing.T) {
	p := func(name string) string { return filepath.Join(evDir, name) }
	cases := []struct {
		name   string
		args   []string
		code   int
		golden string
	}{
		{"sim dev text", []string{"--policy", p("dev-simulated.json"), "--nonce", evNonce, "--as-of", evAsOf, p("sim-bundle.json")}, 0, "sim-dev.txt.golden"},
		{"sim dev json", []string{"--policy", p("dev-simulated.json"), "--nonce", evNonce, "--as-of", evAsOf, "--json", p("sim-bundle.json")}, 0, "sim-dev.json.golden"},
		{"sim default text", []string{"--policy", p("default.json"), "--nonce", evNonce, "--as-of", evAsOf, p("sim-bundle.json")}, 1, "sim-default.txt.golden"},
		{"sim default json", []string{"--policy", p("default.json"), "--nonce", evNonce, "--as-of", evAsOf, "--json", p("sim-bundle.json")}, 1, "sim-default.json.golden"},
		{"wrong nonce", []string{"--policy", p("dev-simulated.json"), "--nonce", strings.Repeat("ab", 32), "--as-of", evAsOf, p("sim-bundle.json")}, 1, ""},
		{"no nonce", []string{"--policy", p("dev-simulated.json"), "--as-of", evAsOf, p("sim-bundle.json")}, 1, ""},
		{"too old", []string{"--policy", p("dev-simulated.json"), "--nonce", evNonce, "--as-of", "2026-07-11T00:00:00Z", p("sim-bundle.json")}, 1, ""},
		{"no policy", []string{p("sim-bundle.json")}, 2, ""},
		{"bad policy", []string{"--policy", p("bad-policy.json"), p("sim-bundle.json")}, 2, ""},
		{"garbage bundle", []string{"--policy", p("dev-simulated.json"), p("README.md")}, 2, ""},
		{"missing bundle", []string{"--policy", p("dev-simulated.json"), p("nope.json")}, 2, ""},
		{"bad nonce", []string{"--policy", p("dev-simulated.json"), "--nonce", "xyz", p("sim-bundle.json")}, 2, ""},
		{"two bundles", []string{"--policy", p("dev-simulated.json"), p("sim-bundle.json"), p("sim-bundle.json")}, 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"evidence", "verify"}, tc.args...), nil, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			if tc.code == 2 && !strings.HasPrefix(stderr.String(), "sparkctl evidence: ") {
				t.Errorf("stderr %q", stderr.String())
			}
			if tc.golden == "" {
				return
			}
			path := filepath.Join(evDir, tc.golden)
			if *updateEvidence {
				if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stdout.Bytes(), want) {
				t.Errorf("output differs from %s:\n%s", path, stdout.String())
			}
			if strings.HasSuffix(tc.golden, ".json.golden") {
				var out struct {
					Verdict struct {
						Verified  bool `json:"verified"`
						Simulated bool `json:"simulated"`
					} `json:"verdict"`
					Claims struct {
						Simulated bool `json:"simulated"`
					} `json:"claims"`
				}
				if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
					t.Fatal(err)
				}
				if out.Verdict.Verified != (tc.code == 0) || !out.Verdict.Simulated || !out.Claims.Simulated {
					t.Errorf("json verdict %+v", out)
				}
			} else if !strings.HasPrefix(stdout.String(), "SIMULATED") {
				t.Error("text output does not start with SIMULATED")
			}
		})
	}
}
