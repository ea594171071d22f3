package attest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/nvgpu"
	"github.com/sparkinfer/cc/attest/sevsnp"
	"github.com/sparkinfer/cc/attest/tdx"
	"github.com/sparkinfer/cc/attest/tpm"
)

// passed reports whether the named check is in l with status pass.
func passed(l check.List, name string) bool {
	c, ok := l.Find(name)
	return ok && c.Status == check.Pass
}

// verifyTDX verifies a TDX quote with package attest/tdx, against the
// bundle's collateral or, without it, collateral from the configured PCS.
// Missing collateral is not a rejection: the claims then say
// CollateralChecked false and the policy decides.
func (v *Verifier) verifyTDX(now time.Time, t *TEEEvidence, cl *check.List) (TEEClaims, []byte, error) {
	c := TEEClaims{Kind: t.Kind}
	opts := tdx.Options{AsOf: now, PCS: v.opts.TDXPCS}
	if len(t.Collateral) > 0 {
		coll, err := tdx.ParseCollateral(t.Collateral)
		if err != nil {
			cl.Fail("tee.collateral", "bundle collateral unusable: %v", err)
			return c, nil, err
		}
		opts.Collateral = coll
	}
	tc, err := tdx.Verify(t.Quote, opts)
	if tc == nil {
		cl.Fail("tee.signature", "tdx quote unusable: %v", err)
		if err == nil {
			err = &check.ParseError{What: "tdx quote", Err: errors.New("no claims")}
		}
		return c, nil, err
	}
	*cl = append(*cl, tc.Checks...)
	var ue *check.UnavailableError
	if err != nil && !errors.As(err, &ue) {
		cl.Fail("tee.signature", "tdx quote rejected: %v", err)
		return c, nil, err
	}
	c.SignatureVerified = true
	cl.Pass("tee.signature", "tdx quote v%d: signature, qe report and pck chain verified to the intel sgx root ca as of %s", tc.QuoteVersion, FormatTime(now))
	c.ReportData = tc.ReportData
	c.Debug = tc.Debug
	c.MRTD = tc.MRTD
	c.RTMRs = tc.RTMR[:]
	c.TEETCBSVN = tc.TeeTCBSVN
	c.PlatformID = tc.FMSPC
	c.RevocationChecked = passed(tc.Checks, tdx.CheckPCKCRL) && passed(tc.Checks, tdx.CheckRootCRL)
	if err != nil {
		cl.Skip("tee.collateral", "tcb not appraised: %v", err)
	} else {
		c.CollateralChecked = tc.TCBStatus != ""
		c.TCBStatus = worstStatus(tc.TCBStatus, tc.TDXModuleTCBStatus, tc.QETCBStatus)
		cl.Pass("tee.collateral", "tcb status %q (platform %q, tdx module %q, qe %q) from %s collateral", c.TCBStatus, tc.TCBStatus, tc.TDXModuleTCBStatus, tc.QETCBStatus, tc.CollateralSource)
	}
	rd, derr := hex.DecodeString(tc.ReportData)
	if derr != nil {
		return c, nil, &check.ParseError{What: "tdx report data", Err: derr}
	}
	return c, rd, nil
}

// worstStatus returns the first status that is not UpToDate (platform, then
// TDX module, then QE), or UpToDate.
func worstStatus(s ...string) string {
	out := ""
	for _, x := range s {
		if x == "" {
			continue
		}
		if out == "" || out == "UpToDate" {
			out = x
		}
	}
	return out
}

// verifySEVSNP verifies an SEV-SNP report with package attest/sevsnp.
// AMD publishes no TCB status, so CollateralChecked stays false: the policy
// appraises the reported TCB against its own minimum (snp_min_tcb), or must
// say allow_unchecked_collateral_unsafe to accept SEV-SNP evidence.
func (v *Verifier) verifySEVSNP(ctx context.Context, now time.Time, t *TEEEvidence, cl *check.List) (TEEClaims, []byte, error) {
	c := TEEClaims{Kind: t.Kind}
	sc, err := sevsnp.Verify(ctx, t.Quote, t.Certificates, sevsnp.Options{Now: now, Getter: v.opts.SNPGetter})
	if sc == nil {
		cl.Fail("tee.signature", "sev-snp report unusable: %v", err)
		if err == nil {
			err = &check.ParseError{What: "sev-snp report", Err: errors.New("no claims")}
		}
		return c, nil, err
	}
	*cl = append(*cl, sc.Checks...)
	if err != nil {
		cl.Fail("tee.signature", "sev-snp report rejected: %v", err)
		return c, nil, err
	}
	c.SignatureVerified = true
	cl.Pass("tee.signature", "sev-snp report signed by the %s, chained to the amd %s root as of %s", sc.Signer, sc.Product, FormatTime(now))
	c.ReportData = sc.ReportData
	c.Debug = sc.Policy.Debug
	c.Measurement = sc.Measurement
	c.PlatformID = sc.ChipID
	c.SNPProduct = sc.Product
	if r := sc.TCB.Reported; r.BootLoader != nil && r.TEE != nil && r.SNP != nil && r.Microcode != nil {
		c.SNPReportedTCB = &SNPTCB{BootLoader: *r.BootLoader, TEE: *r.TEE, SNP: *r.SNP, Microcode: *r.Microcode}
	}
	c.RevocationChecked = passed(sc.Checks, sevsnp.CheckRevocation)
	cl.Skip("tee.collateral", "amd publishes no tcb status: tcb not appraised")
	rd, derr := hex.DecodeString(sc.ReportData)
	if derr != nil {
		return c, nil, &check.ParseError{What: "sev-snp report data", Err: derr}
	}
	return c, rd, nil
}

var rimIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)

// verifyNVIDIA verifies an NVIDIA GPU report with package attest/nvgpu. The
// nonce is compared by the caller (against the statement's GPU nonce). RIMs
// come from the bundle entry when it has any, else from Options.GPURIMDir.
func (v *Verifier) verifyNVIDIA(now time.Time, g *GPUEvidence, name string, gc *GPUClaims, cl *check.List) ([]byte, error) {
	opts := nvgpu.Options{AsOf: now, RIMDir: v.opts.GPURIMDir, HTTPClient: v.opts.GPUHTTPClient, Now: func() time.Time { return now }}
	if len(g.RIMs) > 0 {
		dir, err := os.MkdirTemp("", "sparkinfer-rims-")
		if err != nil {
			return nil, &check.UnavailableError{What: "rim staging directory", Err: err}
		}
		defer os.RemoveAll(dir)
		for j, r := range g.RIMs {
			rim, err := nvgpu.ParseRIM(r.XML)
			if err != nil {
				cl.Fail(name+".rims", "rim %d unusable: %v", j, err)
				return nil, err
			}
			if !rimIDPattern.MatchString(rim.TagID) {
				err := &check.ParseError{What: fmt.Sprintf("gpu %s rim %d tag id", name, j), Err: fmt.Errorf("%q is not a rim id", rim.TagID)}
				cl.Fail(name+".rims", "%v", err)
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, rim.TagID), r.XML, 0o600); err != nil {
				return nil, &check.UnavailableError{What: "rim staging directory", Err: err}
			}
		}
		opts.RIMDir = dir
	}
	nc, err := nvgpu.Verify(g.Report, g.CertChain, opts)
	if nc == nil {
		cl.Fail(name+".signature", "nvidia gpu report unusable: %v", err)
		if err == nil {
			err = &check.ParseError{What: "nvidia gpu report", Err: errors.New("no claims")}
		}
		return nil, err
	}
	for _, c := range nc.Checks {
		c.Name = name + "." + c.Name
		*cl = append(*cl, c)
	}
	if err != nil {
		cl.Fail(name+".signature", "nvidia gpu evidence rejected: %v", err)
		return nil, err
	}
	gc.SignatureVerified = true
	cl.Pass(name+".signature", "%s report signature, fwid and device chain verified to the nvidia device identity ca as of %s", nc.Arch, FormatTime(now))
	gc.Arch = string(nc.Arch)
	gc.DriverVersion = nc.DriverVersion
	gc.VBIOSVersion = nc.VBIOSVersion
	gc.Serial = nc.Chain.LeafSerial
	gc.FWID = nc.FWID
	gc.RevocationChecked = passed(nc.Checks, nvgpu.CheckRevocation)
	gc.RIMsChecked = passed(nc.Checks, nvgpu.CheckMeasurements)
	gc.MeasurementsMatch = gc.RIMsChecked
	// NVIDIA's reports carry no CC or dev-tools field (nvgpu says
	// "unknown"); the modes are pinned by the measurements, so a full RIM
	// match establishes CC on and dev tools off.
	gc.CCEnabled = nc.CCMode == nvgpu.ModeOn || nc.CCMode == nvgpu.ModeUnknown && gc.MeasurementsMatch
	gc.DevToolsEnabled = !(nc.DevToolsMode == nvgpu.ModeOff || nc.DevToolsMode == nvgpu.ModeUnknown && gc.MeasurementsMatch)
	mode := fmt.Sprintf("report says cc %s, dev tools %s", nc.CCMode, nc.DevToolsMode)
	if gc.MeasurementsMatch {
		cl.Pass(name+".modes", "%s; measurements match the signed rims, which pin both modes", mode)
	} else {
		cl.Skip(name+".modes", "%s; not established without a full rim match", mode)
	}
	n, derr := hex.DecodeString(nc.Nonce)
	if derr != nil {
		return nil, &check.ParseError{What: "nvidia gpu report nonce", Err: derr}
	}
	return n, nil
}

// verifyVTPM verifies Azure-style vTPM evidence: the TD quote with
// attest/tdx, then with attest/tpm the HCL report's binding of the vTPM key
// to the TD quote's REPORTDATA and the vTPM quote's signature over want
// (the statement's report data, the vTPM quote's nonce). The report data it
// returns is the vTPM quote's nonce, which tpm.Verify has checked equals
// want; a wrong statement therefore fails there and in tee.report_data.
func (v *Verifier) verifyVTPM(now time.Time, t *TEEEvidence, want []byte, cl *check.List) (TEEClaims, []byte, error) {
	c, tdRD, err := v.verifyTDX(now, t, cl)
	c.Kind = t.Kind
	if err != nil {
		return c, nil, err
	}
	// The TD quote verified; its REPORTDATA binds the HCL report, not the
	// statement, so signature success is not yet the whole story.
	hcl, err := tpm.ParseHCLReport(t.HCLReport)
	if err != nil {
		c.SignatureVerified = false
		cl.Fail("tee.vtpm", "hcl report unusable: %v", err)
		return c, nil, err
	}
	q, err := tpm.ParseTPMQuote(t.TPMQuote)
	if err != nil {
		c.SignatureVerified = false
		cl.Fail("tee.vtpm", "vtpm quote unusable: %v", err)
		return c, nil, err
	}
	vc, err := tpm.Verify(hcl, q, tdRD, want)
	if vc != nil {
		*cl = append(*cl, vc.Checks...)
	}
	var ve *check.VerifyError
	if err != nil && vc != nil && errors.As(err, &ve) && onlyFailures(vc.Checks, tpm.CheckQuoteNonce, tpm.CheckQuoteLibrary) &&
		passed(vc.Checks, tpm.CheckReportDataBinding) && passed(vc.Checks, tpm.CheckHWReportData) &&
		passed(vc.Checks, tpm.CheckQuoteSignature) && passed(vc.Checks, tpm.CheckQuotePCRDigest) {
		// Everything verified except the nonce: the vTPM quote signs
		// other report data. Report it as the binding failure.
		cl.Pass("tee.vtpm", "hcl report binds the vtpm key to the td quote; vtpm quote signature verified")
		n, derr := hex.DecodeString(vc.Nonce)
		if derr != nil {
			return c, nil, &check.ParseError{What: "vtpm quote nonce", Err: derr}
		}
		return c, n, nil
	}
	if err != nil {
		c.SignatureVerified = false
		cl.Fail("tee.vtpm", "vtpm evidence rejected: %v", err)
		return c, nil, err
	}
	cl.Pass("tee.vtpm", "hcl report binds the vtpm key to the td quote; vtpm quote signed over the statement's report data")
	return c, want, nil
}

// onlyFailures reports whether every failed check in l is one of names.
func onlyFailures(l check.List, names ...string) bool {
	for _, c := range l {
		if c.Status == check.Fail && !slices.Contains(names, c.Name) {
			return false
		}
	}
	return true
}
