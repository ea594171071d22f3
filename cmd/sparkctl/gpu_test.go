package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const gpuTD = "../../attest/nvgpu/testdata/"

func runGPU(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"gpu", "verify"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestGPUVerifyCLI(t *testing.T) {
	hop := []string{"--report", gpuTD + "trustee-hopperAttestationReport.txt"}
	const hn = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"
	// Binary report input.
	raw, err := os.ReadFile(gpuTD + "trustee-blackwellAttestationReport.txt")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := hex.DecodeString(string(bytes.TrimSpace(raw)))
	if err != nil {
		t.Fatal(err)
	}
	binPath := filepath.Join(t.TempDir(), "bw.bin")
	os.WriteFile(binPath, bin, 0o644)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"hopper valid", append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case1.txt", "--nonce", hn), 0, "VERIFIED"},
		{"blackwell binary", []string{"--report", binPath, "--chain", gpuTD + "trustee-blackwell_cert_chain_case1.txt", "--as-of", "2025-01-01"}, 0, "[skip] nvgpu.nonce"},
		{"case2", append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case2.txt"), 1, "chain too short"},
		{"case3", append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case3.txt"), 1, "not signed by the next one"},
		{"wrong nonce", append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case1.txt", "--nonce", strings.Repeat("00", 32)), 1, "[FAIL] nvgpu.nonce"},
		{"garbage report", []string{"--report", gpuTD + "trustee-hopper_cert_chain_case1.txt", "--chain", gpuTD + "trustee-hopper_cert_chain_case1.txt"}, 2, "parse gpu report"},
		{"garbage chain", append(hop, "--chain", gpuTD+"trustee-hopperAttestationReport.txt"), 2, "parse gpu certificate chain"},
		{"bad nonce flag", append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case1.txt", "--nonce", "abc"), 2, "not 32 bytes"},
		{"missing flag", hop, 2, "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runGPU(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errs, tc.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, tc.code, tc.want, out, errs)
			}
		})
	}
	code, out, _ := runGPU(t, append(hop, "--chain", gpuTD+"trustee-hopper_cert_chain_case1.txt", "--nonce", hn, "--json")...)
	var c struct {
		Arch     string `json:"arch"`
		Verified bool   `json:"verified"`
		FWID     string `json:"fwid"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || !c.Verified || c.Arch != "hopper" || c.FWID == "" {
		t.Errorf("json: exit %d %+v\n%s", code, c, out)
	}
}
