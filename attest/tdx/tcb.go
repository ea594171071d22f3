package tdx

import (
	"bytes"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/abi"
	"github.com/google/go-tdx-guest/pcs"
	"github.com/google/go-tdx-guest/verify"
)

func p256() elliptic.Curve { return elliptic.P256() }

type tcbResult struct {
	status, date, moduleStatus, qeStatus string
	advisories                           []string
	allPassed                            bool
}

// verifyCollateral runs the collateral checks: validity as of AsOf, CRLs,
// TCB info and QE identity signatures, platform match, TCB level, QE identity.
func (v *verifier) verifyCollateral(c *Collateral) *tcbResult {
	res := &tcbResult{}
	before := len(v.list)
	from, until := c.validity()
	if v.asOf.Before(from) || v.asOf.After(until) {
		v.fail(CheckCollateral, "collateral (%s) is valid from %s until %s, not at %s",
			c.Source, from.Format(time.RFC3339), until.Format(time.RFC3339), v.asOf.Format(time.RFC3339))
	} else {
		v.list.Pass(CheckCollateral, "collateral (%s) valid at %s (window %s to %s)", c.Source,
			v.asOf.Format(time.RFC3339), from.Format(time.RFC3339), until.Format(time.RFC3339))
	}

	root := IntelRootCA()
	inter := v.q.PCKChain[1]
	// Root CA CRL: signed by the root; revokes intermediates (PCK CA, TCB signing).
	if c.RootCACRL == nil {
		v.list.Skip(CheckRootCRL, "collateral has no root ca crl")
	} else if err := c.checkCRL("root", c.RootCACRL, root, v.asOf); err != nil {
		v.fail(CheckRootCRL, "root ca crl: %v", err)
	} else if r := revoked(c.RootCACRL, inter, c.TCBInfoIssuer[0], c.QEIdentityIssuer[0]); r != "" {
		v.fail(CheckRootCRL, "%s is revoked by the root ca crl", r)
	} else {
		v.list.Pass(CheckRootCRL, "root ca crl (%d entries) signed by the root; pck ca and tcb signing certificates not revoked", len(c.RootCACRL.RevokedCertificateEntries))
	}
	if c.PCKCRL == nil {
		v.list.Skip(CheckPCKCRL, "collateral has no pck crl")
	} else if !v.chain {
		v.fail(CheckPCKCRL, "pck chain did not verify")
	} else if err := c.checkCRL("pck", c.PCKCRL, inter, v.asOf); err != nil {
		v.fail(CheckPCKCRL, "pck crl: %v", err)
	} else if r := revoked(c.PCKCRL, v.q.PCKChain[0]); r != "" {
		v.fail(CheckPCKCRL, "%s is revoked by the pck crl", r)
	} else {
		v.list.Pass(CheckPCKCRL, "pck crl (%d entries) signed by %q; pck certificate not revoked", len(c.PCKCRL.RevokedCertificateEntries), inter.Subject.CommonName)
	}

	ti := c.TCBInfo.TcbInfo
	if err := c.checkSigned("tcb info", c.TCBInfoIssuer, c.TCBInfoBody, c.TCBInfo.Signature, v.asOf); err != nil {
		v.fail(CheckTCBInfoSignature, "tcb info: %v", err)
	} else if ti.ID != "TDX" || ti.Version != 3 {
		v.fail(CheckTCBInfoSignature, "tcb info id %q version %d, want \"TDX\" version 3", ti.ID, ti.Version)
	} else {
		v.list.Pass(CheckTCBInfoSignature, "tcb info (fmspc %s, evaluation data number %d) signed by %q", ti.Fmspc, ti.TcbEvaluationDataNumber, c.TCBInfoIssuer[0].Subject.CommonName)
	}
	if v.exts == nil {
		v.fail(CheckTCBInfoPlatform, "pck certificate did not verify")
	} else if !strings.EqualFold(ti.Fmspc, v.exts.FMSPC) || !strings.EqualFold(ti.PceID, v.exts.PCEID) {
		v.fail(CheckTCBInfoPlatform, "tcb info is for fmspc %q pce id %q, the pck certificate for fmspc %q pce id %q", ti.Fmspc, ti.PceID, v.exts.FMSPC, v.exts.PCEID)
	} else {
		v.list.Pass(CheckTCBInfoPlatform, "tcb info fmspc %s and pce id %s match the pck certificate", strings.ToLower(ti.Fmspc), ti.PceID)
	}
	v.checkModule(ti)
	v.checkTCBLevel(ti, res)

	qi := c.QEIdentity.EnclaveIdentity
	if err := c.checkSigned("qe identity", c.QEIdentityIssuer, c.QEIdentityBody, c.QEIdentity.Signature, v.asOf); err != nil {
		v.fail(CheckQEIdentitySig, "qe identity: %v", err)
	} else if qi.ID != "TD_QE" || qi.Version != 2 {
		v.fail(CheckQEIdentitySig, "qe identity id %q version %d, want \"TD_QE\" version 2", qi.ID, qi.Version)
	} else {
		v.list.Pass(CheckQEIdentitySig, "qe identity (evaluation data number %d) signed by %q", qi.TcbEvaluationDataNumber, c.QEIdentityIssuer[0].Subject.CommonName)
	}
	v.checkQEIdentity(qi, res)
	res.allPassed = true
	for _, ch := range v.list[before:] {
		if ch.Status == "fail" {
			res.allPassed = false
		}
	}
	return res
}

// checkCRL checks a CRL's issuer, signature and validity window.
func (c *Collateral) checkCRL(which string, crl *x509.RevocationList, issuer *x509.Certificate, t time.Time) error {
	if !bytes.Equal(crl.RawIssuer, issuer.RawSubject) {
		return fmt.Errorf("issued by %q, want %q", crl.Issuer.String(), issuer.Subject.String())
	}
	if err := c.once("crl "+which+" "+string(issuer.Raw), func() error { return crl.CheckSignatureFrom(issuer) }); err != nil {
		return fmt.Errorf("signature: %v", err)
	}
	if t.Before(crl.ThisUpdate) || t.After(crl.NextUpdate) {
		return fmt.Errorf("valid from %s until %s, not at %s", crl.ThisUpdate.Format(time.RFC3339), crl.NextUpdate.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	return nil
}

func revoked(crl *x509.RevocationList, certs ...*x509.Certificate) string {
	for _, e := range crl.RevokedCertificateEntries {
		for _, c := range certs {
			if c.SerialNumber.Cmp(e.SerialNumber) == 0 {
				return fmt.Sprintf("%q (serial %x, revoked %s)", c.Subject.CommonName, c.SerialNumber, e.RevocationTime.Format(time.RFC3339))
			}
		}
	}
	return ""
}

// checkSigned verifies a PCS JSON body: the issuer chain (signing cert, root)
// chains to the embedded root at t, its leaf is the Intel SGX TCB Signing
// certificate, and the hex r||s signature over the raw body verifies.
func (c *Collateral) checkSigned(which string, chain []*x509.Certificate, body []byte, sigHex string, t time.Time) error {
	signer := chain[0]
	if !bytes.Equal(chain[1].Raw, IntelRootCA().Raw) {
		return fmt.Errorf("issuer chain root %q is not the embedded intel sgx root ca", chain[1].Subject.String())
	}
	if signer.Subject.CommonName != "Intel SGX TCB Signing" {
		return fmt.Errorf("signed by %q, want \"Intel SGX TCB Signing\"", signer.Subject.CommonName)
	}
	if t.Before(signer.NotBefore) || t.After(signer.NotAfter) {
		return fmt.Errorf("signing certificate: valid from %s until %s, not at %s", signer.NotBefore.Format(time.RFC3339), signer.NotAfter.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	if err := c.once("signer "+string(signer.Raw), func() error { return verifyCertChain(signer, nil, signer.NotBefore) }); err != nil {
		return fmt.Errorf("signing certificate: %v", err)
	}
	sig, err := hex.DecodeString(sigHex)
	if err != nil || len(sig) != 64 {
		return fmt.Errorf("signature %q is not 64 bytes of hex", sigHex)
	}
	der, err := rawSigDER(sig)
	if err != nil {
		return err
	}
	if err := c.once(which+" "+string(signer.Raw), func() error { return signer.CheckSignature(x509.ECDSAWithSHA256, body, der) }); err != nil {
		return fmt.Errorf("signature does not verify with %q (serial %x): %v", signer.Subject.CommonName, signer.SerialNumber, err)
	}
	return nil
}

// checkModule compares MRSIGNERSEAM and SEAMATTRIBUTES with tcbInfo.tdxModule.
func (v *verifier) checkModule(ti pcs.TcbInfo) {
	m := ti.TdxModule
	got := v.q.MRSignerSeam()
	if !bytes.Equal(m.Mrsigner.Bytes, got) {
		v.fail(CheckTDXModule, "mrsignerseam %s, tcb info wants %s", hex.EncodeToString(got), hex.EncodeToString(m.Mrsigner.Bytes))
		return
	}
	attr := v.q.SeamAttributes()
	if len(m.AttributesMask.Bytes) != len(attr) || len(m.Attributes.Bytes) != len(attr) {
		v.fail(CheckTDXModule, "tcb info seam attributes mask is %d bytes, want %d", len(m.AttributesMask.Bytes), len(attr))
		return
	}
	for i := range attr {
		if attr[i]&m.AttributesMask.Bytes[i] != m.Attributes.Bytes[i] {
			v.fail(CheckTDXModule, "seam attributes %s under mask %s, tcb info wants %s", hex.EncodeToString(attr), hex.EncodeToString(m.AttributesMask.Bytes), hex.EncodeToString(m.Attributes.Bytes))
			return
		}
	}
	v.list.Pass(CheckTDXModule, "mrsignerseam and seam attributes match the tcb info's tdx module")
}

// checkTCBLevel finds the first TCB level (they are sorted, highest first)
// whose SGX components and PCESVN are <= the PCK certificate's and whose TDX
// components are <= TEE_TCB_SVN (from index 2 when the TDX module major
// version, TEE_TCB_SVN[1], is non-zero; that version then selects a
// tdxModuleIdentities entry "TDX_<major>" whose levels are matched by
// TEE_TCB_SVN[0]). This is Intel's documented algorithm, as go-tdx-guest
// implements it. No match is reported as "no matching TCB level".
func (v *verifier) checkTCBLevel(ti pcs.TcbInfo, res *tcbResult) {
	if v.exts == nil {
		v.fail(CheckTCBLevel, "pck certificate did not verify")
		return
	}
	svn := v.q.TeeTCBSVN()
	cpu := v.exts.TCB.CPUSvnComponents
	var level *pcs.TcbLevel
	for i := range ti.TcbLevels {
		l := &ti.TcbLevels[i]
		if geComponents(cpu, l.Tcb.SgxTcbcomponents, 0) && v.exts.TCB.PCESvn >= l.Tcb.Pcesvn && geTDX(svn, l.Tcb.TdxTcbcomponents) {
			level = l
			break
		}
	}
	if level == nil {
		v.fail(CheckTCBLevel, "no matching TCB level: tee tcb svn %s, pck cpusvn components %s, pcesvn %d match none of the %d levels of the tcb info for fmspc %s",
			hex.EncodeToString(svn), hex.EncodeToString(cpu), v.exts.TCB.PCESvn, len(ti.TcbLevels), ti.Fmspc)
		return
	}
	res.status, res.date, res.advisories = string(level.TcbStatus), level.TcbDate, level.AdvisoryIDs
	if svn[1] > 0 {
		id := fmt.Sprintf("TDX_%02X", svn[1])
		var mid *pcs.TdxModuleIdentity
		for i := range ti.TdxModuleIdentities {
			if strings.EqualFold(ti.TdxModuleIdentities[i].ID, id) {
				mid = &ti.TdxModuleIdentities[i]
			}
		}
		if mid == nil {
			v.fail(CheckTCBLevel, "no matching TCB level: tcb info has no tdx module identity %q", id)
			return
		}
		for _, ml := range mid.TcbLevels {
			if uint32(svn[0]) >= ml.Tcb.Isvsvn {
				res.moduleStatus = string(ml.TcbStatus)
				break
			}
		}
		if res.moduleStatus == "" {
			v.fail(CheckTCBLevel, "no matching TCB level: tdx module %s isvsvn %d is below every level", id, svn[0])
			return
		}
	}
	extra := ""
	if res.moduleStatus != "" {
		extra = ", tdx module " + res.moduleStatus
	}
	v.list.Pass(CheckTCBLevel, "tcb level %s (tcb date %s%s, advisories %v)", res.status, res.date, extra, res.advisories)
}

func geComponents(have []byte, want []pcs.TcbComponent, from int) bool {
	if len(have) != len(want) {
		return false
	}
	for i := from; i < len(have); i++ {
		if have[i] < want[i].Svn {
			return false
		}
	}
	return true
}

func geTDX(svn []byte, want []pcs.TcbComponent) bool {
	from := 0
	if svn[1] > 0 {
		from = 2
	}
	return geComponents(svn, want, from)
}

// checkQEIdentity compares the QE report with the QE identity and finds the
// QE's TCB level by ISVSVN.
func (v *verifier) checkQEIdentity(qi pcs.EnclaveIdentity, res *tcbResult) {
	r := v.q.QEReport
	if len(qi.MiscselectMask.Bytes) != 4 || len(qi.Miscselect.Bytes) != 4 || len(qi.Attributes.Bytes) != 16 || len(qi.AttributesMask.Bytes) != 16 {
		v.fail(CheckQEIdentity, "qe identity miscselect/attributes fields have the wrong sizes")
		return
	}
	mask, want := binary.LittleEndian.Uint32(qi.MiscselectMask.Bytes), binary.LittleEndian.Uint32(qi.Miscselect.Bytes)
	if v.q.qeMiscSelect()&mask != want {
		v.fail(CheckQEIdentity, "qe miscselect %08x under mask %08x, want %08x", v.q.qeMiscSelect(), mask, want)
		return
	}
	attr := r[qeReportAttributes : qeReportAttributes+16]
	for i := range attr {
		if attr[i]&qi.AttributesMask.Bytes[i] != qi.Attributes.Bytes[i] {
			v.fail(CheckQEIdentity, "qe attributes %s under mask %s, want %s", hex.EncodeToString(attr), hex.EncodeToString(qi.AttributesMask.Bytes), hex.EncodeToString(qi.Attributes.Bytes))
			return
		}
	}
	if signer := r[qeReportMrSigner : qeReportMrSigner+32]; !bytes.Equal(signer, qi.Mrsigner.Bytes) {
		v.fail(CheckQEIdentity, "qe mrsigner %s, want %s", hex.EncodeToString(signer), hex.EncodeToString(qi.Mrsigner.Bytes))
		return
	}
	if pid := binary.LittleEndian.Uint16(r[qeReportIsvProdID:]); pid != qi.IsvProdID {
		v.fail(CheckQEIdentity, "qe isvprodid %d, want %d", pid, qi.IsvProdID)
		return
	}
	isvsvn := uint32(binary.LittleEndian.Uint16(r[qeReportIsvSvn:]))
	for _, l := range qi.TcbLevels {
		if l.Tcb.Isvsvn <= isvsvn {
			res.qeStatus = string(l.TcbStatus)
			break
		}
	}
	if res.qeStatus == "" {
		v.fail(CheckQEIdentity, "qe isvsvn %d matches no qe identity tcb level", isvsvn)
		return
	}
	v.list.Pass(CheckQEIdentity, "qe report matches the td_qe identity (mrsigner, isvprodid %d, miscselect, attributes); qe tcb %s at isvsvn %d", qi.IsvProdID, res.qeStatus, isvsvn)
}

// crossCheck runs go-tdx-guest's own verifier (v4 only: it has no v5 path) on
// the same quote, collateral, roots and time, as an independent second
// opinion. The library rejects any TCB or QE status other than UpToDate, so
// collateral is passed to it only when those statuses are UpToDate and our
// collateral checks passed; otherwise it checks the chain and signatures only.
func (v *verifier) crossCheck(c *Collateral, tcb *tcbResult) {
	if v.opts.SkipCrossCheck {
		v.list.Skip(CheckLibrary, "cross-check with go-tdx-guest not requested")
		return
	}
	if v.q.Version != 4 {
		v.list.Skip(CheckLibrary, "go-tdx-guest has no v%d quote path; v%d checked by this package only", v.q.Version, v.q.Version)
		return
	}
	quote, err := abi.QuoteToProto(v.q.Raw)
	if err != nil {
		v.fail(CheckLibrary, "go-tdx-guest cannot parse the quote: %v", err)
		return
	}
	pool := x509.NewCertPool()
	pool.AddCert(IntelRootCA())
	o := &verify.Options{Now: v.asOf, TrustedRoots: pool}
	scope := "pck chain, quote and qe report signatures"
	if c != nil && tcb.allPassed && tcb.status == string(pcs.TcbComponentStatusUpToDate) && tcb.qeStatus == string(pcs.TcbComponentStatusUpToDate) &&
		(tcb.moduleStatus == "" || tcb.moduleStatus == string(pcs.TcbComponentStatusUpToDate)) {
		g, err := c.getter(v.q.PCKChain)
		if err != nil {
			v.fail(CheckLibrary, "serving collateral to go-tdx-guest: %v", err)
			return
		}
		o.GetCollateral, o.Getter = true, g
		o.CheckRevocations = c.PCKCRL != nil && c.RootCACRL != nil
		scope += ", tcb info, qe identity"
		if o.CheckRevocations {
			scope += ", crls"
		}
	}
	if err := verify.TdxQuote(quote, o); err != nil {
		v.fail(CheckLibrary, "go-tdx-guest verify.TdxQuote rejects the quote (%s): %v", scope, err)
		return
	}
	v.list.Pass(CheckLibrary, "go-tdx-guest verify.TdxQuote agrees (%s)", scope)
}

// getter serves the collateral to go-tdx-guest as Intel PCS would, with the
// issuer chains in headers.
func (c *Collateral) getter(pckChain []*x509.Certificate) (*memGetter, error) {
	ca, err := pckCA(pckChain[0])
	if err != nil {
		return nil, err
	}
	hdr := func(name string, chain []*x509.Certificate) map[string][]string {
		return map[string][]string{name: {url.QueryEscape(chainPEM(chain))}}
	}
	g := &memGetter{m: map[string]memResponse{
		pcs.TcbInfoURL(c.TCBInfo.TcbInfo.Fmspc): {hdr("Tcb-Info-Issuer-Chain", c.TCBInfoIssuer), c.tcbInfoResponse},
		pcs.QeIdentityURL():                     {hdr("Sgx-Enclave-Identity-Issuer-Chain", c.QEIdentityIssuer), c.qeIdentityResponse},
	}}
	if c.PCKCRL != nil {
		g.m[pcs.PckCrlURL(ca)] = memResponse{hdr("Sgx-Pck-Crl-Issuer-Chain", pckChain[1:]), c.PCKCRL.Raw}
	}
	if c.RootCACRL != nil {
		for _, u := range c.QEIdentityIssuer[1].CRLDistributionPoints {
			g.m[u] = memResponse{nil, c.RootCACRL.Raw}
		}
	}
	// go-tdx-guest asks for the TCB info with the FMSPC as the PCK prints it.
	g.m[pcs.TcbInfoURL(strings.ToLower(c.TCBInfo.TcbInfo.Fmspc))] = g.m[pcs.TcbInfoURL(c.TCBInfo.TcbInfo.Fmspc)]
	return g, nil
}

type memResponse struct {
	header map[string][]string
	body   []byte
}

type memGetter struct{ m map[string]memResponse }

func (g *memGetter) Get(u string) (map[string][]string, []byte, error) {
	r, ok := g.m[u]
	if !ok {
		return nil, nil, fmt.Errorf("no recorded response for %q", u)
	}
	return r.header, r.body, nil
}
