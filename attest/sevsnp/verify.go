package sevsnp

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/go-sev-guest/verify"
	"github.com/google/go-sev-guest/verify/trust"
	"github.com/sparkinfer/cc/attest/check"
)

// Check names used in [Claims.Checks].
const (
	CheckSigner     = "sevsnp.report.signer"
	CheckSignature  = "sevsnp.report.signature"
	CheckChain      = "sevsnp.cert.chain"
	CheckTCBBinding = "sevsnp.tcb.cert_binding"
	CheckChipID     = "sevsnp.chip_id"
	CheckRevocation = "sevsnp.crl"
)

// Options are the per-verification inputs. The zero value verifies as of the
// current time, offline (revocation "skipped: offline").
type Options struct {
	// Now is the time certificates must be valid at. Zero means time.Now().
	// Set it to the evidence's capture time to verify historical evidence.
	Now time.Time
	// Getter fetches AMD KDS URLs (the CRL). Nil means offline: the
	// revocation check is reported as skipped.
	Getter trust.HTTPSGetter
}

// amdRoots holds the ARK, ASK and ASVK of each product line, parsed once from
// the certificates go-sev-guest embeds (fetched from AMD's KDS cert_chain
// endpoints for VCEK and VLEK).
type amdRoots struct {
	byLine map[string]*trust.ProductCerts
	err    error
}

var (
	rootsOnce sync.Once
	roots     amdRoots
)

func embeddedRoots() (map[string]*trust.ProductCerts, error) {
	rootsOnce.Do(func() {
		bundles := []struct {
			line       string
			vcek, vlek []byte
		}{
			{"Milan", trust.AskArkMilanVcekBytes, trust.AskArkMilanVlekBytes},
			{"Genoa", trust.AskArkGenoaVcekBytes, trust.AskArkGenoaVlekBytes},
			{"Turin", trust.AskArkTurinVcekBytes, trust.AskArkTurinVlekBytes},
		}
		roots.byLine = map[string]*trust.ProductCerts{}
		for _, b := range bundles {
			// The embedded Turin VLEK bundle ends in CRLF CRLF, which the
			// KDS bundle parser refuses as trailing bytes.
			vc, vl := &trust.ProductCerts{}, &trust.ProductCerts{}
			if err := vc.FromKDSCertBytes(bytes.TrimSpace(b.vcek)); err != nil {
				roots.err = fmt.Errorf("embedded %s vcek roots: %v", b.line, err)
				return
			}
			if err := vl.FromKDSCertBytes(bytes.TrimSpace(b.vlek)); err != nil {
				roots.err = fmt.Errorf("embedded %s vlek roots: %v", b.line, err)
				return
			}
			if vc.Ark == nil || vl.Ark == nil || vc.Ask == nil || vl.Asvk == nil || !bytes.Equal(vc.Ark.Raw, vl.Ark.Raw) {
				roots.err = fmt.Errorf("embedded %s roots: incomplete, or vcek and vlek bundles name different arks", b.line)
				return
			}
			roots.byLine[b.line] = &trust.ProductCerts{Ark: vc.Ark, Ask: vc.Ask, Asvk: vl.Asvk}
		}
	})
	return roots.byLine, roots.err
}

// trustedRoots returns a fresh go-sev-guest root set (fresh, because
// AMDRootCerts caches a CRL and must not be shared between verifications).
func trustedRoots() (map[string][]*trust.AMDRootCerts, error) {
	byLine, err := embeddedRoots()
	if err != nil {
		return nil, err
	}
	out := map[string][]*trust.AMDRootCerts{}
	for line, pc := range byLine {
		r := trust.AMDRootCertsProduct(line)
		r.ProductCerts = pc
		out[line] = []*trust.AMDRootCerts{r}
	}
	return out, nil
}

// Verify parses a raw SEV-SNP report, verifies it with the VCEK or VLEK
// certificate cert (DER or PEM) and returns its claims.
//
// Errors: *check.ParseError when the report or certificate cannot be parsed;
// *check.VerifyError when a check fails. When the report parsed, Claims is
// returned even with an error, so that its Checks can be shown; it must not
// be trusted then.
func Verify(ctx context.Context, raw, cert []byte, opts Options) (*Claims, error) {
	r, err := ParseReport(raw)
	if err != nil {
		return nil, err
	}
	return r.Verify(ctx, cert, opts)
}

// Verify verifies a parsed report; see the package function [Verify].
func (r *Report) Verify(ctx context.Context, certDER []byte, opts Options) (*Claims, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	c := &Claims{AsOf: now.UTC()}
	var firstErr error
	fail := func(name, format string, args ...any) {
		c.Checks.Fail(name, format, args...)
		if firstErr == nil {
			firstErr = &check.VerifyError{Check: name, Err: fmt.Errorf(format, args...)}
		}
	}
	finish := func() (*Claims, error) {
		r.fillClaims(c)
		return c, firstErr
	}

	key := r.signer.SigningKey
	if key != abi.VcekReportSigner && key != abi.VlekReportSigner {
		fail(CheckSigner, "report is not signed by a vcek or vlek (signing key %q)", r.Signer())
		return finish()
	}
	if len(certDER) == 0 {
		fail(CheckSigner, "report is signed by the %s but no %s certificate was given", r.Signer(), r.Signer())
		return finish()
	}
	cert, err := trust.ParseCert(certDER)
	if err != nil {
		return nil, &check.ParseError{What: r.Signer() + " certificate", Err: err}
	}
	c.Checks.Pass(CheckSigner, "report is signed by the %s; certificate %q", r.Signer(), cert.Subject.CommonName)

	exts, extErr := kds.CertificateExtensions(cert, key)
	if extErr == nil {
		c.ProductName = exts.ProductName
		c.CSPID = exts.CspID
	}
	c.Product = r.productLine(exts)

	// Signature over the raw bytes, with the certificate's key.
	if err := verify.SnpReportSignature(r.raw, cert); err != nil {
		fail(CheckSignature, "ecdsa p-384 signature over bytes 0x000..0x29f does not verify with the %s key: %v", r.Signer(), err)
	} else {
		c.Checks.Pass(CheckSignature, "ecdsa p-384 signature over bytes 0x000..0x29f verifies with the %s key", r.Signer())
	}

	// Certificate form and chain to the embedded AMD roots as of now. The
	// chain check also re-verifies the signature through go-sev-guest.
	tr, rootsErr := trustedRoots()
	chain := &spb.CertificateChain{Extras: map[string][]byte{}}
	if key == abi.VcekReportSigner {
		chain.VcekCert = cert.Raw
	} else {
		chain.VlekCert = cert.Raw
	}
	att := &spb.Attestation{Report: r.proto, CertificateChain: chain}
	vopts := &verify.Options{DisableCertFetching: true, Now: now, TrustedRoots: tr}
	intermediate := "ask"
	if key == abi.VlekReportSigner {
		intermediate = "asvk"
	}
	if rootsErr != nil {
		fail(CheckChain, "%v", rootsErr)
	} else if err := verify.SnpAttestationContext(ctx, att, vopts); err != nil {
		fail(CheckChain, "%s certificate does not chain to the embedded amd %s ark via the %s as of %s: %v",
			r.Signer(), c.Product, intermediate, now.UTC().Format(time.RFC3339), err)
	} else {
		c.Checks.Pass(CheckChain, "%s certificate chains to the embedded amd %s ark via the %s as of %s",
			r.Signer(), c.Product, intermediate, now.UTC().Format(time.RFC3339))
	}

	// The certificate vouches for one TCB and (VCEK) one chip.
	if extErr != nil {
		fail(CheckTCBBinding, "%s certificate extensions: %v", r.Signer(), extErr)
	} else {
		if uint64(exts.TCBVersion) != r.proto.GetReportedTcb() {
			fail(CheckTCBBinding, "%s certificate tcb 0x%016x differs from the report's reported_tcb 0x%016x",
				r.Signer(), uint64(exts.TCBVersion), r.proto.GetReportedTcb())
		} else {
			c.Checks.Pass(CheckTCBBinding, "%s certificate tcb equals reported_tcb 0x%016x", r.Signer(), r.proto.GetReportedTcb())
		}
		switch {
		case key == abi.VlekReportSigner:
			c.Checks.Skip(CheckChipID, "a vlek certificate names no chip")
		case r.signer.MaskChipKey:
			c.Checks.Skip(CheckChipID, "the host masked chip_id")
		case !bytes.Equal(exts.HWID, r.proto.GetChipId()):
			fail(CheckChipID, "chip_id %x differs from the vcek certificate's hwid %x", r.proto.GetChipId(), exts.HWID)
		default:
			c.Checks.Pass(CheckChipID, "chip_id equals the vcek certificate's hwid")
		}
	}

	r.checkRevocation(ctx, c, cert, opts.Getter, now, fail)
	return finish()
}

// productLine is the product line from the report's CPUID fields (version 3
// and later) or else from the certificate's product name.
func (r *Report) productLine(exts *kds.Extensions) string {
	if fms := r.proto.GetCpuid1EaxFms(); fms != 0 {
		return kds.ProductLineFromFms(fms)
	}
	if exts == nil {
		return "Unknown"
	}
	p, err := kds.ParseProductName(exts.ProductName, r.signer.SigningKey)
	if err != nil {
		return "Unknown"
	}
	return kds.ProductLine(p)
}

// checkRevocation fetches the CRL of the intermediate (ASK for VCEK, ASVK
// for VLEK) through getter; go-sev-guest checks it is signed by the ARK and
// does not list the intermediate; we also check the leaf is not listed.
func (r *Report) checkRevocation(ctx context.Context, c *Claims, leaf *x509.Certificate, getter trust.HTTPSGetter,
	now time.Time, fail func(name, format string, args ...any)) {
	if getter == nil {
		c.Checks.Skip(CheckRevocation, "offline: no getter, amd crl not fetched")
		return
	}
	byLine, err := embeddedRoots()
	pc := byLine[c.Product]
	if err != nil || pc == nil {
		c.Checks.Skip(CheckRevocation, "unavailable: no embedded roots for product %q", c.Product)
		return
	}
	inter := pc.Ask
	if r.signer.SigningKey == abi.VlekReportSigner {
		inter = pc.Asvk
	}
	// go-sev-guest reads the distribution point and the serial to look for
	// from ProductCerts.Ask: give it the intermediate that issued the leaf.
	root := trust.AMDRootCertsProduct(c.Product)
	root.ProductCerts = &trust.ProductCerts{Ark: pc.Ark, Ask: inter}
	crl, err := verify.GetCrlAndCheckRootContext(ctx, root, &verify.Options{Getter: getter, Now: now})
	var unavailable verify.CRLUnavailableErr
	switch {
	case errors.As(err, &unavailable):
		c.Checks.Skip(CheckRevocation, "unavailable: %v", err)
		return
	case err != nil:
		fail(CheckRevocation, "crl of %q: %v", inter.Subject.CommonName, err)
		return
	}
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
			fail(CheckRevocation, "%s certificate serial %x was revoked at %s", r.Signer(), leaf.SerialNumber, e.RevocationTime.UTC().Format(time.RFC3339))
			return
		}
	}
	c.Checks.Pass(CheckRevocation, "crl of %q (this update %s, next update %s) is signed by the ark and lists neither it nor the %s",
		inter.Subject.CommonName, crl.ThisUpdate.UTC().Format(time.RFC3339), crl.NextUpdate.UTC().Format(time.RFC3339), r.Signer())
}
