package tdx

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/pcs"
	"github.com/google/go-tdx-guest/verify/trust"
	"github.com/sparkinfer/cc/attest/check"
)

// rootCRLURL is where Intel publishes the Intel SGX Root CA CRL (the CRL
// distribution point of the root and of the TCB signing certificate).
const rootCRLURL = "https://certificates.trustedservices.intel.com/IntelSGXRootCA.der"

// PCS fetches collateral from Intel PCS v4 (TDX TCB info, TDX QE identity,
// PCK CRL, root CA CRL) through a go-tdx-guest getter, and caches each
// response on disk until its own nextUpdate. Any fetch failure is a
// *check.UnavailableError: could not check, not rejected.
type PCS struct {
	// Getter does the HTTPS GETs; nil: go-tdx-guest's default (real network).
	Getter trust.HTTPSGetter
	// CacheDir holds cached responses; empty: no cache.
	CacheDir string
	// Now is the clock for cache expiry; nil: time.Now.
	Now func() time.Time
}

// cacheEntry is one cached PCS response.
type cacheEntry struct {
	URL        string              `json:"url"`
	Header     map[string][]string `json:"header,omitempty"`
	Body       []byte              `json:"body"`
	NextUpdate time.Time           `json:"next_update"`
}

func (p *PCS) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Collateral returns the collateral for a platform (FMSPC as hex, ca
// "platform" or "processor").
func (p *PCS) Collateral(fmspc, ca string) (*Collateral, error) {
	f := &CollateralFile{Format: CollateralFormat}
	fromCache := true
	get := func(u, hdrName string, nextUpdate func([]byte) (time.Time, error)) ([]byte, string, error) {
		e, cached := p.cached(u)
		if !cached {
			fromCache = false
			g := p.Getter
			if g == nil {
				g = trust.DefaultHTTPSGetter()
			}
			h, body, err := g.Get(u)
			if err != nil {
				return nil, "", &check.UnavailableError{What: "intel pcs " + u, Err: err}
			}
			nu, err := nextUpdate(body)
			if err != nil {
				return nil, "", &check.UnavailableError{What: "intel pcs " + u, Err: fmt.Errorf("unusable response: %v", err)}
			}
			e = &cacheEntry{URL: u, Header: h, Body: body, NextUpdate: nu}
			p.store(e)
		}
		chain := ""
		if hdrName != "" {
			for k, vs := range e.Header {
				if strings.EqualFold(k, hdrName) && len(vs) == 1 {
					s, err := url.QueryUnescape(vs[0])
					if err != nil {
						return nil, "", &check.UnavailableError{What: "intel pcs " + u, Err: fmt.Errorf("header %s: %v", hdrName, err)}
					}
					chain = s
				}
			}
		}
		return e.Body, chain, nil
	}
	var err error
	if f.TCBInfo, f.TCBInfoIssuerChain, err = get(pcs.TcbInfoURL(fmspc), "Tcb-Info-Issuer-Chain", func(b []byte) (time.Time, error) {
		var t pcs.TdxTcbInfo
		err := json.Unmarshal(b, &t)
		return t.TcbInfo.NextUpdate, err
	}); err != nil {
		return nil, err
	}
	if f.QEIdentity, f.QEIdentityIssuerChain, err = get(pcs.QeIdentityURL(), "Sgx-Enclave-Identity-Issuer-Chain", func(b []byte) (time.Time, error) {
		var t pcs.QeIdentity
		err := json.Unmarshal(b, &t)
		return t.EnclaveIdentity.NextUpdate, err
	}); err != nil {
		return nil, err
	}
	crlNext := func(b []byte) (time.Time, error) {
		c, err := parseCRL(b)
		if err != nil {
			return time.Time{}, err
		}
		return c.NextUpdate, nil
	}
	if f.PCKCRL, _, err = get(pcs.PckCrlURL(ca), "", crlNext); err != nil {
		return nil, err
	}
	if f.RootCACRL, _, err = get(rootCRLURL, "", crlNext); err != nil {
		return nil, err
	}
	c, err := f.parse("pcs")
	if err != nil {
		return nil, &check.UnavailableError{What: "intel pcs collateral", Err: err}
	}
	if fromCache {
		c.Source = "pcs cache"
	}
	return c, nil
}

func (p *PCS) path(u string) string {
	h := sha256.Sum256([]byte(u))
	return filepath.Join(p.CacheDir, "pcs-"+hex.EncodeToString(h[:16])+".json")
}

// cached returns a cache entry still valid now.
func (p *PCS) cached(u string) (*cacheEntry, bool) {
	if p.CacheDir == "" {
		return nil, false
	}
	b, err := os.ReadFile(p.path(u))
	if err != nil {
		return nil, false
	}
	var e cacheEntry
	if json.Unmarshal(b, &e) != nil || e.URL != u || !p.now().Before(e.NextUpdate) {
		return nil, false
	}
	return &e, true
}

// store writes a cache entry atomically; a cache that cannot be written is
// not an error (the next run fetches again).
func (p *PCS) store(e *cacheEntry) {
	if p.CacheDir == "" {
		return
	}
	b, err := json.Marshal(e)
	if err != nil || os.MkdirAll(p.CacheDir, 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(p.CacheDir, ".pcs-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), p.path(e.URL)) != nil {
		os.Remove(tmp.Name())
	}
}
