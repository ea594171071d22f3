package sevsnp

import (
	"encoding/binary"
	"fmt"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/sparkinfer/cc/attest/check"
)

// Layout of the raw report (SEV-SNP ABI specification 56860, ATTESTATION_REPORT).
const (
	// ReportSize is the size of a raw attestation report in bytes.
	ReportSize = abi.ReportSize // 0x4A0 = 1184

	offVersion      = 0x000
	offSignatureAlg = 0x034
	offSignedEnd    = 0x2A0 // the signature covers [0, offSignedEnd)
	offSigR         = 0x2A0 // R: 72 bytes little endian, zero-extended
	offSigS         = 0x2E8 // S: 72 bytes little endian, zero-extended
	sigComponentLen = 72
	p384ScalarLen   = 48
)

// Report is a parsed, not yet verified, SEV-SNP attestation report.
type Report struct {
	raw    []byte
	proto  *spb.Report
	signer abi.SignerInfo
}

// Raw returns a copy of the report's bytes.
func (r *Report) Raw() []byte { return append([]byte(nil), r.raw...) }

// Version is the report's VERSION field.
func (r *Report) Version() uint32 { return r.proto.GetVersion() }

// ReportData returns a copy of the 64-byte REPORT_DATA field.
func (r *Report) ReportData() []byte { return append([]byte(nil), r.proto.GetReportData()...) }

// Signer names the key that signed the report: "vcek", "vlek" or "none".
func (r *Report) Signer() string { return signerName(r.signer.SigningKey) }

func signerName(k abi.ReportSigner) string {
	switch k {
	case abi.VcekReportSigner:
		return "vcek"
	case abi.VlekReportSigner:
		return "vlek"
	case abi.NoneReportSigner:
		return "none"
	}
	return fmt.Sprintf("reserved(%d)", uint8(k))
}

// ParseReport parses a raw SEV-SNP attestation report strictly. It checks
// structure only: nothing about the report is trusted until [Verify] passes.
// Errors are *check.ParseError.
func ParseReport(raw []byte) (*Report, error) {
	perr := func(format string, args ...any) error {
		return &check.ParseError{What: "sev-snp report", Err: fmt.Errorf(format, args...)}
	}
	if len(raw) != ReportSize {
		return nil, perr("report is %d bytes, want exactly %d", len(raw), ReportSize)
	}
	if err := abi.ValidateReportFormat(raw); err != nil {
		return nil, perr("%v", err)
	}
	if alg := binary.LittleEndian.Uint32(raw[offSignatureAlg:]); alg != abi.SignEcdsaP384Sha384 {
		return nil, perr("signature algorithm %d is not ecdsa p-384 with sha-384 (%d)", alg, abi.SignEcdsaP384Sha384)
	}
	// ReportToProto checks every must-be-zero field, the policy's reserved
	// bits and the signer info; the raw bytes stay what Verify checks.
	p, err := abi.ReportToProto(raw)
	if err != nil {
		return nil, perr("%v", err)
	}
	info, err := abi.ParseSignerInfo(p.GetSignerInfo())
	if err != nil {
		return nil, perr("signer info: %v", err)
	}
	// R and S are P-384 scalars zero-extended to 72 bytes (little endian):
	// the top 24 bytes of each must be zero.
	for _, off := range []int{offSigR, offSigS} {
		for i := off + p384ScalarLen; i < off+sigComponentLen; i++ {
			if raw[i] != 0 {
				return nil, perr("signature component at 0x%x has a non-zero byte 0x%02x at 0x%x beyond the 48-byte p-384 scalar", off, raw[i], i)
			}
		}
	}
	return &Report{raw: append([]byte(nil), raw...), proto: p, signer: info}, nil
}
