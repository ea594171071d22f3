package policy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/check"
)

// VerdictVersion is the version string of the Verdict JSON format.
const VerdictVersion = "sparkinfer-verdict/v1"

// Verdict is the outcome of an appraisal.
type Verdict struct {
	// Version is VerdictVersion.
	Version string `json:"version"`
	// Verified is true when no check failed.
	Verified bool `json:"verified"`
	// Simulated is true when the evidence was simulated: then Verified
	// means only "well-formed", never "trustworthy".
	Simulated bool `json:"simulated"`
	// Checks lists every check, in order, with pass, fail or skipped.
	Checks check.List `json:"checks"`
	// Mismatches gives field, got and want of every failed policy check.
	Mismatches []Mismatch `json:"mismatches"`
}

// Mismatch is one failed policy check, for programs.
type Mismatch struct {
	Check string `json:"check"`
	Field string `json:"field"`
	Got   string `json:"got"`
	Want  string `json:"want"`
}

type eval struct {
	v *Verdict
}

func (e *eval) pass(name, format string, args ...any) { e.v.Checks.Pass(name, format, args...) }
func (e *eval) skip(name, format string, args ...any) { e.v.Checks.Skip(name, format, args...) }

// fail records a failed check; reason is the one-line explanation.
func (e *eval) fail(name, field, got, want, reason string) {
	e.v.Checks.Fail(name, "%s: %s: got %s, want %s", reason, field, got, want)
	e.v.Mismatches = append(e.v.Mismatches, Mismatch{Check: name, Field: field, Got: got, Want: want})
}

// Evaluate appraises claims against p and returns the verdict, with every
// check (not just the first failure). A nil or invalid policy, or nil claims,
// gives a verdict with a single failed check.
func Evaluate(c *attest.Claims, p *Policy) Verdict {
	v := Verdict{Version: VerdictVersion, Mismatches: []Mismatch{}}
	e := &eval{v: &v}
	if p == nil {
		e.fail("policy.valid", "policy", "none", "a policy", "no policy")
		return v
	}
	if err := p.Validate(); err != nil {
		e.fail("policy.valid", "policy", fmt.Sprintf("%q", err.Error()), "a valid policy", "invalid policy")
		return v
	}
	if c == nil || c.Version != attest.ClaimsVersion {
		got := "none"
		if c != nil {
			got = fmt.Sprintf("%q", c.Version)
		}
		e.fail("policy.claims", "claims.version", got, attest.ClaimsVersion, "no usable claims")
		return v
	}
	v.Simulated = c.Simulated
	e.simulated(c, p)
	e.verified(c)
	e.tee(c, p)
	e.statement(c, p)
	e.gpus(c, p)
	v.Verified = !v.Checks.Failed()
	return v
}

func (e *eval) simulated(c *attest.Claims, p *Policy) {
	switch {
	case !c.Simulated:
		e.pass("policy.simulated", "hardware evidence, not simulated")
	case p.AllowSimulated:
		e.pass("policy.simulated", "SIMULATED evidence accepted by allow_simulated: it proves nothing")
	default:
		e.fail("policy.simulated", "simulated", "true", "false", "simulated evidence not allowed")
	}
}

// verified re-checks that the claims say every signature and binding was
// verified, so that claims from a failed Verify can never pass.
func (e *eval) verified(c *attest.Claims) {
	var bad []string
	if !c.TEE.SignatureVerified {
		bad = append(bad, "tee.signature_verified")
	}
	if !c.TEE.ReportDataBound {
		bad = append(bad, "tee.report_data_bound")
	}
	if len(c.GPUs) != len(c.Statement.GPUEvidenceDigests) {
		bad = append(bad, "gpus (count differs from the statement)")
	}
	for _, g := range c.GPUs {
		if !g.SignatureVerified {
			bad = append(bad, fmt.Sprintf("gpus[%d].signature_verified", g.Index))
		}
		if !g.InStatement {
			bad = append(bad, fmt.Sprintf("gpus[%d].in_statement", g.Index))
		}
		if !g.NonceBound {
			bad = append(bad, fmt.Sprintf("gpus[%d].nonce_bound", g.Index))
		}
	}
	if len(bad) > 0 {
		e.fail("policy.evidence_verified", strings.Join(bad, ", "), "false", "true", "claims say evidence was not verified")
		return
	}
	e.pass("policy.evidence_verified", "signatures and bindings verified")
}

func (e *eval) tee(c *attest.Claims, p *Policy) {
	t := &c.TEE
	// Kind.
	switch {
	case t.Kind == attest.KindSim:
		e.skip("policy.tee.kind", "SIMULATED tee (see policy.simulated)")
	case len(p.TEEKinds) == 0 && slices.Contains([]string{attest.KindTDX, attest.KindSEVSNP, attest.KindTDXVTPM}, t.Kind),
		slices.Contains(p.TEEKinds, t.Kind):
		e.pass("policy.tee.kind", "tee kind %q", t.Kind)
	default:
		want := "one of tdx, sev-snp, tdx-vtpm"
		if len(p.TEEKinds) > 0 {
			want = "one of " + strings.Join(p.TEEKinds, ", ")
		}
		e.fail("policy.tee.kind", "tee.kind", fmt.Sprintf("%q", t.Kind), want, "tee kind not allowed")
	}
	// Debug: never allowed.
	if t.Debug {
		e.fail("policy.tee.debug", "tee.debug", "true", "false", "debug mode is never allowed")
	} else {
		e.pass("policy.tee.debug", "debug off")
	}
	// TCB status.
	allowed := p.AllowedTCBStatuses
	if len(allowed) == 0 {
		allowed = []string{"UpToDate"}
	}
	switch {
	case t.Simulated:
		e.skip("policy.tee.tcb_status", "SIMULATED tee has no tcb collateral")
	case t.Kind == attest.KindSEVSNP && len(p.SNPMinTCB) > 0:
		// AMD publishes no tcb status: the policy's minimum is the appraisal
		min, ok := p.SNPMinTCB[t.SNPProduct]
		switch {
		case !ok:
			e.fail("policy.tee.tcb_status", "tee.snp_product", fmt.Sprintf("%q", t.SNPProduct), "a product line in snp_min_tcb", "no minimum tcb for this sev-snp product line")
		case t.SNPReportedTCB == nil:
			e.fail("policy.tee.tcb_status", "tee.snp_reported_tcb", "not decoded", min.String(), "the reported tcb was not decoded")
		case t.SNPReportedTCB.AtLeast(min):
			e.pass("policy.tee.tcb_status", "sev-snp %s reported tcb (%s) >= the policy's minimum (%s)", t.SNPProduct, t.SNPReportedTCB, min)
		default:
			e.fail("policy.tee.tcb_status", "tee.snp_reported_tcb", t.SNPReportedTCB.String(), ">= "+min.String()+" part by part", "sev-snp reported tcb below the policy's minimum")
		}
	case !t.CollateralChecked && p.AllowUncheckedCollateralUnsafe:
		e.skip("policy.tee.tcb_status", "tcb not appraised against collateral; accepted by allow_unchecked_collateral_unsafe")
	case !t.CollateralChecked:
		e.fail("policy.tee.tcb_status", "tee.collateral_checked", "false", "true", "tcb not appraised against vendor collateral")
	case slices.Contains(allowed, t.TCBStatus):
		e.pass("policy.tee.tcb_status", "tcb status %q allowed", t.TCBStatus)
	default:
		e.fail("policy.tee.tcb_status", "tee.tcb_status", fmt.Sprintf("%q", t.TCBStatus), "one of "+strings.Join(allowed, ", "), "tcb status not allowed")
	}
	// Minimum TEE TCB SVN.
	switch {
	case p.MinTEETCBSVN == "":
		e.skip("policy.tee.min_tcb_svn", "no min_tee_tcb_svn in the policy")
	case t.TEETCBSVN == "":
		e.skip("policy.tee.min_tcb_svn", "tee kind %q has no tee tcb svn", t.Kind)
	default:
		got, err1 := hex.DecodeString(t.TEETCBSVN)
		want, _ := hex.DecodeString(p.MinTEETCBSVN)
		ok := err1 == nil && len(got) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = got[i] >= want[i]
		}
		if ok {
			e.pass("policy.tee.min_tcb_svn", "tee tcb svn %s >= %s byte by byte", t.TEETCBSVN, strings.ToLower(p.MinTEETCBSVN))
		} else {
			e.fail("policy.tee.min_tcb_svn", "tee.tee_tcb_svn", t.TEETCBSVN, ">= "+strings.ToLower(p.MinTEETCBSVN)+" byte by byte", "tee tcb svn below the minimum")
		}
	}
	// Measurements.
	switch t.Kind {
	case attest.KindSEVSNP:
		e.allowlist("policy.tee.measurement", "tee.measurement", t.Measurement, p.SNPMeasurements, p.AllowAnyMeasurementsUnsafe, true)
	default:
		e.allowlist("policy.tee.mrtd", "tee.mrtd", t.MRTD, p.MRTD, p.AllowAnyMeasurementsUnsafe, true)
		for i, l := range [][]string{p.RTMR0, p.RTMR1, p.RTMR2, p.RTMR3} {
			got := ""
			if i < len(t.RTMRs) {
				got = t.RTMRs[i]
			}
			e.allowlist(fmt.Sprintf("policy.tee.rtmr%d", i), fmt.Sprintf("tee.rtmrs[%d]", i), got, l, p.AllowAnyMeasurementsUnsafe, false)
		}
	}
	// Revocation.
	switch {
	case t.Simulated:
		e.skip("policy.tee.revocation", "SIMULATED tee has no certificates")
	case t.RevocationChecked:
		e.pass("policy.tee.revocation", "tee certificate chain checked against current crls")
	case p.AllowOfflineRevocationUnsafe:
		e.skip("policy.tee.revocation", "revocation not checked (offline); accepted by allow_offline_revocation_unsafe")
	default:
		e.fail("policy.tee.revocation", "tee.revocation_checked", "false", "true", "revocation not checked (offline)")
	}
}

// allowlist checks got against list. required: an empty list fails unless
// anyUnsafe; otherwise an empty list skips.
func (e *eval) allowlist(name, field, got string, list []string, anyUnsafe, required bool) {
	switch {
	case len(list) == 0 && anyUnsafe:
		e.skip(name, "%s %s not pinned: allow_any_measurements_unsafe", field, orNone(got))
	case len(list) == 0 && required:
		e.fail(name, field, orNone(got), "a value from the policy's allowlist", "no allowlist in the policy (set one, or allow_any_measurements_unsafe)")
	case len(list) == 0:
		e.skip(name, "%s %s not pinned by the policy", field, orNone(got))
	case got != "" && containsFold(list, got):
		e.pass(name, "%s %s is allowed", field, got)
	default:
		e.fail(name, field, orNone(got), "one of "+strings.ToLower(strings.Join(list, ", ")), "value not in the policy's allowlist")
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func containsFold(list []string, v string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.EqualFold(s, v) })
}

func (e *eval) statement(c *attest.Claims, p *Policy) {
	s := &c.Statement
	switch {
	case len(p.SourceHashes) > 0 && containsFold(p.SourceHashes, s.SourceHash):
		e.pass("policy.source_hash", "source hash %s is allowed", s.SourceHash)
	case len(p.SourceHashes) > 0:
		e.fail("policy.source_hash", "statement.source_hash", s.SourceHash, "one of "+strings.ToLower(strings.Join(p.SourceHashes, ", ")), "source hash not allowed")
	case p.AllowAnySourceHashUnsafe:
		e.skip("policy.source_hash", "source hash %s not pinned: allow_any_source_hash_unsafe", s.SourceHash)
	default:
		e.fail("policy.source_hash", "statement.source_hash", s.SourceHash, "a value from source_hashes", "no source_hashes in the policy (set them, or allow_any_source_hash_unsafe)")
	}
	switch {
	case len(p.ModelDigests) == 0:
		e.skip("policy.model_digest", "model %s not pinned by the policy", s.ModelDigest)
	case containsFold(p.ModelDigests, s.ModelDigest):
		e.pass("policy.model_digest", "model digest %s is allowed", s.ModelDigest)
	default:
		e.fail("policy.model_digest", "statement.model_digest", s.ModelDigest, "one of "+strings.ToLower(strings.Join(p.ModelDigests, ", ")), "model digest not allowed")
	}
	// Freshness.
	switch {
	case c.NonceChecked:
		e.pass("policy.nonce", "statement carries the client's nonce")
	case p.AllowNoNonceUnsafe:
		e.skip("policy.nonce", "freshness not checked against a client nonce: allow_no_nonce_unsafe")
	default:
		e.fail("policy.nonce", "nonce_checked", "false", "true", "freshness not checked against a client nonce")
	}
	// Age.
	maxAge := p.MaxEvidenceAge.Duration
	if maxAge == 0 {
		maxAge = DefaultMaxEvidenceAge
	}
	now, err1 := time.Parse(time.RFC3339, c.VerifiedAt)
	issued, err2 := time.Parse(time.RFC3339, s.IssuedAt)
	const skew = time.Minute
	switch age := now.Sub(issued); {
	case err1 != nil || err2 != nil:
		e.fail("policy.evidence_age", "statement.issued_at", fmt.Sprintf("%q (verified at %q)", s.IssuedAt, c.VerifiedAt), "rfc 3339 times", "evidence age unknown")
	case age < -skew:
		e.fail("policy.evidence_age", "statement.issued_at", s.IssuedAt, "not after "+now.Add(skew).Format(time.RFC3339), "evidence issued in the future")
	case age > maxAge:
		e.fail("policy.evidence_age", "statement.issued_at", fmt.Sprintf("%s (age %s)", s.IssuedAt, age), "age at most "+maxAge.String(), "evidence too old")
	default:
		e.pass("policy.evidence_age", "issued %s, age %s <= %s", s.IssuedAt, age.Round(time.Second), maxAge)
	}
}

func (e *eval) gpus(c *attest.Claims, p *Policy) {
	min := p.MinGPUs
	if min == 0 {
		min = 1
	}
	switch n := len(c.GPUs); {
	case n == 0 && p.AllowNoGPUsUnsafe:
		e.skip("policy.gpu.count", "no gpus: allow_no_gpus_unsafe")
	case n < min:
		e.fail("policy.gpu.count", "gpus", fmt.Sprint(n), fmt.Sprintf("at least %d", min), "too few gpus")
	default:
		e.pass("policy.gpu.count", "%d gpus, at least %d", n, min)
	}
	for _, g := range c.GPUs {
		name := fmt.Sprintf("policy.gpu.%d", g.Index)
		field := fmt.Sprintf("gpus[%d]", g.Index)
		if g.CCEnabled {
			e.pass(name+".cc_mode", "confidential computing on")
		} else {
			e.fail(name+".cc_mode", field+".cc_enabled", "false", "true", "gpu confidential computing mode not shown to be on")
		}
		if g.DevToolsEnabled {
			e.fail(name+".dev_tools", field+".dev_tools_enabled", "true", "false", "gpu dev tools mode not shown to be off")
		} else {
			e.pass(name+".dev_tools", "dev tools off")
		}
		switch {
		case g.Simulated:
			e.skip(name+".rims", "SIMULATED gpu has no reference manifests")
		case g.RIMsChecked && g.MeasurementsMatch:
			e.pass(name+".rims", "measurements match the signed reference manifests")
		case g.RIMsChecked:
			e.fail(name+".rims", field+".measurements_match", "false", "true", "measurements differ from the signed reference manifests")
		case p.AllowMissingRIMsUnsafe:
			e.skip(name+".rims", "measurements not compared with reference manifests: allow_missing_rims_unsafe")
		default:
			e.fail(name+".rims", field+".rims_checked", "false", "true", "measurements not compared with signed reference manifests")
		}
		switch {
		case len(p.GPUDriverVersions) == 0:
			e.skip(name+".driver_version", "driver %s not pinned by the policy", orNone(g.DriverVersion))
		case slices.Contains(p.GPUDriverVersions, g.DriverVersion):
			e.pass(name+".driver_version", "driver %s is allowed", g.DriverVersion)
		default:
			e.fail(name+".driver_version", field+".driver_version", orNone(g.DriverVersion), "one of "+strings.Join(p.GPUDriverVersions, ", "), "gpu driver version not allowed")
		}
		switch {
		case g.Simulated:
			e.skip(name+".revocation", "SIMULATED gpu has no certificates")
		case g.RevocationChecked:
			e.pass(name+".revocation", "device certificate chain checked for revocation")
		case p.AllowOfflineRevocationUnsafe:
			e.skip(name+".revocation", "revocation not checked (offline); accepted by allow_offline_revocation_unsafe")
		default:
			e.fail(name+".revocation", field+".revocation_checked", "false", "true", "revocation not checked (offline)")
		}
	}
}

// Appraise combines verification and policy: it returns a verdict whose
// checks are the verification checks followed by the policy checks, and
// which is Verified only when verification returned no error and every
// policy check passed or was skipped. res may be nil when Verify returned
// a parse error.
func Appraise(res *attest.Result, verifyErr error, p *Policy) Verdict {
	var checks check.List
	if res != nil {
		checks = append(checks, res.Checks...)
	}
	if verifyErr != nil || res == nil {
		if verifyErr == nil {
			verifyErr = errors.New("no verification result")
		}
		checks.Fail("verify", "evidence not verified: %v", verifyErr)
		v := Verdict{Version: VerdictVersion, Checks: checks, Mismatches: []Mismatch{}}
		if res != nil {
			v.Simulated = res.Claims.Simulated
		}
		return v
	}
	v := Evaluate(&res.Claims, p)
	v.Checks = append(checks, v.Checks...)
	v.Verified = !v.Checks.Failed()
	return v
}
