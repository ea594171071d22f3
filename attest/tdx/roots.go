package tdx

import (
	"bytes"
	"crypto/x509"
	_ "embed"
	"encoding/pem"
	"fmt"
	"sync"
)

// The Intel SGX Root CA: the trust anchor of every TDX quote and of all PCS
// collateral. Provenance in certs/README.md (SHA-256 fingerprint
// 44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3).
//
//go:embed certs/intel-sgx-root-ca.pem
var intelRootPEM []byte

// The current Intel SGX TCB Signing certificate followed by the root. PCS
// sends it in response headers; recorded collateral (Polaris receipts) lacks
// it. It is verified against the root on every use, never trusted as is.
//
//go:embed certs/intel-sgx-tcb-signing-chain.pem
var tcbSigningChainPEM []byte

// intelRootFingerprint pins the embedded root.
const intelRootFingerprint = "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"

var roots = sync.OnceValues(func() (*x509.Certificate, error) {
	blk, _ := pem.Decode(intelRootPEM)
	if blk == nil {
		return nil, fmt.Errorf("embedded intel root: no PEM block")
	}
	return x509.ParseCertificate(blk.Bytes)
})

// IntelRootCA returns the embedded Intel SGX Root CA certificate.
func IntelRootCA() *x509.Certificate {
	c, err := roots()
	if err != nil {
		panic(err) // embedded at build time; covered by tests
	}
	return c
}

func defaultTCBSigningChain() ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := tcbSigningChainPEM
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) != 2 || !bytes.Equal(out[1].Raw, IntelRootCA().Raw) {
		return nil, fmt.Errorf("embedded tcb signing chain is not signing cert + intel root")
	}
	return out, nil
}
