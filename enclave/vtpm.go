package enclave

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/tdx"
	"github.com/sparkinfer/cc/attest/tpm"
)

// Azure confidential VM vTPM locations (the paravisor, "HCL", provides them).
const (
	// HCLReportNVIndex holds the HCL report: a TD report whose REPORTDATA
	// binds the runtime claims, which hold the vTPM attestation key.
	HCLReportNVIndex uint32 = 0x01400001
	// UserDataNVIndex holds 64 bytes of user data; writing it makes the
	// paravisor issue a fresh HCL report whose runtime claims carry them
	// ("user-data", hex).
	UserDataNVIndex uint32 = 0x01400002
	// AKHandle is the persistent handle of the vTPM attestation key that
	// the HCL report binds ("HCLAkPub").
	AKHandle uint32 = 0x81000003
	// DefaultIMDSQuoteURL is Azure's instance metadata endpoint that turns a
	// TD report into a TD quote.
	DefaultIMDSQuoteURL = "http://169.254.169.254/acc/tdquote"
)

// TPMDevicePaths are the TPM devices OpenVTPM tries, in order: the kernel's
// resource manager first, then the raw device.
var TPMDevicePaths = []string{"/dev/tpmrm0", "/dev/tpm0"}

const (
	userDataSize    = 64
	maxIMDSResponse = 2*attest.MaxQuoteSize + 4096 // base64 of the largest quote, plus JSON
	quoteAttempts   = 3
	numPCRs         = 24
)

// VTPMConfig configures vTPM evidence collection. The zero value collects
// from an Azure TDX confidential VM: /dev/tpmrm0 (else /dev/tpm0) and the
// instance metadata service at DefaultIMDSQuoteURL.
type VTPMConfig struct {
	// Device is the TPM device path; "" tries TPMDevicePaths in order.
	Device string
	// IMDSQuoteURL is the endpoint that turns a TD report into a TD quote;
	// "" means DefaultIMDSQuoteURL. Tests point it at a local server.
	IMDSQuoteURL string
	// HTTPClient talks to IMDSQuoteURL; nil means a client with a 30 s
	// timeout that ignores proxy settings (the endpoint is link-local).
	HTTPClient *http.Client
}

// NoTPMError means no TPM device exists.
type NoTPMError struct{ Checked []string }

func (e *NoTPMError) Error() string {
	return fmt.Sprintf("no tpm device found (checked %s); --tee tpm needs the vtpm of an azure tdx confidential vm", strings.Join(e.Checked, ", "))
}

// NVIndexError is a failure to use a vTPM NV index. Missing is true when the
// index is not defined (TPM_RC_HANDLE): a TPM without the Azure paravisor's
// HCL report is not an Azure confidential VM's vTPM.
type NVIndexError struct {
	Index   uint32
	Op      string // "read public", "read", "define", "undefine", "write"
	Missing bool
	Err     error
}

func (e *NVIndexError) Error() string {
	if e.Missing {
		return fmt.Sprintf("tpm nv index 0x%08x is not defined (%s: %v)", e.Index, e.Op, e.Err)
	}
	return fmt.Sprintf("tpm nv index 0x%08x: %s: %v", e.Index, e.Op, e.Err)
}
func (e *NVIndexError) Unwrap() error { return e.Err }

// TPMCommandError is a failed TPM command other than an NV access.
type TPMCommandError struct {
	Command string // e.g. "read public 0x81000003", "quote", "pcr read"
	Err     error
}

func (e *TPMCommandError) Error() string { return fmt.Sprintf("tpm %s: %v", e.Command, e.Err) }
func (e *TPMCommandError) Unwrap() error { return e.Err }

// IMDSError is a failure to obtain a TD quote from the instance metadata
// service: the request failed, the status was not 200 (Status), or the
// answer was not a TD quote.
type IMDSError struct {
	URL    string
	Status int // 0 when no HTTP status was received
	Err    error
}

func (e *IMDSError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("td quote from %s: http status %d: %v", e.URL, e.Status, e.Err)
	}
	return fmt.Sprintf("td quote from %s: %v", e.URL, e.Err)
}
func (e *IMDSError) Unwrap() error { return e.Err }

// VTPMEvidenceError means the collected pieces do not hold together; Check
// names what failed: "hcl_report", "ak_binding", "user_data", "quote", or a
// check name of package attest/tpm (e.g. tpm.CheckQuoteSignature).
type VTPMEvidenceError struct {
	Check string
	Err   error
}

func (e *VTPMEvidenceError) Error() string {
	return fmt.Sprintf("vtpm evidence check %s: %v", e.Check, e.Err)
}
func (e *VTPMEvidenceError) Unwrap() error { return e.Err }

func vtpmErr(err error) error { return &TEEError{Kind: attest.KindTDXVTPM, Err: err} }

// VTPMTEE collects tdx-vtpm evidence from an Azure TDX confidential VM's
// vTPM (see the package documentation, "vTPM evidence").
type VTPMTEE struct {
	mu     sync.Mutex
	rw     io.ReadWriter
	closer io.Closer // nil when the caller owns rw
	url    string
	client *http.Client
	ak     *rsa.PublicKey
}

// OpenVTPM opens the TPM device (cfg.Device, else TPMDevicePaths in order)
// and checks it is an Azure vTPM (NewVTPMTEE). No device at all is a
// *NoTPMError; every error is wrapped in a *TEEError.
func OpenVTPM(cfg VTPMConfig) (*VTPMTEE, error) {
	paths := TPMDevicePaths
	if cfg.Device != "" {
		paths = []string{cfg.Device}
	}
	for _, p := range paths {
		rwc, err := tpm2.OpenTPM(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, vtpmErr(&TPMCommandError{Command: fmt.Sprintf("open %q", p), Err: err})
		}
		t, err := newVTPM(rwc, cfg)
		if err != nil {
			rwc.Close()
			return nil, err
		}
		t.closer = rwc
		return t, nil
	}
	return nil, vtpmErr(&NoTPMError{Checked: paths})
}

// NewVTPMTEE collects over an open TPM command channel rw (Close leaves it
// open). It checks that the HCL report's NV index exists and that the
// attestation key at AKHandle is an RSA restricted signing key.
func NewVTPMTEE(rw io.ReadWriter, cfg VTPMConfig) (*VTPMTEE, error) {
	return newVTPM(rw, cfg)
}

func newVTPM(rw io.ReadWriter, cfg VTPMConfig) (*VTPMTEE, error) {
	t := &VTPMTEE{rw: rw, url: cfg.IMDSQuoteURL, client: cfg.HTTPClient}
	if t.url == "" {
		t.url = DefaultIMDSQuoteURL
	}
	if t.client == nil {
		t.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	if _, err := readNVPublic(rw, HCLReportNVIndex); err != nil {
		return nil, vtpmErr(err)
	}
	ak, err := readAK(rw)
	if err != nil {
		return nil, vtpmErr(err)
	}
	t.ak = ak
	return t, nil
}

func (t *VTPMTEE) Kind() string { return attest.KindTDXVTPM }

// Close closes the TPM device if OpenVTPM opened it.
func (t *VTPMTEE) Close() error {
	if t.closer != nil {
		return t.closer.Close()
	}
	return nil
}

// Evidence collects fresh evidence for rd and checks that it holds together
// (checkVTPMEvidence): the attestation key at AKHandle is the HCL report's
// HCLAkPub, attest/tpm's checks pass against the TD quote's REPORTDATA and
// rd, and the HCL report carries rd as its user data. Errors are *TEEError
// wrapping the typed errors of this file.
func (t *VTPMTEE) Evidence(rd [64]byte) (attest.TEEEvidence, error) {
	ev, err := t.collect(rd)
	if err != nil {
		return attest.TEEEvidence{}, err
	}
	if err := checkVTPMEvidence(ev, t.ak, rd); err != nil {
		return attest.TEEEvidence{}, vtpmErr(err)
	}
	return ev, nil
}

// collect gathers the evidence without checking that it holds together:
// user data rd to UserDataNVIndex, the HCL report from HCLReportNVIndex, the
// TD quote for its TD report from IMDS, and a quote by the attestation key
// over SHA-256 PCRs 0-23 with extraData rd.
func (t *VTPMTEE) collect(rd [64]byte) (attest.TEEEvidence, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := writeUserData(t.rw, rd); err != nil {
		return attest.TEEEvidence{}, vtpmErr(err)
	}
	hclRaw, err := readNV(t.rw, HCLReportNVIndex)
	if err != nil {
		return attest.TEEEvidence{}, vtpmErr(err)
	}
	if len(hclRaw) > attest.MaxQuoteSize {
		return attest.TEEEvidence{}, vtpmErr(&VTPMEvidenceError{Check: "hcl_report", Err: fmt.Errorf("%d bytes, at most %d", len(hclRaw), attest.MaxQuoteSize)})
	}
	hcl, err := tpm.ParseHCLReport(hclRaw)
	if err != nil {
		return attest.TEEEvidence{}, vtpmErr(&VTPMEvidenceError{Check: "hcl_report", Err: err})
	}
	if hcl.HardwareType != "tdx" {
		return attest.TEEEvidence{}, vtpmErr(&VTPMEvidenceError{Check: "hcl_report", Err: fmt.Errorf("the hcl report holds an %s report; only tdx confidential vms (tdx-vtpm) are collected", hcl.HardwareType)})
	}
	tdQuote, err := t.tdQuote(hcl.HardwareReport())
	if err != nil {
		return attest.TEEEvidence{}, vtpmErr(err)
	}
	container, err := quoteAllPCRs(t.rw, rd)
	if err != nil {
		return attest.TEEEvidence{}, vtpmErr(err)
	}
	return attest.TEEEvidence{Kind: attest.KindTDXVTPM, Quote: tdQuote, HCLReport: hclRaw, TPMQuote: container}, nil
}

// checkVTPMEvidence checks collected evidence as a verifier would, short of
// the TD quote's signature and collateral: the key at AKHandle (ak) is the
// HCLAkPub the HCL report binds, attest/tpm.Verify passes with the TD
// quote's REPORTDATA and nonce rd, and the report's user data is rd.
func checkVTPMEvidence(ev attest.TEEEvidence, ak *rsa.PublicKey, rd [64]byte) error {
	hcl, err := tpm.ParseHCLReport(ev.HCLReport)
	if err != nil {
		return &VTPMEvidenceError{Check: "hcl_report", Err: err}
	}
	if !hcl.AttestationKey().Equal(ak) {
		return &VTPMEvidenceError{Check: "ak_binding", Err: fmt.Errorf("the attestation key at tpm handle 0x%08x (%s) is not the HCLAkPub the hcl report binds (%s)", AKHandle, keyFingerprint(ak), keyFingerprint(hcl.AttestationKey()))}
	}
	q, err := tpm.ParseTPMQuote(ev.TPMQuote)
	if err != nil {
		return &VTPMEvidenceError{Check: "quote", Err: err}
	}
	td, err := tdx.ParseQuote(ev.Quote)
	if err != nil {
		return &VTPMEvidenceError{Check: "td_quote", Err: err}
	}
	if _, err := tpm.Verify(hcl, q, td.ReportData(), rd[:]); err != nil {
		name := "vtpm"
		var ve *check.VerifyError
		if errors.As(err, &ve) {
			name = ve.Check
		}
		return &VTPMEvidenceError{Check: name, Err: err}
	}
	var claims struct {
		UserData string `json:"user-data"`
	}
	if err := json.Unmarshal(hcl.VariableData(), &claims); err != nil {
		return &VTPMEvidenceError{Check: "user_data", Err: err}
	}
	if !strings.EqualFold(claims.UserData, hex.EncodeToString(rd[:])) {
		return &VTPMEvidenceError{Check: "user_data", Err: fmt.Errorf("the hcl report's user-data %q is not the %d bytes written to nv index 0x%08x: the paravisor did not refresh the report", claims.UserData, userDataSize, UserDataNVIndex)}
	}
	return nil
}

// keyFingerprint is "sha256:" and the hex SHA-256 of the key's PKIX DER.
func keyFingerprint(k *rsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "unencodable key"
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// isMissing reports whether err is the TPM's "no such handle" answer.
func isMissing(err error) bool {
	var he tpm2.HandleError
	return errors.As(err, &he) && he.Code == tpm2.RCHandle
}

func readNVPublic(rw io.ReadWriter, idx uint32) (tpm2.NVPublic, error) {
	pub, err := tpm2.NVReadPublic(rw, tpmutil.Handle(idx))
	if err != nil {
		return pub, &NVIndexError{Index: idx, Op: "read public", Missing: isMissing(err), Err: err}
	}
	return pub, nil
}

// nvAuthHandle picks the authorization for reading (or writing) an NV index
// with an empty password: the owner hierarchy when the index allows it (as
// Azure's tools use), else the index's own authorization.
func nvAuthHandle(pub tpm2.NVPublic, owner, auth tpm2.NVAttr) (tpmutil.Handle, error) {
	switch {
	case pub.Attributes&owner != 0:
		return tpm2.HandleOwner, nil
	case pub.Attributes&auth != 0:
		return pub.NVIndex, nil
	}
	return 0, fmt.Errorf("attributes 0x%08x allow neither owner nor index authorization", uint32(pub.Attributes))
}

// readNV reads a whole NV index (empty password; see nvAuthHandle).
func readNV(rw io.ReadWriter, idx uint32) ([]byte, error) {
	pub, err := readNVPublic(rw, idx)
	if err != nil {
		return nil, err
	}
	ah, err := nvAuthHandle(pub, tpm2.AttrOwnerRead, tpm2.AttrAuthRead)
	if err != nil {
		return nil, &NVIndexError{Index: idx, Op: "read", Err: err}
	}
	b, err := tpm2.NVReadEx(rw, tpmutil.Handle(idx), ah, "", 0)
	if err != nil {
		return nil, &NVIndexError{Index: idx, Op: "read", Err: err}
	}
	if len(b) != int(pub.DataSize) {
		return nil, &NVIndexError{Index: idx, Op: "read", Err: fmt.Errorf("read %d bytes of %d", len(b), pub.DataSize)}
	}
	return b, nil
}

// writeUserData writes rd to UserDataNVIndex (empty password; see
// nvAuthHandle), defining the index (64 bytes, owner and auth read/write,
// SHA-256 name) when it is missing or has another size.
func writeUserData(rw io.ReadWriter, rd [64]byte) error {
	idx := UserDataNVIndex
	h := tpmutil.Handle(idx)
	pub, err := readNVPublic(rw, idx)
	var ne *NVIndexError
	define := errors.As(err, &ne) && ne.Missing
	if err != nil && !define {
		return err
	}
	if err == nil && pub.DataSize != userDataSize {
		if err := tpm2.NVUndefineSpace(rw, "", tpm2.HandleOwner, h); err != nil {
			return &NVIndexError{Index: idx, Op: "undefine", Err: err}
		}
		define = true
	}
	if define {
		pub = tpm2.NVPublic{
			NVIndex:    h,
			NameAlg:    tpm2.AlgSHA256,
			Attributes: tpm2.AttrOwnerWrite | tpm2.AttrOwnerRead | tpm2.AttrAuthWrite | tpm2.AttrAuthRead,
			DataSize:   userDataSize,
		}
		auth := tpm2.AuthCommand{Session: tpm2.HandlePasswordSession, Attributes: tpm2.AttrContinueSession, Auth: tpm2.EmptyAuth}
		if err := tpm2.NVDefineSpaceEx(rw, tpm2.HandleOwner, "", pub, auth); err != nil {
			return &NVIndexError{Index: idx, Op: "define", Err: err}
		}
	}
	ah, err := nvAuthHandle(pub, tpm2.AttrOwnerWrite, tpm2.AttrAuthWrite)
	if err != nil {
		return &NVIndexError{Index: idx, Op: "write", Err: err}
	}
	if err := tpm2.NVWrite(rw, ah, h, "", rd[:], 0); err != nil {
		return &NVIndexError{Index: idx, Op: "write", Err: err}
	}
	return nil
}

// readAK reads the attestation key's public area and checks it is an RSA
// restricted signing key.
func readAK(rw io.ReadWriter) (*rsa.PublicKey, error) {
	cmd := fmt.Sprintf("read public 0x%08x (attestation key)", AKHandle)
	pub, _, _, err := tpm2.ReadPublic(rw, tpmutil.Handle(AKHandle))
	if err != nil {
		return nil, &TPMCommandError{Command: cmd, Err: err}
	}
	if pub.Type != tpm2.AlgRSA || pub.Attributes&(tpm2.FlagSign|tpm2.FlagRestricted) != tpm2.FlagSign|tpm2.FlagRestricted {
		return nil, &TPMCommandError{Command: cmd, Err: fmt.Errorf("key type 0x%x, attributes 0x%x: not an rsa restricted signing key", uint16(pub.Type), uint32(pub.Attributes))}
	}
	k, err := pub.Key()
	if err != nil {
		return nil, &TPMCommandError{Command: cmd, Err: err}
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, &TPMCommandError{Command: cmd, Err: fmt.Errorf("public key is %T", k)}
	}
	return rk, nil
}

// quoteAllPCRs quotes SHA-256 PCRs 0-23 with the attestation key (its own
// scheme, which must be RSASSA with SHA-256, as the verifier expects) over
// extraData rd, reads the PCR values and returns the az-cvm-vtpm quote
// container (attest/tpm.ParseTPMQuote). A PCR extended between the quote and
// the read is caught by the PCR digest and the quote taken again.
func quoteAllPCRs(rw io.ReadWriter, rd [64]byte) ([]byte, error) {
	sel := tpm2.PCRSelection{Hash: tpm2.AlgSHA256}
	for i := 0; i < numPCRs; i++ {
		sel.PCRs = append(sel.PCRs, i)
	}
	for attempt := 1; ; attempt++ {
		msg, rawSig, err := tpm2.QuoteRaw(rw, tpmutil.Handle(AKHandle), "", "", rd[:], sel, tpm2.AlgNull)
		if err != nil {
			return nil, &TPMCommandError{Command: "quote", Err: err}
		}
		sig, err := tpm2.DecodeSignature(bytes.NewBuffer(rawSig))
		if err != nil {
			return nil, &TPMCommandError{Command: "quote", Err: fmt.Errorf("signature: %w", err)}
		}
		if sig.Alg != tpm2.AlgRSASSA || sig.RSA == nil || sig.RSA.HashAlg != tpm2.AlgSHA256 {
			return nil, &VTPMEvidenceError{Check: "quote", Err: fmt.Errorf("signature scheme 0x%x is not rsassa with sha-256", uint16(sig.Alg))}
		}
		att, err := tpm2.DecodeAttestationData(msg)
		if err != nil || att.AttestedQuoteInfo == nil {
			return nil, &VTPMEvidenceError{Check: "quote", Err: fmt.Errorf("tpms_attest is not a quote (%v)", err)}
		}
		if !bytes.Equal(att.ExtraData, rd[:]) {
			return nil, &VTPMEvidenceError{Check: "quote", Err: errors.New("the quote's extradata is not the requested nonce")}
		}
		pcrs, err := readPCRs(rw)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		for _, p := range pcrs {
			h.Write(p)
		}
		if bytes.Equal(h.Sum(nil), att.AttestedQuoteInfo.PCRDigest) {
			return quoteContainer(sig.RSA.Signature, msg, pcrs), nil
		}
		if attempt == quoteAttempts {
			return nil, &VTPMEvidenceError{Check: "quote", Err: fmt.Errorf("pcr values changed between quote and read %d times", quoteAttempts)}
		}
	}
}

// readPCRs reads SHA-256 PCRs 0-23 in index order (TPM2_PCR_Read returns at
// most 8 digests per call).
func readPCRs(rw io.ReadWriter) ([][]byte, error) {
	out := make([][]byte, numPCRs)
	for lo := 0; lo < numPCRs; lo += 8 {
		sel := tpm2.PCRSelection{Hash: tpm2.AlgSHA256, PCRs: []int{lo, lo + 1, lo + 2, lo + 3, lo + 4, lo + 5, lo + 6, lo + 7}}
		m, err := tpm2.ReadPCRs(rw, sel)
		if err != nil {
			return nil, &TPMCommandError{Command: "pcr read", Err: err}
		}
		for _, i := range sel.PCRs {
			if len(m[i]) != sha256.Size {
				return nil, &TPMCommandError{Command: "pcr read", Err: fmt.Errorf("sha-256 pcr %d: %d bytes", i, len(m[i]))}
			}
			out[i] = m[i]
		}
	}
	return out, nil
}

// quoteContainer encodes the az-cvm-vtpm quote container that
// attest/tpm.ParseTPMQuote reads: u64 LE length and the raw signature,
// u64 LE length and the TPMS_ATTEST bytes, u64 LE count and the PCR values.
func quoteContainer(sig, msg []byte, pcrs [][]byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, uint64(len(sig)))
	b = append(b, sig...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(msg)))
	b = append(b, msg...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(pcrs)))
	for _, p := range pcrs {
		b = append(b, p...)
	}
	return b
}

// tdQuote asks the instance metadata service for the TD quote of report.
func (t *VTPMTEE) tdQuote(report []byte) ([]byte, error) {
	body, err := json.Marshal(struct {
		Report string `json:"report"`
	}{base64.RawURLEncoding.EncodeToString(report)})
	if err != nil {
		return nil, &IMDSError{URL: t.url, Err: err}
	}
	req, err := http.NewRequest(http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, &IMDSError{URL: t.url, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, &IMDSError{URL: t.url, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxIMDSResponse+1))
	if err != nil {
		return nil, &IMDSError{URL: t.url, Status: resp.StatusCode, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		if len(data) > 200 {
			data = data[:200]
		}
		return nil, &IMDSError{URL: t.url, Status: resp.StatusCode, Err: fmt.Errorf("answer %q", data)}
	}
	if len(data) > maxIMDSResponse {
		return nil, &IMDSError{URL: t.url, Status: resp.StatusCode, Err: fmt.Errorf("answer larger than %d bytes", maxIMDSResponse)}
	}
	q, err := parseIMDSQuote(data)
	if err != nil {
		return nil, &IMDSError{URL: t.url, Status: resp.StatusCode, Err: err}
	}
	return q, nil
}

// parseIMDSQuote reads the instance metadata service's answer,
// {"quote": base64url(TD quote)} (padded or not; other fields are ignored),
// and checks the quote parses as a TDX quote of at most attest.MaxQuoteSize
// bytes.
func parseIMDSQuote(data []byte) ([]byte, error) {
	var r struct {
		Quote *string `json:"quote"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("answer is not json: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the json answer")
	}
	if r.Quote == nil || *r.Quote == "" {
		return nil, errors.New("answer has no \"quote\"")
	}
	s := *r.Quote
	enc := base64.RawURLEncoding
	if strings.HasSuffix(s, "=") {
		enc = base64.URLEncoding
	}
	q, err := enc.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("quote is not base64url: %v", err)
	}
	if len(q) > attest.MaxQuoteSize {
		return nil, fmt.Errorf("quote of %d bytes exceeds %d", len(q), attest.MaxQuoteSize)
	}
	if _, err := tdx.ParseQuote(q); err != nil {
		return nil, fmt.Errorf("answer is not a td quote: %w", err)
	}
	return q, nil
}
