package enclave

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/engine/cuda"
	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/reproducible"
)

// ZeroDigest is the statement's digest for an absent item: the kernels
// library of the CPU engine, and the source hash of a development build.
var ZeroDigest = strings.Repeat("0", 64)

// Config says how to boot. The zero value boots with TEE auto-detection,
// the embedded model on the CPU, and GPU evidence from NVML.
type Config struct {
	// TEE is one of TEEs ("" means auto).
	TEE string
	// TEEImpl, when set, is used instead of opening Config.TEE (tests pass a
	// ConfigFSTEE over a fake configfs).
	TEEImpl TEE
	// GPUEvidence is one of GPUEvidenceSources ("" means auto: sim for the
	// sim TEE, nvml otherwise).
	GPUEvidence string
	// SimGPUs is the number of simulated GPUs with GPU evidence "sim"
	// (0 means 1; use GPUEvidence "none" for no GPU).
	SimGPUs int
	// ModelPath is the GGUF file to serve; "" means the embedded stories260K.
	ModelPath string
	// ModelID is the model's name in the API; "" means the file's base name
	// without ".gguf" (or "stories260K").
	ModelID string
	// Engine configures the engine (device, threads, context, kernels).
	Engine engine.Options
	// LicenseID goes into the statement.
	LicenseID string
	// Rand is the source of keys and the boot nonce; nil means crypto/rand.
	Rand io.Reader
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logf receives boot progress lines (never secrets); nil discards them.
	Logf func(format string, args ...any)
}

// Enclave is a booted appliance: the engine, the keys (in memory only), the
// boot statement, the TEE and the boot-time GPU evidence. Its methods are
// safe for concurrent use.
type Enclave struct {
	Engine  *engine.Engine
	ModelID string

	keys    *keys.KeySet
	receipt ed25519.PrivateKey
	tee     TEE
	base    attest.Statement
	gpus    []GPU
	gpuEv   []attest.GPUEvidence
	now     func() time.Time
	boot    time.Time

	mu     sync.RWMutex
	closed bool
}

// ErrClosed is returned by an Enclave used after Close.
var ErrClosed = errors.New("enclave: closed")

// NonceError is a client nonce that is not 16 to 64 bytes.
type NonceError struct{ Len int }

func (e *NonceError) Error() string {
	return fmt.Sprintf("nonce of %d bytes: want %d to %d bytes", e.Len, attest.MinNonceSize, attest.MaxNonceSize)
}

// Boot brings the appliance up: it opens the TEE (refusing to start without
// one unless the TEE is "sim"), loads the model, measures the binary, the
// model bytes and the kernels library, generates the HPKE key set and the
// Ed25519 receipt key in memory, draws the boot nonce, collects each GPU's
// attestation report for the statement's GPU nonce, writes the boot statement
// and checks that the TEE produces evidence for it.
func Boot(cfg Config) (_ *Enclave, err error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if cfg.TEE == "" {
		cfg.TEE = TEEAuto
	}
	if !slices.Contains(TEEs, cfg.TEE) {
		return nil, fmt.Errorf("unknown tee %q (want one of %s)", cfg.TEE, strings.Join(TEEs, ", "))
	}
	if cfg.GPUEvidence == "" {
		cfg.GPUEvidence = GPUEvidenceAuto
	}
	if !slices.Contains(GPUEvidenceSources, cfg.GPUEvidence) {
		return nil, fmt.Errorf("unknown gpu evidence source %q (want one of %s)", cfg.GPUEvidence, strings.Join(GPUEvidenceSources, ", "))
	}
	if cfg.SimGPUs < 0 || cfg.SimGPUs > attest.MaxGPUs {
		return nil, fmt.Errorf("sim gpus %d: want 0 to %d", cfg.SimGPUs, attest.MaxGPUs)
	}

	e := &Enclave{now: now, boot: now().UTC()}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	// TEE first: without one there is nothing to boot.
	e.tee = cfg.TEEImpl
	if e.tee == nil {
		if e.tee, err = OpenTEE(cfg.TEE); err != nil {
			return nil, err
		}
	}
	logf("tee: %s", e.tee.Kind())

	// Model and engine.
	var modelBytes []byte
	if cfg.ModelPath == "" {
		e.Engine, err = engine.LoadDefault(cfg.Engine)
		e.ModelID = embedded.Stories260KName
	} else {
		e.Engine, err = engine.Open(cfg.ModelPath, cfg.Engine)
		e.ModelID = strings.TrimSuffix(filepath.Base(cfg.ModelPath), ".gguf")
	}
	if err != nil {
		return nil, err
	}
	if cfg.ModelID != "" {
		e.ModelID = cfg.ModelID
	}
	modelBytes = e.Engine.File.Bytes()
	msum := sha256.Sum256(modelBytes) // the bytes the engine runs, not a re-read of the file
	kernels := ZeroDigest
	if b, ok := e.Engine.Backend.(*cuda.Backend); ok {
		kernels = b.KernelsDigest()
	}
	logf("model: %s (%s), backend %s, kernels %s", e.ModelID, hex.EncodeToString(msum[:]), e.Engine.Backend.Name(), kernels)

	// The running binary and the source it claims.
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate the running binary: %w", err)
	}
	binDigest, err := reproducible.FileSHA256(exe)
	if err != nil {
		return nil, fmt.Errorf("hash the running binary: %w", err)
	}
	source, ok, serr := reproducible.Embedded()
	if !ok {
		source = ZeroDigest
		if serr != nil {
			logf("warning: %v", serr)
		}
		logf("warning: development build: no embedded source hash; the statement says %s", ZeroDigest)
	}

	// Keys, in memory only.
	if e.keys, err = keys.GenerateKeySet(rnd); err != nil {
		return nil, err
	}
	var seed [ed25519.SeedSize]byte
	if _, err := io.ReadFull(rnd, seed[:]); err != nil {
		return nil, fmt.Errorf("receipt key: %w", err)
	}
	e.receipt = ed25519.NewKeyFromSeed(seed[:])
	clear(seed[:])
	var bootNonce [32]byte
	if _, err := io.ReadFull(rnd, bootNonce[:]); err != nil {
		return nil, fmt.Errorf("boot nonce: %w", err)
	}

	st := attest.Statement{
		Version:            attest.StatementVersion,
		SourceHash:         source,
		BinaryDigest:       binDigest,
		KernelsDigest:      kernels,
		ModelDigest:        hex.EncodeToString(msum[:]),
		ReceiptSigningKey:  base64.StdEncoding.EncodeToString(e.receipt.Public().(ed25519.PublicKey)),
		BootNonce:          hex.EncodeToString(bootNonce[:]),
		GPUEvidenceDigests: []string{},
		LicenseID:          cfg.LicenseID,
		BootTime:           attest.FormatTime(e.boot),
		IssuedAt:           attest.FormatTime(e.boot),
	}
	for _, c := range e.keys.Configs() {
		hc := attest.HPKEKeyConfig{KeyID: c.KeyID, KEMID: c.KEM, PublicKey: base64.StdEncoding.EncodeToString(c.PublicKey)}
		for _, a := range c.Algorithms {
			hc.Suites = append(hc.Suites, attest.SymmetricAlgs{KDFID: a.KDF, AEADID: a.AEAD})
		}
		st.HPKEKeyConfigs = append(st.HPKEKeyConfigs, hc)
	}
	gpuNonce, err := st.GPUNonce()
	if err != nil {
		return nil, err
	}

	// GPU evidence, once per boot, bound to the keys and the boot nonce.
	src := cfg.GPUEvidence
	if src == GPUEvidenceAuto {
		src = GPUEvidenceNVML
		if e.tee.Kind() == attest.KindSim {
			src = GPUEvidenceSim
		}
	}
	switch src {
	case GPUEvidenceSim:
		n := cfg.SimGPUs
		if n == 0 {
			n = 1
		}
		e.gpus, err = simGPUs(n, gpuNonce)
	case GPUEvidenceNVML:
		var note string
		e.gpus, note, err = nvmlGPUs(gpuNonce)
		if note != "" {
			logf("gpus: none (%s)", note)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gpu evidence: %w", err)
	}
	for _, g := range e.gpus {
		status := "evidence collected"
		if !g.Evidence {
			status = g.Note
		}
		logf("gpu %d: %s, cc %s, dev tools %s: %s", g.Index, g.Name, g.CCMode, g.DevTools, status)
		if g.ev != nil {
			e.gpuEv = append(e.gpuEv, *g.ev)
			st.GPUEvidenceDigests = append(st.GPUEvidenceDigests, attest.Digest(g.ev.Report))
		}
	}
	if len(e.gpuEv) > attest.MaxGPUs {
		return nil, fmt.Errorf("%d gpus with evidence, at most %d", len(e.gpuEv), attest.MaxGPUs)
	}
	if _, err := st.Marshal(); err != nil {
		return nil, fmt.Errorf("boot statement: %w", err)
	}
	e.base = st

	// The TEE must answer now, not at the first client's request.
	if _, err := e.Evidence(nil); err != nil {
		return nil, err
	}
	return e, nil
}

// Statement returns the boot statement (issued at boot, no client nonce).
func (e *Enclave) Statement() attest.Statement {
	s := e.base
	s.HPKEKeyConfigs = slices.Clone(s.HPKEKeyConfigs)
	s.GPUEvidenceDigests = slices.Clone(s.GPUEvidenceDigests)
	return s
}

// Keys returns the HPKE key set requests are encrypted to.
func (e *Enclave) Keys() *keys.KeySet { return e.keys }

// TEEKind returns the bundle's tee.kind.
func (e *Enclave) TEEKind() string { return e.tee.Kind() }

// Simulated reports whether any evidence of this enclave is simulated.
func (e *Enclave) Simulated() bool {
	if e.tee.Kind() == attest.KindSim {
		return true
	}
	for _, g := range e.gpus {
		if g.Simulated {
			return true
		}
	}
	return false
}

// GPUs returns what was found about each GPU at boot.
func (e *Enclave) GPUs() []GPU { return slices.Clone(e.gpus) }

// BootTime returns the boot time.
func (e *Enclave) BootTime() time.Time { return e.boot }

// Evidence returns a fresh evidence bundle: a statement issued now that
// carries nonce (nil: no client nonce), new TEE evidence binding it, and the
// boot-time GPU evidence. nonce must be attest.MinNonceSize to
// attest.MaxNonceSize bytes (*NonceError).
func (e *Enclave) Evidence(nonce []byte) (*attest.Bundle, error) {
	if nonce != nil && (len(nonce) < attest.MinNonceSize || len(nonce) > attest.MaxNonceSize) {
		return nil, &NonceError{Len: len(nonce)}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	st := e.Statement()
	st.IssuedAt = attest.FormatTime(e.now())
	if nonce != nil {
		st.Nonce = hex.EncodeToString(nonce)
	}
	b, err := st.Marshal()
	if err != nil {
		return nil, err
	}
	tee, err := e.tee.Evidence(attest.ReportData(b))
	if err != nil {
		return nil, err
	}
	bundle := &attest.Bundle{Version: attest.BundleVersion, Statement: b, TEE: tee, GPUs: slices.Clone(e.gpuEv)}
	if bundle.GPUs == nil {
		bundle.GPUs = []attest.GPUEvidence{}
	}
	if err := bundle.Validate(); err != nil {
		return nil, err
	}
	return bundle, nil
}

// ReceiptPublicKey returns the Ed25519 receipt-signing public key.
func (e *Enclave) ReceiptPublicKey() ed25519.PublicKey {
	return slices.Clone(e.receipt.Public().(ed25519.PublicKey))
}

// SignReceipt signs msg with the receipt-signing key.
func (e *Enclave) SignReceipt(msg []byte) ([]byte, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	return ed25519.Sign(e.receipt, msg), nil
}

// Close closes the engine and the TEE and wipes the keys: the receipt key's
// bytes are zeroed and the HPKE key set is closed (see package keys for what
// Go lets it wipe: the standard library's internal copies of HPKE private
// keys stay in memory until the collector reuses it). Close is idempotent.
func (e *Enclave) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	var errs []error
	if e.Engine != nil {
		errs = append(errs, e.Engine.Close())
	}
	if e.tee != nil {
		errs = append(errs, e.tee.Close())
	}
	if e.keys != nil {
		errs = append(errs, e.keys.Close())
	}
	clear(e.receipt)
	return errors.Join(errs...)
}
