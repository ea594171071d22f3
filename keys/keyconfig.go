package keys

import (
	"bytes"
	"crypto/hpke"
	"encoding/binary"
	"fmt"
)

// SymmetricAlgorithm is one KDF/AEAD pair a key configuration offers.
type SymmetricAlgorithm struct {
	KDF  uint16
	AEAD uint16
}

// KeyConfig is a public HPKE key configuration, encoded as in RFC 9458
// section 3.1:
//
//	Key Config {
//	  Key Identifier (8),
//	  HPKE KEM ID (16),
//	  HPKE Public Key (Npk * 8),
//	  HPKE Symmetric Algorithms Length (16) = 4..64,
//	  HPKE Symmetric Algorithms (32) ...,       // KDF ID (16), AEAD ID (16)
//	}
//
// All integers are big-endian. This package is stricter than RFC 9458: the
// KEM, every KDF and every AEAD must be one it supports, the public key must
// be a valid key of the KEM, pairs must be distinct, at most
// [MaxSymmetricAlgorithms] pairs are allowed, and no byte may follow. So an
// accepted encoding is canonical: MarshalBinary gives back the same bytes.
type KeyConfig struct {
	KeyID      uint8
	KEM        uint16
	PublicKey  []byte
	Algorithms []SymmetricAlgorithm
}

// Limits of the key configuration encodings.
const (
	MaxSymmetricAlgorithms = 16
	MaxKeyConfigs          = 16
	// MaxKeyConfigsSize caps an application/ohttp-keys list.
	MaxKeyConfigsSize = 16 << 10
)

// ParseError reports a malformed key configuration: what was being read,
// the byte offset, and why it was rejected.
type ParseError struct {
	What   string
	Offset int
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("keys: malformed %s at offset %d: %s", e.What, e.Offset, e.Reason)
}

func (c KeyConfig) clone() KeyConfig {
	c.PublicKey = bytes.Clone(c.PublicKey)
	c.Algorithms = append([]SymmetricAlgorithm(nil), c.Algorithms...)
	return c
}

// Validate checks what ParseKeyConfig checks, on a KeyConfig value.
func (c KeyConfig) Validate() error {
	info, err := KEMInfo(c.KEM)
	if err != nil {
		return err
	}
	if len(c.PublicKey) != info.Npk {
		return &ParseError{What: "key config", Offset: 3,
			Reason: fmt.Sprintf("public key is %d bytes, %s needs %d", len(c.PublicKey), kemName(c.KEM), info.Npk)}
	}
	if _, err := c.HPKEPublicKey(); err != nil {
		return &ParseError{What: "key config", Offset: 3, Reason: "invalid public key: " + err.Error()}
	}
	if len(c.Algorithms) == 0 || len(c.Algorithms) > MaxSymmetricAlgorithms {
		return &ParseError{What: "key config", Offset: 3 + info.Npk,
			Reason: fmt.Sprintf("%d symmetric algorithms, want 1 to %d", len(c.Algorithms), MaxSymmetricAlgorithms)}
	}
	for i, a := range c.Algorithms {
		if err := (Suite{KEM: c.KEM, KDF: a.KDF, AEAD: a.AEAD}).Validate(); err != nil {
			return err
		}
		for _, b := range c.Algorithms[:i] {
			if a == b {
				return &ParseError{What: "key config", Offset: 3 + info.Npk + 2 + 4*i,
					Reason: fmt.Sprintf("duplicate symmetric algorithm %s/%s", kdfName(a.KDF), aeadName(a.AEAD))}
			}
		}
	}
	return nil
}

// HPKEPublicKey returns the public key as a crypto/hpke key.
func (c KeyConfig) HPKEPublicKey() (hpke.PublicKey, error) {
	kem, _, _, err := Suite{KEM: c.KEM, KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305}.HPKE()
	if err != nil {
		return nil, err
	}
	return kem.NewPublicKey(c.PublicKey)
}

// Supports reports whether the configuration offers the suite.
func (c KeyConfig) Supports(s Suite) bool {
	if s.KEM != c.KEM {
		return false
	}
	for _, a := range c.Algorithms {
		if a.KDF == s.KDF && a.AEAD == s.AEAD {
			return true
		}
	}
	return false
}

// Suites lists the suites the configuration offers, in its order.
func (c KeyConfig) Suites() []Suite {
	out := make([]Suite, len(c.Algorithms))
	for i, a := range c.Algorithms {
		out[i] = Suite{KEM: c.KEM, KDF: a.KDF, AEAD: a.AEAD}
	}
	return out
}

// MarshalBinary encodes the configuration (RFC 9458 section 3.1). It fails
// on a configuration that Validate rejects.
func (c KeyConfig) MarshalBinary() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 3+len(c.PublicKey)+2+4*len(c.Algorithms))
	b = append(b, c.KeyID)
	b = binary.BigEndian.AppendUint16(b, c.KEM)
	b = append(b, c.PublicKey...)
	b = binary.BigEndian.AppendUint16(b, uint16(4*len(c.Algorithms)))
	for _, a := range c.Algorithms {
		b = binary.BigEndian.AppendUint16(b, a.KDF)
		b = binary.BigEndian.AppendUint16(b, a.AEAD)
	}
	return b, nil
}

// ParseKeyConfig decodes one key configuration, strictly (see KeyConfig).
// Errors are [*ParseError] for malformed bytes and [*UnsupportedError] for
// algorithms this package does not implement.
func ParseKeyConfig(b []byte) (KeyConfig, error) {
	const what = "key config"
	if len(b) < 3 {
		return KeyConfig{}, &ParseError{What: what, Offset: len(b), Reason: fmt.Sprintf("%d bytes, shorter than the 3-byte key id and kem id", len(b))}
	}
	c := KeyConfig{KeyID: b[0], KEM: binary.BigEndian.Uint16(b[1:3])}
	info, err := KEMInfo(c.KEM)
	if err != nil {
		return KeyConfig{}, err
	}
	off := 3
	if len(b)-off < info.Npk+2 {
		return KeyConfig{}, &ParseError{What: what, Offset: off,
			Reason: fmt.Sprintf("%d bytes left, %s needs a %d-byte public key and a 2-byte length", len(b)-off, kemName(c.KEM), info.Npk)}
	}
	c.PublicKey = bytes.Clone(b[off : off+info.Npk])
	off += info.Npk
	n := int(binary.BigEndian.Uint16(b[off:]))
	if n == 0 || n%4 != 0 || n > 4*MaxSymmetricAlgorithms {
		return KeyConfig{}, &ParseError{What: what, Offset: off,
			Reason: fmt.Sprintf("symmetric algorithms length %d, want a multiple of 4 from 4 to %d", n, 4*MaxSymmetricAlgorithms)}
	}
	off += 2
	if len(b)-off != n {
		return KeyConfig{}, &ParseError{What: what, Offset: off,
			Reason: fmt.Sprintf("symmetric algorithms length %d but %d bytes left", n, len(b)-off)}
	}
	for ; off < len(b); off += 4 {
		c.Algorithms = append(c.Algorithms, SymmetricAlgorithm{
			KDF:  binary.BigEndian.Uint16(b[off:]),
			AEAD: binary.BigEndian.Uint16(b[off+2:]),
		})
	}
	if err := c.Validate(); err != nil {
		return KeyConfig{}, err
	}
	return c, nil
}

// MarshalKeyConfigs encodes configurations as an application/ohttp-keys
// list (RFC 9458 section 3.2): each configuration preceded by its length as
// a 2-byte big-endian integer. Key ids must be distinct; 1 to
// [MaxKeyConfigs] configurations.
func MarshalKeyConfigs(cs []KeyConfig) ([]byte, error) {
	if len(cs) == 0 || len(cs) > MaxKeyConfigs {
		return nil, &ParseError{What: "key config list", Offset: 0, Reason: fmt.Sprintf("%d key configs, want 1 to %d", len(cs), MaxKeyConfigs)}
	}
	var out []byte
	for i, c := range cs {
		for _, d := range cs[:i] {
			if d.KeyID == c.KeyID {
				return nil, &ParseError{What: "key config list", Offset: len(out), Reason: fmt.Sprintf("duplicate key id %d", c.KeyID)}
			}
		}
		b, err := c.MarshalBinary()
		if err != nil {
			return nil, err
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// ParseKeyConfigs decodes an application/ohttp-keys list, strictly: 1 to
// [MaxKeyConfigs] configurations, at most [MaxKeyConfigsSize] bytes, each
// valid for ParseKeyConfig, distinct key ids, nothing left over.
func ParseKeyConfigs(b []byte) ([]KeyConfig, error) {
	const what = "key config list"
	if len(b) > MaxKeyConfigsSize {
		return nil, &ParseError{What: what, Offset: MaxKeyConfigsSize, Reason: fmt.Sprintf("%d bytes, more than the %d-byte cap", len(b), MaxKeyConfigsSize)}
	}
	if len(b) == 0 {
		return nil, &ParseError{What: what, Offset: 0, Reason: "empty"}
	}
	var out []KeyConfig
	for off := 0; off < len(b); {
		if len(out) == MaxKeyConfigs {
			return nil, &ParseError{What: what, Offset: off, Reason: fmt.Sprintf("more than %d key configs", MaxKeyConfigs)}
		}
		if len(b)-off < 2 {
			return nil, &ParseError{What: what, Offset: off, Reason: "truncated length"}
		}
		n := int(binary.BigEndian.Uint16(b[off:]))
		off += 2
		if len(b)-off < n {
			return nil, &ParseError{What: what, Offset: off, Reason: fmt.Sprintf("key config length %d but %d bytes left", n, len(b)-off)}
		}
		c, err := ParseKeyConfig(b[off : off+n])
		if err != nil {
			if pe, ok := err.(*ParseError); ok {
				return nil, &ParseError{What: pe.What, Offset: off + pe.Offset, Reason: pe.Reason}
			}
			return nil, err
		}
		for _, d := range out {
			if d.KeyID == c.KeyID {
				return nil, &ParseError{What: what, Offset: off, Reason: fmt.Sprintf("duplicate key id %d", c.KeyID)}
			}
		}
		out = append(out, c)
		off += n
	}
	return out, nil
}
