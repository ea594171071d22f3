package sevsnp

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	"github.com/sparkinfer/cc/attest/check"
)

// Platform is the value of [Claims.Platform] for SEV-SNP evidence.
const Platform = "sev-snp"

// Claims is what a verified SEV-SNP report says. Byte fields are lowercase
// hex. Claims returned together with an error must not be trusted: Checks
// then says which check failed.
type Claims struct {
	// Platform is always "sev-snp".
	Platform string `json:"platform"`
	// Version is the report format version (2 to 5).
	Version uint32 `json:"version"`
	// Product is the AMD product line: "Milan", "Genoa" or "Turin".
	Product string `json:"product"`
	// ProductName is the V[CL]EK certificate's product name extension,
	// e.g. "Milan-B0" (VCEK) or "Milan" (VLEK).
	ProductName string `json:"product_name,omitempty"`
	// Signer is "vcek" or "vlek".
	Signer string `json:"signer"`
	// CSPID names the cloud provider a VLEK was issued to (VLEK only).
	CSPID string `json:"csp_id,omitempty"`

	Measurement     string `json:"measurement"`       // MEASUREMENT, 48 bytes
	HostData        string `json:"host_data"`         // HOST_DATA, 32 bytes
	ReportData      string `json:"report_data"`       // REPORT_DATA, 64 bytes
	FamilyID        string `json:"family_id"`         // FAMILY_ID, 16 bytes
	ImageID         string `json:"image_id"`          // IMAGE_ID, 16 bytes
	IDKeyDigest     string `json:"id_key_digest"`     // ID_KEY_DIGEST, 48 bytes
	AuthorKeyDigest string `json:"author_key_digest"` // AUTHOR_KEY_DIGEST, 48 bytes
	ReportID        string `json:"report_id"`         // REPORT_ID, 32 bytes
	ReportIDMA      string `json:"report_id_ma"`      // REPORT_ID_MA, 32 bytes
	ChipID          string `json:"chip_id"`           // CHIP_ID, 64 bytes (zero if masked)
	// ChipIDMasked is the MASK_CHIP_ID bit of the signer info.
	ChipIDMasked bool `json:"chip_id_masked"`
	// AuthorKeyEnabled is the AUTHOR_KEY_EN bit of the signer info.
	AuthorKeyEnabled bool `json:"author_key_enabled"`

	Policy       Policy       `json:"policy"`
	PlatformInfo PlatformInfo `json:"platform_info"`
	GuestSVN     uint32       `json:"guest_svn"`
	VMPL         uint32       `json:"vmpl"`
	TCB          TCB          `json:"tcb"`
	// CurrentFirmware and CommittedFirmware are "major.minor.build" of the
	// SEV-SNP firmware (zero for version 2 reports, which do not carry them).
	CurrentFirmware   string `json:"current_firmware"`
	CommittedFirmware string `json:"committed_firmware"`
	// LaunchMitigationVector and CurrentMitigationVector (version 5 reports).
	LaunchMitigationVector  uint64 `json:"launch_mitigation_vector"`
	CurrentMitigationVector uint64 `json:"current_mitigation_vector"`

	// AsOf is the time certificates were checked at.
	AsOf time.Time `json:"as_of"`
	// Checks lists every check that ran, in order.
	Checks check.List `json:"checks"`
}

// Policy is the guest policy the VM was launched with.
type Policy struct {
	Raw      string `json:"raw"` // 64-bit value, hex, e.g. "0x30000"
	ABIMajor uint8  `json:"abi_major"`
	ABIMinor uint8  `json:"abi_minor"`
	// SMT: simultaneous multithreading may be enabled on the host.
	SMT bool `json:"smt_allowed"`
	// MigrateMA: a migration agent may be associated with the guest.
	MigrateMA bool `json:"migration_agent_allowed"`
	// Debug: the host may debug the guest (decrypt its memory).
	Debug                bool `json:"debug_allowed"`
	SingleSocket         bool `json:"single_socket"`
	CXLAllowed           bool `json:"cxl_allowed"`
	MemAES256XTS         bool `json:"mem_aes_256_xts"`
	RAPLDisabled         bool `json:"rapl_disabled"`
	CipherTextHidingDRAM bool `json:"ciphertext_hiding_dram"`
	PageSwapDisabled     bool `json:"page_swap_disabled"`
}

// PlatformInfo is the PLATFORM_INFO field.
type PlatformInfo struct {
	Raw string `json:"raw"`
	// Known is false when the field has bits go-sev-guest does not know; the
	// flags below are then still decoded from the known bits.
	Known                bool `json:"known"`
	SMTEnabled           bool `json:"smt_enabled"`
	TSMEEnabled          bool `json:"tsme_enabled"`
	ECCEnabled           bool `json:"ecc_enabled"`
	RAPLDisabled         bool `json:"rapl_disabled"`
	CiphertextHidingDRAM bool `json:"ciphertext_hiding_dram"`
	AliasCheckComplete   bool `json:"alias_check_complete"`
	TIOEnabled           bool `json:"tio_enabled"`
}

// TCB holds the report's TCB versions.
type TCB struct {
	Current   TCBVersion `json:"current"`
	Reported  TCBVersion `json:"reported"`
	Committed TCBVersion `json:"committed"`
	Launch    TCBVersion `json:"launch"`
}

// TCBVersion is one 64-bit TCB_VERSION. The parts are given for Milan and
// Genoa (their layout); for Turin only Raw is set.
type TCBVersion struct {
	Raw        string `json:"raw"` // e.g. "0x7308000000000003"
	BootLoader *uint8 `json:"bootloader,omitempty"`
	TEE        *uint8 `json:"tee,omitempty"`
	SNP        *uint8 `json:"snp,omitempty"`
	Microcode  *uint8 `json:"microcode,omitempty"`
}

func tcbVersion(v uint64, product string) TCBVersion {
	out := TCBVersion{Raw: fmt.Sprintf("0x%016x", v)}
	if product == "Milan" || product == "Genoa" {
		p := kds.DecomposeTCBVersion(kds.TCBVersion(v))
		out.BootLoader, out.TEE, out.SNP, out.Microcode = &p.BlSpl, &p.TeeSpl, &p.SnpSpl, &p.UcodeSpl
	}
	return out
}

// fillClaims sets every report-derived field of c. product must be set first.
func (r *Report) fillClaims(c *Claims) {
	p := r.proto
	h := hex.EncodeToString
	c.Platform = Platform
	c.Version = p.GetVersion()
	c.Signer = r.Signer()
	c.Measurement = h(p.GetMeasurement())
	c.HostData = h(p.GetHostData())
	c.ReportData = h(p.GetReportData())
	c.FamilyID = h(p.GetFamilyId())
	c.ImageID = h(p.GetImageId())
	c.IDKeyDigest = h(p.GetIdKeyDigest())
	c.AuthorKeyDigest = h(p.GetAuthorKeyDigest())
	c.ReportID = h(p.GetReportId())
	c.ReportIDMA = h(p.GetReportIdMa())
	c.ChipID = h(p.GetChipId())
	c.ChipIDMasked = r.signer.MaskChipKey
	c.AuthorKeyEnabled = r.signer.AuthorKeyEn
	c.GuestSVN = p.GetGuestSvn()
	c.VMPL = p.GetVmpl()
	// ParseReport already checked the policy parses.
	pol, _ := abi.ParseSnpPolicy(p.GetPolicy())
	c.Policy = Policy{
		Raw: fmt.Sprintf("0x%x", p.GetPolicy()), ABIMajor: pol.ABIMajor, ABIMinor: pol.ABIMinor,
		SMT: pol.SMT, MigrateMA: pol.MigrateMA, Debug: pol.Debug, SingleSocket: pol.SingleSocket,
		CXLAllowed: pol.CXLAllowed, MemAES256XTS: pol.MemAES256XTS, RAPLDisabled: pol.RAPLDis,
		CipherTextHidingDRAM: pol.CipherTextHidingDRAM, PageSwapDisabled: pol.PageSwapDisable,
	}
	pi, err := abi.ParseSnpPlatformInfo(p.GetPlatformInfo())
	c.PlatformInfo = PlatformInfo{
		Raw: fmt.Sprintf("0x%x", p.GetPlatformInfo()), Known: err == nil,
		SMTEnabled: pi.SMTEnabled, TSMEEnabled: pi.TSMEEnabled, ECCEnabled: pi.ECCEnabled,
		RAPLDisabled: pi.RAPLDisabled, CiphertextHidingDRAM: pi.CiphertextHidingDRAMEnabled,
		AliasCheckComplete: pi.AliasCheckComplete, TIOEnabled: pi.TIOEnabled,
	}
	c.TCB = TCB{
		Current:   tcbVersion(p.GetCurrentTcb(), c.Product),
		Reported:  tcbVersion(p.GetReportedTcb(), c.Product),
		Committed: tcbVersion(p.GetCommittedTcb(), c.Product),
		Launch:    tcbVersion(p.GetLaunchTcb(), c.Product),
	}
	c.CurrentFirmware = fmt.Sprintf("%d.%d.%d", p.GetCurrentMajor(), p.GetCurrentMinor(), p.GetCurrentBuild())
	c.CommittedFirmware = fmt.Sprintf("%d.%d.%d", p.GetCommittedMajor(), p.GetCommittedMinor(), p.GetCommittedBuild())
	c.LaunchMitigationVector = p.GetLaunchMitVector()
	c.CurrentMitigationVector = p.GetCurrentMitVector()
}
