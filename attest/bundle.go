package attest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sparkinfer/cc/attest/check"
)

// BundleVersion is the version string of the evidence bundle format.
const BundleVersion = "sparkinfer-evidence/v1"

// Size caps of a bundle and its parts (decoded bytes).
const (
	MaxBundleSize     = 16 << 20 // the whole JSON document
	MaxQuoteSize      = 64 << 10
	MaxCertsSize      = 256 << 10
	MaxEventLogSize   = 1 << 20
	MaxCollateralSize = 2 << 20
	MaxGPUReportSize  = 64 << 10
	MaxRIMSize        = 1 << 20
	MaxGPUs           = 16
	MaxRIMsPerGPU     = 4
)

// TEE evidence kinds.
const (
	KindTDX     = "tdx"      // Intel TDX quote (v4 or v5)
	KindSEVSNP  = "sev-snp"  // AMD SEV-SNP attestation report
	KindTDXVTPM = "tdx-vtpm" // Azure-style TDX CVM: TD quote + HCL report + vTPM quote
	KindSim     = "sim"      // simulated TEE (package attest/sim): proves nothing
)

// GPU evidence kinds.
const (
	GPUKindNVIDIA = "nvidia" // NVIDIA CC attestation report (SPDM GET_MEASUREMENTS)
	GPUKindSim    = "sim"    // simulated GPU (package attest/sim): proves nothing
)

// Bundle is the evidence the appliance serves at GET /v1/attestation. In
// JSON, byte fields are standard base64 (padded).
type Bundle struct {
	// Version is BundleVersion.
	Version string `json:"version"`
	// Statement holds the exact statement bytes the TEE evidence binds.
	Statement []byte `json:"statement"`
	// TEE is the CPU TEE's evidence.
	TEE TEEEvidence `json:"tee"`
	// GPUs holds one entry per GPU, in the order of the statement's
	// gpu_evidence_digests. Empty (not null) without GPUs.
	GPUs []GPUEvidence `json:"gpus"`
}

// TEEEvidence is the CPU TEE's evidence. Which fields are used depends on Kind:
//
//	tdx       quote (TDX quote v4/v5, PCK chain inside), collateral (optional)
//	sev-snp   quote (the 1184-byte attestation report), certificates (VCEK or
//	          VLEK, DER or PEM, optional ASK/ARK), collateral (optional)
//	tdx-vtpm  quote (TD quote), hcl_report (the Azure HCL report binding the
//	          vTPM key), tpm_quote (the az-cvm-vtpm quote container: signature,
//	          TPMS_ATTEST, PCR values), collateral (optional)
//	sim       quote (a sim quote, package attest/sim)
//
// EventLog is optional for every kind (e.g. the RTMR3 event log).
type TEEEvidence struct {
	Kind         string `json:"kind"`
	Quote        []byte `json:"quote"`
	Certificates []byte `json:"certificates,omitempty"`
	EventLog     []byte `json:"event_log,omitempty"`
	Collateral   []byte `json:"collateral,omitempty"`
	HCLReport    []byte `json:"hcl_report,omitempty"`
	TPMQuote     []byte `json:"tpm_quote,omitempty"`
}

// GPUEvidence is one GPU's evidence.
type GPUEvidence struct {
	// Kind is "nvidia" or "sim".
	Kind string `json:"kind"`
	// Report is the raw attestation report (for NVIDIA: the SPDM
	// GET_MEASUREMENTS request and signed response, as returned by
	// nvmlDeviceGetConfComputeGpuAttestationReport).
	Report []byte `json:"report"`
	// CertChain is the device certificate chain, PEM, leaf first (empty for sim).
	CertChain []byte `json:"cert_chain,omitempty"`
	// RIMs are optional reference integrity manifests (signed SWID tags).
	RIMs []RIM `json:"rims,omitempty"`
}

// RIM is one reference integrity manifest.
type RIM struct {
	Name string `json:"name"` // file name or RIM id, informational
	XML  []byte `json:"xml"`
}

// DecodeBundle decodes a bundle from JSON. Decoding is strict: unknown
// fields, trailing data, a wrong version, an unknown kind and oversize parts
// are *check.ParseError. It reads at most MaxBundleSize+1 bytes.
func DecodeBundle(r io.Reader) (*Bundle, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBundleSize+1))
	if err != nil {
		return nil, &check.ParseError{What: "evidence bundle", Err: err}
	}
	return ParseBundle(data)
}

// ParseBundle is DecodeBundle on bytes.
func ParseBundle(data []byte) (*Bundle, error) {
	if len(data) > MaxBundleSize {
		return nil, &check.ParseError{What: "evidence bundle", Err: fmt.Errorf("larger than %d bytes", MaxBundleSize)}
	}
	var b Bundle
	if err := decodeStrict(data, &b); err != nil {
		return nil, &check.ParseError{What: "evidence bundle", Err: err}
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// Encode returns the bundle's JSON encoding (validated first).
func (b *Bundle) Encode() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	c := *b
	if c.GPUs == nil {
		c.GPUs = []GPUEvidence{}
	}
	return json.MarshalIndent(&c, "", "  ")
}

// Validate checks the bundle's structure and size caps (not its contents'
// signatures: that is Verify).
func (b *Bundle) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &check.ParseError{What: "evidence bundle field " + field, Err: fmt.Errorf(format, args...)}
	}
	if b.Version != BundleVersion {
		return bad("version", "%q, want %q", b.Version, BundleVersion)
	}
	if len(b.Statement) == 0 || len(b.Statement) > MaxStatementSize {
		return bad("statement", "%d bytes, want 1 to %d", len(b.Statement), MaxStatementSize)
	}
	t := &b.TEE
	switch t.Kind {
	case KindTDX, KindSEVSNP, KindTDXVTPM, KindSim:
	default:
		return bad("tee.kind", "%q is not one of tdx, sev-snp, tdx-vtpm, sim", t.Kind)
	}
	for _, f := range []struct {
		name string
		v    []byte
		max  int
	}{
		{"tee.quote", t.Quote, MaxQuoteSize}, {"tee.certificates", t.Certificates, MaxCertsSize},
		{"tee.event_log", t.EventLog, MaxEventLogSize}, {"tee.collateral", t.Collateral, MaxCollateralSize},
		{"tee.hcl_report", t.HCLReport, MaxQuoteSize}, {"tee.tpm_quote", t.TPMQuote, MaxQuoteSize},
	} {
		if len(f.v) > f.max {
			return bad(f.name, "%d bytes, at most %d", len(f.v), f.max)
		}
	}
	if len(t.Quote) == 0 {
		return bad("tee.quote", "missing")
	}
	if t.Kind == KindTDXVTPM {
		if len(t.HCLReport) == 0 || len(t.TPMQuote) == 0 {
			return bad("tee", "kind tdx-vtpm needs hcl_report and tpm_quote")
		}
	} else if len(t.HCLReport)+len(t.TPMQuote) != 0 {
		return bad("tee", "hcl_report and tpm_quote are only for kind tdx-vtpm, not %q", t.Kind)
	}
	if len(b.GPUs) > MaxGPUs {
		return bad("gpus", "%d entries, at most %d", len(b.GPUs), MaxGPUs)
	}
	for i, g := range b.GPUs {
		name := fmt.Sprintf("gpus[%d]", i)
		switch g.Kind {
		case GPUKindNVIDIA:
			if len(g.CertChain) == 0 {
				return bad(name+".cert_chain", "missing")
			}
		case GPUKindSim:
		default:
			return bad(name+".kind", "%q is not one of nvidia, sim", g.Kind)
		}
		if len(g.Report) == 0 || len(g.Report) > MaxGPUReportSize {
			return bad(name+".report", "%d bytes, want 1 to %d", len(g.Report), MaxGPUReportSize)
		}
		if len(g.CertChain) > MaxCertsSize {
			return bad(name+".cert_chain", "%d bytes, at most %d", len(g.CertChain), MaxCertsSize)
		}
		if len(g.RIMs) > MaxRIMsPerGPU {
			return bad(name+".rims", "%d entries, at most %d", len(g.RIMs), MaxRIMsPerGPU)
		}
		for j, r := range g.RIMs {
			if len(r.XML) == 0 || len(r.XML) > MaxRIMSize {
				return bad(fmt.Sprintf("%s.rims[%d].xml", name, j), "%d bytes, want 1 to %d", len(r.XML), MaxRIMSize)
			}
			if len(r.Name) > 256 || !printableASCII(r.Name) {
				return bad(fmt.Sprintf("%s.rims[%d].name", name, j), "%q is not at most 256 printable ascii characters", r.Name)
			}
		}
	}
	return nil
}

// decodeStrict decodes one JSON value into v, rejecting unknown fields and
// anything but white space after the value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the json value")
	}
	return nil
}
