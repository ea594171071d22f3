package policy_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/attesttest"
	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/internal/fuzzseed"
	"github.com/sparkinfer/cc/policy"
)

var (
	testNow   = time.Date(2026, 7, 10, 1, 47, 29, 0, time.UTC)
	testNonce = []byte("0123456789abcdef0123456789abcdef")
)

func load(t *testing.T, path string) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultIsZeroValue(t *testing.T) {
	zero := policy.Policy{Version: policy.Version}
	d := policy.Default()
	// The default file spells out the zero value's meaning; compare the
	// verdicts they give rather than the structs (the file writes the
	// defaults explicitly, e.g. min_gpus 1 where the zero value says 0).
	c := simClaims(t, attesttest.Spec{GPUs: 1})
	a, b := policy.Evaluate(c, &zero), policy.Evaluate(c, d)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("default.json and the zero policy disagree:\n%s\n%s", a.Checks, b.Checks)
	}
}

func TestDecodeStrict(t *testing.T) {
	cases := map[string]string{
		"unknown field":     `{"version":"sparkinfer-policy/v1","allow_debug":true}`,
		"wrong type":        `{"version":"sparkinfer-policy/v1","allow_simulated":"yes"}`,
		"wrong type list":   `{"version":"sparkinfer-policy/v1","mrtd":"00"}`,
		"trailing data":     `{"version":"sparkinfer-policy/v1"} {}`,
		"trailing garbage":  `{"version":"sparkinfer-policy/v1"}x`,
		"missing version":   `{}`,
		"wrong version":     `{"version":"sparkinfer-policy/v2"}`,
		"bad status":        `{"version":"sparkinfer-policy/v1","allowed_tcb_statuses":["Revoked"]}`,
		"bad kind":          `{"version":"sparkinfer-policy/v1","tee_kinds":["sim"]}`,
		"bad mrtd":          `{"version":"sparkinfer-policy/v1","mrtd":["00"]}`,
		"bad svn":           `{"version":"sparkinfer-policy/v1","min_tee_tcb_svn":"zz"}`,
		"bad duration":      `{"version":"sparkinfer-policy/v1","max_evidence_age":"5 minutes"}`,
		"negative duration": `{"version":"sparkinfer-policy/v1","max_evidence_age":"-5m"}`,
		"duration number":   `{"version":"sparkinfer-policy/v1","max_evidence_age":300}`,
		"negative gpus":     `{"version":"sparkinfer-policy/v1","min_gpus":-1}`,
		"snp tcb product":   `{"version":"sparkinfer-policy/v1","snp_min_tcb":{"Turin":{"bootloader":1,"tee":0,"snp":1,"microcode":1}}}`,
		"snp tcb field":     `{"version":"sparkinfer-policy/v1","snp_min_tcb":{"Milan":{"fmc":1}}}`,
		"snp tcb range":     `{"version":"sparkinfer-policy/v1","snp_min_tcb":{"Milan":{"snp":256}}}`,
		"not json":          `version: 1`,
		"empty":             ``,
		"null":              `null`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := policy.Parse([]byte(in))
			var pe *policy.Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q): %v, want *policy.Error", in, err)
			}
			if name == "wrong type" && pe.Field != "allow_simulated" {
				t.Errorf("field %q, want allow_simulated", pe.Field)
			}
		})
	}
	if _, err := policy.Decode(bytes.NewReader(append([]byte(`{"version":"sparkinfer-policy/v1"}`), bytes.Repeat([]byte(" "), policy.MaxSize)...))); err == nil {
		t.Error("oversize policy accepted")
	}
}

func simClaims(t testing.TB, spec attesttest.Spec) *attest.Claims {
	t.Helper()
	a := attesttest.PublicAuthority()
	if spec.Statement.Version == "" {
		spec.Statement = attesttest.Statement(testNow, testNonce)
	}
	b, err := a.Mint(spec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := attest.Verify(context.Background(), b, a.Options(testNow), attest.Expectations{Nonce: testNonce})
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Checks)
	}
	return &r.Claims
}

// snpClaims turns simulated claims into verified SEV-SNP claims of a Milan
// part (revocation checked, GPU appraised), leaving the TCB to the case.
func snpClaims(c *attest.Claims) {
	c.Simulated, c.TEE.Simulated, c.TEE.Kind = false, false, attest.KindSEVSNP
	c.TEE.MRTD, c.TEE.RTMRs, c.TEE.Measurement = "", nil, strings.Repeat("ab", 48)
	c.TEE.SNPProduct, c.TEE.RevocationChecked = "Milan", true
	c.GPUs[0].Simulated, c.GPUs[0].RIMsChecked, c.GPUs[0].MeasurementsMatch, c.GPUs[0].RevocationChecked = false, true, true, true
}

func failed(v policy.Verdict) []string {
	var names []string
	for _, c := range v.Checks {
		if c.Status == check.Fail {
			names = append(names, c.Name)
		}
	}
	return names
}

func TestSimulatedAllowedOnlyByPolicy(t *testing.T) {
	c := simClaims(t, attesttest.Spec{GPUs: 2})
	dev := load(t, "dev-simulated.json")
	v := policy.Evaluate(c, dev)
	if !v.Verified || !v.Simulated {
		t.Fatalf("dev policy: verified %v simulated %v:\n%s", v.Verified, v.Simulated, v.Checks)
	}
	if ch, _ := v.Checks.Find("policy.simulated"); !strings.Contains(ch.Reason, "SIMULATED") {
		t.Errorf("policy.simulated = %+v", ch)
	}
	v = policy.Evaluate(c, policy.Default())
	if v.Verified {
		t.Fatal("default policy accepted simulated evidence")
	}
	ch, _ := v.Checks.Find("policy.simulated")
	if ch.Status != check.Fail || !strings.HasPrefix(ch.Reason, "simulated evidence not allowed") {
		t.Errorf("policy.simulated = %+v", ch)
	}
	// Every mismatch is reported, not just the first.
	want := []string{"policy.simulated", "policy.tee.mrtd", "policy.source_hash"}
	if got := failed(v); !reflect.DeepEqual(got, want) {
		t.Errorf("failed checks %v, want %v", got, want)
	}
	if len(v.Mismatches) != len(want) || v.Mismatches[0].Field != "simulated" || v.Mismatches[0].Got != "true" {
		t.Errorf("mismatches %+v", v.Mismatches)
	}
}

func TestEvaluateReportsEachFailure(t *testing.T) {
	dev := load(t, "dev-simulated.json")
	old := attesttest.Statement(testNow.Add(-time.Hour), testNonce)
	cases := []struct {
		name   string
		spec   attesttest.Spec
		mutate func(*policy.Policy, *attest.Claims)
		want   []string
	}{
		{"debug", attesttest.Spec{GPUs: 1, Debug: true}, nil, []string{"policy.tee.debug"}},
		{"cc off", attesttest.Spec{GPUs: 2, CCOff: true}, nil, []string{"policy.gpu.0.cc_mode", "policy.gpu.1.cc_mode"}},
		{"dev tools", attesttest.Spec{GPUs: 1, DevTools: true}, nil, []string{"policy.gpu.0.dev_tools"}},
		{"debug and dev tools", attesttest.Spec{GPUs: 1, Debug: true, DevTools: true, CCOff: true}, nil,
			[]string{"policy.tee.debug", "policy.gpu.0.cc_mode", "policy.gpu.0.dev_tools"}},
		{"no gpus", attesttest.Spec{GPUs: 0}, nil, []string{"policy.gpu.count"}},
		{"too few gpus", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) { p.MinGPUs = 2 }, []string{"policy.gpu.count"}},
		{"no gpus allowed", attesttest.Spec{GPUs: 0}, func(p *policy.Policy, _ *attest.Claims) { p.AllowNoGPUsUnsafe = true }, nil},
		{"mrtd mismatch", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.AllowAnyMeasurementsUnsafe = false
			p.MRTD = []string{strings.Repeat("ab", 48)}
		}, []string{"policy.tee.mrtd"}},
		{"mrtd and rtmr pinned ok", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.AllowAnyMeasurementsUnsafe = false
			p.MRTD = []string{strings.Repeat("00", 48)}
			p.RTMR2 = []string{strings.Repeat("00", 48)}
		}, nil},
		{"rtmr mismatch", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.AllowAnyMeasurementsUnsafe = false
			p.MRTD = []string{strings.Repeat("00", 48)}
			p.RTMR1 = []string{strings.Repeat("11", 48)}
		}, []string{"policy.tee.rtmr1"}},
		{"svn below minimum", attesttest.Spec{GPUs: 1, SVN: [16]byte{3, 0, 5}}, func(p *policy.Policy, _ *attest.Claims) {
			p.MinTEETCBSVN = "03000600000000000000000000000000"
		}, []string{"policy.tee.min_tcb_svn"}},
		{"svn at minimum", attesttest.Spec{GPUs: 1, SVN: [16]byte{3, 0, 5}}, func(p *policy.Policy, _ *attest.Claims) {
			p.MinTEETCBSVN = "03000500000000000000000000000000"
		}, nil},
		{"source hash", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.SourceHashes = []string{strings.Repeat("0", 64)}
		}, []string{"policy.source_hash"}},
		{"model digest", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.ModelDigests = []string{strings.Repeat("0", 64)}
		}, []string{"policy.model_digest"}},
		{"driver version", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, _ *attest.Claims) {
			p.GPUDriverVersions = []string{"580.1"}
		}, []string{"policy.gpu.0.driver_version"}},
		{"too old", attesttest.Spec{GPUs: 1, Statement: old}, nil, []string{"policy.evidence_age"}},
		{"old but allowed", attesttest.Spec{GPUs: 1, Statement: old}, func(p *policy.Policy, _ *attest.Claims) {
			p.MaxEvidenceAge.Duration = 2 * time.Hour
		}, nil},
		{"from the future", attesttest.Spec{GPUs: 1, Statement: attesttest.Statement(testNow.Add(time.Hour), testNonce)}, nil, []string{"policy.evidence_age"}},
		{"nonce not checked", attesttest.Spec{GPUs: 1}, func(_ *policy.Policy, c *attest.Claims) { c.NonceChecked = false }, []string{"policy.nonce"}},
		{"nonce not checked allowed", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			c.NonceChecked = false
			p.AllowNoNonceUnsafe = true
		}, nil},
		{"claims from failed verification", attesttest.Spec{GPUs: 1}, func(_ *policy.Policy, c *attest.Claims) {
			c.TEE.ReportDataBound = false
			c.GPUs[0].NonceBound = false
		}, []string{"policy.evidence_verified"}},
		{"hardware claims without collateral or revocation", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			c.Simulated, c.TEE.Simulated, c.TEE.Kind = false, false, attest.KindTDX
			c.GPUs[0].Simulated = false
		}, []string{"policy.tee.tcb_status", "policy.tee.revocation", "policy.gpu.0.rims", "policy.gpu.0.revocation"}},
		{"hardware claims out of date", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			c.Simulated, c.TEE.Simulated, c.TEE.Kind = false, false, attest.KindTDX
			c.TEE.CollateralChecked, c.TEE.TCBStatus, c.TEE.RevocationChecked = true, "OutOfDate", true
			c.GPUs[0].Simulated, c.GPUs[0].RIMsChecked, c.GPUs[0].MeasurementsMatch, c.GPUs[0].RevocationChecked = false, true, false, true
		}, []string{"policy.tee.tcb_status", "policy.gpu.0.rims"}},
		{"hardware claims, kind not allowed", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			c.Simulated, c.TEE.Simulated, c.TEE.Kind = false, false, attest.KindTDX
			c.TEE.CollateralChecked, c.TEE.TCBStatus, c.TEE.RevocationChecked = true, "SWHardeningNeeded", true
			c.GPUs[0].Simulated, c.GPUs[0].RIMsChecked, c.GPUs[0].MeasurementsMatch, c.GPUs[0].RevocationChecked = false, true, true, true
			p.TEEKinds = []string{"sev-snp"}
			p.AllowedTCBStatuses = []string{"UpToDate", "SWHardeningNeeded"}
		}, []string{"policy.tee.kind"}},
		{"sev-snp without a minimum tcb or the unsafe flag", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPReportedTCB = &attest.SNPTCB{BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}
		}, []string{"policy.tee.tcb_status"}},
		{"sev-snp reported tcb at the minimum", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPReportedTCB = &attest.SNPTCB{BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}
			p.SNPMinTCB = map[string]attest.SNPTCB{"Milan": {BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}, "Genoa": {BootLoader: 9, TEE: 0, SNP: 23, Microcode: 72}}
		}, nil},
		{"sev-snp reported tcb above the minimum", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPReportedTCB = &attest.SNPTCB{BootLoader: 4, TEE: 1, SNP: 9, Microcode: 116}
			p.SNPMinTCB = map[string]attest.SNPTCB{"Milan": {BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}}
		}, nil},
		{"sev-snp microcode below the minimum", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPReportedTCB = &attest.SNPTCB{BootLoader: 9, TEE: 9, SNP: 22, Microcode: 114}
			p.SNPMinTCB = map[string]attest.SNPTCB{"Milan": {BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}}
			p.AllowUncheckedCollateralUnsafe = true // a minimum, once set, is not waived
		}, []string{"policy.tee.tcb_status"}},
		{"sev-snp product line without a minimum", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPProduct = "Genoa"
			c.TEE.SNPReportedTCB = &attest.SNPTCB{BootLoader: 9, TEE: 0, SNP: 23, Microcode: 72}
			p.SNPMinTCB = map[string]attest.SNPTCB{"Milan": {BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}}
		}, []string{"policy.tee.tcb_status"}},
		{"sev-snp reported tcb not decoded", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			snpClaims(c)
			c.TEE.SNPProduct = "Turin"
			p.SNPMinTCB = map[string]attest.SNPTCB{"Milan": {BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}}
		}, []string{"policy.tee.tcb_status"}},
		{"hardware claims all good, offline allowed", attesttest.Spec{GPUs: 1}, func(p *policy.Policy, c *attest.Claims) {
			c.Simulated, c.TEE.Simulated, c.TEE.Kind = false, false, attest.KindTDX
			c.TEE.CollateralChecked, c.TEE.TCBStatus = true, "UpToDate"
			c.GPUs[0].Simulated, c.GPUs[0].RIMsChecked, c.GPUs[0].MeasurementsMatch = false, true, true
			p.AllowOfflineRevocationUnsafe = true
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := simClaims(t, tc.spec)
			p := *dev
			if tc.mutate != nil {
				tc.mutate(&p, c)
			}
			v := policy.Evaluate(c, &p)
			got := failed(v)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("failed checks %v, want %v\n%s", got, tc.want, v.Checks)
			}
			if v.Verified != (len(tc.want) == 0) || len(v.Mismatches) != len(tc.want) {
				t.Errorf("verified %v with %d mismatches", v.Verified, len(v.Mismatches))
			}
			for _, m := range v.Mismatches {
				if m.Field == "" || m.Got == "" || m.Want == "" {
					t.Errorf("incomplete mismatch %+v", m)
				}
			}
		})
	}
}

func TestAppraise(t *testing.T) {
	a := attesttest.PublicAuthority()
	b, err := a.Mint(attesttest.Spec{GPUs: 1, Statement: attesttest.Statement(testNow, testNonce)})
	if err != nil {
		t.Fatal(err)
	}
	dev := load(t, "dev-simulated.json")
	r, err := attest.Verify(context.Background(), b, a.Options(testNow), attest.Expectations{Nonce: testNonce})
	if v := policy.Appraise(r, err, dev); !v.Verified {
		t.Fatalf("appraise: %s", v.Checks)
	}
	bad := attesttest.FlipQuoteByte(b, 100)
	r, err = attest.Verify(context.Background(), bad, a.Options(testNow), attest.Expectations{Nonce: testNonce})
	v := policy.Appraise(r, err, dev)
	if v.Verified {
		t.Fatal("appraise accepted a bundle that failed verification")
	}
	if ch, _ := v.Checks.Find("tee.signature"); ch.Status != check.Fail {
		t.Errorf("tee.signature = %+v", ch)
	}
	if v := policy.Evaluate(&r.Claims, nil); v.Verified {
		t.Error("nil policy accepted")
	}
	if v := policy.Evaluate(nil, dev); v.Verified {
		t.Error("nil claims accepted")
	}
}

func FuzzDecodePolicy(f *testing.F) {
	fuzzseed.Files(f, "*.json", "testdata/*.json")
	c := simClaims(f, attesttest.Spec{GPUs: 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			var pe *policy.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v, want *policy.Error", err, err)
			}
			return
		}
		v := policy.Evaluate(c, p)
		if v.Verified && !p.AllowSimulated {
			t.Fatal("simulated claims verified without allow_simulated")
		}
	})
}

func TestSNPMinTCBFile(t *testing.T) {
	b, err := os.ReadFile("testdata/snp-min-tcb.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.SNPMinTCB["Milan"], (attest.SNPTCB{BootLoader: 3, TEE: 0, SNP: 8, Microcode: 115}); got != want || len(p.SNPMinTCB) != 2 {
		t.Errorf("snp_min_tcb %+v, want Milan %+v and Genoa", p.SNPMinTCB, want)
	}
}
