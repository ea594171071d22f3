package tpm

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	_ "crypto/sha256" // registers crypto.SHA256
	_ "crypto/sha512" // registers crypto.SHA384, crypto.SHA512
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/sparkinfer/cc/attest/check"
)

// HCL report layout (see the package documentation).
const (
	hclSignature      = 0x414c4348 // "HCLA" read as a little-endian uint32
	hclHeaderSize     = 32
	hwReportOffset    = hclHeaderSize
	hwReportAreaSize  = 1184 // sized for an SNP report; a TD report is padded
	tdReportSize      = 1024
	snpReportSize     = 1184
	reqDataOffset     = hwReportOffset + hwReportAreaSize // 0x4C0
	reqDataFixedSize  = 20
	varDataOffset     = reqDataOffset + reqDataFixedSize // 0x4D4 = 1236
	tdReportDataOff   = 128                              // REPORTDATA within TDREPORT (after REPORTMACSTRUCT's header fields)
	snpReportDataOff  = 0x50                             // REPORT_DATA within an SNP report
	reportDataSize    = 64
	maxVariableData   = 64 << 10
	reportTypeSNP     = 2
	reportTypeTDX     = 4
	akKeyID           = "HCLAkPub"
	maxRSAModulusBits = 8192
)

// HCLReport is a parsed, not yet verified, HCL attestation report.
type HCLReport struct {
	raw []byte
	// Version and RequestType are the header's fields, as given.
	Version, RequestType uint32
	// HardwareType is "tdx" or "snp".
	HardwareType string
	// HashType names the hash of the variable data in REPORTDATA.
	HashType string
	hash     crypto.Hash
	hw       []byte // the hardware report (1024 or 1184 bytes)
	varData  []byte
	claims   runtimeClaims
	ak       *rsa.PublicKey
}

// runtimeClaims is the variable data's JSON.
type runtimeClaims struct {
	Keys            []jwk           `json:"keys"`
	VMConfiguration json.RawMessage `json:"vm-configuration"`
	UserData        string          `json:"user-data"`
}

type jwk struct {
	Kid    string   `json:"kid"`
	Kty    string   `json:"kty"`
	KeyOps []string `json:"key_ops"`
	N      string   `json:"n"`
	E      string   `json:"e"`
}

// HardwareReport returns a copy of the embedded hardware report: a TD report
// (1024 bytes) or an SNP attestation report (1184 bytes, which
// attest/sevsnp can verify).
func (h *HCLReport) HardwareReport() []byte { return bytes.Clone(h.hw) }

// VariableData returns a copy of the runtime-claims JSON bytes.
func (h *HCLReport) VariableData() []byte { return bytes.Clone(h.varData) }

// AttestationKey returns the vTPM attestation key the report binds.
func (h *HCLReport) AttestationKey() *rsa.PublicKey { return h.ak }

// hwReportData is the REPORTDATA field of the embedded hardware report.
func (h *HCLReport) hwReportData() []byte {
	if h.HardwareType == "tdx" {
		return h.hw[tdReportDataOff : tdReportDataOff+reportDataSize]
	}
	return h.hw[snpReportDataOff : snpReportDataOff+reportDataSize]
}

// varDataDigest is H(variable data) with the header's hash.
func (h *HCLReport) varDataDigest() []byte {
	d := h.hash.New()
	d.Write(h.varData)
	return d.Sum(nil)
}

func hclErr(format string, args ...any) error {
	return &check.ParseError{What: "hcl report", Err: fmt.Errorf(format, args...)}
}

// ParseHCLReport parses an HCL report strictly (layout in the package
// documentation). Errors are *check.ParseError.
func ParseHCLReport(b []byte) (*HCLReport, error) {
	if len(b) < varDataOffset {
		return nil, hclErr("report is %d bytes, shorter than the fixed part (%d)", len(b), varDataOffset)
	}
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	if sig := u32(0); sig != hclSignature {
		return nil, hclErr("signature %q is not \"HCLA\"", b[0:4])
	}
	h := &HCLReport{Version: u32(4), RequestType: u32(12)}
	if h.Version != 1 && h.Version != 2 {
		return nil, hclErr("unknown header version %d", h.Version)
	}
	if status := u32(16); status != 0 {
		return nil, hclErr("header status %d is not success (0)", status)
	}
	for off := 20; off < hclHeaderSize; off++ {
		if b[off] != 0 {
			return nil, hclErr("reserved header byte 0x%x is 0x%02x, must be zero", off, b[off])
		}
	}
	dataSize, reqVersion, reportType, hashType, varSize := u32(reqDataOffset), u32(reqDataOffset+4), u32(reqDataOffset+8), u32(reqDataOffset+12), u32(reqDataOffset+16)
	if reqVersion != 1 {
		return nil, hclErr("unknown request data version %d (want 1)", reqVersion)
	}
	if varSize > maxVariableData {
		return nil, hclErr("variable data size %d exceeds %d", varSize, maxVariableData)
	}
	if dataSize != reqDataFixedSize+varSize {
		return nil, hclErr("request data size %d is not %d + variable data size %d", dataSize, reqDataFixedSize, varSize)
	}
	reportSize := uint64(u32(8))
	if want := uint64(reqDataOffset) + uint64(dataSize); reportSize != want {
		return nil, hclErr("report size %d is not %d (header, hardware report area and request data)", reportSize, want)
	}
	if reportSize > uint64(len(b)) {
		return nil, hclErr("report size %d exceeds the %d bytes given", reportSize, len(b))
	}
	for i := int(reportSize); i < len(b); i++ {
		if b[i] != 0 {
			return nil, hclErr("byte 0x%x after the report (size %d) is 0x%02x, must be zero", i, reportSize, b[i])
		}
	}
	switch reportType {
	case reportTypeTDX:
		h.HardwareType = "tdx"
		h.hw = b[hwReportOffset : hwReportOffset+tdReportSize]
		for i := hwReportOffset + tdReportSize; i < reqDataOffset; i++ {
			if b[i] != 0 {
				return nil, hclErr("td report padding byte 0x%x is 0x%02x, must be zero", i, b[i])
			}
		}
	case reportTypeSNP:
		h.HardwareType = "snp"
		h.hw = b[hwReportOffset : hwReportOffset+snpReportSize]
	default:
		return nil, hclErr("unknown hardware report type %d (want 2 snp or 4 tdx)", reportType)
	}
	switch hashType {
	case 1:
		h.HashType, h.hash = "sha256", crypto.SHA256
	case 2:
		h.HashType, h.hash = "sha384", crypto.SHA384
	case 3:
		h.HashType, h.hash = "sha512", crypto.SHA512
	default:
		return nil, hclErr("unknown report data hash type %d", hashType)
	}
	h.varData = b[varDataOffset : varDataOffset+int(varSize)]
	dec := json.NewDecoder(bytes.NewReader(h.varData))
	if err := dec.Decode(&h.claims); err != nil {
		return nil, hclErr("runtime claims json: %v", err)
	}
	if dec.More() {
		return nil, hclErr("runtime claims json: trailing data after the object")
	}
	ak, err := h.claims.attestationKey()
	if err != nil {
		return nil, hclErr("%v", err)
	}
	h.ak = ak
	h.raw = bytes.Clone(b[:reportSize])
	h.hw = bytes.Clone(h.hw)
	h.varData = bytes.Clone(h.varData)
	return h, nil
}

// attestationKey finds the single "HCLAkPub" key and decodes it.
func (rc *runtimeClaims) attestationKey() (*rsa.PublicKey, error) {
	var found *jwk
	for i := range rc.Keys {
		if rc.Keys[i].Kid == akKeyID {
			if found != nil {
				return nil, fmt.Errorf("runtime claims hold more than one %q key", akKeyID)
			}
			found = &rc.Keys[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("runtime claims hold no %q key", akKeyID)
	}
	if found.Kty != "RSA" {
		return nil, fmt.Errorf("%s key type %q is not \"RSA\"", akKeyID, found.Kty)
	}
	n, err := base64.RawURLEncoding.DecodeString(found.N)
	if err != nil {
		return nil, fmt.Errorf("%s modulus: %v", akKeyID, err)
	}
	e, err := base64.RawURLEncoding.DecodeString(found.E)
	if err != nil {
		return nil, fmt.Errorf("%s exponent: %v", akKeyID, err)
	}
	nb := new(big.Int).SetBytes(n)
	if nb.BitLen() < 2048 || nb.BitLen() > maxRSAModulusBits {
		return nil, fmt.Errorf("%s modulus is %d bits, want 2048 to %d", akKeyID, nb.BitLen(), maxRSAModulusBits)
	}
	if len(e) == 0 || len(e) > 4 || e[0] == 0 {
		return nil, fmt.Errorf("%s exponent %q is not a canonical 1 to 4 byte value", akKeyID, found.E)
	}
	var ei int
	for _, c := range e {
		ei = ei<<8 | int(c)
	}
	if ei < 3 || ei%2 == 0 {
		return nil, fmt.Errorf("%s exponent %d is not an odd number >= 3", akKeyID, ei)
	}
	return &rsa.PublicKey{N: nb, E: ei}, nil
}
