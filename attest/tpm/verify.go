package tpm

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/sparkinfer/cc/attest/check"
)

// Check names used in [Claims.Checks].
const (
	CheckReportDataBinding = "vtpm.hcl.report_data_binding"
	CheckHWReportData      = "vtpm.hcl.hw_report_data"
	CheckQuoteSignature    = "vtpm.quote.signature"
	CheckQuoteNonce        = "vtpm.quote.nonce"
	CheckQuotePCRDigest    = "vtpm.quote.pcr_digest"
	CheckQuoteLibrary      = "vtpm.quote.go_attestation"
)

// Platform values of [Claims.Platform].
const (
	PlatformTDX = "tdx-vtpm"
	PlatformSNP = "snp-vtpm"
)

// Claims is what verified vTPM evidence says. Claims returned together with
// an error must not be trusted: Checks then says which check failed.
type Claims struct {
	// Platform is "tdx-vtpm" or "snp-vtpm", from the HCL report's hardware
	// report type.
	Platform string `json:"platform"`
	// AKFingerprint is the lowercase hex SHA-256 of the attestation key's
	// PKIX (SubjectPublicKeyInfo) DER encoding.
	AKFingerprint string `json:"ak_fingerprint"`
	// AKBits is the size of the RSA attestation key's modulus.
	AKBits int `json:"ak_bits"`
	// Nonce is the quote's extraData (hex); verification requires it to
	// equal the verifier's challenge.
	Nonce string `json:"nonce"`
	// PCRBank is "sha256"; PCRs lists every quoted PCR.
	PCRBank string `json:"pcr_bank"`
	PCRs    []PCR  `json:"pcrs"`
	// HardwareReport refers to the hardware report that binds the key.
	HardwareReport HardwareReportRef `json:"hardware_report"`
	// RuntimeData describes the HCL report's runtime claims.
	RuntimeData RuntimeData `json:"runtime_data"`
	// TPM clock and firmware from the quote.
	ResetCount      uint32 `json:"reset_count"`
	RestartCount    uint32 `json:"restart_count"`
	FirmwareVersion uint64 `json:"firmware_version"`
	// Checks lists every check that ran, in order.
	Checks check.List `json:"checks"`
}

// PCR is one quoted PCR value.
type PCR struct {
	Index  int    `json:"index"`
	Digest string `json:"digest"` // hex
}

// HardwareReportRef says which hardware report the evidence is bound to.
type HardwareReportRef struct {
	// Type is "tdx" (TD report; the verified TD quote carries the same
	// REPORTDATA) or "snp" (SNP report).
	Type string `json:"type"`
	// ReportData is the verified REPORTDATA (64 bytes, hex) the binding was
	// checked against.
	ReportData string `json:"report_data"`
	// SHA256 is the SHA-256 of the hardware report embedded in the HCL report.
	SHA256 string `json:"sha256"`
}

// RuntimeData describes the variable data of the HCL report.
type RuntimeData struct {
	// HashType is the hash bound into REPORTDATA ("sha256" in practice).
	HashType string `json:"hash_type"`
	// Digest is H(variable data), hex.
	Digest string `json:"digest"`
	// UserData is the "user-data" claim as the HCL states it.
	UserData string `json:"user_data,omitempty"`
	// VMConfiguration is the "vm-configuration" object, verbatim.
	VMConfiguration json.RawMessage `json:"vm_configuration,omitempty"`
}

// Verify checks that the HCL report hcl binds the vTPM attestation key to
// reportData — the REPORTDATA of the hardware report, which the caller must
// already have verified (attest/tdx for a TD quote, attest/sevsnp for an SNP
// report) — and that quote is signed by that key over nonce.
//
// Errors: *check.ParseError for an unusable argument (a nil report or quote,
// a REPORTDATA that is not 64 bytes, an empty nonce); *check.VerifyError when
// a check fails. Claims is returned with a VerifyError so its Checks can be
// shown; it must not be trusted then.
func Verify(hcl *HCLReport, quote *Quote, reportData, nonce []byte) (*Claims, error) {
	switch {
	case hcl == nil || quote == nil:
		return nil, &check.ParseError{What: "vtpm evidence", Err: fmt.Errorf("missing hcl report or quote")}
	case len(reportData) != reportDataSize:
		return nil, &check.ParseError{What: "verified reportdata", Err: fmt.Errorf("%d bytes, want %d", len(reportData), reportDataSize)}
	case len(nonce) == 0:
		return nil, &check.ParseError{What: "nonce", Err: fmt.Errorf("empty: a quote cannot be checked for freshness without a challenge")}
	}
	c := &Claims{PCRBank: "sha256"}
	var firstErr error
	fail := func(name, format string, args ...any) {
		c.Checks.Fail(name, format, args...)
		if firstErr == nil {
			firstErr = &check.VerifyError{Check: name, Err: fmt.Errorf(format, args...)}
		}
	}

	// 1. The HCL report's variable data is bound to the verified hardware report.
	digest := hcl.varDataDigest()
	n := len(digest)
	if subtle.ConstantTimeCompare(reportData[:n], digest) == 1 {
		c.Checks.Pass(CheckReportDataBinding, "reportdata[0:%d] = %s(runtime claims, %d bytes)", n, hcl.HashType, len(hcl.varData))
	} else {
		fail(CheckReportDataBinding, "reportdata[0:%d] %x is not %s(runtime claims) %x", n, reportData[:n], hcl.HashType, digest)
	}
	if hw := hcl.hwReportData(); bytes.Equal(hw, reportData) {
		c.Checks.Pass(CheckHWReportData, "the %s report inside the hcl report carries the verified reportdata", hcl.HardwareType)
	} else {
		fail(CheckHWReportData, "the %s report inside the hcl report carries reportdata %x, not the verified %x", hcl.HardwareType, hw, reportData)
	}

	// 2. The quote is signed by the bound key (RSASSA-PKCS1-v1_5, SHA-256).
	ak := hcl.ak
	sum := sha256.Sum256(quote.Message)
	if err := rsa.VerifyPKCS1v15(ak, crypto.SHA256, sum[:], quote.Signature); err != nil {
		fail(CheckQuoteSignature, "rsassa sha-256 signature over tpms_attest does not verify with %s: %v", akKeyID, err)
	} else {
		c.Checks.Pass(CheckQuoteSignature, "rsassa sha-256 signature over tpms_attest verifies with %s (%d bits)", akKeyID, ak.N.BitLen())
	}

	// 3. Its extraData is the challenge.
	att := quote.Attest
	if subtle.ConstantTimeCompare(att.ExtraData, nonce) == 1 {
		c.Checks.Pass(CheckQuoteNonce, "extradata equals the challenge (%d bytes)", len(nonce))
	} else {
		fail(CheckQuoteNonce, "extradata %q is not the challenge %q", att.ExtraData, nonce)
	}

	// 4. The PCR digest covers the shipped PCR values, in selection order.
	sel := att.AttestedQuoteInfo.PCRSelection
	h := sha256.New()
	pcrs := make([]attest.PCR, len(sel.PCRs))
	for i, idx := range sel.PCRs {
		h.Write(quote.PCRs[i])
		pcrs[i] = attest.PCR{Index: idx, Digest: quote.PCRs[i], DigestAlg: crypto.SHA256}
		c.PCRs = append(c.PCRs, PCR{Index: idx, Digest: hex.EncodeToString(quote.PCRs[i])})
	}
	if got := h.Sum(nil); bytes.Equal(got, att.AttestedQuoteInfo.PCRDigest) {
		c.Checks.Pass(CheckQuotePCRDigest, "pcr digest covers the %d sha-256 pcr values given", len(sel.PCRs))
	} else {
		fail(CheckQuotePCRDigest, "pcr digest %x is not sha-256 of the %d pcr values given (%x)", []byte(att.AttestedQuoteInfo.PCRDigest), len(sel.PCRs), got)
	}

	// 5. A second implementation agrees: go-attestation's AKPublic.Verify
	// (signature, nonce and PCR digest in one).
	tsig, err := tpm2.Signature{Alg: tpm2.AlgRSASSA, RSA: &tpm2.SignatureRSA{HashAlg: tpm2.AlgSHA256, Signature: quote.Signature}}.Encode()
	if err == nil {
		akp := attest.AKPublic{Public: ak, Hash: crypto.SHA256}
		err = akp.Verify(attest.Quote{Quote: quote.Message, Signature: tsig}, pcrs, nonce)
	}
	if err != nil {
		fail(CheckQuoteLibrary, "go-attestation rejects the quote: %v", err)
	} else {
		c.Checks.Pass(CheckQuoteLibrary, "go-attestation AKPublic.Verify accepts signature, nonce and pcrs")
	}

	// Claims.
	c.Platform = PlatformTDX
	if hcl.HardwareType == "snp" {
		c.Platform = PlatformSNP
	}
	if der, err := x509.MarshalPKIXPublicKey(ak); err == nil {
		fp := sha256.Sum256(der)
		c.AKFingerprint = hex.EncodeToString(fp[:])
	}
	c.AKBits = ak.N.BitLen()
	c.Nonce = hex.EncodeToString(att.ExtraData)
	hwSum := sha256.Sum256(hcl.hw)
	c.HardwareReport = HardwareReportRef{Type: hcl.HardwareType, ReportData: hex.EncodeToString(reportData), SHA256: hex.EncodeToString(hwSum[:])}
	c.RuntimeData = RuntimeData{HashType: hcl.HashType, Digest: hex.EncodeToString(digest), UserData: hcl.claims.UserData,
		VMConfiguration: bytes.Clone(hcl.claims.VMConfiguration)}
	c.ResetCount, c.RestartCount = att.ClockInfo.ResetCount, att.ClockInfo.RestartCount
	c.FirmwareVersion = att.FirmwareVersion
	return c, firstErr
}
