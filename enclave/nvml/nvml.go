// Package nvml reads the confidential-computing state and attestation
// evidence of NVIDIA GPUs through NVML, the NVIDIA Management Library.
//
// NVML is not linked: Open loads libnvidia-ml.so.1 with dlopen at run time
// (a small C shim, as package engine/cuda does for the kernels library), so
// the appliance binary builds without NVIDIA headers or libraries and runs on
// machines without them; there Open returns an *UnavailableError.
//
// # What it reads
//
//   - the system's CC capabilities and state (nvmlSystemGetConfComputeCapabilities,
//     nvmlSystemGetConfComputeState): whether CC is on, and the dev-tools mode;
//   - per GPU: name and UUID, the attestation report for a caller-chosen
//     32-byte nonce (nvmlDeviceGetConfComputeGpuAttestationReport) and the
//     certificate chains (nvmlDeviceGetConfComputeGpuCertificate).
//
// # What it does not check
//
// Nothing here verifies anything: the report and chain are returned as the
// driver gave them (package attest/nvgpu verifies them). The only checks are
// that sizes reported by the driver fit the buffers and that the report echoes
// the requested nonce. NVML entry points that an old driver lacks report
// ErrNotSupported, like NVML's own "not supported".
package nvml

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// LibraryName is the file Open loads (through the dynamic loader's search).
const LibraryName = "libnvidia-ml.so.1"

// NVML return codes this package tells apart.
const (
	codeSuccess         = 0
	codeNotSupported    = 3
	codeDriverNotLoaded = 9
	codeMissing         = C.NV_MISSING
)

// ErrNotSupported is wrapped by an *Error whose NVML call reported "not
// supported" (for example, a CC call on a GPU or driver without CC) or whose
// entry point the loaded NVML lacks.
var ErrNotSupported = errors.New("not supported")

// Error is a failed NVML call.
type Error struct {
	Op   string // NVML function
	Code int    // NVML return code, or -1 for a missing entry point
	Msg  string // nvmlErrorString
}

func (e *Error) Error() string {
	return fmt.Sprintf("nvml: %s: %s (code %d)", e.Op, e.Msg, e.Code)
}

// Unwrap maps "not supported" and a missing entry point to ErrNotSupported.
func (e *Error) Unwrap() error {
	if e.Code == codeNotSupported || e.Code == codeMissing {
		return ErrNotSupported
	}
	return nil
}

// UnavailableError means NVML could not be used at all: no library, or no
// driver. The appliance then has no GPU evidence.
type UnavailableError struct {
	What string
	Err  error
}

func (e *UnavailableError) Error() string {
	return "nvml: " + e.What + " unavailable: " + e.Err.Error()
}
func (e *UnavailableError) Unwrap() error { return e.Err }

func callErr(op string, code C.int) error {
	if code == codeSuccess {
		return nil
	}
	msg := "entry point missing from " + LibraryName
	if code != codeMissing {
		msg = C.GoString(C.nv_error_string(code))
	}
	return &Error{Op: op, Code: int(code), Msg: msg}
}

var (
	loadMu sync.Mutex
	loaded bool
	refs   int
)

// Library is an initialised NVML. Close it when done; Open may be called
// again afterwards.
type Library struct {
	closed bool
}

// Open loads NVML and initialises it. Without the library or the driver it
// returns an *UnavailableError.
func Open() (*Library, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if !loaded {
		name := C.CString(LibraryName)
		defer C.free(unsafe.Pointer(name))
		var ebuf [512]C.char
		if C.nv_load(name, &ebuf[0], C.size_t(len(ebuf))) != 0 {
			return nil, &UnavailableError{What: LibraryName, Err: errors.New(C.GoString(&ebuf[0]))}
		}
		loaded = true
	}
	if err := callErr("nvmlInit_v2", C.nv_init()); err != nil {
		return nil, &UnavailableError{What: "nvml initialisation", Err: err}
	}
	refs++
	return &Library{}, nil
}

// Close shuts NVML down (once per Open).
func (l *Library) Close() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	refs--
	return callErr("nvmlShutdown", C.nv_shutdown())
}

func cstr(b []C.char) string {
	gb := C.GoBytes(unsafe.Pointer(&b[0]), C.int(len(b)))
	if i := bytes.IndexByte(gb, 0); i >= 0 {
		gb = gb[:i]
	}
	return string(gb)
}

// DriverVersion returns the driver version, e.g. "595.58.03".
func (l *Library) DriverVersion() (string, error) {
	var b [96]C.char
	if err := callErr("nvmlSystemGetDriverVersion", C.nv_driver_version(&b[0], C.uint(len(b)))); err != nil {
		return "", err
	}
	return cstr(b[:]), nil
}

// DeviceCount returns the number of GPUs NVML sees.
func (l *Library) DeviceCount() (int, error) {
	var n C.uint
	if err := callErr("nvmlDeviceGetCount_v2", C.nv_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// CCCapabilities is the system's confidential-computing capability.
type CCCapabilities struct {
	CPU     string // "none", "amd-sev", "intel-tdx", "amd-sev-snp", "amd-snp-vtom" or "unknown(N)"
	GPUsCCS bool   // the GPUs are CC capable
}

// CCState is the system's confidential-computing state.
type CCState struct {
	Environment string // "unavailable", "sim" or "prod"
	CCEnabled   bool   // CC feature enabled
	DevTools    bool   // dev-tools mode on
}

// SystemCCCapabilities returns the CC capabilities.
func (l *Library) SystemCCCapabilities() (CCCapabilities, error) {
	var c C.nv_cc_caps
	if err := callErr("nvmlSystemGetConfComputeCapabilities", C.nv_cc_capabilities(&c)); err != nil {
		return CCCapabilities{}, err
	}
	cpu := fmt.Sprintf("unknown(%d)", c.cpuCaps)
	switch c.cpuCaps {
	case 0:
		cpu = "none"
	case 1:
		cpu = "amd-sev"
	case 2:
		cpu = "intel-tdx"
	case 3:
		cpu = "amd-sev-snp"
	case 4:
		cpu = "amd-snp-vtom"
	}
	return CCCapabilities{CPU: cpu, GPUsCCS: c.gpusCaps == 1}, nil
}

// SystemCCState returns the CC state.
func (l *Library) SystemCCState() (CCState, error) {
	var s C.nv_cc_state
	if err := callErr("nvmlSystemGetConfComputeState", C.nv_cc_system_state(&s)); err != nil {
		return CCState{}, err
	}
	env := fmt.Sprintf("unknown(%d)", s.environment)
	switch s.environment {
	case 0:
		env = "unavailable"
	case 1:
		env = "sim"
	case 2:
		env = "prod"
	}
	return CCState{Environment: env, CCEnabled: s.ccFeature == 1, DevTools: s.devToolsMode == 1}, nil
}

// Device is one GPU.
type Device struct {
	Index int
	Name  string
	UUID  string
	h     C.nv_device
}

// Device returns GPU number i.
func (l *Library) Device(i int) (*Device, error) {
	if i < 0 {
		return nil, fmt.Errorf("nvml: gpu index %d is negative", i)
	}
	var h C.nv_device
	if err := callErr("nvmlDeviceGetHandleByIndex_v2", C.nv_device_handle(C.uint(i), &h)); err != nil {
		return nil, err
	}
	d := &Device{Index: i, h: h}
	var b [96]C.char
	if err := callErr("nvmlDeviceGetName", C.nv_device_name(h, &b[0], C.uint(len(b)))); err != nil {
		return nil, err
	}
	d.Name = cstr(b[:])
	if err := callErr("nvmlDeviceGetUUID", C.nv_device_uuid(h, &b[0], C.uint(len(b)))); err != nil {
		return nil, err
	}
	d.UUID = cstr(b[:])
	return d, nil
}

// AttestationReport returns the GPU's attestation report requested with
// nonce: the SPDM GET_MEASUREMENTS request and the signed response, as
// attest/nvgpu parses it. It fails with ErrNotSupported when CC is off.
func (d *Device) AttestationReport(nonce [32]byte) ([]byte, error) {
	r := (*C.nv_cc_report)(C.calloc(1, C.size_t(unsafe.Sizeof(C.nv_cc_report{}))))
	if r == nil {
		return nil, errors.New("nvml: out of memory")
	}
	defer C.free(unsafe.Pointer(r))
	C.memcpy(unsafe.Pointer(&r.nonce[0]), unsafe.Pointer(&nonce[0]), 32)
	if err := callErr("nvmlDeviceGetConfComputeGpuAttestationReport", C.nv_get_cc_report(d.h, r)); err != nil {
		return nil, err
	}
	n := int(r.attestationReportSize)
	if n <= 0 || n > len(r.attestationReport) {
		return nil, fmt.Errorf("nvml: gpu %d: attestation report size %d out of range 1..%d", d.Index, n, len(r.attestationReport))
	}
	rep := C.GoBytes(unsafe.Pointer(&r.attestationReport[0]), C.int(n))
	// The report starts with the SPDM request, whose nonce is at bytes 4..35.
	if len(rep) < 36 || !bytes.Equal(rep[4:36], nonce[:]) {
		return nil, fmt.Errorf("nvml: gpu %d: the attestation report does not carry the requested nonce", d.Index)
	}
	return rep, nil
}

// Certificates returns the GPU's certificate chains as NVML gives them (PEM):
// the device certificate chain and the attestation certificate chain, whose
// leaf signs attestation reports.
func (d *Device) Certificates() (device, attestation []byte, err error) {
	c := (*C.nv_cc_cert)(C.calloc(1, C.size_t(unsafe.Sizeof(C.nv_cc_cert{}))))
	if c == nil {
		return nil, nil, errors.New("nvml: out of memory")
	}
	defer C.free(unsafe.Pointer(c))
	if err := callErr("nvmlDeviceGetConfComputeGpuCertificate", C.nv_get_cc_certificate(d.h, c)); err != nil {
		return nil, nil, err
	}
	n, m := int(c.certChainSize), int(c.attestationCertChainSize)
	if n < 0 || n > len(c.certChain) || m <= 0 || m > len(c.attestationCertChain) {
		return nil, nil, fmt.Errorf("nvml: gpu %d: certificate chain sizes %d, %d out of range", d.Index, n, m)
	}
	return C.GoBytes(unsafe.Pointer(&c.certChain[0]), C.int(n)),
		C.GoBytes(unsafe.Pointer(&c.attestationCertChain[0]), C.int(m)), nil
}
