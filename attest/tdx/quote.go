package tdx

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/sparkinfer/cc/attest/check"
)

// Quote layout (Intel TDX DCAP Quote Generation Library and Quote Verification
// Library API, "Quote Format" appendix). All integers are little endian.
//
//	v4: header(48) | TD report body(584)                          | sigLen(4) | signature data
//	v5: header(48) | bodyType(2) | bodySize(4) | body(584 or 648) | sigLen(4) | signature data
//
// The attestation key signs everything before sigLen. Signature data:
//
//	signature(64) | attestation key(64) | certType(2)=6 | certSize(4) | QE report certification data
//	QE report certification data: QE report(384) | QE report signature(64) | authLen(2) | auth data |
//	                              certType(2)=5 | certSize(4) | PCK certificate chain (PEM)
const (
	headerSize = 0x30

	hdrVersion        = 0x00 // uint16
	hdrAttestKeyType  = 0x02 // uint16
	hdrTeeType        = 0x04 // uint32
	hdrQeSvn          = 0x08 // uint16 (reserved in TDX)
	hdrPceSvn         = 0x0A // uint16
	hdrQeVendorID     = 0x0C // 16 bytes
	hdrQeVendorIDSize = 0x10
	hdrUserData       = 0x1C // 20 bytes

	attestKeyTypeECDSAP256 = 2
	teeTypeTDX             = 0x81

	v5DescType = headerSize     // uint16 body type
	v5DescSize = headerSize + 2 // uint32 body size
	v5Body     = headerSize + 6

	// Body types of the v5 descriptor.
	BodyTypeTDX10 = 2
	BodyTypeTDX15 = 3

	bodySizeTDX10 = 0x248 // 584
	bodySizeTDX15 = 0x288 // 648

	// Offsets inside the TD report body.
	bodyTeeTcbSvn      = 0x000 // 16
	bodyMrSeam         = 0x010 // 48
	bodyMrSignerSeam   = 0x040 // 48
	bodySeamAttributes = 0x070 // 8
	bodyTdAttributes   = 0x078 // 8
	bodyXfam           = 0x080 // 8
	bodyMrTd           = 0x088 // 48
	bodyMrConfigID     = 0x0B8 // 48
	bodyMrOwner        = 0x0E8 // 48
	bodyMrOwnerConfig  = 0x118 // 48
	bodyRtmr0          = 0x148 // 4 x 48
	bodyReportData     = 0x208 // 64
	bodyTeeTcbSvn2     = 0x248 // 16, TDX 1.5 only
	bodyMrServiceTd    = 0x258 // 48, TDX 1.5 only

	svnSize        = 16
	measurementLen = 48
	reportDataSize = 64

	sigDataSignature = 0x00 // 64
	sigDataAttestKey = 0x40 // 64
	sigDataCertType  = 0x80 // uint16
	sigDataCertSize  = 0x82 // uint32
	sigDataCert      = 0x86

	certTypeQEReport = 6
	certTypePCKChain = 5

	qeReportSize       = 0x180
	qeReportSigSize    = 0x40
	qeCertAuthLen      = qeReportSize + qeReportSigSize // uint16
	qeCertAuthData     = qeCertAuthLen + 2
	qeReportCPUSvn     = 0x000 // 16
	qeReportMiscSelect = 0x010 // uint32
	qeReportAttributes = 0x030 // 16
	qeReportMrEnclave  = 0x040 // 32
	qeReportMrSigner   = 0x080 // 32
	qeReportIsvProdID  = 0x100 // uint16
	qeReportIsvSvn     = 0x102 // uint16
	qeReportReportData = 0x140 // 64

	// maxQuoteSize caps input: real quotes are about 5 KiB.
	maxQuoteSize = 64 << 10
)

// Quote is a parsed TDX quote (v4, or v5 with a TDX 1.0 or 1.5 body). Its
// byte slices alias the raw input; nothing in it has been verified.
type Quote struct {
	Raw         []byte
	Version     int // 4 or 5
	BodyType    int // BodyTypeTDX10 or BodyTypeTDX15 (v4 quotes: BodyTypeTDX10)
	PCESVN      uint16
	QEVendorID  []byte
	SignedBytes []byte // header and body: what the attestation key signs
	Body        []byte // the TD report body (584 or 648 bytes)

	Signature    []byte // 64 bytes r||s over SignedBytes
	AttestKey    []byte // 64 bytes X||Y, P-256
	QEReport     []byte // 384-byte SGX report of the quoting enclave
	QEReportSig  []byte // 64 bytes r||s by the PCK key over QEReport
	QEAuthData   []byte
	PCKChainPEM  []byte
	PCKChain     []*x509.Certificate // leaf, intermediate, root
	SignedLength int                 // offset of the signature-data length field
	Padding      int                 // zero bytes after the signature data
}

func (q *Quote) field(off, n int) []byte { return q.Body[off : off+n] }

// TeeTCBSVN returns TEE_TCB_SVN.
func (q *Quote) TeeTCBSVN() []byte { return q.field(bodyTeeTcbSvn, svnSize) }

// TDAttributes returns TD_ATTRIBUTES (8 bytes, little endian bit field).
func (q *Quote) TDAttributes() []byte { return q.field(bodyTdAttributes, 8) }

// ReportData returns REPORTDATA.
func (q *Quote) ReportData() []byte { return q.field(bodyReportData, reportDataSize) }

// MRSignerSeam returns MRSIGNERSEAM.
func (q *Quote) MRSignerSeam() []byte { return q.field(bodyMrSignerSeam, measurementLen) }

// SeamAttributes returns SEAMATTRIBUTES.
func (q *Quote) SeamAttributes() []byte { return q.field(bodySeamAttributes, 8) }

// Debug reports whether TD_ATTRIBUTES.TUD.DEBUG (bit 0) is set.
func (q *Quote) Debug() bool { return q.TDAttributes()[0]&1 != 0 }

func parseErr(format string, args ...any) error {
	return &check.ParseError{What: "tdx quote", Err: fmt.Errorf(format, args...)}
}

func u16(b []byte, off int) int { return int(binary.LittleEndian.Uint16(b[off:])) }
func u32(b []byte, off int) int { return int(binary.LittleEndian.Uint32(b[off:])) }

// ParseQuote parses a raw TDX quote, v4 or v5. It checks structure only:
// every length field must match the bytes present exactly (only zero
// padding may follow the signature data), the key type must be ECDSA P-256, the certification data must be a
// QE report with a PEM PCK chain of exactly three certificates in canonical
// PEM encoding. Errors are *check.ParseError.
func ParseQuote(raw []byte) (*Quote, error) {
	if len(raw) > maxQuoteSize {
		return nil, parseErr("quote is %d bytes, more than the %d accepted", len(raw), maxQuoteSize)
	}
	if len(raw) < headerSize+2 {
		return nil, parseErr("quote is %d bytes, shorter than a header", len(raw))
	}
	q := &Quote{Raw: raw, Version: u16(raw, hdrVersion)}
	if kt := u16(raw, hdrAttestKeyType); kt != attestKeyTypeECDSAP256 {
		return nil, parseErr("attestation key type %d, want %d (ECDSA P-256)", kt, attestKeyTypeECDSAP256)
	}
	if tt := u32(raw, hdrTeeType); tt != teeTypeTDX {
		return nil, parseErr("tee type %#x, want %#x (TDX)", tt, teeTypeTDX)
	}
	q.PCESVN = uint16(u16(raw, hdrPceSvn))
	q.QEVendorID = raw[hdrQeVendorID : hdrQeVendorID+hdrQeVendorIDSize]
	var bodyStart, bodySize int
	switch q.Version {
	case 4:
		bodyStart, bodySize, q.BodyType = headerSize, bodySizeTDX10, BodyTypeTDX10
	case 5:
		if len(raw) < v5Body {
			return nil, parseErr("v5 quote is %d bytes, shorter than its body descriptor", len(raw))
		}
		q.BodyType, bodySize, bodyStart = u16(raw, v5DescType), u32(raw, v5DescSize), v5Body
		switch {
		case q.BodyType == BodyTypeTDX10 && bodySize == bodySizeTDX10:
		case q.BodyType == BodyTypeTDX15 && bodySize == bodySizeTDX15:
		default:
			return nil, parseErr("v5 body type %d with size %d is not a TDX 1.0 (2, %d) or TDX 1.5 (3, %d) body",
				q.BodyType, bodySize, bodySizeTDX10, bodySizeTDX15)
		}
	default:
		return nil, parseErr("quote version %d, want 4 or 5", q.Version)
	}
	bodyEnd := bodyStart + bodySize
	if len(raw) < bodyEnd+4 {
		return nil, parseErr("quote is %d bytes, truncated in the body (needs %d)", len(raw), bodyEnd+4)
	}
	q.Body = raw[bodyStart:bodyEnd]
	q.SignedBytes = raw[:bodyEnd]
	q.SignedLength = bodyEnd
	sigLen := u32(raw, bodyEnd)
	sd := raw[bodyEnd+4:]
	if sigLen > len(sd) {
		return nil, parseErr("signature data length field is %d, but only %d bytes follow", sigLen, len(sd))
	}
	// Quote buffers (configfs-tsm, the QGS) are often larger than the quote
	// and come back zero-filled after it: accept trailing zeros, nothing else.
	sd, pad := sd[:sigLen], sd[sigLen:]
	for i, c := range pad {
		if c != 0 {
			return nil, parseErr("non-zero byte %#02x at offset %d after the end of the signature data", c, len(raw)-len(pad)+i)
		}
	}
	q.Padding = len(pad)
	if len(sd) < sigDataCert {
		return nil, parseErr("signature data is %d bytes, shorter than %d", len(sd), sigDataCert)
	}
	q.Signature = sd[sigDataSignature:sigDataAttestKey]
	q.AttestKey = sd[sigDataAttestKey:sigDataCertType]
	if ct := u16(sd, sigDataCertType); ct != certTypeQEReport {
		return nil, parseErr("certification data type %d, want %d (QE report)", ct, certTypeQEReport)
	}
	cd := sd[sigDataCert:]
	if cs := u32(sd, sigDataCertSize); cs != len(cd) {
		return nil, parseErr("certification data size field is %d, but %d bytes follow", cs, len(cd))
	}
	if len(cd) < qeCertAuthData {
		return nil, parseErr("QE report certification data is %d bytes, shorter than %d", len(cd), qeCertAuthData)
	}
	q.QEReport = cd[:qeReportSize]
	q.QEReportSig = cd[qeReportSize:qeCertAuthLen]
	authLen := u16(cd, qeCertAuthLen)
	chainHdr := qeCertAuthData + authLen
	if len(cd) < chainHdr+6 {
		return nil, parseErr("QE auth data length %d runs past the certification data", authLen)
	}
	q.QEAuthData = cd[qeCertAuthData:chainHdr]
	if ct := u16(cd, chainHdr); ct != certTypePCKChain {
		return nil, parseErr("inner certification data type %d, want %d (PCK certificate chain)", ct, certTypePCKChain)
	}
	q.PCKChainPEM = cd[chainHdr+6:]
	if cs := u32(cd, chainHdr+2); cs != len(q.PCKChainPEM) {
		return nil, parseErr("PCK certificate chain size field is %d, but %d bytes follow", cs, len(q.PCKChainPEM))
	}
	chain, err := parsePEMChain(q.PCKChainPEM, 3)
	if err != nil {
		return nil, parseErr("PCK certificate chain: %v", err)
	}
	q.PCKChain = chain
	return q, nil
}

// parsePEMChain parses exactly n PEM CERTIFICATE blocks. The input must be the
// canonical PEM encoding of those blocks (as encoding/pem writes it), optionally
// followed by one NUL byte (quote generators NUL-terminate the chain): no
// headers, no other line lengths, no bytes outside the blocks. Without this,
// bytes of the quote that no signature covers (base64 padding bits, line
// breaks, text between blocks) could be changed without detection.
func parsePEMChain(b []byte, n int) ([]*x509.Certificate, error) {
	rest := bytes.TrimSuffix(b, []byte{0})
	var canon []byte
	var certs []*x509.Certificate
	for len(rest) > 0 {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, errors.New("not a PEM certificate block")
		}
		if blk.Type != "CERTIFICATE" || len(blk.Headers) != 0 {
			return nil, fmt.Errorf("PEM block of type %q with %d headers, want a plain CERTIFICATE", blk.Type, len(blk.Headers))
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(certs), err)
		}
		certs = append(certs, c)
		canon = append(canon, pem.EncodeToMemory(blk)...)
		if len(certs) > n {
			break
		}
	}
	if len(certs) != n {
		return nil, fmt.Errorf("%d certificates, want %d", len(certs), n)
	}
	if !bytes.Equal(canon, bytes.TrimSuffix(b, []byte{0})) {
		return nil, errors.New("not in canonical PEM encoding (extra text, line breaks or padding bits)")
	}
	return certs, nil
}
