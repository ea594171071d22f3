// Package sim is a software TEE and GPU for machines without confidential
// computing hardware: it mints and verifies "quotes" and GPU attestation
// reports in the project's own simple binary formats, signed with Ed25519 by
// a simulation root.
//
// # Simulated evidence proves nothing
//
// The default simulation root, [PublicRootSeed], is published in this source
// file on purpose: anybody can sign anything with it. A verifier that accepts
// simulated evidence learns only that the evidence is well formed. That is the
// point: the same bundle format, statement binding, nonce derivation and
// policy checks can be exercised end to end on a laptop or in CI. The package
// attest marks every claim it derives from simulated evidence as SIMULATED,
// and the policy package rejects it unless the policy says
// "allow_simulated": true.
//
// # Formats
//
// Both formats are fixed-size, big-endian, and signed with Ed25519 over a
// domain-separation prefix followed by every byte before the signature:
//
//	sim quote (396 bytes)                    sim GPU report (236 bytes)
//	  0  magic "SPKSIMQ1"        8             0  magic "SPKSIMG1"      8
//	  8  version = 1             2             8  version = 1           2
//	 10  flags (bit 0: debug)    2            10  flags (bit 0: CC on,  2
//	 12  MRTD                   48                bit 1: dev tools on)
//	 60  RTMR0..RTMR3        4x48            12  nonce                 32
//	252  TEE TCB SVN            16            44  measurement           48
//	268  REPORTDATA             64            92  driver version        16 (ASCII, NUL padded)
//	332  Ed25519 signature      64           108  VBIOS version         16 (ASCII, NUL padded)
//	                                         124  serial number         16 (ASCII, NUL padded)
//	                                         140  FWID                  32
//	                                         172  Ed25519 signature     64
//
// The signed message is [QuoteContext] (or [GPUReportContext]) followed by
// the bytes at offsets 0 up to the signature. Unknown flag bits, a bad magic,
// a wrong version or a wrong length are parse errors; a bad signature is a
// verification error (see package attest/check).
//
// # What is checked
//
// [VerifyQuote] and [VerifyGPUReport] check the structure and the signature
// under the given root public key. They do not judge the values (debug,
// CC mode, measurements, nonce): those are returned as claims for the caller
// (package attest) and the policy to appraise.
package sim

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sparkinfer/cc/attest/check"
)

// PublicRootSeed is the Ed25519 seed of the project's public simulation root.
// It is deliberately public: it is SHA-256 of the ASCII string
// "sparkinfer simulation root v1: public key material, proves nothing".
// Never use it, or any key derived from it, for anything but simulation.
var PublicRootSeed = sha256.Sum256([]byte("sparkinfer simulation root v1: public key material, proves nothing"))

// PublicRootKey returns the public simulation root's private key (public
// knowledge; see [PublicRootSeed]).
func PublicRootKey() ed25519.PrivateKey { return ed25519.NewKeyFromSeed(PublicRootSeed[:]) }

// PublicRoot returns the public simulation root's public key, the trust
// anchor a verifier uses for simulated evidence unless told otherwise.
func PublicRoot() ed25519.PublicKey { return PublicRootKey().Public().(ed25519.PublicKey) }

// Domain-separation prefixes of the two signed formats.
const (
	QuoteContext     = "sparkinfer sim quote v1\x00"
	GPUReportContext = "sparkinfer sim gpu report v1\x00"
)

// Layout of the sim quote.
const (
	QuoteMagic      = "SPKSIMQ1"
	quoteVersionOff = 8
	quoteFlagsOff   = 10
	QuoteMRTDOff    = 12
	QuoteRTMROff    = 60
	QuoteSVNOff     = 252
	QuoteReportData = 268
	QuoteSigOff     = 332
	QuoteSize       = 396

	QuoteFlagDebug = 1 << 0
)

// Layout of the sim GPU report.
const (
	GPUMagic          = "SPKSIMG1"
	gpuVersionOff     = 8
	gpuFlagsOff       = 10
	GPUNonceOff       = 12
	GPUMeasurementOff = 44
	GPUDriverOff      = 92
	GPUVBIOSOff       = 108
	GPUSerialOff      = 124
	GPUFWIDOff        = 140
	GPUSigOff         = 172
	GPUReportSize     = 236

	GPUFlagCC       = 1 << 0
	GPUFlagDevTools = 1 << 1
)

// Quote is the content of a sim quote.
type Quote struct {
	Debug      bool
	MRTD       [48]byte
	RTMR       [4][48]byte
	TEETCBSVN  [16]byte
	ReportData [64]byte
}

// GPUReport is the content of a sim GPU report.
type GPUReport struct {
	CCEnabled       bool
	DevToolsEnabled bool
	Nonce           [32]byte
	Measurement     [48]byte
	DriverVersion   string // at most 16 ASCII bytes
	VBIOSVersion    string // at most 16 ASCII bytes
	Serial          string // at most 16 ASCII bytes
	FWID            [32]byte
}

// SignQuote encodes q and signs it with key.
func SignQuote(key ed25519.PrivateKey, q *Quote) []byte {
	b := make([]byte, QuoteSigOff, QuoteSize)
	copy(b, QuoteMagic)
	binary.BigEndian.PutUint16(b[quoteVersionOff:], 1)
	var flags uint16
	if q.Debug {
		flags |= QuoteFlagDebug
	}
	binary.BigEndian.PutUint16(b[quoteFlagsOff:], flags)
	copy(b[QuoteMRTDOff:], q.MRTD[:])
	for i := range q.RTMR {
		copy(b[QuoteRTMROff+48*i:], q.RTMR[i][:])
	}
	copy(b[QuoteSVNOff:], q.TEETCBSVN[:])
	copy(b[QuoteReportData:], q.ReportData[:])
	return append(b, ed25519.Sign(key, append([]byte(QuoteContext), b...))...)
}

// SignGPUReport encodes r and signs it with key. It returns an error if a
// version string does not fit its 16-byte field or is not printable ASCII.
func SignGPUReport(key ed25519.PrivateKey, r *GPUReport) ([]byte, error) {
	b := make([]byte, GPUSigOff, GPUReportSize)
	copy(b, GPUMagic)
	binary.BigEndian.PutUint16(b[gpuVersionOff:], 1)
	var flags uint16
	if r.CCEnabled {
		flags |= GPUFlagCC
	}
	if r.DevToolsEnabled {
		flags |= GPUFlagDevTools
	}
	binary.BigEndian.PutUint16(b[gpuFlagsOff:], flags)
	copy(b[GPUNonceOff:], r.Nonce[:])
	copy(b[GPUMeasurementOff:], r.Measurement[:])
	for _, f := range []struct {
		name, v string
		off     int
	}{{"driver version", r.DriverVersion, GPUDriverOff}, {"vbios version", r.VBIOSVersion, GPUVBIOSOff}, {"serial", r.Serial, GPUSerialOff}} {
		if len(f.v) > 16 || !printable(f.v) {
			return nil, fmt.Errorf("sim gpu report: %s %q is not at most 16 printable ascii bytes", f.name, f.v)
		}
		copy(b[f.off:], f.v)
	}
	copy(b[GPUFWIDOff:], r.FWID[:])
	return append(b, ed25519.Sign(key, append([]byte(GPUReportContext), b...))...), nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ParseQuote checks the structure of a sim quote and decodes it without
// checking its signature.
func ParseQuote(b []byte) (*Quote, error) {
	if len(b) != QuoteSize {
		return nil, &check.ParseError{What: "sim quote", Err: fmt.Errorf("length %d, want %d", len(b), QuoteSize)}
	}
	if string(b[:8]) != QuoteMagic {
		return nil, &check.ParseError{What: "sim quote", Err: fmt.Errorf("magic %q, want %q", b[:8], QuoteMagic)}
	}
	if v := binary.BigEndian.Uint16(b[quoteVersionOff:]); v != 1 {
		return nil, &check.ParseError{What: "sim quote", Err: fmt.Errorf("version %d, want 1", v)}
	}
	flags := binary.BigEndian.Uint16(b[quoteFlagsOff:])
	if flags&^QuoteFlagDebug != 0 {
		return nil, &check.ParseError{What: "sim quote", Err: fmt.Errorf("unknown flag bits %#04x", flags)}
	}
	q := &Quote{Debug: flags&QuoteFlagDebug != 0}
	copy(q.MRTD[:], b[QuoteMRTDOff:])
	for i := range q.RTMR {
		copy(q.RTMR[i][:], b[QuoteRTMROff+48*i:])
	}
	copy(q.TEETCBSVN[:], b[QuoteSVNOff:])
	copy(q.ReportData[:], b[QuoteReportData:])
	return q, nil
}

// ParseGPUReport checks the structure of a sim GPU report and decodes it
// without checking its signature.
func ParseGPUReport(b []byte) (*GPUReport, error) {
	if len(b) != GPUReportSize {
		return nil, &check.ParseError{What: "sim gpu report", Err: fmt.Errorf("length %d, want %d", len(b), GPUReportSize)}
	}
	if string(b[:8]) != GPUMagic {
		return nil, &check.ParseError{What: "sim gpu report", Err: fmt.Errorf("magic %q, want %q", b[:8], GPUMagic)}
	}
	if v := binary.BigEndian.Uint16(b[gpuVersionOff:]); v != 1 {
		return nil, &check.ParseError{What: "sim gpu report", Err: fmt.Errorf("version %d, want 1", v)}
	}
	flags := binary.BigEndian.Uint16(b[gpuFlagsOff:])
	if flags&^(GPUFlagCC|GPUFlagDevTools) != 0 {
		return nil, &check.ParseError{What: "sim gpu report", Err: fmt.Errorf("unknown flag bits %#04x", flags)}
	}
	r := &GPUReport{CCEnabled: flags&GPUFlagCC != 0, DevToolsEnabled: flags&GPUFlagDevTools != 0}
	copy(r.Nonce[:], b[GPUNonceOff:])
	copy(r.Measurement[:], b[GPUMeasurementOff:])
	var err error
	if r.DriverVersion, err = field(b[GPUDriverOff:GPUDriverOff+16], "driver version"); err != nil {
		return nil, err
	}
	if r.VBIOSVersion, err = field(b[GPUVBIOSOff:GPUVBIOSOff+16], "vbios version"); err != nil {
		return nil, err
	}
	if r.Serial, err = field(b[GPUSerialOff:GPUSerialOff+16], "serial"); err != nil {
		return nil, err
	}
	copy(r.FWID[:], b[GPUFWIDOff:])
	return r, nil
}

// field decodes a NUL-padded ASCII field; the padding must be all NULs.
func field(b []byte, name string) (string, error) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		n = len(b)
	}
	s := string(b[:n])
	if !printable(s) || bytes.ContainsFunc(b[n:], func(r rune) bool { return r != 0 }) {
		return "", &check.ParseError{What: "sim gpu report " + name, Err: fmt.Errorf("%q is not nul-padded printable ascii", b)}
	}
	return s, nil
}

// ErrBadSignature is wrapped by the *check.VerifyError a bad signature gives.
var ErrBadSignature = errors.New("ed25519 signature does not verify under the simulation root")

// VerifyQuote parses a sim quote and checks its signature under root.
// Errors are *check.ParseError (unusable input) or *check.VerifyError with
// Check "sim.quote.signature".
func VerifyQuote(b []byte, root ed25519.PublicKey) (*Quote, error) {
	q, err := ParseQuote(b)
	if err != nil {
		return nil, err
	}
	if len(root) != ed25519.PublicKeySize {
		return nil, &check.VerifyError{Check: "sim.quote.signature", Err: errors.New("no simulation root configured")}
	}
	if !ed25519.Verify(root, append([]byte(QuoteContext), b[:QuoteSigOff]...), b[QuoteSigOff:]) {
		return nil, &check.VerifyError{Check: "sim.quote.signature", Err: ErrBadSignature}
	}
	return q, nil
}

// VerifyGPUReport parses a sim GPU report and checks its signature under
// root. Errors are *check.ParseError or *check.VerifyError with Check
// "sim.gpu.signature".
func VerifyGPUReport(b []byte, root ed25519.PublicKey) (*GPUReport, error) {
	r, err := ParseGPUReport(b)
	if err != nil {
		return nil, err
	}
	if len(root) != ed25519.PublicKeySize {
		return nil, &check.VerifyError{Check: "sim.gpu.signature", Err: errors.New("no simulation root configured")}
	}
	if !ed25519.Verify(root, append([]byte(GPUReportContext), b[:GPUSigOff]...), b[GPUSigOff:]) {
		return nil, &check.VerifyError{Check: "sim.gpu.signature", Err: ErrBadSignature}
	}
	return r, nil
}
