package tdx

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// receipt holds the Polaris receipt fields the tests use.
type receipt struct {
	name        string
	Attestation struct {
		Timestamp string `json:"timestamp_utc"`
	} `json:"attestation"`
	TDX struct {
		Quote       string `json:"quote_b64"`
		Collateral  string `json:"collateral_b64"`
		Nonce       string `json:"nonce"`
		E2EPubkey   string `json:"e2e_pubkey_b64"`
		BoundDigest string `json:"bound_digest"`
		ResultSHA   string `json:"result_sha256"`
		FilesSHA    string `json:"files_sha256"`
	} `json:"tdx"`
}

func (r *receipt) quote(t testing.TB) []byte {
	b, err := base64.StdEncoding.DecodeString(r.TDX.Quote)
	if err != nil {
		t.Fatalf("%s: quote_b64: %v", r.name, err)
	}
	return b
}

func (r *receipt) collateral(t testing.TB) *Collateral {
	raw, err := base64.StdEncoding.DecodeString(r.TDX.Collateral)
	if err != nil {
		t.Fatalf("%s: collateral_b64: %v", r.name, err)
	}
	c, err := ParseCollateral(raw)
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	return c
}

func (r *receipt) asOf(t testing.TB) time.Time {
	ts, err := time.Parse(time.RFC3339, r.Attestation.Timestamp)
	if err != nil {
		t.Fatalf("%s: timestamp_utc: %v", r.name, err)
	}
	return ts
}

// wantReportData recomputes REPORTDATA per the Polaris rule.
func (r *receipt) wantReportData() []byte {
	a := sha256.Sum256([]byte(r.TDX.Nonce + r.TDX.E2EPubkey))
	b := sha256.Sum256([]byte(r.TDX.BoundDigest + r.TDX.ResultSHA + r.TDX.FilesSHA))
	return append(a[:], b[:]...)
}

func loadReceipts(t testing.TB) []*receipt {
	files, err := filepath.Glob("testdata/polaris/*.json")
	if err != nil || len(files) != 26 {
		t.Fatalf("want 26 polaris receipts in testdata/polaris, got %d (%v)", len(files), err)
	}
	var out []*receipt
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := &receipt{name: filepath.Base(f)}
		if err := json.Unmarshal(b, r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, r)
	}
	return out
}

func TestPolarisQuotesVerify(t *testing.T) {
	for _, r := range loadReceipts(t) {
		t.Run(r.name, func(t *testing.T) {
			cl, err := Verify(r.quote(t), Options{AsOf: r.asOf(t), Collateral: r.collateral(t), ReportData: r.wantReportData()})
			if err != nil {
				if cl == nil {
					t.Fatalf("verify: %v", err)
				}
				t.Fatalf("verify: %v\n%s", err, cl.Checks)
			}
			for _, c := range cl.Checks {
				if c.Status != "pass" {
					t.Errorf("check %s is %s: %s", c.Name, c.Status, c.Reason)
				}
			}
			if cl.ReportData != hex.EncodeToString(r.wantReportData()) {
				t.Errorf("report data %s", cl.ReportData)
			}
			if !cl.AsOf.Equal(r.asOf(t)) || cl.CollateralSource != "polaris receipt" || cl.TCBStatus == "" || cl.FMSPC == "" {
				t.Errorf("claims: %+v", cl)
			}
			if testing.Verbose() && r.name == "0000-51467dd.json" {
				t.Logf("\n%s", cl.Checks)
			}
		})
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
