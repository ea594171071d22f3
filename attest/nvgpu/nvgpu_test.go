package nvgpu

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

func readTD(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reportTD(t testing.TB, name string) []byte {
	t.Helper()
	b, err := DecodeReportFile(readTD(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

const (
	hopperNonce    = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"
	blackwellNonce = "4cff7f5380ead8fad8ec2c531c110aca4302a88f603792801a8ca29ee151af2e"
	hopperFWID     = "f5c384aebb579217a2c66b17ed0f28e6a9b8d639041acd7b4721cec004f7275494ba94bb5cdfdb3055ee051762b1f75d"
	blackwellFWID  = "9b92cc3e53b9265259e1abde163653288c2474fcafd8e5c0fd62ce9c9036fb62723fe3715b50f4ac27c68b62e2fd9240"
)

// realCases are the real reports with their valid chains.
var realCases = []struct {
	name, report, chain, nonce, fwid string
	arch                             Arch
}{
	{"nvtrust-hopper", "nvtrust-hopperAttestationReport.txt", "nvtrust-hopperCertChain.txt", hopperNonce, hopperFWID, Hopper},
	{"trustee-hopper", "trustee-hopperAttestationReport.txt", "trustee-hopper_cert_chain_case1.txt", hopperNonce, hopperFWID, Hopper},
	{"trustee-blackwell", "trustee-blackwellAttestationReport.txt", "trustee-blackwell_cert_chain_case1.txt", blackwellNonce, blackwellFWID, Blackwell},
}

func TestRealReportsVerify(t *testing.T) {
	for _, tc := range realCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Verify(reportTD(t, tc.report), readTD(t, tc.chain), Options{Nonce: mustHex(tc.nonce)})
			if err != nil {
				t.Fatalf("verify: %v\n%s", err, c.Checks)
			}
			t.Logf("\n%s", c.Checks)
			if !c.Verified || c.Arch != tc.arch || !c.NonceVerified || c.FWID != tc.fwid {
				t.Errorf("claims: verified=%v arch=%s nonce=%v fwid=%s", c.Verified, c.Arch, c.NonceVerified, c.FWID)
			}
			for _, name := range []string{CheckChain, CheckSignature, CheckNonce, CheckArch} {
				if ck, _ := c.Checks.Find(name); ck.Status != check.Pass {
					t.Errorf("%s: %+v", name, ck)
				}
			}
			if ck, _ := c.Checks.Find(CheckRevocation); ck.Status != check.Skipped || !strings.Contains(ck.Reason, "skipped: offline") {
				t.Errorf("revocation: %+v", ck)
			}
			j, _ := json.Marshal(c)
			_ = j
		})
	}
}

func TestBrokenChainsRejectedDistinctly(t *testing.T) {
	for _, arch := range []string{"hopper", "blackwell"} {
		rep := reportTD(t, "trustee-"+arch+"AttestationReport.txt")
		reasons := map[string]ChainReason{}
		for _, cs := range []string{"case2", "case3"} {
			c, err := Verify(rep, readTD(t, "trustee-"+arch+"_cert_chain_"+cs+".txt"), Options{})
			var ve *check.VerifyError
			var ce *ChainError
			if !errors.As(err, &ve) || !errors.As(err, &ce) || ve.Check != CheckChain {
				t.Fatalf("%s %s: err %v", arch, cs, err)
			}
			if c.Verified {
				t.Errorf("%s %s: verified", arch, cs)
			}
			t.Logf("%s %s: %v", arch, cs, err)
			reasons[cs] = ce.Reason
		}
		if reasons["case2"] != ChainTooShort || reasons["case3"] != ChainNotSignedBy {
			t.Errorf("%s reasons: %v", arch, reasons)
		}
	}
}
