// Package cuda is the engine's CUDA backend: a thin cgo binding to
// libsparkinfer_kernels.so (kernels/), which it opens with dlopen at run
// time. `go build` needs no CUDA toolkit, and one binary runs with or without
// a GPU: without one, Open or NewDevice returns an error and callers fall
// back to the CPU backend.
//
// # Integrity
//
// The kernels library is code that runs with the model's inputs, so the
// appliance measures it: Open reads the library's bytes once, hashes them,
// and loads exactly those bytes (through an anonymous memory file), so the
// digest reported for attestation is the digest of the code that runs — no
// window exists between hashing and loading. When Options.ExpectDigest is
// set, a library with another digest is refused with a *DigestError;
// AllowAnyDigestUnsafe turns that off for development.
//
// # Threads
//
// Every C entry point makes the device's CUDA context current on the calling
// thread, so any goroutine may call in; a Device serialises its own calls.
package cuda

/*
#cgo CFLAGS: -I${SRCDIR}/../../kernels
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABIVersion is the version of sparkinfer_kernels.h this binding speaks.
const ABIVersion = C.SK_ABI_VERSION

// LibraryName is the kernels library's file name.
const LibraryName = "libsparkinfer_kernels.so"

// Options control how the kernels library is opened.
type Options struct {
	// ExpectDigest is the hex SHA-256 the library must have (the digest
	// recorded at build time). Empty means "no digest recorded": Open then
	// refuses to load unless AllowAnyDigestUnsafe is set.
	ExpectDigest string
	// AllowAnyDigestUnsafe loads a library whatever its digest. For
	// development only: the digest is still measured and reported.
	AllowAnyDigestUnsafe bool
}

// Library is the opened kernels library. There is at most one per process.
type Library struct {
	Path   string
	Digest string // hex SHA-256 of the bytes that were loaded
}

// UnavailableError means no usable kernels library or GPU: callers fall
// back to the CPU backend.
type UnavailableError struct {
	What string
	Err  error
}

func (e *UnavailableError) Error() string { return "cuda: " + e.What + ": " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// DigestError means the library's bytes are not the measured ones.
type DigestError struct {
	Path      string
	Got, Want string
}

func (e *DigestError) Error() string {
	if e.Want == "" {
		return fmt.Sprintf("cuda: kernels library %q has digest %s and no digest was recorded at build time; refusing to load it (hint: build a release, or allow any digest for development)", e.Path, e.Got)
	}
	return fmt.Sprintf("cuda: kernels library %q has digest %s, want the measured %s", e.Path, e.Got, e.Want)
}

// Error is a failed kernels-library call.
type Error struct {
	Op   string
	Code int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (code %d)", e.Op, e.Msg, e.Code) }

var (
	openMu  sync.Mutex
	openLib *Library
)

// DefaultPath is where the appliance looks for the kernels library: the
// SPARKINFER_KERNELS environment variable, else LibraryName beside the
// executable, else kernels/build/ under the working directory.
func DefaultPath() string {
	if p := os.Getenv("SPARKINFER_KERNELS"); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), LibraryName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join("kernels", "build", LibraryName)
}

// Open loads the kernels library at path after checking its digest.
// Opening a second, different library in one process is an error.
func Open(path string, opts Options) (*Library, error) {
	openMu.Lock()
	defer openMu.Unlock()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &UnavailableError{What: "kernels library", Err: err}
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	if openLib != nil {
		if openLib.Digest != digest {
			return nil, fmt.Errorf("cuda: a different kernels library (%s) is already loaded", openLib.Digest)
		}
		return openLib, nil
	}
	if !opts.AllowAnyDigestUnsafe && digest != opts.ExpectDigest {
		return nil, &DigestError{Path: path, Got: digest, Want: opts.ExpectDigest}
	}
	// Load exactly the bytes that were hashed, from an anonymous file.
	fd, err := unix.MemfdCreate("sparkinfer_kernels", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, &UnavailableError{What: "memfd", Err: err}
	}
	f := os.NewFile(uintptr(fd), "sparkinfer_kernels")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return nil, &UnavailableError{What: "memfd", Err: err}
	}
	cpath := C.CString(fmt.Sprintf("/proc/self/fd/%d", fd))
	defer C.free(unsafe.Pointer(cpath))
	var ebuf [512]C.char
	v := C.sk_load(cpath, &ebuf[0], C.size_t(len(ebuf)))
	if v < 0 {
		return nil, &UnavailableError{What: "dlopen " + path, Err: errors.New(C.GoString(&ebuf[0]))}
	}
	if v != ABIVersion {
		return nil, &UnavailableError{What: "kernels library", Err: fmt.Errorf("abi version %d, want %d", v, ABIVersion)}
	}
	openLib = &Library{Path: path, Digest: digest}
	return openLib, nil
}

// FileDigest returns the hex SHA-256 of the file at path (what Open would
// measure), without loading it.
func FileDigest(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// Info describes a GPU.
type Info struct {
	Name                 string
	ComputeCapability    string // "9.0"
	SMs                  int
	MemoryBytes          uint64
	ClockMHz             int
	MemoryClockMHz       int
	MemoryBusWidthBits   int
	DriverVersion        int
	RuntimeVersion       int
	TheoreticalBandwidth float64 // bytes/s from memory clock and bus width (DDR)
}

// Device is one GPU with its stream. Its methods serialise.
type Device struct {
	mu  sync.Mutex
	c   *C.sk_ctx
	lib *Library
}

// NewDevice opens GPU number i.
func (l *Library) NewDevice(i int) (*Device, error) {
	var ebuf [512]C.char
	c := C.w_create(C.int(i), &ebuf[0], C.size_t(len(ebuf)))
	if c == nil {
		return nil, &UnavailableError{What: fmt.Sprintf("device %d", i), Err: errors.New(C.GoString(&ebuf[0]))}
	}
	return &Device{c: c, lib: l}, nil
}

// Close releases the device's stream and scratch memory.
func (d *Device) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c != nil {
		C.w_destroy(d.c)
		d.c = nil
	}
}

func (d *Device) check(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(rc), Msg: C.GoString(C.w_error(d.c))}
}

// Info reports the GPU's properties.
func (d *Device) Info() (Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var in C.sk_device_info
	if err := d.check("info", C.w_info(d.c, &in)); err != nil {
		return Info{}, err
	}
	out := Info{
		Name:               C.GoString(&in.name[0]),
		ComputeCapability:  fmt.Sprintf("%d.%d", int(in.cc_major), int(in.cc_minor)),
		SMs:                int(in.sm_count),
		MemoryBytes:        uint64(in.mem_total),
		ClockMHz:           int(in.clock_khz) / 1000,
		MemoryClockMHz:     int(in.mem_clock_khz) / 1000,
		MemoryBusWidthBits: int(in.mem_bus_width),
		DriverVersion:      int(in.driver_version),
		RuntimeVersion:     int(in.runtime_version),
	}
	out.TheoreticalBandwidth = 2 * float64(in.mem_clock_khz) * 1e3 * float64(in.mem_bus_width) / 8
	return out, nil
}

// CopyBandwidth measures device-to-device copy bandwidth (bytes read plus
// written per second), the median of reps copies of n bytes.
func (d *Device) CopyBandwidth(n int, reps int) (float64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var bw C.double
	err := d.check("copy bandwidth", C.w_copy_bandwidth(d.c, C.size_t(n), C.int(reps), &bw))
	return float64(bw), err
}

// Sync waits for all enqueued work.
func (d *Device) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("sync", C.w_sync(d.c))
}

// BuildKernelsDigest is the hex SHA-256 of the kernels library recorded at
// build time; a release build sets it with
// -ldflags "-X github.com/sparkinfer/cc/engine/cuda.BuildKernelsDigest=…".
// Empty in a development build, where only AllowAnyDigestUnsafe loads a
// library.
var BuildKernelsDigest string

// OpenDevice opens the kernels library at path (DefaultPath() when empty),
// expecting BuildKernelsDigest unless allowAnyDigestUnsafe, and GPU number
// dev.
func OpenDevice(path string, dev int, allowAnyDigestUnsafe bool) (*Device, *Library, error) {
	if path == "" {
		path = DefaultPath()
	}
	lib, err := Open(path, Options{ExpectDigest: BuildKernelsDigest, AllowAnyDigestUnsafe: allowAnyDigestUnsafe})
	if err != nil {
		return nil, nil, err
	}
	d, err := lib.NewDevice(dev)
	if err != nil {
		return nil, nil, err
	}
	return d, lib, nil
}
