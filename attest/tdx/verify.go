package tdx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/abi"
	"github.com/google/go-tdx-guest/pcs"
	"github.com/sparkinfer/cc/attest/check"
)

// Check names, in the order Verify reports them.
const (
	CheckStructure        = "tdx.quote.structure"
	CheckPCKChain         = "tdx.pck.chain"
	CheckQuoteSignature   = "tdx.quote.signature"
	CheckQEReportSig      = "tdx.qe_report.signature"
	CheckQEReportBinding  = "tdx.qe_report.binding"
	CheckCollateral       = "tdx.collateral.validity"
	CheckRootCRL          = "tdx.crl.root_ca"
	CheckPCKCRL           = "tdx.crl.pck"
	CheckTCBInfoSignature = "tdx.tcb_info.signature"
	CheckTCBInfoPlatform  = "tdx.tcb_info.platform"
	CheckTDXModule        = "tdx.tcb.tdx_module"
	CheckTCBLevel         = "tdx.tcb.level"
	CheckQEIdentitySig    = "tdx.qe_identity.signature"
	CheckQEIdentity       = "tdx.qe_identity.match"
	CheckLibrary          = "tdx.go_tdx_guest"
	CheckDebug            = "tdx.td.debug"
	CheckReportData       = "tdx.td.report_data"
)

// Options are the per-quote settings of Verify. The zero value verifies
// against the current time and skips nothing it can check; with no
// collateral, collateral checks are skipped and Verify returns an
// *check.UnavailableError.
type Options struct {
	// AsOf is the time at which certificates, CRLs and collateral must be
	// valid. Zero: Now().
	AsOf time.Time
	// Now is the clock used when AsOf is zero; nil: time.Now.
	Now func() time.Time
	// Collateral is the Intel PCS collateral to verify against. When nil and
	// PCS is set, it is fetched (or read from PCS's cache).
	Collateral *Collateral
	// PCS fetches collateral online when Collateral is nil.
	PCS *PCS
	// ReportData, when set, must equal the quote's REPORTDATA (64 bytes).
	ReportData []byte
	// SkipCrossCheck skips go-tdx-guest's second opinion on v4 quotes (the
	// check is then reported as skipped). Every check of this package still
	// runs; the cross-check roughly doubles the verification time.
	SkipCrossCheck bool
}

// Claims is what a verified TDX quote says, for the appraisal policy. Hex
// strings are lowercase. A Claims value is only meaningful together with the
// error Verify returned: nil means every check that ran passed.
type Claims struct {
	Platform     string `json:"platform"`      // "tdx"
	QuoteVersion int    `json:"quote_version"` // 4 or 5
	BodyType     int    `json:"body_type"`     // 2 TDX 1.0 body, 3 TDX 1.5 body

	TeeTCBSVN      string    `json:"tee_tcb_svn"`
	TeeTCBSVN2     string    `json:"tee_tcb_svn2,omitempty"` // TDX 1.5 body only
	MRSeam         string    `json:"mr_seam"`
	MRSignerSeam   string    `json:"mr_signer_seam"`
	SeamAttributes string    `json:"seam_attributes"`
	TDAttributes   string    `json:"td_attributes"`
	XFAM           string    `json:"xfam"`
	MRTD           string    `json:"mr_td"`
	MRConfigID     string    `json:"mr_config_id"`
	MROwner        string    `json:"mr_owner"`
	MROwnerConfig  string    `json:"mr_owner_config"`
	RTMR           [4]string `json:"rtmr"`
	MRServiceTD    string    `json:"mr_service_td,omitempty"` // TDX 1.5 body only
	ReportData     string    `json:"report_data"`
	Debug          bool      `json:"debug"` // TD_ATTRIBUTES.TUD.DEBUG

	// From the PCK certificate (empty when the chain did not verify).
	FMSPC   string `json:"fmspc,omitempty"`
	PCEID   string `json:"pce_id,omitempty"`
	PCKPPID string `json:"pck_ppid,omitempty"` // platform provisioning id, the PCK platform identity

	// From the collateral (empty when it was not checked).
	TCBStatus          string   `json:"tcb_status,omitempty"` // e.g. "UpToDate", "OutOfDate"
	TCBDate            string   `json:"tcb_date,omitempty"`
	AdvisoryIDs        []string `json:"advisory_ids,omitempty"`
	TDXModuleTCBStatus string   `json:"tdx_module_tcb_status,omitempty"`
	QETCBStatus        string   `json:"qe_tcb_status,omitempty"`

	// AsOf is the time everything was verified at; CollateralSource where the
	// collateral came from ("polaris receipt", "file", "pcs", "pcs cache").
	AsOf             time.Time `json:"as_of"`
	CollateralSource string    `json:"collateral_source,omitempty"`

	// Checks lists every check with pass / fail / skipped and a reason.
	Checks check.List `json:"checks"`
}

// verifier carries one run.
type verifier struct {
	q      *Quote
	opts   Options
	asOf   time.Time
	list   check.List
	failed error
	exts   *pcs.PckExtensions
	chain  bool // PCK chain verified
}

func (v *verifier) fail(name, format string, args ...any) {
	v.list.Fail(name, format, args...)
	if v.failed == nil {
		v.failed = &check.VerifyError{Check: name, Err: fmt.Errorf(format, args...)}
	}
}

// Verify parses and verifies a raw TDX quote and returns its claims with the
// checklist. Errors: *check.ParseError (unusable input; claims nil),
// *check.VerifyError (a check failed: rejected), *check.UnavailableError
// (collateral could not be had; everything else passed).
func Verify(raw []byte, opts Options) (*Claims, error) {
	q, err := ParseQuote(raw)
	if err != nil {
		return nil, err
	}
	return VerifyQuote(q, opts)
}

// VerifyQuote is Verify for an already parsed quote.
func VerifyQuote(q *Quote, opts Options) (*Claims, error) {
	v := &verifier{q: q, opts: opts, asOf: opts.AsOf}
	if v.asOf.IsZero() {
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		v.asOf = now()
	}
	v.asOf = v.asOf.UTC()
	v.list.Pass(CheckStructure, "quote v%d, %s body, %d bytes, pck chain of 3 certificates", q.Version, bodyName(q.BodyType), len(q.Raw))

	v.verifyChain()
	v.verifyQuoteSignature()
	v.verifyQEReport()

	var unavailable error
	coll := opts.Collateral
	if coll == nil && opts.PCS != nil && v.exts != nil {
		ca, err := pckCA(q.PCKChain[0])
		if err == nil {
			coll, err = opts.PCS.Collateral(v.exts.FMSPC, ca)
		}
		if err != nil {
			unavailable = err
			coll = nil
		}
	}
	cl := v.claims()
	tcb := &tcbResult{}
	if coll == nil {
		reason := "no collateral given (use --collateral or online pcs)"
		if unavailable != nil {
			reason = "collateral unavailable: " + unavailable.Error()
		}
		if v.exts == nil {
			reason = "pck certificate did not verify"
		}
		for _, n := range []string{CheckCollateral, CheckRootCRL, CheckPCKCRL, CheckTCBInfoSignature, CheckTCBInfoPlatform, CheckTDXModule, CheckTCBLevel, CheckQEIdentitySig, CheckQEIdentity} {
			v.list.Skip(n, "%s", reason)
		}
		if unavailable == nil {
			unavailable = &check.UnavailableError{What: "tdx collateral", Err: errors.New("no collateral given")}
		}
	} else {
		cl.CollateralSource = coll.Source
		tcb = v.verifyCollateral(coll)
		cl.TCBStatus, cl.TCBDate, cl.AdvisoryIDs = tcb.status, tcb.date, tcb.advisories
		cl.TDXModuleTCBStatus, cl.QETCBStatus = tcb.moduleStatus, tcb.qeStatus
	}
	v.crossCheck(coll, tcb)

	if q.Debug() {
		v.fail(CheckDebug, "td attributes %s have the debug bit set: the host can read the td's memory", hex.EncodeToString(q.TDAttributes()))
	} else {
		v.list.Pass(CheckDebug, "debug bit off (td attributes %s)", hex.EncodeToString(q.TDAttributes()))
	}
	switch {
	case opts.ReportData == nil:
		v.list.Skip(CheckReportData, "no expected report data given")
	case bytes.Equal(opts.ReportData, q.ReportData()):
		v.list.Pass(CheckReportData, "report data matches the expected value")
	default:
		v.fail(CheckReportData, "report data %s, want %s", hex.EncodeToString(q.ReportData()), hex.EncodeToString(opts.ReportData))
	}
	cl.Checks = v.list
	if v.failed != nil {
		return cl, v.failed
	}
	if unavailable != nil {
		var ue *check.UnavailableError
		if !errors.As(unavailable, &ue) {
			unavailable = &check.UnavailableError{What: "tdx collateral", Err: unavailable}
		}
		return cl, unavailable
	}
	return cl, nil
}

func bodyName(t int) string {
	if t == BodyTypeTDX15 {
		return "tdx 1.5"
	}
	return "tdx 1.0"
}

func (v *verifier) claims() *Claims {
	q := v.q
	h := hex.EncodeToString
	cl := &Claims{
		Platform: "tdx", QuoteVersion: q.Version, BodyType: q.BodyType,
		TeeTCBSVN:      h(q.TeeTCBSVN()),
		MRSeam:         h(q.field(bodyMrSeam, measurementLen)),
		MRSignerSeam:   h(q.MRSignerSeam()),
		SeamAttributes: h(q.SeamAttributes()),
		TDAttributes:   h(q.TDAttributes()),
		XFAM:           h(q.field(bodyXfam, 8)),
		MRTD:           h(q.field(bodyMrTd, measurementLen)),
		MRConfigID:     h(q.field(bodyMrConfigID, measurementLen)),
		MROwner:        h(q.field(bodyMrOwner, measurementLen)),
		MROwnerConfig:  h(q.field(bodyMrOwnerConfig, measurementLen)),
		ReportData:     h(q.ReportData()),
		Debug:          q.Debug(),
		AsOf:           v.asOf,
	}
	for i := range cl.RTMR {
		cl.RTMR[i] = h(q.field(bodyRtmr0+i*measurementLen, measurementLen))
	}
	if q.BodyType == BodyTypeTDX15 {
		cl.TeeTCBSVN2 = h(q.field(bodyTeeTcbSvn2, svnSize))
		cl.MRServiceTD = h(q.field(bodyMrServiceTd, measurementLen))
	}
	if v.exts != nil {
		cl.FMSPC, cl.PCEID, cl.PCKPPID = strings.ToLower(v.exts.FMSPC), strings.ToLower(v.exts.PCEID), strings.ToLower(v.exts.PPID)
	}
	return cl
}

// verifyChain checks the PCK chain: the quote's root must be the embedded
// Intel SGX Root CA, and leaf <- intermediate <- root must verify as of AsOf.
func (v *verifier) verifyChain() {
	leaf, inter, root := v.q.PCKChain[0], v.q.PCKChain[1], v.q.PCKChain[2]
	if !bytes.Equal(root.Raw, IntelRootCA().Raw) {
		v.fail(CheckPCKChain, "root certificate %q is not the embedded intel sgx root ca", root.Subject.String())
		return
	}
	if err := verifyCertChain(leaf, []*x509.Certificate{inter}, v.asOf); err != nil {
		v.fail(CheckPCKChain, "pck certificate %q: %v", leaf.Subject.CommonName, err)
		return
	}
	if inter.Subject.CommonName != "Intel SGX PCK Platform CA" && inter.Subject.CommonName != "Intel SGX PCK Processor CA" {
		v.fail(CheckPCKChain, "intermediate %q is not an intel sgx pck platform or processor ca", inter.Subject.CommonName)
		return
	}
	exts, err := pcs.PckCertificateExtensions(leaf)
	if err != nil {
		v.fail(CheckPCKChain, "pck certificate sgx extensions: %v", err)
		return
	}
	v.exts, v.chain = exts, true
	v.list.Pass(CheckPCKChain, "%q <- %q <- embedded intel sgx root ca, valid at %s", leaf.Subject.CommonName, inter.Subject.CommonName, v.asOf.Format(time.RFC3339))
}

// verifyCertChain verifies leaf to the embedded root at time t, ECDSA only.
func verifyCertChain(leaf *x509.Certificate, inters []*x509.Certificate, t time.Time) error {
	rp := x509.NewCertPool()
	rp.AddCert(IntelRootCA())
	ip := x509.NewCertPool()
	for _, c := range inters {
		ip.AddCert(c)
	}
	if leaf.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		return fmt.Errorf("signature algorithm %v, want ECDSA-SHA256", leaf.SignatureAlgorithm)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: rp, Intermediates: ip, CurrentTime: t, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

func pckCA(leaf *x509.Certificate) (string, error) {
	switch leaf.Issuer.CommonName {
	case "Intel SGX PCK Platform CA":
		return "platform", nil
	case "Intel SGX PCK Processor CA":
		return "processor", nil
	}
	return "", fmt.Errorf("pck issuer %q is neither the platform nor the processor ca", leaf.Issuer.CommonName)
}

// rawSigDER turns a 64-byte r||s signature into ASN.1 DER (go-tdx-guest's abi).
func rawSigDER(sig []byte) ([]byte, error) { return abi.SignatureToDER(sig) }

func (v *verifier) verifyQuoteSignature() {
	k := v.q.AttestKey
	x, y := new(big.Int).SetBytes(k[:32]), new(big.Int).SetBytes(k[32:])
	pub, err := ecdsa.ParseUncompressedPublicKey(p256(), append([]byte{4}, k...))
	if err != nil {
		v.fail(CheckQuoteSignature, "attestation key (%x, %x) is not a p-256 point: %v", x, y, err)
		return
	}
	der, err := rawSigDER(v.q.Signature)
	if err != nil {
		v.fail(CheckQuoteSignature, "signature: %v", err)
		return
	}
	h := sha256.Sum256(v.q.SignedBytes)
	if !ecdsa.VerifyASN1(pub, h[:], der) {
		v.fail(CheckQuoteSignature, "ecdsa p-256 signature over header and body does not verify with the attestation key")
		return
	}
	v.list.Pass(CheckQuoteSignature, "attestation key signs header and body (%d bytes)", len(v.q.SignedBytes))
}

func (v *verifier) verifyQEReport() {
	q := v.q
	der, err := rawSigDER(q.QEReportSig)
	if err != nil {
		v.fail(CheckQEReportSig, "qe report signature: %v", err)
	} else if err := q.PCKChain[0].CheckSignature(x509.ECDSAWithSHA256, q.QEReport, der); err != nil {
		v.fail(CheckQEReportSig, "qe report signature does not verify with the pck key: %v", err)
	} else if !v.chain {
		v.fail(CheckQEReportSig, "qe report signed by a pck certificate that did not verify")
	} else {
		v.list.Pass(CheckQEReportSig, "pck key signs the qe report")
	}
	want := sha256.Sum256(append(append([]byte{}, q.AttestKey...), q.QEAuthData...))
	rd := q.QEReport[qeReportReportData : qeReportReportData+reportDataSize]
	if !bytes.Equal(rd[:32], want[:]) || !bytes.Equal(rd[32:], make([]byte, 32)) {
		v.fail(CheckQEReportBinding, "qe report data %s is not sha256(attestation key || qe auth data) = %s followed by zeros", hex.EncodeToString(rd), hex.EncodeToString(want[:]))
		return
	}
	v.list.Pass(CheckQEReportBinding, "qe report data = sha256(attestation key || %d bytes of auth data)", len(q.QEAuthData))
}

func (q *Quote) qeMiscSelect() uint32 {
	return binary.LittleEndian.Uint32(q.QEReport[qeReportMiscSelect:])
}
