package nvgpu

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sparkinfer/cc/attest/check"
)

// SPDM constants of the GET_MEASUREMENTS exchange NVIDIA GPUs return
// (DMTF DSP0274 1.1).
const (
	spdmVersion11        = 0x11
	spdmGetMeasurements  = 0xE0 // request code
	spdmMeasurements     = 0x60 // response code
	spdmRequestLen       = 37   // version, code, param1, param2, nonce[32], slot id
	spdmRequestNonceOff  = 4
	spdmNonceLen         = 32
	spdmParam1SigReq     = 0x01 // "signature requested" bit of the request's Param1
	spdmParam2AllBlocks  = 0xFF // "all measurement blocks"
	spdmRespHeaderLen    = 8    // version, code, param1, param2, nblocks, record length (3)
	dmtfMeasurementSpec  = 0x01 // MeasurementSpecification bit 0: DMTF
	dmtfValueHeaderLen   = 3    // DMTFSpecMeasurementValueType, DMTFSpecMeasurementValueSize (2)
	blockHeaderLen       = 4    // Index, MeasurementSpecification, MeasurementSize (2)
	opaqueItemHeaderLen  = 4    // DataType (2), DataSize (2)
	signatureLen         = 96   // ECDSA P-384 r||s
	maxReportLen         = 1 << 20
	measurementCountSize = 4
)

// Opaque data field ids NVIDIA GPUs put in the MEASUREMENTS response's
// OpaqueData, as type(2, LE) | size(2, LE) | data items. The numbering is
// NVIDIA's (the OPAQUE_FIELD_ID_* values of its verifiers).
const (
	OpaqueCertIssuerName      = 1
	OpaqueCertAuthorityKeyID  = 2
	OpaqueDriverVersion       = 3
	OpaqueGPUInfo             = 4
	OpaqueSKU                 = 5
	OpaqueVBIOSVersion        = 6
	OpaqueManufacturerID      = 7
	OpaqueTamperDetection     = 8
	OpaqueSMC                 = 9
	OpaqueVPR                 = 10
	OpaqueNVDEC0Status        = 11
	OpaqueMeasurementCount    = 12
	OpaqueCPRInfo             = 13
	OpaqueBoardID             = 14
	OpaqueChipSKU             = 15
	OpaqueChipSKUMod          = 16
	OpaqueProject             = 17
	OpaqueProjectSKU          = 18
	OpaqueProjectSKUMod       = 19
	OpaqueFWID                = 20
	OpaqueProtectedPCIeStatus = 21
	OpaqueSwitchPDI           = 22
	OpaqueFloorsweptPorts     = 23
	OpaquePositionID          = 24
	OpaqueLockSwitchStatus    = 25
	OpaqueGPULinkConn         = 32
	OpaqueSysEnableStatus     = 33
	OpaqueDataVersion         = 34
	OpaqueChipInfo            = 35
	OpaqueFeatureFlag         = 36
)

var opaqueNames = map[uint16]string{
	OpaqueCertIssuerName:      "cert_issuer_name",
	OpaqueCertAuthorityKeyID:  "cert_authority_key_identifier",
	OpaqueDriverVersion:       "driver_version",
	OpaqueGPUInfo:             "gpu_info",
	OpaqueSKU:                 "sku",
	OpaqueVBIOSVersion:        "vbios_version",
	OpaqueManufacturerID:      "manufacturer_id",
	OpaqueTamperDetection:     "tamper_detection",
	OpaqueSMC:                 "smc",
	OpaqueVPR:                 "vpr",
	OpaqueNVDEC0Status:        "nvdec0_status",
	OpaqueMeasurementCount:    "measurement_count",
	OpaqueCPRInfo:             "cpr_info",
	OpaqueBoardID:             "board_id",
	OpaqueChipSKU:             "chip_sku",
	OpaqueChipSKUMod:          "chip_sku_mod",
	OpaqueProject:             "project",
	OpaqueProjectSKU:          "project_sku",
	OpaqueProjectSKUMod:       "project_sku_mod",
	OpaqueFWID:                "fwid",
	OpaqueProtectedPCIeStatus: "protected_pcie_status",
	OpaqueSwitchPDI:           "switch_pdi",
	OpaqueFloorsweptPorts:     "floorswept_ports",
	OpaquePositionID:          "position_id",
	OpaqueLockSwitchStatus:    "lock_switch_status",
	OpaqueGPULinkConn:         "gpu_link_conn",
	OpaqueSysEnableStatus:     "sys_enable_status",
	OpaqueDataVersion:         "opaque_data_version",
	OpaqueChipInfo:            "chip_info",
	OpaqueFeatureFlag:         "feature_flag",
}

// OpaqueName returns NVIDIA's name for an opaque field id, or "" if unknown.
func OpaqueName(id uint16) string { return opaqueNames[id] }

// NVDEC0 status byte values.
const (
	nvdecEnabled  = 0xAA
	nvdecDisabled = 0x55
)

// MeasurementBlock is one DMTF measurement block of the MEASUREMENTS response.
type MeasurementBlock struct {
	Index     uint8  // 1-based block index
	Spec      uint8  // MeasurementSpecification (always DMTF here)
	ValueType uint8  // DMTFSpecMeasurementValueType
	Value     []byte // the digest (48 bytes, SHA-384, on Hopper and Blackwell)
}

// OpaqueField is one item of the response's opaque data.
type OpaqueField struct {
	Type uint16
	Data []byte
}

// Report is a parsed NVIDIA GPU attestation report: the SPDM 1.1
// GET_MEASUREMENTS request followed by the signed MEASUREMENTS response.
// All byte slices alias Raw.
type Report struct {
	Raw []byte // the whole report

	RequestNonce [32]byte // bytes 4..35: the verifier's challenge
	RequestParam1,
	RequestParam2 uint8
	SlotID uint8

	ResponseParam1,
	ResponseParam2 uint8
	Blocks        []MeasurementBlock // in report order, indexes unique
	ResponseNonce [32]byte           // the responder's nonce
	Opaque        []OpaqueField      // in report order, types unique
	Signature     []byte             // 96 bytes r||s
	Signed        []byte             // Raw without the signature: what the signature covers

	// Decoded opaque fields (empty when absent).
	DriverVersion    string
	VBIOSVersion     string   // as NVIDIA prints it, e.g. "96.00.9f.00.01"
	MeasurementCount []uint32 // per block, from opaque field 12
	NVDEC0Status     string   // "enabled", "disabled" or ""
	FWID             []byte   // opaque field 20 (Blackwell), nil when absent
	FeatureFlag      string   // "SPT", "MPT", "PPCIE", "unknown(N)" or "" when absent
}

func parseErr(what, format string, args ...any) error {
	return &check.ParseError{What: what, Err: fmt.Errorf(format, args...)}
}

// DecodeReportFile accepts a report as the vectors and NVML tools store it
// (a hex string, optionally with whitespace and a 0x prefix) or as raw bytes.
// Raw bytes are recognised by their first two bytes (SPDM 1.1,
// GET_MEASUREMENTS), which are not both hex digits.
func DecodeReportFile(b []byte) ([]byte, error) {
	if len(b) >= 2 && b[0] == spdmVersion11 && b[1] == spdmGetMeasurements {
		return b, nil
	}
	s := strings.Join(strings.Fields(string(b)), "")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if s == "" {
		return nil, parseErr("gpu report file", "empty")
	}
	out, err := hex.DecodeString(s)
	if err != nil {
		return nil, parseErr("gpu report file", "neither an spdm report nor hex: %v", err)
	}
	return out, nil
}

// ParseReport parses a report strictly: every length must agree, every block
// must be a DMTF block, every opaque item must be known and appear once, and
// nothing may follow the signature. It checks no signature; see Verify.
func ParseReport(b []byte) (*Report, error) {
	if len(b) > maxReportLen {
		return nil, parseErr("gpu report", "%d bytes is larger than the %d-byte limit", len(b), maxReportLen)
	}
	if len(b) < spdmRequestLen+spdmRespHeaderLen+spdmNonceLen+2+signatureLen {
		return nil, parseErr("gpu report", "%d bytes is too short for an spdm request and measurements response", len(b))
	}
	r := &Report{Raw: b}
	// GET_MEASUREMENTS request.
	req := b[:spdmRequestLen]
	if req[0] != spdmVersion11 {
		return nil, parseErr("gpu report request", "spdm version 0x%02x, want 0x11", req[0])
	}
	if req[1] != spdmGetMeasurements {
		return nil, parseErr("gpu report request", "request code 0x%02x, want GET_MEASUREMENTS 0xe0", req[1])
	}
	r.RequestParam1, r.RequestParam2 = req[2], req[3]
	if r.RequestParam1&spdmParam1SigReq == 0 {
		return nil, parseErr("gpu report request", "param1 0x%02x does not request a signature", r.RequestParam1)
	}
	if r.RequestParam2 != spdmParam2AllBlocks {
		return nil, parseErr("gpu report request", "param2 0x%02x, want 0xff (all measurement blocks)", r.RequestParam2)
	}
	copy(r.RequestNonce[:], req[spdmRequestNonceOff:spdmRequestNonceOff+spdmNonceLen])
	r.SlotID = req[36]

	// MEASUREMENTS response.
	resp := b[spdmRequestLen:]
	if resp[0] != spdmVersion11 {
		return nil, parseErr("gpu report response", "spdm version 0x%02x, want 0x11", resp[0])
	}
	if resp[1] != spdmMeasurements {
		return nil, parseErr("gpu report response", "response code 0x%02x, want MEASUREMENTS 0x60", resp[1])
	}
	r.ResponseParam1, r.ResponseParam2 = resp[2], resp[3]
	if r.ResponseParam2&0x0F != r.SlotID&0x0F {
		return nil, parseErr("gpu report response", "slot id %d differs from the request's %d", r.ResponseParam2&0x0F, r.SlotID&0x0F)
	}
	nblocks := int(resp[4])
	recLen := int(resp[5]) | int(resp[6])<<8 | int(resp[7])<<16
	off := spdmRespHeaderLen
	if recLen > len(resp)-off {
		return nil, parseErr("gpu report measurement record", "length %d exceeds the %d bytes left", recLen, len(resp)-off)
	}
	blocks, err := parseRecord(resp[off:off+recLen], nblocks)
	if err != nil {
		return nil, err
	}
	r.Blocks = blocks
	off += recLen
	rest := resp[off:]
	if len(rest) < spdmNonceLen+2 {
		return nil, parseErr("gpu report response", "truncated after the measurement record")
	}
	copy(r.ResponseNonce[:], rest[:spdmNonceLen])
	rest = rest[spdmNonceLen:]
	opLen := int(binary.LittleEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != opLen+signatureLen {
		return nil, parseErr("gpu report response", "opaque length %d and a %d-byte signature leave %d bytes, want 0", opLen, signatureLen, len(rest)-opLen-signatureLen)
	}
	if err := r.parseOpaque(rest[:opLen]); err != nil {
		return nil, err
	}
	r.Signature = rest[opLen:]
	r.Signed = b[:len(b)-signatureLen]
	return r, nil
}

func parseRecord(rec []byte, nblocks int) ([]MeasurementBlock, error) {
	if nblocks == 0 {
		return nil, parseErr("gpu report measurement record", "no measurement blocks")
	}
	seen := map[uint8]bool{}
	var blocks []MeasurementBlock
	for i := 0; i < nblocks; i++ {
		if len(rec) < blockHeaderLen {
			return nil, parseErr("gpu report measurement record", "block %d of %d truncated", i+1, nblocks)
		}
		blk := MeasurementBlock{Index: rec[0], Spec: rec[1]}
		size := int(binary.LittleEndian.Uint16(rec[2:]))
		rec = rec[blockHeaderLen:]
		if blk.Index == 0 || blk.Index == 0xFF {
			return nil, parseErr("gpu report measurement record", "block %d has reserved index %d", i+1, blk.Index)
		}
		if seen[blk.Index] {
			return nil, parseErr("gpu report measurement record", "index %d appears twice", blk.Index)
		}
		seen[blk.Index] = true
		if blk.Spec != dmtfMeasurementSpec {
			return nil, parseErr("gpu report measurement record", "block index %d has measurement specification 0x%02x, want dmtf 0x01", blk.Index, blk.Spec)
		}
		if size > len(rec) || size < dmtfValueHeaderLen {
			return nil, parseErr("gpu report measurement record", "block index %d has size %d with %d bytes left", blk.Index, size, len(rec))
		}
		m := rec[:size]
		rec = rec[size:]
		blk.ValueType = m[0]
		vsize := int(binary.LittleEndian.Uint16(m[1:]))
		if vsize != size-dmtfValueHeaderLen {
			return nil, parseErr("gpu report measurement record", "block index %d value size %d, want %d", blk.Index, vsize, size-dmtfValueHeaderLen)
		}
		blk.Value = m[dmtfValueHeaderLen:]
		blocks = append(blocks, blk)
	}
	if len(rec) != 0 {
		return nil, parseErr("gpu report measurement record", "%d bytes after %d blocks", len(rec), nblocks)
	}
	return blocks, nil
}

func (r *Report) parseOpaque(b []byte) error {
	seen := map[uint16]bool{}
	for len(b) > 0 {
		if len(b) < opaqueItemHeaderLen {
			return parseErr("gpu report opaque data", "%d trailing bytes", len(b))
		}
		f := OpaqueField{Type: binary.LittleEndian.Uint16(b), Data: nil}
		size := int(binary.LittleEndian.Uint16(b[2:]))
		b = b[opaqueItemHeaderLen:]
		if size > len(b) {
			return parseErr("gpu report opaque data", "field %d has size %d with %d bytes left", f.Type, size, len(b))
		}
		f.Data = b[:size]
		b = b[size:]
		name, ok := opaqueNames[f.Type]
		if !ok {
			return parseErr("gpu report opaque data", "unknown field id %d", f.Type)
		}
		if seen[f.Type] {
			return parseErr("gpu report opaque data", "field %s appears twice", name)
		}
		seen[f.Type] = true
		if err := r.decodeOpaque(f, name); err != nil {
			return err
		}
		r.Opaque = append(r.Opaque, f)
	}
	if r.DriverVersion == "" || r.VBIOSVersion == "" {
		return parseErr("gpu report opaque data", "driver_version and vbios_version must both be present")
	}
	if r.MeasurementCount != nil && len(r.MeasurementCount) != len(r.Blocks) {
		return parseErr("gpu report opaque data", "measurement_count has %d entries for %d blocks", len(r.MeasurementCount), len(r.Blocks))
	}
	return nil
}

func (r *Report) decodeOpaque(f OpaqueField, name string) error {
	what := "gpu report opaque " + name
	switch f.Type {
	case OpaqueDriverVersion:
		s, err := cString(f.Data)
		if err != nil || s == "" {
			return parseErr(what, "not a printable string: %q", f.Data)
		}
		r.DriverVersion = s
	case OpaqueVBIOSVersion:
		v, err := FormatVBIOSVersion(f.Data)
		if err != nil {
			return &check.ParseError{What: what, Err: err}
		}
		r.VBIOSVersion = v
	case OpaqueMeasurementCount:
		if len(f.Data)%measurementCountSize != 0 {
			return parseErr(what, "%d bytes is not a multiple of 4", len(f.Data))
		}
		r.MeasurementCount = make([]uint32, 0, len(f.Data)/4)
		for i := 0; i < len(f.Data); i += 4 {
			r.MeasurementCount = append(r.MeasurementCount, binary.LittleEndian.Uint32(f.Data[i:]))
		}
	case OpaqueNVDEC0Status:
		switch {
		case bytes.Equal(f.Data, []byte{nvdecEnabled}):
			r.NVDEC0Status = "enabled"
		case bytes.Equal(f.Data, []byte{nvdecDisabled}):
			r.NVDEC0Status = "disabled"
		default:
			return parseErr(what, "unknown status %x", f.Data)
		}
	case OpaqueFWID:
		if len(f.Data) != 48 {
			return parseErr(what, "%d bytes, want 48", len(f.Data))
		}
		r.FWID = f.Data
	case OpaqueFeatureFlag:
		if len(f.Data) == 0 || len(f.Data) > 8 {
			return parseErr(what, "%d bytes, want 1..8", len(f.Data))
		}
		var v [8]byte
		copy(v[:], f.Data)
		switch n := binary.LittleEndian.Uint64(v[:]); n {
		case 0:
			r.FeatureFlag = "SPT"
		case 1:
			r.FeatureFlag = "MPT"
		case 2:
			r.FeatureFlag = "PPCIE"
		default:
			r.FeatureFlag = fmt.Sprintf("unknown(%d)", n)
		}
	case OpaqueChipSKU, OpaqueChipSKUMod, OpaqueProject, OpaqueProjectSKU, OpaqueChipInfo:
		if _, err := cString(f.Data); err != nil {
			return parseErr(what, "not a printable string: %q", f.Data)
		}
	}
	return nil
}

// cString decodes a NUL-padded printable ASCII string.
func cString(b []byte) (string, error) {
	s := strings.TrimRight(string(b), "\x00")
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return "", errors.New("non-printable byte")
		}
	}
	return s, nil
}

// FormatVBIOSVersion renders the 8-byte opaque VBIOS version field the way
// NVIDIA's tools print it: the first four bytes reversed, then the fifth, as
// dot-separated lowercase hex ("96.00.9f.00.01").
func FormatVBIOSVersion(b []byte) (string, error) {
	if len(b) != 8 {
		return "", fmt.Errorf("%d bytes, want 8", len(b))
	}
	return fmt.Sprintf("%02x.%02x.%02x.%02x.%02x", b[3], b[2], b[1], b[0], b[4]), nil
}

// Field returns the opaque field with the given id.
func (r *Report) Field(id uint16) ([]byte, bool) {
	for _, f := range r.Opaque {
		if f.Type == id {
			return f.Data, true
		}
	}
	return nil, false
}

// Block returns the measurement block with the given 1-based index.
func (r *Report) Block(index int) (MeasurementBlock, bool) {
	for _, b := range r.Blocks {
		if int(b.Index) == index {
			return b, true
		}
	}
	return MeasurementBlock{}, false
}

// OpaqueStrings returns every opaque field as a display string keyed by
// NVIDIA's field name: strings for textual fields, hex otherwise (as
// NVIDIA's and Trustee's verifiers print them; project_sku_mod is hex); the
// measurement count is omitted (see MeasurementCount).
func (r *Report) OpaqueStrings() map[string]string {
	m := map[string]string{}
	for _, f := range r.Opaque {
		name := opaqueNames[f.Type]
		switch f.Type {
		case OpaqueMeasurementCount:
			continue
		case OpaqueDriverVersion:
			m[name] = r.DriverVersion
		case OpaqueVBIOSVersion:
			m[name] = r.VBIOSVersion
		case OpaqueNVDEC0Status:
			m[name] = r.NVDEC0Status
		case OpaqueFeatureFlag:
			m[name] = r.FeatureFlag
		case OpaqueChipSKU, OpaqueChipSKUMod, OpaqueProject, OpaqueProjectSKU, OpaqueChipInfo:
			s, _ := cString(f.Data)
			m[name] = s
		case OpaqueDataVersion:
			var v [8]byte
			copy(v[:], f.Data)
			m[name] = fmt.Sprint(binary.LittleEndian.Uint64(v[:]))
		default:
			m[name] = hex.EncodeToString(f.Data)
		}
	}
	return m
}

// sortedIndexes returns the block indexes in ascending order.
func (r *Report) sortedIndexes() []int {
	var out []int
	for _, b := range r.Blocks {
		out = append(out, int(b.Index))
	}
	sort.Ints(out)
	return out
}
