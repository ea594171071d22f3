package ohttp

import (
	"crypto/hpke"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/sparkinfer/cc/keys"
)

// NewRequestID reads a fresh request id from r (nil means crypto/rand).
func NewRequestID(r io.Reader) ([RequestIDSize]byte, error) {
	var id [RequestIDSize]byte
	if r == nil {
		r = rand.Reader
	}
	if _, err := io.ReadFull(r, id[:]); err != nil {
		return id, fmt.Errorf("ohttp: reading request id: %w", err)
	}
	return id, nil
}

// Header returns the 7-byte request header for a key id and suite.
func Header(keyID uint8, s keys.Suite) []byte {
	h := make([]byte, 0, HeaderSize)
	h = append(h, keyID)
	h = binary.BigEndian.AppendUint16(h, s.KEM)
	h = binary.BigEndian.AppendUint16(h, s.KDF)
	h = binary.BigEndian.AppendUint16(h, s.AEAD)
	return h
}

// requestInfo is the HPKE info string: RequestLabel || 0x00 || header.
func requestInfo(header []byte) []byte {
	info := make([]byte, 0, len(RequestLabel)+1+len(header))
	info = append(info, RequestLabel...)
	info = append(info, 0)
	return append(info, header...)
}

// responseSecretSize is max(Nn, Nk) of the suite's AEAD.
func responseSecretSize(s keys.Suite) (int, error) {
	nk, nn, _, err := keys.AEADSizes(s.AEAD)
	if err != nil {
		return 0, err
	}
	return max(nk, nn), nil
}

// ClientRequest is the client's state for one request: what it needs to
// open the response. It holds the response secret; drop it when done.
type ClientRequest struct {
	suite  keys.Suite
	enc    []byte
	secret []byte
}

// Suite returns the suite the request was sealed with.
func (c *ClientRequest) Suite() keys.Suite { return c.suite }

// ClientKey is a key configuration checked and parsed once, ready for
// encapsulating requests to it. Parsing an ML-KEM-768 public key expands
// its matrix (SHAKE-128 sampling, a few tens of microseconds); a client that
// sends many requests to the same verified configuration makes one
// ClientKey and reuses it. Every [ClientKey.Encapsulate] still makes a
// fresh HPKE encapsulation. A ClientKey is safe for concurrent use.
type ClientKey struct {
	cfg keys.KeyConfig
	pk  hpke.PublicKey
}

// NewClientKey validates cfg and parses its public key.
func NewClientKey(cfg keys.KeyConfig) (*ClientKey, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pk, err := cfg.HPKEPublicKey()
	if err != nil {
		return nil, err
	}
	return &ClientKey{cfg: cloneConfig(cfg), pk: pk}, nil
}

// Config returns the key configuration (a copy).
func (k *ClientKey) Config() keys.KeyConfig { return cloneConfig(k.cfg) }

func cloneConfig(c keys.KeyConfig) keys.KeyConfig {
	c.PublicKey = append([]byte(nil), c.PublicKey...)
	c.Algorithms = append([]keys.SymmetricAlgorithm(nil), c.Algorithms...)
	return c
}

// EncapsulateRequest seals req to the key configuration cfg with suite s
// (cfg must offer it) and returns the encapsulated request message and the
// state for opening the response. The HPKE ephemeral randomness comes from
// crypto/hpke, which takes no reader. It is NewClientKey followed by
// [ClientKey.Encapsulate].
func EncapsulateRequest(cfg keys.KeyConfig, s keys.Suite, req Request) ([]byte, *ClientRequest, error) {
	k, err := NewClientKey(cfg)
	if err != nil {
		return nil, nil, err
	}
	return k.Encapsulate(s, req)
}

// Encapsulate seals req to the key with suite s (the configuration must
// offer it), with a fresh HPKE encapsulation, and returns the encapsulated
// request message and the state for opening the response.
func (k *ClientKey) Encapsulate(s keys.Suite, req Request) ([]byte, *ClientRequest, error) {
	if !k.cfg.Supports(s) {
		return nil, nil, &keys.SuiteError{KeyID: k.cfg.KeyID, Suite: s}
	}
	pt, err := req.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	_, kdf, aead, err := s.HPKE()
	if err != nil {
		return nil, nil, err
	}
	hdr := Header(k.cfg.KeyID, s)
	enc, sender, err := hpke.NewSender(k.pk, kdf, aead, requestInfo(hdr))
	if err != nil {
		return nil, nil, fmt.Errorf("ohttp: hpke setup: %w", err)
	}
	n, err := responseSecretSize(s)
	if err != nil {
		return nil, nil, err
	}
	ct, err := sender.Seal(nil, pt)
	clear(pt)
	if err != nil {
		return nil, nil, fmt.Errorf("ohttp: hpke seal: %w", err)
	}
	secret, err := sender.Export(ResponseLabel, n)
	if err != nil {
		return nil, nil, fmt.Errorf("ohttp: hpke export: %w", err)
	}
	msg := make([]byte, 0, len(hdr)+len(enc)+len(ct))
	msg = append(append(append(msg, hdr...), enc...), ct...)
	return msg, &ClientRequest{suite: s, enc: enc, secret: secret}, nil
}

// Gateway opens encapsulated requests with the appliance's key set. Keys
// and Replay are required: a Gateway without a replay cache refuses every
// request.
type Gateway struct {
	Keys   *keys.KeySet
	Replay *ReplayCache
	// MaxRequestSize caps an encapsulated request; 0 means
	// DefaultMaxRequestSize.
	MaxRequestSize int
}

// ServerRequest is an opened request and the state for sealing its
// response. It holds the response secret; drop it when done.
type ServerRequest struct {
	Request
	KeyID uint8
	Suite keys.Suite

	enc    []byte
	secret []byte
}

// CheckPath returns a [*RequestError] of kind ErrPathMismatch unless the
// path inside the request equals urlPath, the path it arrived on (without
// query string). The error does not quote the inner path.
func (r *ServerRequest) CheckPath(urlPath string) error {
	if r.Path != urlPath {
		return &RequestError{Err: ErrPathMismatch, Detail: fmt.Sprintf("request sent to %q", urlPath)}
	}
	return nil
}

// Decapsulate opens an encapsulated request. It checks, in order: the
// size cap, the header, that the key id exists and offers the suite, the
// encapsulated key and AEAD tag, the plaintext encoding, the timestamp
// against the replay cache's clock skew, and that the encapsulated key was
// not seen within the replay window. Every failure is a [*RequestError]
// whose kind [HTTPError] maps to a status; Decapsulate never panics on any
// input.
func (g *Gateway) Decapsulate(msg []byte) (*ServerRequest, error) {
	if g.Keys == nil || g.Replay == nil {
		return nil, errors.New("ohttp: gateway has no key set or no replay cache")
	}
	limit := g.MaxRequestSize
	if limit <= 0 {
		limit = DefaultMaxRequestSize
	}
	if len(msg) > limit {
		return nil, &RequestError{Err: ErrRequestTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(msg), limit)}
	}
	if len(msg) < HeaderSize {
		return nil, &RequestError{Err: ErrMalformedRequest, Detail: fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(msg), HeaderSize)}
	}
	keyID := msg[0]
	s := keys.Suite{
		KEM:  binary.BigEndian.Uint16(msg[1:]),
		KDF:  binary.BigEndian.Uint16(msg[3:]),
		AEAD: binary.BigEndian.Uint16(msg[5:]),
	}
	kp, ok := g.Keys.Lookup(keyID)
	if !ok {
		return nil, &RequestError{Err: ErrUnknownKeyID, Detail: fmt.Sprintf("key id %d", keyID)}
	}
	if !kp.Supports(s) {
		return nil, &RequestError{Err: ErrUnsupportedSuite, Detail: fmt.Sprintf("key id %d does not offer %s", keyID, s)}
	}
	info, err := keys.KEMInfo(s.KEM)
	if err != nil {
		return nil, &RequestError{Err: ErrUnsupportedSuite, Detail: err.Error()}
	}
	_, _, nt, err := keys.AEADSizes(s.AEAD)
	if err != nil {
		return nil, &RequestError{Err: ErrUnsupportedSuite, Detail: err.Error()}
	}
	if len(msg) < HeaderSize+info.Nenc+nt {
		return nil, &RequestError{Err: ErrMalformedRequest, Detail: fmt.Sprintf("%d bytes, shorter than header, %d-byte enc and %d-byte tag", len(msg), info.Nenc, nt)}
	}
	hdr := msg[:HeaderSize]
	enc := msg[HeaderSize : HeaderSize+info.Nenc]
	ct := msg[HeaderSize+info.Nenc:]
	rcpt, err := kp.NewRecipient(enc, s, requestInfo(hdr))
	if err != nil {
		if errors.Is(err, keys.ErrKeyClosed) {
			return nil, err
		}
		return nil, &RequestError{Err: ErrDecryption, Detail: "invalid encapsulated key"}
	}
	pt, err := rcpt.Open(nil, ct)
	if err != nil {
		return nil, &RequestError{Err: ErrDecryption, Detail: "ciphertext authentication failed"}
	}
	req, err := ParseRequest(pt)
	if err != nil {
		return nil, err
	}
	n, err := responseSecretSize(s)
	if err != nil {
		return nil, err
	}
	secret, err := rcpt.Export(ResponseLabel, n)
	if err != nil {
		return nil, fmt.Errorf("ohttp: hpke export: %w", err)
	}
	if err := g.Replay.Check(enc, req.Time); err != nil {
		return nil, err
	}
	return &ServerRequest{Request: req, KeyID: keyID, Suite: s, enc: append([]byte(nil), enc...), secret: secret}, nil
}
