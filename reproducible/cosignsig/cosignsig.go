// Package cosignsig signs and verifies release artifacts in the formats of
// sigstore's cosign, with github.com/sigstore/cosign/v2, offline and with a
// key pair: no Fulcio certificate, no Rekor transparency-log entry.
//
// # Formats
//
//   - Private key: cosign's encrypted PEM ("ENCRYPTED SIGSTORE PRIVATE KEY",
//     also "ENCRYPTED COSIGN PRIVATE KEY"): a PKCS #8 key sealed with
//     scrypt + secretbox under a password, as `cosign generate-key-pair`
//     writes it. New keys are ECDSA P-256.
//   - Public key: PEM "PUBLIC KEY" (PKIX), as cosign.pub.
//   - Signature: the base64 (standard alphabet, no newline) of the raw
//     signature over the artifact's bytes, as `cosign sign-blob --key K
//     --output-signature F.sig --tlog-upload=false` writes it. For ECDSA
//     keys that is an ASN.1 DER signature of the SHA-256 of the artifact.
//
// Such a signature verifies with `cosign verify-blob --key K.pub --signature
// F.sig --insecure-ignore-tlog=true F`, and this package verifies what that
// cosign command verifies.
//
// # What is checked
//
// [Verify] checks the signature over the exact artifact bytes with the given
// public key, through cosign.VerifyBlobSignature. It does not check a
// transparency-log inclusion or a signing time (there are none in this
// offline format), nor who owns the key: trusting the public key is the
// caller's decision.
//
// This package is release tooling: only sparkctl imports it, never the
// appliance binary (a test in package reproducible checks this).
package cosignsig

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// KeyError says a key could not be used: unparsable, of an unsupported type,
// or a private key that does not decrypt with the password.
type KeyError struct {
	What string // "private key" or "public key"
	Err  error
}

func (e *KeyError) Error() string { return fmt.Sprintf("%s: %v", e.What, e.Err) }
func (e *KeyError) Unwrap() error { return e.Err }

// SignatureError says a signature file is malformed (not base64, empty, too
// large). It is not a verdict on the artifact.
type SignatureError struct{ Err error }

func (e *SignatureError) Error() string { return fmt.Sprintf("signature: %v", e.Err) }
func (e *SignatureError) Unwrap() error { return e.Err }

// VerifyError is the rejection: the signature is well formed but does not
// verify over these bytes with this key. A tampered artifact, a different
// key and a signature of another file all end here; cryptography cannot
// tell them apart, so the reason names the key and the artifact's digest.
type VerifyError struct {
	KeyFingerprint string // sha256 of the PKIX public key, hex
	ArtifactSHA256 string
	Err            error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("signature does not verify: the artifact (sha256 %s) was not signed with the key sha256:%s, or was changed after signing: %v",
		e.ArtifactSHA256, e.KeyFingerprint, e.Err)
}
func (e *VerifyError) Unwrap() error { return e.Err }

// maxSignature caps a signature file: base64 of an RSA-4096 signature is
// under 700 bytes.
const maxSignature = 16 << 10

// GenerateKeyPair creates an ECDSA P-256 key pair in cosign's formats: the
// private key encrypted under password (which may be empty, as cosign
// allows), and the public key.
func GenerateKeyPair(password []byte) (privatePEM, publicPEM []byte, err error) {
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return bytes.Clone(password), nil })
	if err != nil {
		return nil, nil, fmt.Errorf("generate key pair: %w", err)
	}
	return kb.PrivateBytes, kb.PublicBytes, nil
}

// Sign signs artifact with a cosign encrypted private key and returns the
// signature in cosign's base64 format (the contents of FILE.sig).
func Sign(privatePEM, password, artifact []byte) ([]byte, error) {
	// No ed25519ph: cosign signs blobs with pure Ed25519 when nothing goes
	// to the transparency log; ECDSA and RSA keys are unaffected.
	sv, err := cosign.LoadPrivateKey(privatePEM, password, &[]signature.LoadOption{})
	if err != nil {
		return nil, &KeyError{What: "private key", Err: err}
	}
	sig, err := sv.SignMessage(bytes.NewReader(artifact))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return []byte(base64.StdEncoding.EncodeToString(sig)), nil
}

// PublicKey returns the PEM public key of a cosign encrypted private key.
func PublicKey(privatePEM, password []byte) ([]byte, error) {
	sv, err := cosign.LoadPrivateKey(privatePEM, password, &[]signature.LoadOption{})
	if err != nil {
		return nil, &KeyError{What: "private key", Err: err}
	}
	pub, err := sv.PublicKey()
	if err != nil {
		return nil, &KeyError{What: "private key", Err: err}
	}
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// Fingerprint returns the SHA-256 of a PEM public key's PKIX encoding, hex.
func Fingerprint(publicPEM []byte) (string, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(publicPEM)
	if err != nil {
		return "", &KeyError{What: "public key", Err: err}
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", &KeyError{What: "public key", Err: err}
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// ParseSignature decodes a signature file: base64 in the standard alphabet,
// optionally followed by one newline (what `cosign sign-blob` and [Sign]
// write, and what an editor may add).
func ParseSignature(file []byte) (raw []byte, err error) {
	if len(file) > maxSignature {
		return nil, &SignatureError{Err: fmt.Errorf("%d bytes is over the %d-byte limit", len(file), maxSignature)}
	}
	s := bytes.TrimSuffix(file, []byte("\n"))
	if len(s) == 0 {
		return nil, &SignatureError{Err: errors.New("empty")}
	}
	if bytes.ContainsAny(s, "\r\n\t ") {
		// encoding/base64 skips line breaks; a signature file has none.
		return nil, &SignatureError{Err: errors.New("whitespace inside the base64 signature")}
	}
	raw, err = base64.StdEncoding.Strict().DecodeString(string(s))
	if err != nil {
		return nil, &SignatureError{Err: fmt.Errorf("not base64: %v", err)}
	}
	if len(raw) == 0 {
		return nil, &SignatureError{Err: errors.New("empty")}
	}
	return raw, nil
}

// Verify checks a cosign signature file over artifact with a PEM public key.
// It returns nil only if the signature verifies.
func Verify(ctx context.Context, publicPEM, signatureFile, artifact []byte) error {
	raw, err := ParseSignature(signatureFile)
	if err != nil {
		return err
	}
	fp, err := Fingerprint(publicPEM)
	if err != nil {
		return err
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(publicPEM)
	if err != nil {
		return &KeyError{What: "public key", Err: err}
	}
	// As `cosign verify-blob --key` loads a key file.
	verifier, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return &KeyError{What: "public key", Err: err}
	}
	sig, err := static.NewSignature(artifact, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return &SignatureError{Err: err}
	}
	co := &cosign.CheckOpts{
		SigVerifier: verifier,
		IgnoreTlog:  true, // offline key-based format: no Rekor entry exists
		IgnoreSCT:   true, // no certificate, so no SCT
	}
	if _, err := cosign.VerifyBlobSignature(ctx, sig, co); err != nil {
		sum := sha256.Sum256(artifact)
		return &VerifyError{KeyFingerprint: fp, ArtifactSHA256: hex.EncodeToString(sum[:]), Err: err}
	}
	return nil
}
