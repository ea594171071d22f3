package nvgpu

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/beevik/etree"
	dsig "github.com/russellhaering/goxmldsig"
	"github.com/russellhaering/goxmldsig/etreeutils"

	"github.com/sparkinfer/cc/attest/check"
)

// XML namespaces and algorithm identifiers of NVIDIA's RIMs.
const (
	nsSWID          = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd"
	nsDSig          = "http://www.w3.org/2000/09/xmldsig#"
	algC14N11       = "http://www.w3.org/2006/12/xml-c14n11"
	algEnveloped    = "http://www.w3.org/2000/09/xmldsig#enveloped-signature"
	algECDSASHA384  = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384"
	algSHA384       = "http://www.w3.org/2001/04/xmldsig-more#sha384"
	algSHA384Enc    = "http://www.w3.org/2001/04/xmlenc#sha384"
	maxRIMBytes     = 1 << 20
	maxAlternatives = 64
)

// GoldenMeasurement is one Payload/Resource entry of a RIM.
type GoldenMeasurement struct {
	Index        int      `json:"index"` // 0-based RIM index; report block index = Index+1
	Name         string   `json:"name"`
	Active       bool     `json:"active"`
	Size         int      `json:"size"`
	Alternatives [][]byte `json:"-"` // accepted digests
}

// RIM is a parsed NVIDIA reference integrity manifest (a signed SWID tag).
// ParseRIM only parses; VerifyRIM checks the signature and the chain.
type RIM struct {
	Raw           []byte
	TagID         string
	Name          string // e.g. "GH100"
	Version       string // Meta colloquialVersion: driver or VBIOS version
	Product       string // Meta product
	Edition       string // Meta edition
	Measurements  []GoldenMeasurement
	Certs         []*x509.Certificate // KeyInfo chain, signer first
	doc           *etree.Document
	signature     *etree.Element
	signedInfo    *etree.Element
	digestValue   []byte
	signatureBits []byte
}

func rimErr(format string, args ...any) error { return parseErr("rim", format, args...) }

// ParseRIM parses a RIM and its enveloped XML signature's structure: exactly
// one Signature, a direct child of SoftwareIdentity, using C14N 1.1, ECDSA
// P-384 with SHA-384, one whole-document reference with the enveloped-
// signature and C14N 1.1 transforms, and an X.509 chain in KeyInfo.
func ParseRIM(b []byte) (*RIM, error) {
	if len(b) > maxRIMBytes {
		return nil, rimErr("%d bytes is larger than the %d-byte limit", len(b), maxRIMBytes)
	}
	doc := etree.NewDocument()
	doc.ReadSettings.Permissive = false
	if err := doc.ReadFromBytes(b); err != nil {
		return nil, rimErr("xml: %v", err)
	}
	root := doc.Root()
	if root == nil || root.Tag != "SoftwareIdentity" || root.NamespaceURI() != nsSWID {
		return nil, rimErr("root element is not a swid SoftwareIdentity")
	}
	r := &RIM{Raw: b, doc: doc,
		TagID: root.SelectAttrValue("tagId", ""), Name: root.SelectAttrValue("name", "")}

	var sigs []*etree.Element
	for _, el := range root.FindElements("//Signature") {
		if el.NamespaceURI() == nsDSig {
			sigs = append(sigs, el)
		}
	}
	if len(sigs) != 1 || sigs[0].Parent() != root {
		return nil, rimErr("want exactly one ds:Signature as a child of SoftwareIdentity, found %d", len(sigs))
	}
	r.signature = sigs[0]
	if err := r.parseSignature(); err != nil {
		return nil, err
	}
	if err := r.parseBody(root); err != nil {
		return nil, err
	}
	return r, nil
}

// child returns the single child of el with the given local name in ns.
func child(el *etree.Element, ns, tag string) (*etree.Element, error) {
	var found *etree.Element
	for _, c := range el.ChildElements() {
		if c.Tag == tag && c.NamespaceURI() == ns {
			if found != nil {
				return nil, rimErr("%s has two %s elements", el.Tag, tag)
			}
			found = c
		}
	}
	if found == nil {
		return nil, rimErr("%s has no %s element", el.Tag, tag)
	}
	return found, nil
}

func algorithm(el *etree.Element, ns, tag string, want ...string) error {
	c, err := child(el, ns, tag)
	if err != nil {
		return err
	}
	got := c.SelectAttrValue("Algorithm", "")
	for _, w := range want {
		if got == w {
			return nil
		}
	}
	return rimErr("%s algorithm %q, want %q", tag, got, want[0])
}

func (r *RIM) parseSignature() error {
	sig := r.signature
	si, err := child(sig, nsDSig, "SignedInfo")
	if err != nil {
		return err
	}
	r.signedInfo = si
	if err := algorithm(si, nsDSig, "CanonicalizationMethod", algC14N11); err != nil {
		return err
	}
	if err := algorithm(si, nsDSig, "SignatureMethod", algECDSASHA384); err != nil {
		return err
	}
	ref, err := child(si, nsDSig, "Reference")
	if err != nil {
		return err
	}
	if uri := ref.SelectAttr("URI"); uri == nil || uri.Value != "" {
		return rimErr("reference must have URI=\"\" (the whole document)")
	}
	tr, err := child(ref, nsDSig, "Transforms")
	if err != nil {
		return err
	}
	ts := tr.ChildElements()
	if len(ts) != 2 || ts[0].SelectAttrValue("Algorithm", "") != algEnveloped || ts[1].SelectAttrValue("Algorithm", "") != algC14N11 {
		return rimErr("transforms must be enveloped-signature then c14n 1.1")
	}
	if err := algorithm(ref, nsDSig, "DigestMethod", algSHA384, algSHA384Enc); err != nil {
		return err
	}
	dv, err := child(ref, nsDSig, "DigestValue")
	if err != nil {
		return err
	}
	if r.digestValue, err = base64.StdEncoding.DecodeString(strings.TrimSpace(dv.Text())); err != nil || len(r.digestValue) != 48 {
		return rimErr("digest value is not 48 base64-encoded bytes")
	}
	sv, err := child(sig, nsDSig, "SignatureValue")
	if err != nil {
		return err
	}
	if r.signatureBits, err = base64.StdEncoding.DecodeString(strings.Join(strings.Fields(sv.Text()), "")); err != nil || len(r.signatureBits) != signatureLen {
		return rimErr("signature value is not 96 base64-encoded bytes (raw r||s)")
	}
	ki, err := child(sig, nsDSig, "KeyInfo")
	if err != nil {
		return err
	}
	xd, err := child(ki, nsDSig, "X509Data")
	if err != nil {
		return err
	}
	for _, c := range xd.ChildElements() {
		if c.Tag != "X509Certificate" || c.NamespaceURI() != nsDSig {
			continue
		}
		der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(c.Text()), ""))
		if err != nil {
			return rimErr("keyinfo certificate %d: %v", len(r.Certs)+1, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return rimErr("keyinfo certificate %d: %v", len(r.Certs)+1, err)
		}
		r.Certs = append(r.Certs, cert)
		if len(r.Certs) > maxChainLen {
			return rimErr("more than %d keyinfo certificates", maxChainLen)
		}
	}
	if len(r.Certs) == 0 {
		return rimErr("keyinfo has no certificate")
	}
	return nil
}

func (r *RIM) parseBody(root *etree.Element) error {
	meta, err := child(root, nsSWID, "Meta")
	if err != nil {
		return err
	}
	r.Version = meta.SelectAttrValue("colloquialVersion", "")
	r.Product = meta.SelectAttrValue("product", "")
	r.Edition = meta.SelectAttrValue("edition", "")
	payload, err := child(root, nsSWID, "Payload")
	if err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, res := range payload.ChildElements() {
		if res.Tag != "Resource" || res.NamespaceURI() != nsSWID || res.SelectAttrValue("type", "") != "Measurement" {
			continue
		}
		g := GoldenMeasurement{Name: res.SelectAttrValue("name", "")}
		var err error
		if g.Index, err = strconv.Atoi(res.SelectAttrValue("index", "")); err != nil || g.Index < 0 || g.Index > 253 {
			return rimErr("resource %q has bad index %q", g.Name, res.SelectAttrValue("index", ""))
		}
		if seen[g.Index] {
			return rimErr("index %d appears twice", g.Index)
		}
		seen[g.Index] = true
		switch a := res.SelectAttrValue("active", ""); strings.ToLower(a) {
		case "true":
			g.Active = true
		case "false":
		default:
			return rimErr("index %d: active %q is not True/False", g.Index, a)
		}
		if g.Size, err = strconv.Atoi(res.SelectAttrValue("size", "")); err != nil || g.Size <= 0 || g.Size > 64 {
			return rimErr("index %d: bad size %q", g.Index, res.SelectAttrValue("size", ""))
		}
		n, err := strconv.Atoi(res.SelectAttrValue("alternatives", ""))
		if err != nil || n < 1 || n > maxAlternatives {
			return rimErr("index %d: bad alternatives %q", g.Index, res.SelectAttrValue("alternatives", ""))
		}
		hashes := map[string]string{}
		for _, a := range res.Attr {
			if strings.HasPrefix(a.Key, "Hash") && a.NamespaceURI() == algSHA384Enc {
				hashes[a.Key] = a.Value
			}
		}
		if len(hashes) != n {
			return rimErr("index %d: %d hashes for %d alternatives", g.Index, len(hashes), n)
		}
		for i := 0; i < n; i++ {
			h, ok := hashes["Hash"+strconv.Itoa(i)]
			if !ok {
				return rimErr("index %d: Hash%d missing", g.Index, i)
			}
			d, err := hex.DecodeString(h)
			if err != nil || len(d) != g.Size {
				return rimErr("index %d: Hash%d is not %d hex bytes", g.Index, i, g.Size)
			}
			g.Alternatives = append(g.Alternatives, d)
		}
		r.Measurements = append(r.Measurements, g)
	}
	if len(r.Measurements) == 0 {
		return rimErr("no measurement resources")
	}
	sort.Slice(r.Measurements, func(i, j int) bool { return r.Measurements[i].Index < r.Measurements[j].Index })
	return nil
}

// SigningTime is the time a RIM's chain is checked at when the caller gives
// none: the RIM carries no signing time of its own, so this is the signer
// certificate's NotBefore (NVIDIA issues a short-lived signer per RIM).
func (r *RIM) SigningTime() time.Time { return r.Certs[0].NotBefore }

// VerifyRIM checks a parsed RIM:
//   - the ECDSA P-384 / SHA-384 signature (raw 96-byte r||s) over SignedInfo
//     canonicalized with C14N 1.1, carrying the namespaces it inherits,
//     with the KeyInfo leaf's key;
//   - the SHA-384 of the C14N 1.1 canonical document without its Signature
//     element against the reference's DigestValue;
//   - the KeyInfo chain to root (the embedded NVIDIA CoRIM signing Root CA
//     when root is nil) as of t (the RIM's SigningTime when t is zero).
//
// Failures are *check.VerifyError.
func VerifyRIM(r *RIM, root *x509.Certificate, t time.Time) error {
	if root == nil {
		root = RIMRoot()
	}
	if t.IsZero() {
		t = r.SigningTime()
	}
	pub, ok := r.Certs[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve.Params().BitSize != 384 {
		return &check.VerifyError{Check: "nvgpu.rim.signature", Err: errors.New("signer key is not ecdsa p-384")}
	}
	ctx, err := etreeutils.NSBuildParentContext(r.signedInfo)
	if err != nil {
		return &check.VerifyError{Check: "nvgpu.rim.signature", Err: fmt.Errorf("signedinfo namespaces: %v", err)}
	}
	detached, err := etreeutils.NSDetatch(ctx, r.signedInfo)
	if err != nil {
		return &check.VerifyError{Check: "nvgpu.rim.signature", Err: fmt.Errorf("signedinfo namespaces: %v", err)}
	}
	canon, err := dsig.MakeC14N11Canonicalizer().Canonicalize(detached)
	if err != nil {
		return &check.VerifyError{Check: "nvgpu.rim.signature", Err: fmt.Errorf("canonicalize signedinfo: %v", err)}
	}
	h := sha512.Sum384(canon)
	rr := new(big.Int).SetBytes(r.signatureBits[:48])
	ss := new(big.Int).SetBytes(r.signatureBits[48:])
	if !ecdsa.Verify(pub, h[:], rr, ss) {
		return &check.VerifyError{Check: "nvgpu.rim.signature", Err: fmt.Errorf("signature by %q does not verify", r.Certs[0].Subject.CommonName)}
	}
	body := r.doc.Root().Copy()
	for _, c := range body.ChildElements() {
		if c.Tag == "Signature" && c.NamespaceURI() == nsDSig {
			body.RemoveChild(c)
		}
	}
	canonDoc, err := dsig.MakeC14N11Canonicalizer().Canonicalize(body)
	if err != nil {
		return &check.VerifyError{Check: "nvgpu.rim.digest", Err: fmt.Errorf("canonicalize document: %v", err)}
	}
	d := sha512.Sum384(canonDoc)
	if !bytes.Equal(d[:], r.digestValue) {
		return &check.VerifyError{Check: "nvgpu.rim.digest", Err: fmt.Errorf("document digest %x differs from the signed digest value %x", d[:], r.digestValue)}
	}
	if err := verifyChain(r.Certs, root, t); err != nil {
		return &check.VerifyError{Check: "nvgpu.rim.chain", Err: err}
	}
	return nil
}

// RIM ids as NVIDIA's RIM service names them.

// DriverRIMID returns the id of the driver RIM for a report, as NVIDIA's
// RIM service names it: Hopper "NV_GPU_DRIVER_GH100_<driver version>";
// Blackwell "NV_GPU_CC_DRIVER_<chip>_<driver version>" where chip is the
// report's chip_info opaque field (GB100 when the field is absent, as
// NVIDIA's verifier falls back).
func DriverRIMID(arch Arch, r *Report) string {
	if arch == Blackwell {
		chip := "GB100"
		if d, ok := r.Field(OpaqueChipInfo); ok {
			if s, err := cString(d); err == nil && s != "" {
				chip = strings.ToUpper(s)
			}
		}
		return "NV_GPU_CC_DRIVER_" + chip + "_" + r.DriverVersion
	}
	return "NV_GPU_DRIVER_GH100_" + r.DriverVersion
}

// VBIOSRIMID returns the VBIOS RIM id: NV_GPU_VBIOS_<project>_<project sku>_
// <chip sku>_<VBIOS version without dots, upper case>.
func VBIOSRIMID(r *Report) string {
	get := func(id uint16) string {
		d, _ := r.Field(id)
		s, _ := cString(d)
		return strings.ToUpper(s)
	}
	return "NV_GPU_VBIOS_" + get(OpaqueProject) + "_" + get(OpaqueProjectSKU) + "_" + get(OpaqueChipSKU) + "_" +
		strings.ToUpper(strings.ReplaceAll(r.VBIOSVersion, ".", ""))
}

// LoadRIMFile reads the RIM with the given id from a cache directory: the
// file DIR/ID or DIR/ID.swidtag. It returns nil, nil when neither exists.
func LoadRIMFile(dir, id string) (*RIM, error) {
	if strings.ContainsAny(id, `/\`) || id == "" || id == "." || id == ".." {
		return nil, rimErr("bad rim id %q", id)
	}
	for _, name := range []string{id, id + ".swidtag"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, &check.UnavailableError{What: "rim " + id, Err: err}
		}
		return ParseRIM(b)
	}
	return nil, nil
}
