// Package keys holds the appliance's key material. This file and
// keyconfig.go cover the HPKE (RFC 9180) key pairs that clients encrypt
// requests to, the cipher suites the appliance offers, and the public key
// configuration published in the attestation statement.
//
// # Suites
//
// The default suite is KEM MLKEM768-X25519 (X-Wing, HPKE KEM id 0x647a, from
// draft-ietf-hpke-pq, the id Go's crypto/hpke and the npm package
// @hpke/hybridkem-x-wing both use), KDF HKDF-SHA256 (0x0001) and AEAD
// ChaCha20-Poly1305 (0x0003). For clients without post-quantum support the
// appliance also offers DHKEM(X25519, HKDF-SHA256) (0x0020) with AES-128-GCM
// (0x0001) or ChaCha20-Poly1305. No other algorithm is accepted anywhere:
// parsers reject unknown ids with an [*UnsupportedError].
//
// # Key pairs
//
// [GenerateKeyPair] reads a 32-byte private key from a reader (crypto/rand
// in production, a fixed reader in tests) and keeps it in memory only: no
// function of this package serialises a private key. The private key never
// leaves the [KeyPair]; callers get an HPKE receiving context through
// [KeyPair.NewRecipient].
//
// # What Close can and cannot wipe
//
// [KeyPair.Close] zeroes the seed buffer this package read, zeroes the seed
// copy kept inside crypto/hpke's hybrid private key (Go returns that copy
// itself from PrivateKey.Bytes), and drops every reference so that later use
// fails with [ErrKeyClosed]. It cannot wipe what the Go standard library
// keeps in unexported fields: the expanded ML-KEM-768 decapsulation key, the
// X25519 scalar inside crypto/ecdh, and any copies the garbage collector or
// the stack made. Those stay in memory until the collector reuses it. The
// appliance's protection for them is the TEE's encrypted memory and the
// process hardening done at boot (no core dumps), not this function.
package keys

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
)

// HPKE algorithm identifiers (RFC 9180 section 7 and draft-ietf-hpke-pq).
const (
	KEMX25519HKDFSHA256 uint16 = 0x0020 // DHKEM(X25519, HKDF-SHA256)
	KEMMLKEM768X25519   uint16 = 0x647a // MLKEM768-X25519, a.k.a. X-Wing

	KDFHKDFSHA256 uint16 = 0x0001

	AEADAES128GCM        uint16 = 0x0001
	AEADChaCha20Poly1305 uint16 = 0x0003
)

// Suite is an HPKE cipher suite: one KEM, one KDF, one AEAD.
type Suite struct {
	KEM  uint16
	KDF  uint16
	AEAD uint16
}

// DefaultSuite is the suite clients should use when the key configuration
// offers it: MLKEM768-X25519, HKDF-SHA256, ChaCha20-Poly1305.
var DefaultSuite = Suite{KEM: KEMMLKEM768X25519, KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305}

// X25519 suites for clients without post-quantum support.
var (
	SuiteX25519AES128GCM        = Suite{KEM: KEMX25519HKDFSHA256, KDF: KDFHKDFSHA256, AEAD: AEADAES128GCM}
	SuiteX25519ChaCha20Poly1305 = Suite{KEM: KEMX25519HKDFSHA256, KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305}
)

// String names the suite, e.g. "MLKEM768-X25519/HKDF-SHA256/ChaCha20-Poly1305".
func (s Suite) String() string {
	return kemName(s.KEM) + "/" + kdfName(s.KDF) + "/" + aeadName(s.AEAD)
}

func kemName(id uint16) string {
	switch id {
	case KEMX25519HKDFSHA256:
		return "DHKEM-X25519-HKDF-SHA256"
	case KEMMLKEM768X25519:
		return "MLKEM768-X25519"
	}
	return fmt.Sprintf("KEM(0x%04x)", id)
}

func kdfName(id uint16) string {
	if id == KDFHKDFSHA256 {
		return "HKDF-SHA256"
	}
	return fmt.Sprintf("KDF(0x%04x)", id)
}

func aeadName(id uint16) string {
	switch id {
	case AEADAES128GCM:
		return "AES-128-GCM"
	case AEADChaCha20Poly1305:
		return "ChaCha20-Poly1305"
	}
	return fmt.Sprintf("AEAD(0x%04x)", id)
}

// Sizes of a supported KEM: public key (Npk), encapsulated key (Nenc) and
// private key as this package reads it (a 32-byte seed for both KEMs).
type KEMSizes struct{ Npk, Nenc, Nsk int }

// KEMInfo returns the sizes of a supported KEM, or an [*UnsupportedError].
func KEMInfo(kem uint16) (KEMSizes, error) {
	switch kem {
	case KEMX25519HKDFSHA256:
		return KEMSizes{Npk: 32, Nenc: 32, Nsk: 32}, nil
	case KEMMLKEM768X25519:
		return KEMSizes{Npk: 1216, Nenc: 1120, Nsk: 32}, nil
	}
	return KEMSizes{}, &UnsupportedError{Kind: "kem", ID: kem}
}

// AEADSizes returns the key (Nk), nonce (Nn) and tag (Nt) sizes of a
// supported AEAD, or an [*UnsupportedError].
func AEADSizes(aead uint16) (nk, nn, nt int, err error) {
	switch aead {
	case AEADAES128GCM:
		return 16, 12, 16, nil
	case AEADChaCha20Poly1305:
		return 32, 12, 16, nil
	}
	return 0, 0, 0, &UnsupportedError{Kind: "aead", ID: aead}
}

// Validate reports whether every algorithm of the suite is supported.
func (s Suite) Validate() error {
	if _, err := KEMInfo(s.KEM); err != nil {
		return err
	}
	if s.KDF != KDFHKDFSHA256 {
		return &UnsupportedError{Kind: "kdf", ID: s.KDF}
	}
	_, _, _, err := AEADSizes(s.AEAD)
	return err
}

// HPKE returns crypto/hpke's implementations of the suite's algorithms.
func (s Suite) HPKE() (hpke.KEM, hpke.KDF, hpke.AEAD, error) {
	if err := s.Validate(); err != nil {
		return nil, nil, nil, err
	}
	var kem hpke.KEM
	switch s.KEM {
	case KEMX25519HKDFSHA256:
		kem = hpke.DHKEM(ecdh.X25519())
	case KEMMLKEM768X25519:
		kem = hpke.MLKEM768X25519()
	}
	var aead hpke.AEAD
	switch s.AEAD {
	case AEADAES128GCM:
		aead = hpke.AES128GCM()
	case AEADChaCha20Poly1305:
		aead = hpke.ChaCha20Poly1305()
	}
	return kem, hpke.HKDFSHA256(), aead, nil
}

// UnsupportedError reports a well-formed algorithm id that this package does
// not implement. Kind is "kem", "kdf" or "aead".
type UnsupportedError struct {
	Kind string
	ID   uint16
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("keys: unsupported hpke %s id 0x%04x", e.Kind, e.ID)
}

// ErrKeyClosed is returned by a [KeyPair] used after Close.
var ErrKeyClosed = errors.New("keys: hpke key pair is closed")

// SuiteError reports a suite that a key configuration does not offer.
type SuiteError struct {
	KeyID uint8
	Suite Suite
}

func (e *SuiteError) Error() string {
	return fmt.Sprintf("keys: key id %d does not offer suite %s", e.KeyID, e.Suite)
}

// KeyPair is an HPKE key pair held in memory. The private key cannot be
// read out; use NewRecipient. A KeyPair is safe for concurrent use.
type KeyPair struct {
	config KeyConfig

	mu   sync.RWMutex
	priv hpke.PrivateKey // nil once closed
}

// GenerateKeyPair creates a key pair for the given KEM, published under
// keyID with the given KDF/AEAD pairs. It reads the 32-byte private key
// (the X-Wing seed, or the X25519 scalar) from r; r nil means crypto/rand.
// Tests inject a fixed reader to get fixed keys.
func GenerateKeyPair(r io.Reader, keyID uint8, kem uint16, algs ...SymmetricAlgorithm) (*KeyPair, error) {
	info, err := KEMInfo(kem)
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = rand.Reader
	}
	seed := make([]byte, info.Nsk)
	defer clear(seed)
	if _, err := io.ReadFull(r, seed); err != nil {
		return nil, fmt.Errorf("keys: reading hpke private key randomness: %w", err)
	}
	hk, _, _, err := Suite{KEM: kem, KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305}.HPKE()
	if err != nil {
		return nil, err
	}
	priv, err := hk.NewPrivateKey(seed)
	if err != nil {
		return nil, fmt.Errorf("keys: hpke private key: %w", err)
	}
	cfg := KeyConfig{
		KeyID:      keyID,
		KEM:        kem,
		PublicKey:  priv.PublicKey().Bytes(),
		Algorithms: append([]SymmetricAlgorithm(nil), algs...),
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &KeyPair{config: cfg, priv: priv}, nil
}

// Config returns the public key configuration (a copy).
func (k *KeyPair) Config() KeyConfig { return k.config.clone() }

// KeyID returns the key identifier of the configuration.
func (k *KeyPair) KeyID() uint8 { return k.config.KeyID }

// Supports reports whether the key pair's configuration offers the suite.
func (k *KeyPair) Supports(s Suite) bool { return k.config.Supports(s) }

// NewRecipient sets up an HPKE base-mode receiving context for enc and
// info. It fails with a [*SuiteError] when the configuration does not offer
// the suite, with [ErrKeyClosed] after Close, and with crypto/hpke's error
// when decapsulation fails (a malformed or invalid enc).
func (k *KeyPair) NewRecipient(enc []byte, s Suite, info []byte) (*hpke.Recipient, error) {
	if !k.config.Supports(s) {
		return nil, &SuiteError{KeyID: k.config.KeyID, Suite: s}
	}
	_, kdf, aead, err := s.HPKE()
	if err != nil {
		return nil, err
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.priv == nil {
		return nil, ErrKeyClosed
	}
	return hpke.NewRecipient(enc, k.priv, kdf, aead, info)
}

// Close wipes what it can of the private key (see the package
// documentation for what Go lets it wipe) and makes the key pair unusable.
// Close is idempotent.
func (k *KeyPair) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.priv == nil {
		return nil
	}
	// For the hybrid KEM, Bytes returns the seed slice the private key keeps
	// (not a copy) in Go 1.26; for X25519 it returns a fresh clamped copy.
	// Zeroing it is harmless either way.
	if b, err := k.priv.Bytes(); err == nil {
		clear(b)
	}
	k.priv = nil
	return nil
}

// KeySet is the set of key pairs the appliance serves, at most one per key
// id. It is safe for concurrent use.
type KeySet struct {
	pairs []*KeyPair
}

// Key ids of the default key set made by GenerateKeySet.
const (
	DefaultKeyIDMLKEM768X25519 uint8 = 1
	DefaultKeyIDX25519         uint8 = 2
)

// NewKeySet groups key pairs; key ids must be distinct.
func NewKeySet(pairs ...*KeyPair) (*KeySet, error) {
	if len(pairs) == 0 || len(pairs) > MaxKeyConfigs {
		return nil, fmt.Errorf("keys: a key set holds 1 to %d key pairs, got %d", MaxKeyConfigs, len(pairs))
	}
	seen := map[uint8]bool{}
	for _, p := range pairs {
		if p == nil {
			return nil, errors.New("keys: nil key pair in key set")
		}
		if seen[p.KeyID()] {
			return nil, fmt.Errorf("keys: duplicate key id %d in key set", p.KeyID())
		}
		seen[p.KeyID()] = true
	}
	return &KeySet{pairs: append([]*KeyPair(nil), pairs...)}, nil
}

// GenerateKeySet creates the appliance's default key set, reading private
// keys from r (nil means crypto/rand):
//
//   - key id 1: MLKEM768-X25519 with HKDF-SHA256/ChaCha20-Poly1305;
//   - key id 2: DHKEM(X25519, HKDF-SHA256) with HKDF-SHA256/AES-128-GCM and
//     HKDF-SHA256/ChaCha20-Poly1305.
func GenerateKeySet(r io.Reader) (*KeySet, error) {
	xw, err := GenerateKeyPair(r, DefaultKeyIDMLKEM768X25519, KEMMLKEM768X25519,
		SymmetricAlgorithm{KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305})
	if err != nil {
		return nil, err
	}
	x, err := GenerateKeyPair(r, DefaultKeyIDX25519, KEMX25519HKDFSHA256,
		SymmetricAlgorithm{KDF: KDFHKDFSHA256, AEAD: AEADAES128GCM},
		SymmetricAlgorithm{KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305})
	if err != nil {
		xw.Close()
		return nil, err
	}
	return NewKeySet(xw, x)
}

// Lookup returns the key pair with the given key id.
func (s *KeySet) Lookup(id uint8) (*KeyPair, bool) {
	for _, p := range s.pairs {
		if p.KeyID() == id {
			return p, true
		}
	}
	return nil, false
}

// Configs returns the public key configurations in key set order.
func (s *KeySet) Configs() []KeyConfig {
	out := make([]KeyConfig, len(s.pairs))
	for i, p := range s.pairs {
		out[i] = p.Config()
	}
	return out
}

// MarshalConfigs encodes the public configurations as an
// application/ohttp-keys list (see [MarshalKeyConfigs]): the bytes the
// attestation statement carries.
func (s *KeySet) MarshalConfigs() ([]byte, error) {
	return MarshalKeyConfigs(s.Configs())
}

// Close closes every key pair of the set.
func (s *KeySet) Close() error {
	for _, p := range s.pairs {
		p.Close()
	}
	return nil
}
