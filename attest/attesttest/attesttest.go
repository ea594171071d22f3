// Package attesttest mints evidence bundles under fresh test roots, and
// tampers with them, for tests of packages that verify evidence (attest,
// policy, client, enclave).
//
// The evidence is simulated (package attest/sim): a TEE quote and GPU
// reports signed with Ed25519 by an [Authority]'s key. A verifier built
// with [Authority.Options] trusts that key and nothing else, so a test can
// check that verification really depends on the root (evidence minted by
// another Authority must fail). Every bundle is a real, well-formed bundle:
// the statement is canonical, the quote's REPORTDATA binds the statement
// bytes, and the GPU reports carry the statement's GPU nonce.
package attesttest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/sim"
)

// Authority is a simulation root that mints evidence.
type Authority struct {
	key ed25519.PrivateKey
}

// NewAuthority returns an authority with a fresh key from rand (nil means
// crypto/rand).
func NewAuthority(r io.Reader) (*Authority, error) {
	if r == nil {
		r = rand.Reader
	}
	_, k, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, err
	}
	return &Authority{key: k}, nil
}

// PublicAuthority returns the authority of the project's public simulation
// root (sim.PublicRootKey): what the appliance's simulation mode signs with.
func PublicAuthority() *Authority { return &Authority{key: sim.PublicRootKey()} }

// Root returns the authority's public key.
func (a *Authority) Root() ed25519.PublicKey { return a.key.Public().(ed25519.PublicKey) }

// Options returns verifier options that trust this authority, with the
// clock fixed at now.
func (a *Authority) Options(now time.Time) attest.Options {
	return attest.Options{SimRoot: a.Root(), Now: func() time.Time { return now }}
}

// Spec says what to mint. The zero value of each evidence field is the
// healthy value (debug off, CC on, dev tools off).
type Spec struct {
	// Statement is the statement to bind; its GPUEvidenceDigests are
	// filled in by Mint (one per GPU) unless WrongGPUDigest.
	Statement attest.Statement
	// GPUs is the number of simulated GPUs.
	GPUs int
	// Quote fields.
	Debug bool
	MRTD  [48]byte
	RTMR  [4][48]byte
	SVN   [16]byte
	// GPU fields.
	CCOff    bool
	DevTools bool
	Driver   string // default "595.58.03"
	VBIOS    string // default "98.02.81.00.01"

	// Faults, each breaking exactly one binding while keeping every
	// signature valid.
	//
	// WrongGPUNonce requests GPU 0's report with a nonce that is not the
	// statement's GPU nonce (as if taken in another boot).
	WrongGPUNonce bool
	// WrongGPUDigest lists a digest for GPU 0 that is not its report's.
	WrongGPUDigest bool
	// WrongReportData makes the quote carry report data of other bytes.
	WrongReportData bool
}

// Statement returns a valid statement with fixed, recognisable test values,
// boot and issue time now and the given client nonce (may be nil).
func Statement(now time.Time, nonce []byte) attest.Statement {
	h := func(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }
	pk := sha512.Sum512([]byte("test hpke public key"))
	rk := sha256.Sum256([]byte("test receipt key"))
	s := attest.Statement{
		Version:       attest.StatementVersion,
		SourceHash:    h("test source"),
		BinaryDigest:  h("test binary"),
		KernelsDigest: h("test kernels"),
		ModelDigest:   h("test model"),
		HPKEKeyConfigs: []attest.HPKEKeyConfig{{
			KeyID: 1, KEMID: 0x0020, PublicKey: base64.StdEncoding.EncodeToString(pk[:32]),
			Suites: []attest.SymmetricAlgs{{KDFID: 1, AEADID: 3}},
		}},
		ReceiptSigningKey:  base64.StdEncoding.EncodeToString(rk[:]),
		BootNonce:          h("test boot nonce"),
		GPUEvidenceDigests: []string{},
		LicenseID:          "test-license",
		BootTime:           attest.FormatTime(now.Add(-time.Minute)),
		IssuedAt:           attest.FormatTime(now),
	}
	if nonce != nil {
		s.Nonce = hex.EncodeToString(nonce)
	}
	return s
}

// Mint builds a bundle per spec.
func (a *Authority) Mint(spec Spec) (*attest.Bundle, error) {
	stmt := spec.Statement
	if spec.GPUs < 0 || spec.GPUs > attest.MaxGPUs {
		return nil, fmt.Errorf("attesttest: %d gpus", spec.GPUs)
	}
	// The GPU nonce depends only on keys and boot nonce, so it can be
	// computed before the digests are known.
	nonce, err := stmt.GPUNonce()
	if err != nil {
		return nil, err
	}
	driver, vbios := spec.Driver, spec.VBIOS
	if driver == "" {
		driver = "595.58.03"
	}
	if vbios == "" {
		vbios = "98.02.81.00.01"
	}
	b := &attest.Bundle{Version: attest.BundleVersion, GPUs: []attest.GPUEvidence{}}
	stmt.GPUEvidenceDigests = []string{}
	for i := range spec.GPUs {
		r := &sim.GPUReport{
			CCEnabled: !spec.CCOff, DevToolsEnabled: spec.DevTools, Nonce: nonce,
			Measurement:   sha512.Sum384([]byte("sim gpu firmware")),
			DriverVersion: driver, VBIOSVersion: vbios, Serial: fmt.Sprintf("SIM-GPU-%04d", i),
			FWID: sha256.Sum256(fmt.Appendf(nil, "sim gpu fwid %d", i)),
		}
		if i == 0 && spec.WrongGPUNonce {
			r.Nonce = sha256.Sum256([]byte("another boot"))
		}
		rep, err := sim.SignGPUReport(a.key, r)
		if err != nil {
			return nil, err
		}
		d := attest.Digest(rep)
		if i == 0 && spec.WrongGPUDigest {
			d = attest.Digest(append(rep, 0))
		}
		stmt.GPUEvidenceDigests = append(stmt.GPUEvidenceDigests, d)
		b.GPUs = append(b.GPUs, attest.GPUEvidence{Kind: attest.GPUKindSim, Report: rep})
	}
	sb, err := stmt.Marshal()
	if err != nil {
		return nil, err
	}
	b.Statement = sb
	q := &sim.Quote{Debug: spec.Debug, MRTD: spec.MRTD, RTMR: spec.RTMR, TEETCBSVN: spec.SVN, ReportData: attest.ReportData(sb)}
	if spec.WrongReportData {
		q.ReportData = attest.ReportData(append(sb, ' '))
	}
	b.TEE = attest.TEEEvidence{Kind: attest.KindSim, Quote: sim.SignQuote(a.key, q)}
	return b, nil
}

// Clone returns a deep copy of b.
func Clone(b *attest.Bundle) *attest.Bundle {
	c := *b
	c.Statement = append([]byte(nil), b.Statement...)
	c.TEE = b.TEE
	for _, p := range []*[]byte{&c.TEE.Quote, &c.TEE.Certificates, &c.TEE.EventLog, &c.TEE.Collateral, &c.TEE.HCLReport, &c.TEE.TPMQuote} {
		if *p != nil {
			*p = append([]byte(nil), (*p)...)
		}
	}
	c.GPUs = make([]attest.GPUEvidence, len(b.GPUs))
	for i, g := range b.GPUs {
		g.Report = append([]byte(nil), g.Report...)
		if g.CertChain != nil {
			g.CertChain = append([]byte(nil), g.CertChain...)
		}
		if g.RIMs != nil {
			rims := make([]attest.RIM, len(g.RIMs))
			for j, r := range g.RIMs {
				rims[j] = attest.RIM{Name: r.Name, XML: append([]byte(nil), r.XML...)}
			}
			g.RIMs = rims
		}
		c.GPUs[i] = g
	}
	return &c
}

// FlipQuoteByte returns a copy of b with bit 0 of quote byte i flipped.
func FlipQuoteByte(b *attest.Bundle, i int) *attest.Bundle {
	c := Clone(b)
	c.TEE.Quote[i] ^= 1
	return c
}

// FlipGPUReportByte returns a copy of b with bit 0 of byte i of GPU g's
// report flipped.
func FlipGPUReportByte(b *attest.Bundle, g, i int) *attest.Bundle {
	c := Clone(b)
	c.GPUs[g].Report[i] ^= 1
	return c
}

// TamperStatement returns a copy of b whose statement differs in one hex
// digit of model_digest and is still canonical, so it parses and only the
// binding to the TEE evidence can catch it.
func TamperStatement(b *attest.Bundle) (*attest.Bundle, error) {
	s, err := attest.ParseStatement(b.Statement)
	if err != nil {
		return nil, err
	}
	d := []byte(s.ModelDigest)
	if d[0] == '0' {
		d[0] = '1'
	} else {
		d[0] = '0'
	}
	s.ModelDigest = string(d)
	sb, err := s.Marshal()
	if err != nil {
		return nil, err
	}
	c := Clone(b)
	c.Statement = sb
	return c, nil
}

// SwapGPUs returns a copy of b with the GPU evidence of b2 (another boot,
// another statement) in place of its own.
func SwapGPUs(b, b2 *attest.Bundle) *attest.Bundle {
	c := Clone(b)
	c.GPUs = Clone(b2).GPUs
	return c
}
