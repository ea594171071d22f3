package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/keys/ohttp"
	"github.com/sparkinfer/cc/policy"
)

// NonceSize is the size of the fresh nonce sent with every evidence request.
const NonceSize = 32

// MaxErrorBodySize caps a plaintext error body read from the appliance.
const MaxErrorBodySize = 64 << 10

// AttestationPath is the appliance's evidence route.
const AttestationPath = "/v1/attestation"

// preferredSuites is the order in which the client picks a suite among those
// a verified key configuration offers: the post-quantum default first.
var preferredSuites = []keys.Suite{keys.DefaultSuite, keys.SuiteX25519ChaCha20Poly1305, keys.SuiteX25519AES128GCM}

// Client talks to one SparkInfer CC appliance. Every request is encrypted to
// a key taken from evidence that was verified with a fresh nonce and accepted
// by Policy; see the package documentation.
//
// Set the fields before the first call and do not change them afterwards.
// A Client is safe for concurrent use.
type Client struct {
	// BaseURL is the appliance's origin, e.g. "https://appliance:8443",
	// without a path: the encrypted request binds the path it is sent to.
	BaseURL string
	// HTTP is the HTTP client; nil means http.DefaultClient. It carries only
	// ciphertext and the evidence, which is public.
	HTTP *http.Client
	// Policy appraises the evidence. Required: a nil Policy fails every call
	// with ErrNoPolicy.
	Policy *policy.Policy
	// Verifier verifies the evidence; nil means one built with
	// attest.Options{Now: Now} (the public simulation root, offline).
	Verifier *attest.Verifier
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand is the source of nonces and request ids; nil means crypto/rand.
	// (HPKE's own randomness comes from crypto/hpke, which takes no reader.)
	Rand io.Reader

	mu       sync.Mutex
	cached   *Attestation
	verifier *attest.Verifier
}

// Attestation is evidence that was verified and accepted by the policy,
// and what the client took from it.
type Attestation struct {
	// Verdict lists every verification and policy check.
	Verdict policy.Verdict
	// Claims are the verified claims.
	Claims attest.Claims
	// KeyConfigs are the HPKE key configurations of the verified
	// statement, validated; requests are encrypted only to these.
	KeyConfigs []keys.KeyConfig
	// Nonce is the nonce the evidence was requested with.
	Nonce []byte
	// Expires is when the client stops using this attestation and fetches
	// fresh evidence: the policy's maximum evidence age after the earlier
	// of the statement's issue time and the moment the request was made.
	Expires time.Time

	// key is Key()'s configuration, parsed once when the evidence was
	// accepted (parsing an ML-KEM public key is not free), and suite its
	// suite; nil for an Attestation not made by Attest.
	key   *ohttp.ClientKey
	suite keys.Suite
}

// clientKey returns the parsed key requests are encrypted to and its suite.
func (a *Attestation) clientKey() (*ohttp.ClientKey, keys.Suite, error) {
	if a.key != nil {
		return a.key, a.suite, nil
	}
	cfg, suite, err := a.Key()
	if err != nil {
		return nil, keys.Suite{}, err
	}
	k, err := ohttp.NewClientKey(cfg)
	if err != nil {
		return nil, keys.Suite{}, err
	}
	return k, suite, nil
}

// Key returns the key configuration and suite requests are encrypted with:
// the first of the client's preferred suites (the post-quantum default
// first) that a verified configuration offers.
func (a *Attestation) Key() (keys.KeyConfig, keys.Suite, error) { return pickKey(a.KeyConfigs) }

// Simulated reports whether the evidence was simulated (proves nothing).
func (a *Attestation) Simulated() bool { return a.Verdict.Simulated }

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) rand() io.Reader {
	if c.Rand != nil {
		return c.Rand
	}
	return rand.Reader
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) getVerifier() (*attest.Verifier, error) {
	if c.Verifier != nil {
		return c.Verifier, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verifier == nil {
		v, err := attest.NewVerifier(attest.Options{Now: c.Now})
		if err != nil {
			return nil, err
		}
		c.verifier = v
	}
	return c.verifier, nil
}

// ParseBaseURL checks that s is an http or https origin without path,
// query, fragment or user info, as Client.BaseURL must be.
func ParseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("client: base url %q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base url %q: want http:// or https:// and a host", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: base url %q: want an origin without path, query or user info", s)
	}
	return u, nil
}

// endpoint returns BaseURL joined with path.
func (c *Client) endpoint(path string) (string, error) {
	u, err := ParseBaseURL(c.BaseURL)
	if err != nil {
		return "", err
	}
	return u.Scheme + "://" + u.Host + path, nil
}

func maxEvidenceAge(p *policy.Policy) time.Duration {
	if p.MaxEvidenceAge.Duration > 0 {
		return p.MaxEvidenceAge.Duration
	}
	return policy.DefaultMaxEvidenceAge
}

// Attest fetches evidence with a fresh random nonce, verifies it and
// appraises it against the policy. On success it returns the attestation
// and remembers it for later requests until it expires. On failure it
// returns a *VerificationError (evidence rejected, with the verdict) or a
// *FetchError (no evidence obtained), and forgets any remembered
// attestation.
func (c *Client) Attest(ctx context.Context) (*Attestation, error) {
	a, err := c.attest(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.cached = nil
		return a, err
	}
	c.cached = a
	return a, nil
}

// Verified returns the remembered attestation while it has not expired,
// and otherwise calls Attest.
func (c *Client) Verified(ctx context.Context) (*Attestation, error) {
	c.mu.Lock()
	a := c.cached
	c.mu.Unlock()
	if a != nil && c.now().Before(a.Expires) {
		return a, nil
	}
	return c.Attest(ctx)
}

// Forget drops the remembered attestation, so that the next request
// fetches and verifies fresh evidence.
func (c *Client) Forget() {
	c.mu.Lock()
	c.cached = nil
	c.mu.Unlock()
}

func (c *Client) attest(ctx context.Context) (*Attestation, error) {
	if c.Policy == nil {
		return nil, ErrNoPolicy
	}
	if err := c.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("client: policy: %w", err)
	}
	v, err := c.getVerifier()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, NonceSize)
	if _, err := io.ReadFull(c.rand(), nonce); err != nil {
		return nil, fmt.Errorf("client: read nonce: %w", err)
	}
	base, err := c.endpoint(AttestationPath)
	if err != nil {
		return nil, err
	}
	u := base + "?nonce=" + hex.EncodeToString(nonce)
	start := c.now()
	bundle, err := c.fetchBundle(ctx, u)
	if err != nil {
		return nil, err
	}
	res, verr := v.Verify(ctx, bundle, attest.Expectations{Nonce: nonce})
	verdict := policy.Appraise(res, verr, c.Policy)
	if !verdict.Verified {
		return nil, &VerificationError{Verdict: verdict, Err: verr}
	}
	// Only now is the statement trusted: the key configurations come from
	// the claims of verified evidence, which are the decoded statement bytes
	// that the TEE evidence binds.
	st := res.Claims.Statement
	var cfgs []keys.KeyConfig
	for i, k := range st.HPKEKeyConfigs {
		cfg, err := keyConfig(k)
		if err != nil {
			verdict.Checks.Fail("client.hpke_key_config", "key config %d: %v", i, err)
			verdict.Verified = false
			return nil, &VerificationError{Verdict: verdict}
		}
		cfgs = append(cfgs, cfg)
	}
	cfg, suite, err := pickKey(cfgs)
	if err != nil {
		verdict.Checks.Fail("client.hpke_key_config", "%v", err)
		verdict.Verified = false
		return nil, &VerificationError{Verdict: verdict, Err: err}
	}
	key, err := ohttp.NewClientKey(cfg)
	if err != nil {
		verdict.Checks.Fail("client.hpke_key_config", "key id %d: %v", cfg.KeyID, err)
		verdict.Verified = false
		return nil, &VerificationError{Verdict: verdict, Err: err}
	}
	verdict.Checks.Pass("client.hpke_key_config", "%d key configurations from the verified statement", len(cfgs))
	issued, err := time.Parse(time.RFC3339, st.IssuedAt)
	if err != nil {
		verdict.Checks.Fail("client.issued_at", "issued_at %q: %v", st.IssuedAt, err)
		verdict.Verified = false
		return nil, &VerificationError{Verdict: verdict}
	}
	from := start
	if issued.Before(from) {
		from = issued
	}
	return &Attestation{
		Verdict:    verdict,
		Claims:     res.Claims,
		KeyConfigs: cfgs,
		Nonce:      nonce,
		Expires:    from.Add(maxEvidenceAge(c.Policy)),
		key:        key,
		suite:      suite,
	}, nil
}

// maxAttestationRetries bounds how often fetchBundle waits out a 429 of the
// appliance's evidence rate limit.
const maxAttestationRetries = 5

func (c *Client) fetchBundle(ctx context.Context, u string) (*attest.Bundle, error) {
	for attempt := 0; ; attempt++ {
		b, retry, err := c.fetchBundleOnce(ctx, u)
		if retry <= 0 || attempt >= maxAttestationRetries {
			return b, err
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &FetchError{URL: u, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// fetchBundleOnce fetches the bundle; retry > 0 when the appliance asked to
// come back later (429, Retry-After).
func (c *Client) fetchBundleOnce(ctx context.Context, u string) (_ *attest.Bundle, retry time.Duration, _ error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, &FetchError{URL: u, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the url
		}
		return nil, 0, &FetchError{URL: u, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusTooManyRequests {
			retry = time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				retry = min(max(time.Duration(s)*time.Second, 100*time.Millisecond), 10*time.Second)
			}
		}
		return nil, retry, &FetchError{URL: u, Err: readAPIError(resp, false)}
	}
	b, err := attest.DecodeBundle(resp.Body)
	if err != nil {
		// Unusable evidence from the appliance is rejected evidence.
		return nil, 0, &VerificationError{Verdict: policy.Appraise(nil, err, c.Policy), Err: err}
	}
	return b, 0, nil
}

// keyConfig rebuilds the binary key configuration of docs/PROTOCOL.md
// section 4 from the statement's JSON form and validates it.
func keyConfig(k attest.HPKEKeyConfig) (keys.KeyConfig, error) {
	pk, err := base64.StdEncoding.Strict().DecodeString(k.PublicKey)
	if err != nil {
		return keys.KeyConfig{}, fmt.Errorf("key id %d: public key is not base64: %v", k.KeyID, err)
	}
	cfg := keys.KeyConfig{KeyID: k.KeyID, KEM: k.KEMID, PublicKey: pk}
	for _, s := range k.Suites {
		cfg.Algorithms = append(cfg.Algorithms, keys.SymmetricAlgorithm{KDF: s.KDFID, AEAD: s.AEADID})
	}
	if err := cfg.Validate(); err != nil {
		return keys.KeyConfig{}, fmt.Errorf("key id %d: %w", k.KeyID, err)
	}
	return cfg, nil
}

// pickKey chooses the configuration and suite to encrypt to, in the order
// of preferredSuites.
func pickKey(cfgs []keys.KeyConfig) (keys.KeyConfig, keys.Suite, error) {
	for _, s := range preferredSuites {
		for _, cfg := range cfgs {
			if cfg.Supports(s) {
				return cfg, s, nil
			}
		}
	}
	return keys.KeyConfig{}, keys.Suite{}, ErrNoUsableKey
}

// Response is the appliance's answer to an encrypted request.
type Response struct {
	// StatusCode is the HTTP status (visible to the host, not authenticated).
	StatusCode int
	// Streamed is true when the response used chunked transfer encoding
	// (informational).
	Streamed bool
	// Attestation is the verified evidence the request was encrypted under.
	Attestation *Attestation

	rr   *ohttp.ResponseReader
	body io.ReadCloser
}

// Read reads the decrypted body. It returns io.EOF only at the
// authenticated end of the response; a truncated, reordered, altered or
// misdirected response gives a *ohttp.StreamError (errors.Is with
// ohttp.ErrTruncated, ErrReordered, ErrDuplicated, ErrAfterFinal,
// ErrWrongKey, ErrChunkAuth, ErrMalformedChunk).
func (r *Response) Read(p []byte) (int, error) { return r.rr.Read(p) }

// NextChunk returns the plaintext of the next sealed chunk, authenticated;
// io.EOF at the authenticated end. Streamed responses carry one server-sent
// event per chunk.
func (r *Response) NextChunk() ([]byte, error) { return r.rr.Next() }

// Close releases the connection.
func (r *Response) Close() error { return r.body.Close() }

// Do sends body, encrypted, as a POST to path (e.g. "/v1/chat/completions")
// and returns the decrypted response. Before sending it obtains verified
// evidence (Verified); when that fails nothing is sent and the error is a
// *VerificationError or *FetchError.
//
// A plaintext error answer (docs/PROTOCOL.md section 9) is returned as an
// *APIError with Encrypted false. When the appliance no longer knows the
// key id (it restarted), Do fetches fresh evidence and tries once more
// with a new encapsulation. An encrypted answer is returned as a Response
// whatever its status; the caller reads and checks it.
func (c *Client) Do(ctx context.Context, path string, body []byte) (*Response, error) {
	resp, err := c.do(ctx, path, body)
	if errors.Is(err, ohttp.ErrUnknownKeyID) {
		c.Forget()
		resp, err = c.do(ctx, path, body)
	}
	return resp, err
}

func (c *Client) do(ctx context.Context, path string, body []byte) (*Response, error) {
	u, err := c.endpoint(path)
	if err != nil {
		return nil, err
	}
	att, err := c.Verified(ctx)
	if err != nil {
		return nil, err
	}
	key, suite, err := att.clientKey()
	if err != nil {
		return nil, err
	}
	id, err := ohttp.NewRequestID(c.rand())
	if err != nil {
		return nil, fmt.Errorf("client: request id: %w", err)
	}
	msg, creq, err := key.Encapsulate(suite, ohttp.Request{ID: id, Time: c.now(), Path: path, Body: body})
	if err != nil {
		return nil, fmt.Errorf("client: encrypt request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(msg))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ohttp.RequestMediaType)
	req.Header.Set("Accept", ohttp.ResponseMediaType)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: post %q: %w", u, err)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == ohttp.ResponseMediaType:
		return &Response{
			StatusCode:  resp.StatusCode,
			Streamed:    len(resp.TransferEncoding) > 0,
			Attestation: att,
			rr:          creq.NewResponseReader(resp.Body),
			body:        resp.Body,
		}, nil
	case resp.StatusCode != http.StatusOK && mt == "application/json":
		defer resp.Body.Close()
		return nil, readAPIError(resp, false)
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("%w: status %d, content type %q", ErrUnexpectedResponse, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// errorBody is the OpenAI error shape.
type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func parseAPIError(status int, b []byte, encrypted bool) *APIError {
	e := &APIError{StatusCode: status, Encrypted: encrypted}
	var eb errorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		e.Message = fmt.Sprintf("unparseable error body of %d bytes", len(b))
		return e
	}
	e.Message, e.Type = eb.Error.Message, eb.Error.Type
	switch code := eb.Error.Code.(type) {
	case string:
		e.Code = code
	case float64:
		e.Code = fmt.Sprint(code)
	}
	return e
}

func readAPIError(resp *http.Response, encrypted bool) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodySize))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" {
		return &APIError{StatusCode: resp.StatusCode, Message: fmt.Sprintf("%d bytes of %q", len(b), strings.TrimSpace(resp.Header.Get("Content-Type")))}
	}
	return parseAPIError(resp.StatusCode, b, encrypted)
}
