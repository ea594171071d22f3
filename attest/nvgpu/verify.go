package nvgpu

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha512"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sparkinfer/cc/attest/check"
)

// Arch is a GPU architecture.
type Arch string

const (
	Hopper    Arch = "hopper"
	Blackwell Arch = "blackwell"
)

// Mode is a tri-state device mode claim.
type Mode string

const (
	ModeOn      Mode = "on"
	ModeOff     Mode = "off"
	ModeUnknown Mode = "unknown" // the evidence does not say
)

// ClaimsVersion is the version of the Claims JSON schema.
const ClaimsVersion = 1

// Claims is what a verified GPU report says, for the policy engine. A claim
// is only as good as the checks in Checks: a skipped check means the claim
// it supports was not established.
type Claims struct {
	Version  int  `json:"version"`  // ClaimsVersion
	Arch     Arch `json:"arch"`     // hopper or blackwell, from the leaf certificate
	Verified bool `json:"verified"` // true when no check failed (skipped checks allowed)

	DriverVersion string `json:"driver_version"` // opaque field 3
	VBIOSVersion  string `json:"vbios_version"`  // opaque field 6, e.g. "96.00.9f.00.01"
	Nonce         string `json:"nonce"`          // hex of the request nonce (report bytes 4..35)
	NonceVerified bool   `json:"nonce_verified"` // equal to Options.Nonce

	Measurements []Measurement `json:"measurements"` // every block, by index

	FWID        string `json:"fwid"`                  // hex, from the leaf's DICE TcbInfo extension
	ReportFWID  string `json:"report_fwid,omitempty"` // hex, opaque field 20 when present (both real reports carry it)
	FWIDMatched bool   `json:"fwid_matched"`          // report FWID present and equal to FWID

	// CCMode and DevToolsMode: NVIDIA's opaque data (field ids 1..36) has no
	// CC-mode or dev-tools field, so both are "unknown" for every report seen
	// so far; the mode is reflected in the measurements, which the RIM
	// comparison pins.
	CCMode       Mode   `json:"cc_mode"`
	DevToolsMode Mode   `json:"devtools_mode"`
	FeatureFlag  string `json:"feature_flag,omitempty"` // opaque field 36: SPT, MPT or PPCIE (Blackwell)

	Opaque map[string]string `json:"opaque"` // every opaque field by NVIDIA's name

	Chain ChainInfo `json:"chain"`

	RIMs        []RIMResult     `json:"rims"`
	Measurement MeasurementInfo `json:"measurement_comparison"`
	AsOf        time.Time       `json:"as_of"` // certificate validity was checked at this time
	Checks      check.List      `json:"checks"`
}

// Measurement is one report measurement block.
type Measurement struct {
	Index     int    `json:"index"`      // 1-based SPDM block index
	ValueType uint8  `json:"value_type"` // DMTF value type
	Digest    string `json:"digest"`     // hex
}

// ChainInfo describes the device certificate chain.
type ChainInfo struct {
	Length      int    `json:"length"`
	LeafSubject string `json:"leaf_subject"`
	LeafSerial  string `json:"leaf_serial"` // decimal (NVIDIA's UEID)
	RootSubject string `json:"root_subject"`
}

// RIMResult is the outcome for one reference manifest.
type RIMResult struct {
	Kind        string    `json:"kind"` // "driver" or "vbios"
	ID          string    `json:"id"`
	Found       bool      `json:"found"`
	Version     string    `json:"version,omitempty"` // the RIM's colloquialVersion
	Signer      string    `json:"signer,omitempty"`
	SigningTime time.Time `json:"signing_time,omitzero"`
	Valid       bool      `json:"valid"` // signature, digest and chain verified
	Error       string    `json:"error,omitempty"`
}

// MeasurementInfo is the outcome of comparing the report with the RIMs.
// Indexes are 1-based report block indexes.
type MeasurementInfo struct {
	Compared   bool  `json:"compared"`
	Matched    []int `json:"matched"`
	Mismatched []int `json:"mismatched"`
	Missing    []int `json:"missing"`     // golden index active but no such block in the report
	NotCovered []int `json:"not_covered"` // report blocks no loaded RIM has an active entry for
}

// Options are the per-report verification inputs. The zero value verifies
// offline, now, without a nonce (a skipped check) and without RIMs (skipped).
type Options struct {
	// Nonce is the 32-byte challenge the report's request must carry. Nil
	// skips the check: the report's freshness is then unproven.
	Nonce []byte
	// AsOf is the time certificate chains are checked at; zero means Now.
	// Verifying captured evidence: pass its capture time.
	AsOf time.Time
	// RIMDir is a RIM cache directory with files named by RIM id.
	RIMDir string
	// HTTPClient enables OCSP revocation checks; nil means offline.
	HTTPClient *http.Client
	// Now is the clock for OCSP freshness; nil means time.Now.
	Now func() time.Time
	// DeviceRoot and RIMRoot replace the embedded roots (tests only).
	DeviceRoot, RIMRoot *x509.Certificate
}

// Check names.
const (
	CheckChain        = "nvgpu.chain"
	CheckArch         = "nvgpu.arch"
	CheckSignature    = "nvgpu.report.signature"
	CheckNonce        = "nvgpu.nonce"
	CheckFWID         = "nvgpu.fwid"
	CheckCCMode       = "nvgpu.cc_mode"
	CheckDevTools     = "nvgpu.devtools_mode"
	CheckRevocation   = "nvgpu.revocation"
	CheckDriverRIM    = "nvgpu.rim.driver"
	CheckVBIOSRIM     = "nvgpu.rim.vbios"
	CheckMeasurements = "nvgpu.measurements"
)

// Verify parses and verifies a GPU attestation report (raw bytes, see
// DecodeReportFile) with its PEM certificate chain (leaf first).
//
// Unusable input gives (nil, *check.ParseError). Otherwise Claims is
// returned with every check listed; if any check failed the error is a
// *check.VerifyError naming the first failure. Skipped checks (no nonce,
// offline, no RIM) are not errors: policy decides about them.
func Verify(report, chainPEM []byte, opts Options) (*Claims, error) {
	r, err := ParseReport(report)
	if err != nil {
		return nil, err
	}
	certs, err := ParseChain(chainPEM)
	if err != nil {
		return nil, err
	}
	return VerifyParsed(r, certs, opts)
}

// VerifyParsed is Verify on parsed inputs.
func VerifyParsed(r *Report, certs []*x509.Certificate, opts Options) (*Claims, error) {
	if r == nil || len(certs) == 0 {
		return nil, parseErr("gpu evidence", "missing report or certificate chain")
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	asOf := opts.AsOf
	if asOf.IsZero() {
		asOf = now()
	}
	root := opts.DeviceRoot
	if root == nil {
		root = DeviceIdentityRoot()
	}
	c := &Claims{
		Version: ClaimsVersion, DriverVersion: r.DriverVersion, VBIOSVersion: r.VBIOSVersion,
		Nonce: hex.EncodeToString(r.RequestNonce[:]), CCMode: ModeUnknown, DevToolsMode: ModeUnknown,
		FeatureFlag: r.FeatureFlag, Opaque: r.OpaqueStrings(), AsOf: asOf.UTC(),
		Measurement: MeasurementInfo{Matched: []int{}, Mismatched: []int{}, Missing: []int{}, NotCovered: []int{}},
		RIMs:        []RIMResult{},
	}
	for _, b := range r.Blocks {
		c.Measurements = append(c.Measurements, Measurement{Index: int(b.Index), ValueType: b.ValueType, Digest: hex.EncodeToString(b.Value)})
	}
	sort.Slice(c.Measurements, func(i, j int) bool { return c.Measurements[i].Index < c.Measurements[j].Index })
	leaf := certs[0]
	c.Chain = ChainInfo{Length: len(certs), LeafSubject: leaf.Subject.String(), LeafSerial: leaf.SerialNumber.String(),
		RootSubject: certs[len(certs)-1].Subject.String()}
	var first error
	fail := func(name string, err error) {
		c.Checks.Fail(name, "%v", err)
		if first == nil {
			first = &check.VerifyError{Check: name, Err: err}
		}
	}

	// Certificate chain.
	chainOK := false
	if err := verifyChain(certs, root, asOf); err != nil {
		fail(CheckChain, err)
	} else {
		chainOK = true
		c.Checks.Pass(CheckChain, "%d certificates from %q to the embedded %q, valid at %s", len(certs), leaf.Subject.CommonName, root.Subject.CommonName, asOf.UTC().Format(time.RFC3339))
	}

	// Architecture, from the leaf's model name.
	switch cn := leaf.Subject.CommonName; {
	case strings.HasPrefix(cn, "GH1"):
		c.Arch = Hopper
	case strings.HasPrefix(cn, "GB1"), strings.HasPrefix(cn, "GB2"):
		c.Arch = Blackwell
	}
	if c.Arch == "" {
		fail(CheckArch, fmt.Errorf("leaf %q names no supported gpu (hopper GH1xx, blackwell GB1xx/GB2xx)", leaf.Subject.CommonName))
	} else {
		c.Checks.Pass(CheckArch, "%s (leaf %q)", c.Arch, leaf.Subject.CommonName)
	}

	// Report signature with the leaf key.
	if pub, err := leafKey(leaf); err != nil {
		fail(CheckSignature, err)
	} else {
		h := sha512.Sum384(r.Signed)
		rr := new(big.Int).SetBytes(r.Signature[:48])
		ss := new(big.Int).SetBytes(r.Signature[48:])
		if !ecdsa.Verify(pub, h[:], rr, ss) {
			fail(CheckSignature, fmt.Errorf("ecdsa p-384 signature over %d report bytes does not verify with the key of %q", len(r.Signed), leaf.Subject.CommonName))
		} else if !chainOK {
			c.Checks.Pass(CheckSignature, "verifies with the leaf key, but the leaf is not trusted (chain failed)")
		} else {
			c.Checks.Pass(CheckSignature, "ecdsa p-384 / sha-384 over %d bytes verifies with the leaf key", len(r.Signed))
		}
	}

	// Nonce.
	switch {
	case opts.Nonce == nil:
		c.Checks.Skip(CheckNonce, "no expected nonce given: freshness not established (request nonce %s)", c.Nonce)
	case bytes.Equal(opts.Nonce, r.RequestNonce[:]):
		c.NonceVerified = true
		c.Checks.Pass(CheckNonce, "request nonce equals the expected %s", c.Nonce)
	default:
		fail(CheckNonce, fmt.Errorf("request nonce %s, want %q", c.Nonce, hex.EncodeToString(opts.Nonce)))
	}

	// FWID.
	fwid, err := CertFWID(leaf)
	switch {
	case err != nil:
		fail(CheckFWID, fmt.Errorf("leaf %q: %v", leaf.Subject.CommonName, err))
	case fwid == nil && r.FWID != nil:
		fail(CheckFWID, fmt.Errorf("report carries fwid %x but the leaf has no dice tcbinfo extension", r.FWID))
	case fwid == nil:
		c.Checks.Skip(CheckFWID, "neither the report nor the leaf carries an fwid")
	default:
		c.FWID = hex.EncodeToString(fwid)
		if r.FWID == nil {
			c.Checks.Skip(CheckFWID, "report has no fwid field (opaque id 20) to compare; leaf fwid %s exposed as a claim (nvidia's verifier also skips this comparison)", c.FWID)
		} else if c.ReportFWID = hex.EncodeToString(r.FWID); bytes.Equal(fwid, r.FWID) {
			c.FWIDMatched = true
			c.Checks.Pass(CheckFWID, "report fwid equals the leaf's dice tcbinfo fwid %s", c.FWID)
		} else {
			fail(CheckFWID, fmt.Errorf("report fwid %s differs from the leaf's %q", c.ReportFWID, c.FWID))
		}
	}

	// CC and dev-tools mode: not carried by the report.
	c.Checks.Skip(CheckCCMode, "the report's opaque data has no cc-mode field; cc state is bound only through the measurements (rim comparison)")
	c.Checks.Skip(CheckDevTools, "the report's opaque data has no dev-tools field; dev-tools state is bound only through the measurements (rim comparison)")

	// Revocation.
	if opts.HTTPClient == nil {
		c.Checks.Skip(CheckRevocation, "skipped: offline (no http client); ocsp status of the chain not checked")
	} else {
		res := checkOCSP(context.Background(), opts.HTTPClient, certs, 1, now())
		switch {
		case res.revoked != nil:
			fail(CheckRevocation, res.revoked)
		case res.unavailable != nil:
			c.Checks.Skip(CheckRevocation, "skipped: ocsp unavailable: %v", res.unavailable)
		default:
			c.Checks.Pass(CheckRevocation, "ocsp: %d intermediate certificate(s) good", res.checked)
		}
	}

	// RIMs and measurements.
	if err := c.compareRIMs(r, opts, fail); err != nil {
		return nil, err
	}
	c.Verified = first == nil
	return c, first
}

func (c *Claims) compareRIMs(r *Report, opts Options, fail func(string, error)) error {
	if opts.RIMDir == "" {
		c.Checks.Skip(CheckDriverRIM, "no rim cache given")
		c.Checks.Skip(CheckVBIOSRIM, "no rim cache given")
		c.Checks.Skip(CheckMeasurements, "no rim cache given: measurements not compared with golden values")
		return nil
	}
	type loaded struct {
		kind, check, id string
		rim             *RIM
	}
	arch := c.Arch
	if arch == "" {
		arch = Hopper
	}
	wanted := []loaded{
		{kind: "driver", check: CheckDriverRIM, id: DriverRIMID(arch, r)},
		{kind: "vbios", check: CheckVBIOSRIM, id: VBIOSRIMID(r)},
	}
	var good []loaded
	for _, w := range wanted {
		res := RIMResult{Kind: w.kind, ID: w.id}
		rim, err := LoadRIMFile(opts.RIMDir, w.id)
		var ue *check.UnavailableError
		switch {
		case errors.As(err, &ue):
			res.Error = err.Error()
			c.Checks.Skip(w.check, "%v", err)
		case err != nil:
			res.Found, res.Error = true, err.Error()
			fail(w.check, fmt.Errorf("rim %s: %v", w.id, err))
		case rim == nil:
			c.Checks.Skip(w.check, "rim %s not in the cache %q", w.id, opts.RIMDir)
		default:
			res.Found, res.Version, res.Signer, res.SigningTime = true, rim.Version, rim.Certs[0].Subject.CommonName, rim.SigningTime().UTC()
			want := r.DriverVersion
			if w.kind == "vbios" {
				want = r.VBIOSVersion
			}
			if err := VerifyRIM(rim, opts.RIMRoot, time.Time{}); err != nil {
				res.Error = err.Error()
				fail(w.check, fmt.Errorf("rim %s: %v", w.id, err))
			} else if !strings.EqualFold(rim.Version, want) {
				res.Error = fmt.Sprintf("rim version %q is not the report's %q", rim.Version, want)
				fail(w.check, fmt.Errorf("rim %s: %s", w.id, res.Error))
			} else {
				res.Valid = true
				c.Checks.Pass(w.check, "rim %s (version %s) signed by %q, chain valid at its signing time %s", w.id, rim.Version, res.Signer, res.SigningTime.Format(time.RFC3339))
				w.rim = rim
				good = append(good, w)
			}
		}
		c.RIMs = append(c.RIMs, res)
	}
	if len(good) == 0 {
		c.Checks.Skip(CheckMeasurements, "no valid rim for this report: measurements not compared")
		return nil
	}
	var rims []*RIM
	for _, g := range good {
		rims = append(rims, g.rim)
	}
	mi, err := CompareMeasurements(r, rims...)
	if err != nil {
		fail(CheckMeasurements, err)
		return nil
	}
	c.Measurement = mi
	switch {
	case len(mi.Mismatched)+len(mi.Missing) > 0:
		fail(CheckMeasurements, fmt.Errorf("report blocks differ from the golden values at indexes %v (missing %v)", mi.Mismatched, mi.Missing))
	case len(good) < 2:
		c.Checks.Skip(CheckMeasurements, "only the %s rim was available: %d blocks matched, %d not covered", good[0].kind, len(mi.Matched), len(mi.NotCovered))
	default:
		c.Checks.Pass(CheckMeasurements, "%d blocks match the driver and vbios golden values; %d blocks have no active golden value", len(mi.Matched), len(mi.NotCovered))
	}
	return nil
}

// CompareMeasurements compares a report's blocks with the active golden
// measurements of the given RIMs, as NVIDIA's verifier does: RIM index i
// (0-based) is report block i+1; the block must equal one of the
// alternatives and have the golden size; RIM index 35 is skipped when the
// report says NVDEC0 is disabled; two RIMs with an active entry at the same
// index are an error.
func CompareMeasurements(r *Report, rims ...*RIM) (MeasurementInfo, error) {
	mi := MeasurementInfo{Compared: true, Matched: []int{}, Mismatched: []int{}, Missing: []int{}, NotCovered: []int{}}
	golden := map[int]GoldenMeasurement{}
	for _, rim := range rims {
		for _, g := range rim.Measurements {
			if !g.Active {
				continue
			}
			if _, dup := golden[g.Index]; dup {
				return mi, fmt.Errorf("two rims have an active golden measurement at index %d", g.Index)
			}
			golden[g.Index] = g
		}
	}
	covered := map[int]bool{}
	var idx []int
	for i := range golden {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		g := golden[i]
		if i == 35 && r.NVDEC0Status == "disabled" {
			continue
		}
		bi := i + 1
		covered[bi] = true
		blk, ok := r.Block(bi)
		if !ok {
			mi.Missing = append(mi.Missing, bi)
			continue
		}
		match := false
		for _, alt := range g.Alternatives {
			if len(blk.Value) == g.Size && bytes.Equal(alt, blk.Value) {
				match = true
			}
		}
		if match {
			mi.Matched = append(mi.Matched, bi)
		} else {
			mi.Mismatched = append(mi.Mismatched, bi)
		}
	}
	for _, i := range r.sortedIndexes() {
		if !covered[i] {
			mi.NotCovered = append(mi.NotCovered, i)
		}
	}
	return mi, nil
}
