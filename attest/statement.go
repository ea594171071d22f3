package attest

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

// StatementVersion is the version string of the statement format this
// package writes and reads.
const StatementVersion = "sparkinfer-statement/v1"

// MaxStatementSize caps the statement's encoded size.
const MaxStatementSize = 64 << 10

// Domain-separation labels, each followed by one 0x00 byte in the hashes.
const (
	reportDataLabel = "sparkinfer attestation v1"
	gpuNonceLabel   = "sparkinfer gpu nonce v1"
)

// Statement is everything the appliance vouches for in one boot (and, for
// fresh evidence, one client request). Its JSON encoding is canonical: the
// fields in the order below, no insignificant white space, no trailing
// newline, as written by [Statement.Marshal]. [ParseStatement] accepts only
// that encoding, so one statement has exactly one byte string, and a
// verifier hashes the bytes it received.
//
// Digests are lowercase hex SHA-256 (64 characters); keys and nonces are
// standard base64 (keys) or lowercase hex (nonces), as documented per field.
type Statement struct {
	// Version is StatementVersion.
	Version string `json:"version"`
	// SourceHash is the reproducible source hash the binary was built from
	// (SHA-256 over the manifest of tracked files; see package reproducible).
	SourceHash string `json:"source_hash"`
	// BinaryDigest is SHA-256 of the running appliance binary.
	BinaryDigest string `json:"binary_digest"`
	// KernelsDigest is SHA-256 of the loaded CUDA kernels library, or 64
	// zeros when no kernels library is loaded (CPU reference engine).
	KernelsDigest string `json:"kernels_digest"`
	// ModelDigest is SHA-256 of the served GGUF file.
	ModelDigest string `json:"model_digest"`
	// HPKEKeyConfigs are the HPKE public keys requests are encrypted to,
	// in the key configuration shape of RFC 9458 (Oblivious HTTP).
	HPKEKeyConfigs []HPKEKeyConfig `json:"hpke_key_configs"`
	// ReceiptSigningKey is the Ed25519 public key (32 bytes, base64) that
	// signs eval receipts.
	ReceiptSigningKey string `json:"receipt_signing_key"`
	// BootNonce is 32 random bytes (hex) drawn once per boot; together with
	// the keys it determines the GPU report nonce ([Statement.GPUNonce]).
	BootNonce string `json:"boot_nonce"`
	// GPUEvidenceDigests holds, per GPU in bundle order, SHA-256 of that
	// GPU's raw attestation report bytes. Empty (not null) without GPUs.
	GPUEvidenceDigests []string `json:"gpu_evidence_digests"`
	// LicenseID is the id of the license the appliance runs under, or "".
	LicenseID string `json:"license_id"`
	// BootTime is when the appliance booted, RFC 3339 UTC with seconds.
	BootTime string `json:"boot_time"`
	// IssuedAt is when this statement was written, RFC 3339 UTC with
	// seconds; the policy's max_evidence_age is measured from it.
	IssuedAt string `json:"issued_at"`
	// Nonce is the client's nonce (hex, 16 to 64 bytes) for fresh evidence,
	// or "" for boot-time evidence.
	Nonce string `json:"nonce"`
}

// HPKEKeyConfig is one HPKE public key and the suites it accepts
// (RFC 9458, section 3: key_id, kem_id, public key, symmetric algorithms).
type HPKEKeyConfig struct {
	KeyID     uint8           `json:"key_id"`
	KEMID     uint16          `json:"kem_id"`
	PublicKey string          `json:"public_key"` // standard base64
	Suites    []SymmetricAlgs `json:"suites"`
}

// SymmetricAlgs is one (KDF, AEAD) pair of an HPKE key configuration.
type SymmetricAlgs struct {
	KDFID  uint16 `json:"kdf_id"`
	AEADID uint16 `json:"aead_id"`
}

// Marshal returns the canonical encoding of s. It fails if s is not valid
// (see [Statement.Validate]).
func (s *Statement) Marshal() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s.marshal()
}

func (s *Statement) marshal() ([]byte, error) {
	c := *s
	if c.HPKEKeyConfigs == nil {
		c.HPKEKeyConfigs = []HPKEKeyConfig{}
	}
	if c.GPUEvidenceDigests == nil {
		c.GPUEvidenceDigests = []string{}
	}
	for i := range c.HPKEKeyConfigs {
		if c.HPKEKeyConfigs[i].Suites == nil {
			c.HPKEKeyConfigs[i].Suites = []SymmetricAlgs{}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Validate checks every field's syntax. It says nothing about whether the
// values are acceptable: that is the policy's job.
func (s *Statement) Validate() error {
	bad := func(field string, format string, args ...any) error {
		return &check.ParseError{What: "statement field " + field, Err: fmt.Errorf(format, args...)}
	}
	if s.Version != StatementVersion {
		return bad("version", "%q, want %q", s.Version, StatementVersion)
	}
	for _, d := range []struct{ name, v string }{
		{"source_hash", s.SourceHash}, {"binary_digest", s.BinaryDigest},
		{"kernels_digest", s.KernelsDigest}, {"model_digest", s.ModelDigest},
	} {
		if !isHex(d.v, 32) {
			return bad(d.name, "%q is not 64 lowercase hex digits", d.v)
		}
	}
	if len(s.HPKEKeyConfigs) == 0 || len(s.HPKEKeyConfigs) > 16 {
		return bad("hpke_key_configs", "%d configs, want 1 to 16", len(s.HPKEKeyConfigs))
	}
	for i, k := range s.HPKEKeyConfigs {
		pk, err := base64.StdEncoding.Strict().DecodeString(k.PublicKey)
		if err != nil || len(pk) == 0 || len(pk) > 4096 {
			return bad(fmt.Sprintf("hpke_key_configs[%d].public_key", i), "%q is not 1 to 4096 bytes of standard base64", k.PublicKey)
		}
		if len(k.Suites) == 0 || len(k.Suites) > 16 {
			return bad(fmt.Sprintf("hpke_key_configs[%d].suites", i), "%d suites, want 1 to 16", len(k.Suites))
		}
		for j := range i {
			if s.HPKEKeyConfigs[j].KeyID == k.KeyID {
				return bad(fmt.Sprintf("hpke_key_configs[%d].key_id", i), "%d repeats an earlier key id", k.KeyID)
			}
		}
	}
	if k, err := base64.StdEncoding.Strict().DecodeString(s.ReceiptSigningKey); err != nil || len(k) != 32 {
		return bad("receipt_signing_key", "%q is not a base64 ed25519 public key (32 bytes)", s.ReceiptSigningKey)
	}
	if !isHex(s.BootNonce, 32) {
		return bad("boot_nonce", "%q is not 32 bytes of lowercase hex", s.BootNonce)
	}
	if len(s.GPUEvidenceDigests) > MaxGPUs {
		return bad("gpu_evidence_digests", "%d digests, at most %d", len(s.GPUEvidenceDigests), MaxGPUs)
	}
	for i, d := range s.GPUEvidenceDigests {
		if !isHex(d, 32) {
			return bad(fmt.Sprintf("gpu_evidence_digests[%d]", i), "%q is not 64 lowercase hex digits", d)
		}
	}
	if len(s.LicenseID) > 128 || !printableASCII(s.LicenseID) {
		return bad("license_id", "%q is not at most 128 printable ascii characters", s.LicenseID)
	}
	for _, t := range []struct{ name, v string }{{"boot_time", s.BootTime}, {"issued_at", s.IssuedAt}} {
		if _, err := parseTime(t.v); err != nil {
			return bad(t.name, "%q is not an rfc 3339 utc time with seconds (e.g. 2026-01-02T03:04:05Z)", t.v)
		}
	}
	if s.Nonce != "" && !isHexRange(s.Nonce, MinNonceSize, MaxNonceSize) {
		return bad("nonce", "%q is not %d to %d bytes of lowercase hex", s.Nonce, MinNonceSize, MaxNonceSize)
	}
	return nil
}

// Client nonce size limits, in bytes.
const (
	MinNonceSize = 16
	MaxNonceSize = 64
)

// timeLayout is the one accepted time form: RFC 3339, UTC, whole seconds.
const timeLayout = "2006-01-02T15:04:05Z"

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, err
	}
	if t.Format(timeLayout) != s {
		return time.Time{}, fmt.Errorf("non-canonical time %q", s)
	}
	return t, nil
}

// FormatTime formats t in the statement's time form (UTC, whole seconds).
func FormatTime(t time.Time) string { return t.UTC().Truncate(time.Second).Format(timeLayout) }

func isHex(s string, n int) bool { return isHexRange(s, n, n) }

func isHexRange(s string, min, max int) bool {
	if len(s)%2 != 0 || len(s) < 2*min || len(s) > 2*max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ParseStatement decodes statement bytes. It accepts only the canonical
// encoding of a valid statement: unknown or missing fields, duplicate keys,
// white space, a different field order and trailing data are all
// *check.ParseError.
func ParseStatement(b []byte) (*Statement, error) {
	if len(b) > MaxStatementSize {
		return nil, &check.ParseError{What: "statement", Err: fmt.Errorf("%d bytes, at most %d", len(b), MaxStatementSize)}
	}
	var s Statement
	if err := decodeStrict(b, &s); err != nil {
		return nil, &check.ParseError{What: "statement", Err: err}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c, err := s.marshal()
	if err != nil {
		return nil, &check.ParseError{What: "statement", Err: err}
	}
	if !bytes.Equal(c, b) {
		return nil, &check.ParseError{What: "statement", Err: fmt.Errorf("not in canonical form (fields in schema order, no white space, no duplicate keys)")}
	}
	return &s, nil
}

// ReportData returns the 64 bytes the TEE evidence must carry for the
// statement bytes b: SHA-512("sparkinfer attestation v1" || 0x00 || b).
// b are the exact statement bytes, never a re-serialisation.
func ReportData(b []byte) [64]byte {
	h := sha512.New()
	h.Write([]byte(reportDataLabel))
	h.Write([]byte{0})
	h.Write(b)
	var out [64]byte
	h.Sum(out[:0])
	return out
}

// GPUNonce returns the 32-byte nonce each GPU attestation report of this
// boot is requested with. It binds the GPU evidence to the boot's keys and
// boot nonce (not to the client nonce, because GPU reports are taken once
// at boot):
//
//	SHA-256( "sparkinfer gpu nonce v1" || 0x00
//	         || u32(len(receipt key)) || receipt key (32 bytes)
//	         || u32(number of HPKE key configs)
//	         || for each config, in statement order:
//	              u8 key_id || u16 kem_id || u32(len(public key)) || public key
//	              || u32(number of suites) || for each suite: u16 kdf_id || u16 aead_id
//	         || boot nonce (32 bytes) )
//
// All integers are big-endian; keys are the base64-decoded bytes. The
// statement must be valid.
func (s *Statement) GPUNonce() ([32]byte, error) {
	if err := s.Validate(); err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	h.Write([]byte(gpuNonceLabel))
	h.Write([]byte{0})
	rk, _ := base64.StdEncoding.Strict().DecodeString(s.ReceiptSigningKey)
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(rk))))
	h.Write(rk)
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s.HPKEKeyConfigs))))
	for _, k := range s.HPKEKeyConfigs {
		pk, _ := base64.StdEncoding.Strict().DecodeString(k.PublicKey)
		var b []byte
		b = append(b, k.KeyID)
		b = binary.BigEndian.AppendUint16(b, k.KEMID)
		b = binary.BigEndian.AppendUint32(b, uint32(len(pk)))
		b = append(b, pk...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(k.Suites)))
		for _, su := range k.Suites {
			b = binary.BigEndian.AppendUint16(b, su.KDFID)
			b = binary.BigEndian.AppendUint16(b, su.AEADID)
		}
		h.Write(b)
	}
	bn, _ := hex.DecodeString(s.BootNonce)
	h.Write(bn)
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

// Digest returns lowercase hex SHA-256 of b, the digest form the statement uses.
func Digest(b []byte) string {
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}
