package attest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/sim"
	"github.com/sparkinfer/cc/attest/tdx"
)

// Options is the deployment-wide trust material and environment of a
// [Verifier], fixed at construction. The zero value is usable: the real
// clock and the public simulation root.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SimRoot is the trust anchor for simulated evidence; nil means the
	// project's public simulation root (sim.PublicRoot). Simulated evidence
	// proves nothing whatever the root; tests use fresh roots
	// (package attest/attesttest) to check that verification really
	// depends on it.
	SimRoot ed25519.PublicKey
	// TDXPCS fetches Intel PCS collateral (with its on-disk cache) for TDX
	// quotes whose bundle carries no collateral; nil means offline.
	TDXPCS *tdx.PCS
	// SNPGetter fetches AMD KDS CRLs; nil means offline (revocation
	// skipped, which the default policy rejects).
	SNPGetter trust.HTTPSGetter
	// GPURIMDir is an offline cache of NVIDIA RIMs named by RIM id, used
	// for GPUs whose bundle entry carries no RIMs; "" means none.
	GPURIMDir string
	// GPUHTTPClient enables OCSP revocation checks of GPU certificate
	// chains; nil means offline.
	GPUHTTPClient *http.Client
}

// Expectations are the per-bundle expectations given to [Verifier.Verify].
type Expectations struct {
	// Nonce is the client nonce the caller sent with its request. When
	// nil, freshness is not checked: the check "statement.nonce" is
	// skipped and Claims.NonceChecked is false, which the default policy
	// rejects.
	Nonce []byte
}

// Result is the outcome of [Verifier.Verify].
type Result struct {
	// Claims are the claims read from the evidence (see Claims for when
	// they may be trusted).
	Claims Claims `json:"claims"`
	// Checks lists every check carried out, in order.
	Checks check.List `json:"checks"`
}

// UnsupportedKindError reports evidence of a kind this build cannot verify.
// It is wrapped in a *check.UnavailableError: the evidence was not
// rejected, it could not be checked at all.
type UnsupportedKindError struct {
	Kind string // e.g. "tee kind \"tdx\""
}

func (e *UnsupportedKindError) Error() string {
	return "unsupported evidence kind: no verifier for " + e.Kind + " in this build"
}

// Verifier verifies evidence bundles. It is safe for concurrent use; its
// options never change after construction.
type Verifier struct {
	now     func() time.Time
	simRoot ed25519.PublicKey
	opts    Options
}

// NewVerifier returns a verifier with the given trust material.
func NewVerifier(opts Options) (*Verifier, error) {
	v := &Verifier{now: opts.Now, simRoot: opts.SimRoot, opts: opts}
	if v.now == nil {
		v.now = time.Now
	}
	if v.simRoot == nil {
		v.simRoot = sim.PublicRoot()
	} else if len(v.simRoot) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("attest: simulation root is %d bytes, want %d", len(v.simRoot), ed25519.PublicKeySize)
	}
	v.simRoot = bytes.Clone(v.simRoot)
	return v, nil
}

// Verify verifies a bundle with a verifier built from opts; see
// [Verifier.Verify].
func Verify(ctx context.Context, b *Bundle, opts Options, exp Expectations) (*Result, error) {
	v, err := NewVerifier(opts)
	if err != nil {
		return nil, err
	}
	return v.Verify(ctx, b, exp)
}

// Verify checks a bundle and returns its claims and checklist:
//
//   - the bundle's structure and the statement's canonical encoding;
//   - the TEE evidence, by its kind's verifier (signatures, certificate
//     chains, collateral where available);
//   - that the TEE evidence's report data equals ReportData(statement bytes);
//   - per GPU: its verifier's signature and chain checks, that SHA-256 of
//     its report is the statement's gpu_evidence_digests entry at its
//     position, and that its request nonce equals the statement's GPUNonce;
//   - that the statement lists exactly as many GPU digests as there are GPUs;
//   - that the statement's nonce equals exp.Nonce (skipped when exp.Nonce is nil).
//
// It does not judge values (debug, TCB status, measurements, CC mode,
// simulation, evidence age): that is policy.Evaluate's job, on the claims.
//
// The error is nil when every check carried out passed; a *check.ParseError
// when the bundle or a part of it is unusable (Result is then nil if the
// statement could not be read); a *check.VerifyError naming the first
// failing check when evidence was rejected (the Result lists every check);
// a *check.UnavailableError (wrapping *UnsupportedKindError, for instance)
// when a part could not be checked.
func (v *Verifier) Verify(ctx context.Context, b *Bundle, exp Expectations) (*Result, error) {
	if b == nil {
		return nil, &check.ParseError{What: "evidence bundle", Err: errors.New("nil bundle")}
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if exp.Nonce != nil && (len(exp.Nonce) < MinNonceSize || len(exp.Nonce) > MaxNonceSize) {
		return nil, &check.ParseError{What: "expected nonce", Err: fmt.Errorf("%d bytes, want %d to %d", len(exp.Nonce), MinNonceSize, MaxNonceSize)}
	}
	stmt, err := ParseStatement(b.Statement)
	if err != nil {
		return nil, err
	}
	now := v.now()
	r := &Result{Claims: Claims{
		Version:         ClaimsVersion,
		VerifiedAt:      FormatTime(now),
		StatementDigest: Digest(b.Statement),
		Statement:       *stmt,
		GPUs:            []GPUClaims{},
	}}
	cl := &r.Checks
	cl.Pass("statement.decode", "canonical %s, sha256 %s", StatementVersion, r.Claims.StatementDigest)

	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}

	// The TEE evidence and its binding to the statement bytes.
	want := ReportData(b.Statement)
	tee, got, err := v.verifyTEE(ctx, now, &b.TEE, want[:], cl)
	r.Claims.TEE = tee
	switch {
	case err != nil:
		note(err)
		cl.Skip("tee.report_data", "tee evidence not verified, binding not checked")
	case bytes.Equal(got, want[:]):
		r.Claims.TEE.ReportDataBound = true
		cl.Pass("tee.report_data", "report data = sha512(%q || 0x00 || statement)", reportDataLabel)
	default:
		cl.Fail("tee.report_data", "report data does not bind the statement: got %s, want %s", short(got), short(want[:]))
		note(&check.VerifyError{Check: "tee.report_data", Err: errors.New("report data does not bind the statement")})
	}

	// GPUs: count, digests, signatures, nonces.
	if len(stmt.GPUEvidenceDigests) == len(b.GPUs) {
		cl.Pass("gpu.count", "%d gpu evidence entries, %d digests in the statement", len(b.GPUs), len(stmt.GPUEvidenceDigests))
	} else {
		cl.Fail("gpu.count", "%d gpu evidence entries but %d digests in the statement", len(b.GPUs), len(stmt.GPUEvidenceDigests))
		note(&check.VerifyError{Check: "gpu.count", Err: errors.New("gpu evidence count differs from the statement")})
	}
	gpuNonce, _ := stmt.GPUNonce() // the statement is valid
	for i := range b.GPUs {
		g := &b.GPUs[i]
		name := fmt.Sprintf("gpu.%d", i)
		gc := GPUClaims{Index: i, Kind: g.Kind, EvidenceDigest: Digest(g.Report)}
		if i < len(stmt.GPUEvidenceDigests) && stmt.GPUEvidenceDigests[i] == gc.EvidenceDigest {
			gc.InStatement = true
			cl.Pass(name+".evidence_digest", "sha256 %s is listed in the statement", gc.EvidenceDigest)
		} else {
			cl.Fail(name+".evidence_digest", "gpu evidence digest not in statement: sha256 %s is not the statement's entry %d", gc.EvidenceDigest, i)
			note(&check.VerifyError{Check: name + ".evidence_digest", Err: errors.New("gpu evidence digest not in statement")})
		}
		nonce, err := v.verifyGPU(ctx, now, g, name, &gc, cl)
		if err != nil {
			note(err)
			cl.Skip(name+".nonce", "gpu evidence not verified, nonce not checked")
		} else if gc.Nonce = hex.EncodeToString(nonce); bytes.Equal(nonce, gpuNonce[:]) {
			gc.NonceBound = true
			cl.Pass(name+".nonce", "report nonce is the statement's gpu nonce %s", short(gpuNonce[:]))
		} else {
			cl.Fail(name+".nonce", "report nonce %s is not the statement's gpu nonce %s", short(nonce), short(gpuNonce[:]))
			note(&check.VerifyError{Check: name + ".nonce", Err: errors.New("gpu report nonce does not match the statement's gpu nonce")})
		}
		r.Claims.GPUs = append(r.Claims.GPUs, gc)
	}

	// Freshness.
	switch {
	case exp.Nonce == nil:
		cl.Skip("statement.nonce", "no expected nonce given: freshness not checked")
	case stmt.Nonce == hex.EncodeToString(exp.Nonce):
		r.Claims.NonceChecked = true
		cl.Pass("statement.nonce", "statement carries the expected nonce")
	default:
		got := stmt.Nonce
		if got == "" {
			got = "none"
		}
		cl.Fail("statement.nonce", "statement nonce %q is not the expected nonce %q", got, hex.EncodeToString(exp.Nonce))
		note(&check.VerifyError{Check: "statement.nonce", Err: errors.New("statement nonce is not the expected nonce")})
	}

	r.Claims.Simulated = r.Claims.TEE.Simulated
	for _, g := range r.Claims.GPUs {
		r.Claims.Simulated = r.Claims.Simulated || g.Simulated
	}
	if r.Claims.Simulated {
		cl.Pass("simulated", "SIMULATED: evidence signed by a simulation root proves nothing")
	}
	if err := ctx.Err(); err != nil && firstErr == nil {
		firstErr = &check.UnavailableError{What: "verification", Err: err}
	}
	return r, firstErr
}

// verifyTEE dispatches on the TEE kind. It returns the claims, the report
// data the evidence carries, and an error when the evidence could not be
// verified (rejected or unavailable). Checks are appended to cl.
func (v *Verifier) verifyTEE(ctx context.Context, now time.Time, t *TEEEvidence, want []byte, cl *check.List) (TEEClaims, []byte, error) {
	c := TEEClaims{Kind: t.Kind}
	switch t.Kind {
	case KindSim:
		c.Simulated = true
		q, err := sim.VerifyQuote(t.Quote, v.simRoot)
		if err != nil {
			cl.Fail("tee.signature", "%v", err)
			return c, nil, err
		}
		cl.Pass("tee.signature", "SIMULATED quote signed by the simulation root")
		c.SignatureVerified = true
		c.ReportData = hex.EncodeToString(q.ReportData[:])
		c.Debug = q.Debug
		c.MRTD = hex.EncodeToString(q.MRTD[:])
		for _, m := range q.RTMR {
			c.RTMRs = append(c.RTMRs, hex.EncodeToString(m[:]))
		}
		c.TEETCBSVN = hex.EncodeToString(q.TEETCBSVN[:])
		cl.Skip("tee.collateral", "simulated tee has no tcb collateral")
		return c, q.ReportData[:], nil
	case KindTDX:
		return v.verifyTDX(now, t, cl)
	case KindSEVSNP:
		return v.verifySEVSNP(ctx, now, t, cl)
	case KindTDXVTPM:
		return v.verifyVTPM(now, t, want, cl)
	default:
		err := &check.UnavailableError{What: fmt.Sprintf("verifier for tee kind %q", t.Kind), Err: &UnsupportedKindError{Kind: fmt.Sprintf("tee kind %q", t.Kind)}}
		cl.Skip("tee.signature", "unsupported evidence kind %q in this build", t.Kind)
		return c, nil, err
	}
}

// verifyGPU dispatches on the GPU kind, fills gc and returns the report's
// request nonce.
func (v *Verifier) verifyGPU(_ context.Context, now time.Time, g *GPUEvidence, name string, gc *GPUClaims, cl *check.List) ([]byte, error) {
	switch g.Kind {
	case GPUKindSim:
		gc.Simulated = true
		r, err := sim.VerifyGPUReport(g.Report, v.simRoot)
		if err != nil {
			cl.Fail(name+".signature", "%v", err)
			return nil, err
		}
		cl.Pass(name+".signature", "SIMULATED gpu report signed by the simulation root")
		gc.SignatureVerified = true
		gc.Arch = "sim"
		gc.CCEnabled = r.CCEnabled
		gc.DevToolsEnabled = r.DevToolsEnabled
		gc.DriverVersion = r.DriverVersion
		gc.VBIOSVersion = r.VBIOSVersion
		gc.Serial = r.Serial
		gc.FWID = hex.EncodeToString(r.FWID[:])
		cl.Skip(name+".rims", "simulated gpu has no reference manifests")
		return r.Nonce[:], nil
	case GPUKindNVIDIA:
		return v.verifyNVIDIA(now, g, name, gc, cl)
	default:
		err := &check.UnavailableError{What: fmt.Sprintf("verifier for gpu kind %q", g.Kind), Err: &UnsupportedKindError{Kind: fmt.Sprintf("gpu kind %q", g.Kind)}}
		cl.Skip(name+".signature", "unsupported evidence kind %q in this build", g.Kind)
		return nil, err
	}
}

// short abbreviates a long hex value for checklist lines.
func short(b []byte) string {
	h := hex.EncodeToString(b)
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}
