package nvgpu

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	_ "embed"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/sparkinfer/cc/attest/check"
)

// The embedded trust anchors. roots/README.md says where each came from.
var (
	//go:embed roots/nvidia-device-identity-ca.pem
	deviceIdentityRootPEM []byte
	//go:embed roots/nvidia-corim-signing-root-ca.pem
	rimRootPEM []byte
)

// DeviceIdentityRoot returns the embedded NVIDIA Device Identity CA: the root
// of every GPU attestation certificate chain (Hopper and Blackwell).
func DeviceIdentityRoot() *x509.Certificate { return mustRoot(deviceIdentityRootPEM) }

// RIMRoot returns the embedded NVIDIA CoRIM signing Root CA: the root of the
// chains that sign NVIDIA's reference integrity manifests.
func RIMRoot() *x509.Certificate { return mustRoot(rimRootPEM) }

func mustRoot(p []byte) *x509.Certificate {
	b, _ := pem.Decode(p)
	if b == nil {
		panic("nvgpu: embedded root is not pem")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		panic("nvgpu: embedded root: " + err.Error())
	}
	return c
}

// OIDs of the TCG DICE extensions that carry the firmware id (FWID).
var (
	oidDiceTcbInfo      = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1}    // Hopper leaf
	oidDiceTcbInfoAlt   = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1, 1} // Blackwell leaf
	oidDiceMultiTcbInfo = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 5}
	oidSHA384           = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
)

const maxChainLen = 8
const maxChainBytes = 64 << 10

// ParseChain decodes a PEM certificate chain (leaf first). Anything other
// than CERTIFICATE blocks and whitespace is an error, and so is an empty input.
func ParseChain(p []byte) ([]*x509.Certificate, error) {
	if len(p) > maxChainBytes {
		return nil, parseErr("gpu certificate chain", "%d bytes is larger than the %d-byte limit", len(p), maxChainBytes)
	}
	var certs []*x509.Certificate
	rest := p
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, parseErr("gpu certificate chain", "pem block %d has type %q, want CERTIFICATE", len(certs)+1, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, parseErr("gpu certificate chain", "certificate %d: %v", len(certs)+1, err)
		}
		certs = append(certs, c)
		if len(certs) > maxChainLen {
			return nil, parseErr("gpu certificate chain", "more than %d certificates", maxChainLen)
		}
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, parseErr("gpu certificate chain", "%d bytes of non-pem data after certificate %d", len(bytes.TrimSpace(rest)), len(certs))
	}
	if len(certs) == 0 {
		return nil, parseErr("gpu certificate chain", "no certificates")
	}
	return certs, nil
}

// ChainError says why a certificate chain was rejected; Reason is one of the
// ChainReason constants so callers can tell the cases apart without reading
// message text.
type ChainError struct {
	Reason ChainReason
	Detail string
}

// ChainReason names a chain rejection.
type ChainReason string

const (
	ChainTooShort      ChainReason = "chain too short"
	ChainWrongRoot     ChainReason = "chain does not end at the trusted root"
	ChainNotSignedBy   ChainReason = "certificate not signed by the next one"
	ChainExpired       ChainReason = "certificate not valid at the verification time"
	ChainBadLeaf       ChainReason = "leaf certificate unusable"
	ChainPathRejected  ChainReason = "path rejected by x509 verification"
	ChainUnhandledCrit ChainReason = "unhandled critical extension"
)

func (e *ChainError) Error() string { return string(e.Reason) + ": " + e.Detail }

// verifyChain checks certs (leaf first) up to root as of t:
//  1. at least two certificates (a leaf and the root);
//  2. the last certificate is byte-for-byte the embedded root;
//  3. each certificate is signed by the next one, whose subject is its issuer
//     and which is a CA allowed to sign certificates;
//  4. every certificate is valid at t;
//  5. crypto/x509's own path validation (path length, key usage, critical
//     extensions) with the root as the only anchor and the supplied
//     intermediates, as of t. NVIDIA certificates carry no extended key
//     usage, so any usage is allowed; the DICE extensions this package parses
//     are accepted as handled if a certificate marks them critical.
//
// The first failure is returned as a *ChainError.
func verifyChain(certs []*x509.Certificate, root *x509.Certificate, t time.Time) error {
	if len(certs) < 2 {
		return &ChainError{ChainTooShort, fmt.Sprintf("%d certificate(s); a chain needs at least the leaf and the root %q", len(certs), root.Subject.CommonName)}
	}
	last := certs[len(certs)-1]
	if !bytes.Equal(last.Raw, root.Raw) {
		return &ChainError{ChainWrongRoot, fmt.Sprintf("last certificate %q is not the embedded %q", last.Subject.CommonName, root.Subject.CommonName)}
	}
	for i := 0; i < len(certs)-1; i++ {
		c, p := certs[i], certs[i+1]
		if !bytes.Equal(c.RawIssuer, p.RawSubject) {
			return &ChainError{ChainNotSignedBy, fmt.Sprintf("certificate %d %q names issuer %q but certificate %d is %q", i, c.Subject.CommonName, c.Issuer.CommonName, i+1, p.Subject.CommonName)}
		}
		if err := c.CheckSignatureFrom(p); err != nil {
			return &ChainError{ChainNotSignedBy, fmt.Sprintf("certificate %d %q not signed by certificate %d %q: %v", i, c.Subject.CommonName, i+1, p.Subject.CommonName, err)}
		}
	}
	if err := last.CheckSignatureFrom(last); err != nil {
		return &ChainError{ChainNotSignedBy, fmt.Sprintf("root %q is not self-signed: %v", last.Subject.CommonName, err)}
	}
	for i, c := range certs {
		if t.Before(c.NotBefore) || t.After(c.NotAfter) {
			return &ChainError{ChainExpired, fmt.Sprintf("certificate %d %q valid %s to %s, not at %s", i, c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))}
		}
	}
	for i, c := range certs {
		c.UnhandledCriticalExtensions = slices.DeleteFunc(c.UnhandledCriticalExtensions, func(o asn1.ObjectIdentifier) bool {
			return o.Equal(oidDiceTcbInfo) || o.Equal(oidDiceTcbInfoAlt) || o.Equal(oidDiceMultiTcbInfo)
		})
		if len(c.UnhandledCriticalExtensions) > 0 {
			return &ChainError{ChainUnhandledCrit, fmt.Sprintf("certificate %d %q: %v", i, c.Subject.CommonName, c.UnhandledCriticalExtensions)}
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range certs[1 : len(certs)-1] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: t,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return &ChainError{ChainPathRejected, err.Error()}
	}
	return nil
}

// leafKey returns the leaf's P-384 ECDSA key, requiring digitalSignature usage.
func leafKey(leaf *x509.Certificate) (*ecdsa.PublicKey, error) {
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P384() {
		return nil, &ChainError{ChainBadLeaf, fmt.Sprintf("leaf %q key is not ecdsa p-384", leaf.Subject.CommonName)}
	}
	if leaf.KeyUsage != 0 && leaf.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return nil, &ChainError{ChainBadLeaf, fmt.Sprintf("leaf %q lacks the digitalSignature key usage", leaf.Subject.CommonName)}
	}
	return pub, nil
}

// CertFWID extracts the firmware id from a GPU leaf certificate's TCG DICE
// TcbInfo extension. Two encodings occur:
//   - Hopper (OID 2.23.133.5.4.1): SEQUENCE { INTEGER, SubjectPublicKeyInfo,
//     SEQUENCE { hashAlg OID, digest OCTET STRING } } — the FWID is that
//     SHA-384 digest, which is also the extension's last 48 bytes (the way
//     NVIDIA's verifier reads it).
//   - Blackwell (OID 2.23.133.5.4.1.1): a DiceTcbInfo with implicitly tagged
//     fields; the FWID is the digest of fwids[0] ([6]).
//
// It returns nil, nil when the certificate carries neither extension.
func CertFWID(c *x509.Certificate) ([]byte, error) {
	for _, e := range c.Extensions {
		switch {
		case e.Id.Equal(oidDiceTcbInfo), e.Id.Equal(oidDiceTcbInfoAlt):
			fw, err := parseTcbInfoFWID(e.Value)
			if err != nil {
				return nil, fmt.Errorf("dice tcbinfo extension %s: %w", e.Id, err)
			}
			return fw, nil
		}
	}
	return nil, nil
}

func parseTcbInfoFWID(v []byte) ([]byte, error) {
	in := cryptobyte.String(v)
	var seq cryptobyte.String
	if !in.ReadASN1(&seq, cbasn1.SEQUENCE) || !in.Empty() {
		return nil, errors.New("not a single DER sequence")
	}
	if seq.PeekASN1Tag(cbasn1.INTEGER) {
		// Hopper layout: version, public key, one FWID.
		var ver int64
		var spki, fwid cryptobyte.String
		if !seq.ReadASN1Integer(&ver) || !seq.ReadASN1(&spki, cbasn1.SEQUENCE) || !seq.ReadASN1(&fwid, cbasn1.SEQUENCE) || !seq.Empty() {
			return nil, errors.New("malformed version/key/fwid sequence")
		}
		d, err := readFWID(fwid)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(d, v[len(v)-len(d):]) {
			return nil, errors.New("fwid digest is not the extension's last 48 bytes")
		}
		return d, nil
	}
	// DiceTcbInfo: optional implicitly tagged fields [0]..[9]; fwids is [6].
	var fwids cryptobyte.String
	var found bool
	tagFWIDs := cbasn1.Tag(6).Constructed().ContextSpecific()
	if !seq.ReadOptionalASN1(&fwids, &found, tagFWIDs) {
		// Fields before [6] are primitive; skip them one by one.
		return nil, errors.New("malformed dice tcbinfo")
	}
	for !found && !seq.Empty() {
		var skip cryptobyte.String
		var tag cbasn1.Tag
		if !seq.ReadAnyASN1(&skip, &tag) {
			return nil, errors.New("malformed dice tcbinfo field")
		}
		if tag == tagFWIDs {
			fwids, found = skip, true
		}
	}
	if !found {
		return nil, errors.New("dice tcbinfo has no fwids")
	}
	var first cryptobyte.String
	if !fwids.ReadASN1(&first, cbasn1.SEQUENCE) {
		return nil, errors.New("empty fwids list")
	}
	return readFWID(first)
}

func readFWID(s cryptobyte.String) ([]byte, error) {
	var oid asn1.ObjectIdentifier
	var d []byte
	if !s.ReadASN1ObjectIdentifier(&oid) || !s.ReadASN1Bytes(&d, cbasn1.OCTET_STRING) || !s.Empty() {
		return nil, errors.New("malformed fwid (hashAlg, digest)")
	}
	if !oid.Equal(oidSHA384) || len(d) != 48 {
		return nil, fmt.Errorf("fwid hash %s with %d bytes, want sha-384 with 48", oid, len(d))
	}
	return d, nil
}

// chainVerifyErr wraps a chain failure for the check list.
func chainVerifyErr(name string, err error) error {
	return &check.VerifyError{Check: name, Err: err}
}
