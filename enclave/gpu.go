package enclave

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/nvgpu"
	"github.com/sparkinfer/cc/attest/sim"
	"github.com/sparkinfer/cc/enclave/nvml"
)

// GPU evidence sources accepted by Config.GPUEvidence.
const (
	GPUEvidenceAuto = "auto" // sim with --tee sim, else nvml
	GPUEvidenceNVML = "nvml" // NVML's CC attestation reports
	GPUEvidenceSim  = "sim"  // Config.SimGPUs simulated GPUs
	GPUEvidenceNone = "none" // no GPU evidence
)

// GPUEvidenceSources lists the accepted values of Config.GPUEvidence.
var GPUEvidenceSources = []string{GPUEvidenceAuto, GPUEvidenceNVML, GPUEvidenceSim, GPUEvidenceNone}

// GPU is what the appliance found about one GPU at boot.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid,omitempty"`
	// CCMode is "on", "off" or "unknown" (NVML could not tell).
	CCMode string `json:"cc_mode"`
	// DevTools is "on", "off" or "unknown".
	DevTools string `json:"dev_tools"`
	// Evidence says whether an attestation report was collected; when
	// false, Note says why, and the GPU is absent from the bundle.
	Evidence bool   `json:"evidence"`
	Note     string `json:"note,omitempty"`
	// Simulated is true for a sim GPU.
	Simulated bool `json:"simulated,omitempty"`

	ev *attest.GPUEvidence
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// simGPUs mints n simulated GPU reports (package attest/sim) with nonce: CC
// on, dev tools off, signed by the public simulation root (proves nothing).
func simGPUs(n int, nonce [32]byte) ([]GPU, error) {
	var out []GPU
	for i := range n {
		serial := fmt.Sprintf("SIMGPU%04d", i)
		meas := sha256.Sum256([]byte("sparkinfer sim gpu measurement v1"))
		var m [48]byte
		copy(m[:], meas[:])
		fwid := sha256.Sum256([]byte(serial))
		rep, err := sim.SignGPUReport(sim.PublicRootKey(), &sim.GPUReport{
			CCEnabled: true, Nonce: nonce, Measurement: m,
			DriverVersion: "sim", VBIOSVersion: "sim", Serial: serial, FWID: fwid,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, GPU{Index: i, Name: "simulated gpu", UUID: serial, CCMode: "on", DevTools: "off",
			Evidence: true, Simulated: true, ev: &attest.GPUEvidence{Kind: attest.GPUKindSim, Report: rep}})
	}
	return out, nil
}

// nvmlGPUs lists the GPUs NVML sees and collects each one's attestation
// report (requested with nonce) and attestation certificate chain. A GPU
// with CC off is listed with CCMode "off" and no evidence: not an error,
// the verifier's policy decides. Without NVML (no library or driver) the
// result is empty and the note says why.
func nvmlGPUs(nonce [32]byte) ([]GPU, string, error) {
	lib, err := nvml.Open()
	var ue *nvml.UnavailableError
	if errors.As(err, &ue) {
		return nil, ue.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	defer lib.Close()
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, "", err
	}
	if n > attest.MaxGPUs {
		return nil, "", fmt.Errorf("nvml reports %d gpus, at most %d are supported", n, attest.MaxGPUs)
	}
	ccMode, devTools, stateNote := "unknown", "unknown", ""
	st, err := lib.SystemCCState()
	switch {
	case err == nil:
		ccMode, devTools = onOff(st.CCEnabled), onOff(st.DevTools)
	case errors.Is(err, nvml.ErrNotSupported):
		ccMode, devTools, stateNote = "off", "unknown", "the driver does not support confidential computing"
	default:
		return nil, "", err
	}
	var out []GPU
	for i := range n {
		d, err := lib.Device(i)
		if err != nil {
			return nil, "", err
		}
		g := GPU{Index: i, Name: d.Name, UUID: d.UUID, CCMode: ccMode, DevTools: devTools}
		if ccMode == "off" {
			g.Note = "cc mode off: no attestation report (the verifier's policy decides; the default policy rejects)"
			if stateNote != "" {
				g.Note = stateNote + "; " + g.Note
			}
			out = append(out, g)
			continue
		}
		rep, err := d.AttestationReport(nonce)
		if err != nil {
			if errors.Is(err, nvml.ErrNotSupported) {
				g.Note = "attestation report not supported: " + err.Error()
				out = append(out, g)
				continue
			}
			return nil, "", err
		}
		_, chain, err := d.Certificates()
		if err != nil {
			return nil, "", err
		}
		chain = trimNUL(chain)
		if _, err := nvgpu.ParseChain(chain); err != nil {
			return nil, "", fmt.Errorf("gpu %d attestation certificate chain: %w", i, err)
		}
		g.Evidence = true
		g.ev = &attest.GPUEvidence{Kind: attest.GPUKindNVIDIA, Report: rep, CertChain: chain}
		out = append(out, g)
	}
	return out, "", nil
}

func trimNUL(b []byte) []byte { return []byte(strings.TrimRight(string(b), "\x00")) }
