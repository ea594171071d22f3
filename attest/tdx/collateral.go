package tdx

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-tdx-guest/pcs"
	"github.com/sparkinfer/cc/attest/check"
)

// CollateralFormat is the value of the "format" field of a collateral file.
const CollateralFormat = "sparkinfer-tdx-collateral-v1"

// maxCollateralSize caps a collateral file (real ones are about 20 KiB).
const maxCollateralSize = 4 << 20

// CollateralFile is the offline collateral file format read by
// `sparkctl quote verify --collateral F` (JSON, unknown fields rejected).
// Byte fields are base64 (standard, padded) as encoding/json writes []byte.
//
//	{
//	  "format": "sparkinfer-tdx-collateral-v1",
//	  "tcb_info": "<base64 of the body of GET /tdx/certification/v4/tcb?fmspc=…>",
//	  "tcb_info_issuer_chain": "<PEM: Intel SGX TCB Signing cert, Intel SGX Root CA>",
//	  "qe_identity": "<base64 of the body of GET /tdx/certification/v4/qe/identity>",
//	  "qe_identity_issuer_chain": "<PEM>",
//	  "pck_crl": "<base64 of the DER body of GET /sgx/certification/v4/pckcrl?ca=…&encoding=der>",
//	  "root_ca_crl": "<base64 of the DER Intel SGX Root CA CRL>"
//	}
//
// tcb_info and qe_identity are required; the CRLs are optional (without them
// revocation checks are reported as skipped). The issuer chains are the
// URL-decoded Tcb-Info-Issuer-Chain and Sgx-Enclave-Identity-Issuer-Chain
// response headers; when absent the embedded Intel SGX TCB Signing chain is
// used. Issuer chains are never trusted on their own: they are verified
// against the embedded Intel SGX Root CA.
type CollateralFile struct {
	Format                string `json:"format"`
	TCBInfo               []byte `json:"tcb_info"`
	TCBInfoIssuerChain    string `json:"tcb_info_issuer_chain,omitempty"`
	QEIdentity            []byte `json:"qe_identity"`
	QEIdentityIssuerChain string `json:"qe_identity_issuer_chain,omitempty"`
	PCKCRL                []byte `json:"pck_crl,omitempty"`
	RootCACRL             []byte `json:"root_ca_crl,omitempty"`
}

// Collateral is parsed Intel PCS collateral. Nothing in it is trusted until
// Verify checks its signatures against the embedded root.
type Collateral struct {
	// Source says where it came from, e.g. "polaris receipt", "file", "pcs".
	Source string

	TCBInfo            pcs.TdxTcbInfo
	TCBInfoBody        []byte // the raw "tcbInfo" JSON value: the signed bytes
	TCBInfoIssuer      []*x509.Certificate
	QEIdentity         pcs.QeIdentity
	QEIdentityBody     []byte // the raw "enclaveIdentity" JSON value
	QEIdentityIssuer   []*x509.Certificate
	PCKCRL             *x509.RevocationList // nil when absent
	RootCACRL          *x509.RevocationList // nil when absent
	tcbInfoResponse    []byte
	qeIdentityResponse []byte

	// memo caches the outcome of time-independent signature checks over
	// this collateral (keyed by what was checked against which issuer), so
	// verifying many quotes against one cached collateral pays for each
	// collateral signature once. Validity windows are checked every time.
	mu   sync.Mutex
	memo map[string]error
}

func (c *Collateral) once(key string, f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err, ok := c.memo[key]; ok {
		return err
	}
	err := f()
	if c.memo == nil {
		c.memo = map[string]error{}
	}
	c.memo[key] = err
	return err
}

func collErr(format string, args ...any) error {
	return &check.ParseError{What: "tdx collateral", Err: fmt.Errorf(format, args...)}
}

// ParseCollateral reads collateral in either accepted format: a
// CollateralFile, or the Polaris receipt format (the decoded
// tdx.collateral_b64: {"v":1,"items":{URL: base64 body},"urls":[…]}). Input
// may also be the base64 text of either. Errors are *check.ParseError.
func ParseCollateral(b []byte) (*Collateral, error) {
	if len(b) > maxCollateralSize {
		return nil, collErr("%d bytes, more than the %d accepted", len(b), maxCollateralSize)
	}
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] != '{' {
		dec, err := base64.StdEncoding.DecodeString(string(t))
		if err != nil {
			return nil, collErr("neither JSON nor base64 JSON: %v", err)
		}
		t = bytes.TrimSpace(dec)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(t, &probe); err != nil {
		return nil, collErr("not a JSON object: %v", err)
	}
	if _, ok := probe["items"]; ok {
		return parsePolaris(t)
	}
	var f CollateralFile
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, collErr("collateral file: %v", err)
	}
	if dec.More() {
		return nil, collErr("collateral file: trailing data after the JSON object")
	}
	if f.Format != CollateralFormat {
		return nil, collErr("format %q, want %q", f.Format, CollateralFormat)
	}
	return f.parse("file")
}

// polarisCollateral is the collateral object of Polaris receipts.
type polarisCollateral struct {
	V     int               `json:"v"`
	Items map[string]string `json:"items"`
	URLs  []string          `json:"urls"`
}

func parsePolaris(b []byte) (*Collateral, error) {
	var p polarisCollateral
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, collErr("polaris collateral: %v", err)
	}
	if p.V != 1 {
		return nil, collErr("polaris collateral version %d, want 1", p.V)
	}
	var f CollateralFile
	keys := make([]string, 0, len(p.Items))
	for k := range p.Items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		body, err := base64.StdEncoding.DecodeString(p.Items[k])
		if err != nil {
			return nil, collErr("polaris collateral item %q: %v", k, err)
		}
		var dst *[]byte
		switch kind, err := classifyPCSURL(k); {
		case err != nil:
			return nil, collErr("polaris collateral: %v", err)
		case kind == urlTCBInfo:
			dst = &f.TCBInfo
		case kind == urlQEIdentity:
			dst = &f.QEIdentity
		case kind == urlPCKCRL:
			dst = &f.PCKCRL
		case kind == urlRootCRL:
			dst = &f.RootCACRL
		}
		if *dst != nil {
			return nil, collErr("polaris collateral: two items for %q", k)
		}
		*dst = body
	}
	return f.parse("polaris receipt")
}

type urlKind int

const (
	urlTCBInfo urlKind = iota
	urlQEIdentity
	urlPCKCRL
	urlRootCRL
)

// classifyPCSURL maps an Intel PCS v4 URL to the collateral it serves.
func classifyPCSURL(s string) (urlKind, error) {
	u, err := url.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("item url %q: %v", s, err)
	}
	switch {
	case u.Host == "api.trustedservices.intel.com" && u.Path == "/tdx/certification/v4/tcb":
		return urlTCBInfo, nil
	case u.Host == "api.trustedservices.intel.com" && u.Path == "/tdx/certification/v4/qe/identity":
		return urlQEIdentity, nil
	case u.Host == "api.trustedservices.intel.com" && u.Path == "/sgx/certification/v4/pckcrl":
		return urlPCKCRL, nil
	case u.Host == "certificates.trustedservices.intel.com" && u.Path == "/IntelSGXRootCA.der":
		return urlRootCRL, nil
	}
	return 0, fmt.Errorf("unknown item url %q", s)
}

func (f *CollateralFile) parse(source string) (*Collateral, error) {
	c := &Collateral{Source: source, tcbInfoResponse: f.TCBInfo, qeIdentityResponse: f.QEIdentity}
	if len(f.TCBInfo) == 0 {
		return nil, collErr("tcb info is missing")
	}
	if len(f.QEIdentity) == 0 {
		return nil, collErr("qe identity is missing")
	}
	var err error
	if c.TCBInfoBody, err = rawField(f.TCBInfo, "tcbInfo", &c.TCBInfo); err != nil {
		return nil, collErr("tcb info: %v", err)
	}
	if c.QEIdentityBody, err = rawField(f.QEIdentity, "enclaveIdentity", &c.QEIdentity); err != nil {
		return nil, collErr("qe identity: %v", err)
	}
	if c.TCBInfoIssuer, err = issuerChain(f.TCBInfoIssuerChain); err != nil {
		return nil, collErr("tcb info issuer chain: %v", err)
	}
	if c.QEIdentityIssuer, err = issuerChain(f.QEIdentityIssuerChain); err != nil {
		return nil, collErr("qe identity issuer chain: %v", err)
	}
	if len(f.PCKCRL) > 0 {
		if c.PCKCRL, err = x509.ParseRevocationList(f.PCKCRL); err != nil {
			return nil, collErr("pck crl: %v", err)
		}
	}
	if len(f.RootCACRL) > 0 {
		if c.RootCACRL, err = x509.ParseRevocationList(f.RootCACRL); err != nil {
			return nil, collErr("root ca crl: %v", err)
		}
	}
	return c, nil
}

// File returns the collateral in the CollateralFile format.
func (c *Collateral) File() *CollateralFile {
	f := &CollateralFile{
		Format:                CollateralFormat,
		TCBInfo:               c.tcbInfoResponse,
		QEIdentity:            c.qeIdentityResponse,
		TCBInfoIssuerChain:    chainPEM(c.TCBInfoIssuer),
		QEIdentityIssuerChain: chainPEM(c.QEIdentityIssuer),
	}
	if c.PCKCRL != nil {
		f.PCKCRL = c.PCKCRL.Raw
	}
	if c.RootCACRL != nil {
		f.RootCACRL = c.RootCACRL.Raw
	}
	return f
}

func chainPEM(cs []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range cs {
		b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return b.String()
}

// rawField unmarshals a PCS JSON response into v and returns the exact bytes
// of its top-level field name, which is what Intel signs.
func rawField(body []byte, name string, v any) ([]byte, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&top); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	raw, ok := top[name]
	if !ok {
		return nil, fmt.Errorf("field %q is missing", name)
	}
	if _, ok := top["signature"]; !ok || len(top) != 2 {
		return nil, fmt.Errorf("want exactly the fields %q and \"signature\"", name)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, err
	}
	return raw, nil
}

// issuerChain parses a PEM issuer chain (signing certificate, then root); an
// empty string selects the embedded Intel SGX TCB Signing chain.
func issuerChain(s string) ([]*x509.Certificate, error) {
	if s == "" {
		return defaultTCBSigningChain()
	}
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block of type %q", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("trailing data after the PEM blocks")
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("%d certificates, want 2 (signing certificate, root)", len(out))
	}
	return out, nil
}

// validity returns the collateral's combined validity window: the latest
// issue date and the earliest next update of the items present.
func (c *Collateral) validity() (from, until time.Time) {
	from, until = c.TCBInfo.TcbInfo.IssueDate, c.TCBInfo.TcbInfo.NextUpdate
	upd := func(f, u time.Time) {
		if f.After(from) {
			from = f
		}
		if u.Before(until) {
			until = u
		}
	}
	upd(c.QEIdentity.EnclaveIdentity.IssueDate, c.QEIdentity.EnclaveIdentity.NextUpdate)
	if c.PCKCRL != nil {
		upd(c.PCKCRL.ThisUpdate, c.PCKCRL.NextUpdate)
	}
	if c.RootCACRL != nil {
		upd(c.RootCACRL.ThisUpdate, c.RootCACRL.NextUpdate)
	}
	return from, until
}

func parseCRL(b []byte) (*x509.RevocationList, error) { return x509.ParseRevocationList(b) }
