package attest

import "fmt"

// ClaimsVersion is the version string of the Claims JSON format.
const ClaimsVersion = "sparkinfer-claims/v1"

// Claims is what verified evidence says, in one place, for a policy to
// appraise (package policy) and for programs to act on. It is produced by
// [Verifier.Verify] and is meaningful only when Verify returned no error:
// claims of evidence that failed verification are still filled in as far as
// they could be read, for display, but must not be trusted.
//
// Hex strings are lowercase. Boolean "…Checked" fields say whether a check
// could be carried out at all (offline, no collateral, simulated); a policy
// decides whether an unchecked item may be tolerated.
type Claims struct {
	// Version is ClaimsVersion.
	Version string `json:"version"`
	// Simulated is true when any part of the evidence (TEE or a GPU) is
	// simulated: such evidence proves nothing. Every output says SIMULATED.
	Simulated bool `json:"simulated"`
	// VerifiedAt is the verifier's clock at verification, RFC 3339 UTC.
	VerifiedAt string `json:"verified_at"`
	// StatementDigest is SHA-256 (hex) of the exact statement bytes.
	StatementDigest string `json:"statement_digest"`
	// Statement is the decoded statement.
	Statement Statement `json:"statement"`
	// NonceChecked is true when the caller gave an expected client nonce
	// and the statement carried exactly it; false when none was given.
	NonceChecked bool `json:"nonce_checked"`
	// TEE is what the CPU TEE's evidence says.
	TEE TEEClaims `json:"tee"`
	// GPUs holds one entry per GPU, in bundle order.
	GPUs []GPUClaims `json:"gpus"`
}

// TEEClaims are the claims of the CPU TEE's evidence, normalised over kinds.
// Fields a kind does not have are left empty.
type TEEClaims struct {
	// Kind is the bundle's tee.kind: tdx, sev-snp, tdx-vtpm or sim.
	Kind string `json:"kind"`
	// Simulated is true for kind sim.
	Simulated bool `json:"simulated"`
	// SignatureVerified is true when the quote's signature and certificate
	// chain verified up to the configured root.
	SignatureVerified bool `json:"signature_verified"`
	// ReportDataBound is true when the evidence's report data equals
	// ReportData(statement bytes).
	ReportDataBound bool `json:"report_data_bound"`
	// ReportData is the evidence's 64-byte report data (hex).
	ReportData string `json:"report_data"`
	// Debug is true when the TD/guest runs with debugging enabled.
	Debug bool `json:"debug"`
	// MRTD and RTMRs (TDX, tdx-vtpm, sim): 48-byte measurements (hex).
	MRTD  string   `json:"mrtd,omitempty"`
	RTMRs []string `json:"rtmrs,omitempty"`
	// Measurement is the SEV-SNP launch measurement (hex, 48 bytes).
	Measurement string `json:"measurement,omitempty"`
	// TEETCBSVN is the TDX TEE TCB SVN (hex, 16 bytes).
	TEETCBSVN string `json:"tee_tcb_svn,omitempty"`
	// CollateralChecked is true when the TCB was appraised against the
	// vendor's signed collateral (TDX TCB info and QE identity; AMD
	// VCEK TCB); TCBStatus is then the resulting status, e.g. "UpToDate".
	CollateralChecked bool   `json:"collateral_checked"`
	TCBStatus         string `json:"tcb_status,omitempty"`
	// RevocationChecked is true when the certificate chains were checked
	// against current CRLs.
	RevocationChecked bool `json:"revocation_checked"`
	// PlatformID identifies the platform where the kind has one (TDX:
	// FMSPC; SEV-SNP: chip id), hex.
	PlatformID string `json:"platform_id,omitempty"`
	// SNPProduct is the SEV-SNP product line: Milan, Genoa or Turin.
	SNPProduct string `json:"snp_product,omitempty"`
	// SNPReportedTCB is the SEV-SNP report's REPORTED_TCB, decoded: the TCB
	// the VCEK/VLEK certificate vouches for (the verifier checked the
	// certificate's TCB extension equal to it). Nil where this build does
	// not decode the product's layout (Turin).
	SNPReportedTCB *SNPTCB `json:"snp_reported_tcb,omitempty"`
}

// SNPTCB holds the security patch levels of an SEV-SNP TCB_VERSION (Milan
// and Genoa layout).
type SNPTCB struct {
	BootLoader uint8 `json:"bootloader"`
	TEE        uint8 `json:"tee"`
	SNP        uint8 `json:"snp"`
	Microcode  uint8 `json:"microcode"`
}

// AtLeast reports whether every part of t is at least the same part of min.
func (t SNPTCB) AtLeast(min SNPTCB) bool {
	return t.BootLoader >= min.BootLoader && t.TEE >= min.TEE && t.SNP >= min.SNP && t.Microcode >= min.Microcode
}

func (t SNPTCB) String() string {
	return fmt.Sprintf("bootloader %d, tee %d, snp %d, microcode %d", t.BootLoader, t.TEE, t.SNP, t.Microcode)
}

// GPUClaims are the claims of one GPU's evidence.
type GPUClaims struct {
	// Index is the GPU's position in the bundle.
	Index int `json:"index"`
	// Kind is nvidia or sim; Simulated is true for sim.
	Kind      string `json:"kind"`
	Simulated bool   `json:"simulated"`
	// Arch is the GPU architecture where known (e.g. hopper, blackwell).
	Arch string `json:"arch,omitempty"`
	// SignatureVerified is true when the report's signature and the
	// device certificate chain verified up to the configured root.
	SignatureVerified bool `json:"signature_verified"`
	// EvidenceDigest is SHA-256 (hex) of the raw report; InStatement is
	// true when the statement lists it at this GPU's position.
	EvidenceDigest string `json:"evidence_digest"`
	InStatement    bool   `json:"in_statement"`
	// Nonce is the report's request nonce (hex); NonceBound is true when
	// it equals the statement's GPU nonce.
	Nonce      string `json:"nonce"`
	NonceBound bool   `json:"nonce_bound"`
	// CCEnabled and DevToolsEnabled are the GPU's confidential-computing
	// and developer-tools modes as its report states them.
	CCEnabled       bool `json:"cc_enabled"`
	DevToolsEnabled bool `json:"dev_tools_enabled"`
	// Versions and identity as the report states them.
	DriverVersion string `json:"driver_version,omitempty"`
	VBIOSVersion  string `json:"vbios_version,omitempty"`
	Serial        string `json:"serial,omitempty"`
	FWID          string `json:"fwid,omitempty"`
	// RIMsChecked is true when signed reference manifests were verified and
	// compared; MeasurementsMatch then says whether every measurement matched.
	RIMsChecked       bool `json:"rims_checked"`
	MeasurementsMatch bool `json:"measurements_match"`
	// RevocationChecked is true when the device chain was checked for
	// revocation (OCSP/CRL).
	RevocationChecked bool `json:"revocation_checked"`
}
