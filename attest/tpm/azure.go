package tpm

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/tdx"
)

// CheckHardwareType names the check that the HCL report's hardware report
// is of the kind whose quote was verified.
const CheckHardwareType = "vtpm.hcl.hardware_type"

// AzureTDX is the result of verifying an Azure TDX CVM's vTPM evidence:
// the TD quote's claims (attest/tdx) and the vTPM claims bound to it.
type AzureTDX struct {
	TD   *tdx.Claims `json:"td"`
	VTPM *Claims     `json:"vtpm"`
}

// VerifyAzureTDX verifies ev end to end: the TD quote with attest/tdx (with
// tdxOpts: collateral, as-of time), then the HCL report's binding to the
// quote's REPORTDATA and the vTPM quote against nonce ([Verify]).
//
// Errors: *check.ParseError for unusable input; *check.VerifyError when the
// TD quote or a vTPM check fails; *check.UnavailableError when everything
// that ran passed but the TD quote's collateral could not be had (the TD
// quote's signature, QE report and PCK chain did verify, so the binding is
// still checked). The result is returned with every error but a ParseError;
// it must not be trusted unless the error is nil.
func VerifyAzureTDX(ev *Evidence, nonce []byte, tdxOpts tdx.Options) (*AzureTDX, error) {
	if ev == nil || ev.Quote == nil {
		return nil, &check.ParseError{What: "vtpm evidence", Err: errors.New("missing quote")}
	}
	h, err := ParseHCLReport(ev.HCLReport)
	if err != nil {
		return nil, err
	}
	tdc, tdErr := tdx.Verify(ev.TDQuote, tdxOpts)
	var pe *check.ParseError
	if errors.As(tdErr, &pe) {
		return nil, tdErr
	}
	out := &AzureTDX{TD: tdc}
	var ue *check.UnavailableError
	if tdErr != nil && !errors.As(tdErr, &ue) {
		return out, tdErr // the TD quote is rejected: its REPORTDATA binds nothing
	}
	if h.HardwareType != "tdx" {
		out.VTPM = &Claims{}
		out.VTPM.Checks.Fail(CheckHardwareType, "the hcl report holds an %s report, not a td report", h.HardwareType)
		return out, &check.VerifyError{Check: CheckHardwareType, Err: fmt.Errorf("hcl report holds an %s report, not a td report", h.HardwareType)}
	}
	rd, err := hex.DecodeString(tdc.ReportData)
	if err != nil {
		return out, &check.VerifyError{Check: CheckReportDataBinding, Err: fmt.Errorf("td claims report data %q: %v", tdc.ReportData, err)}
	}
	out.VTPM, err = Verify(h, ev.Quote, rd, nonce)
	if err != nil {
		return out, err
	}
	return out, tdErr
}
