// Package ohttp is SparkInfer's end-to-end encryption layer: the
// Oblivious-HTTP-style (RFC 9458) framing that the appliance's server and
// the client library both use. docs/PROTOCOL.md specifies the wire format
// byte by byte, with test vectors that this package's tests check.
//
// # Requests
//
// A client encrypts a [Request] (a fresh 16-byte request id, a timestamp,
// the HTTP path it is meant for, and the JSON body) to one of the
// appliance's published key configurations with [EncapsulateRequest] (a
// client sending many requests parses the configuration once with
// [NewClientKey] and calls [ClientKey.Encapsulate] per request; every
// request gets a fresh encapsulation either way):
//
//	header     = key_id (1) || kem_id (2) || kdf_id (2) || aead_id (2)
//	info       = "sparkinfer request v1" || 0x00 || header
//	enc, ctx   = HPKE SetupBaseS(public key, info)
//	ciphertext = ctx.Seal(aad = "", request plaintext)
//	message    = header || enc || ciphertext
//
// The appliance opens it with a [Gateway], which checks the key id, the
// suite, the AEAD tag, the plaintext encoding, the timestamp against a
// maximum clock skew, and that the encapsulated key was not seen before
// ([ReplayCache]). It does not check the path against the URL the message
// arrived on, nor the JSON body: the server does both.
//
// # Responses
//
// Both sides derive the response key from the HPKE exporter as in RFC 9458
// section 4.4 (label "sparkinfer response v1"). A response is the response
// nonce followed by one or more sealed chunks, the last one marked final;
// each chunk's nonce is the base nonce XOR its index, and the final chunk is
// sealed with the associated data "final" (as in the chunked OHTTP draft,
// draft-ietf-ohai-chunked-ohttp). A non-streamed response is a stream of one
// final chunk. [ResponseReader] detects a truncated stream (no final chunk),
// a reordered, duplicated or altered chunk, data after the final chunk, and
// a response sealed for another request, each with its own error (see
// [StreamError]).
//
// # What this package does not do
//
// It does not authenticate the appliance: the client must verify the
// attestation evidence that carries the key configurations before it
// encrypts to them. It does not hide message sizes, timing or HTTP status
// codes from the host. It does not persist anything.
package ohttp

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Labels and media types of the protocol (docs/PROTOCOL.md).
const (
	// RequestLabel starts the HPKE info string of every request.
	RequestLabel = "sparkinfer request v1"
	// ResponseLabel is the HPKE exporter context of the response secret.
	ResponseLabel = "sparkinfer response v1"

	// RequestMediaType is the Content-Type of an encapsulated request.
	RequestMediaType = "application/sparkinfer-ohttp-req"
	// ResponseMediaType is the Content-Type of an encapsulated response,
	// streamed or not.
	ResponseMediaType = "application/sparkinfer-ohttp-res"
	// KeysMediaType is the Content-Type of a key configuration list
	// (RFC 9458 section 3.2).
	KeysMediaType = "application/ohttp-keys"
)

// Sizes and limits of the framing.
const (
	// HeaderSize is the size of the request header: key id, KEM, KDF and
	// AEAD ids.
	HeaderSize = 7
	// RequestIDSize is the size of the client-chosen request id.
	RequestIDSize = 16
	// MaxPathLen caps the path carried in a request plaintext.
	MaxPathLen = 255
	// DefaultMaxRequestSize is the Gateway's cap on an encapsulated request
	// when its MaxRequestSize is zero.
	DefaultMaxRequestSize = 8 << 20
	// MaxChunkSize caps the plaintext of one response chunk; writers split
	// longer writes.
	MaxChunkSize = 1 << 20
	// chunkHeaderSize is the flags byte and the 4-byte length.
	chunkHeaderSize = 5
	// plaintextFixed is the request id, the timestamp and the path length.
	plaintextFixed = RequestIDSize + 8 + 1
)

// Request is the plaintext of an encapsulated request.
//
//	Request Plaintext {
//	  Request ID (128),         // chosen by the client, random
//	  Timestamp (64),           // Unix seconds, big-endian, unsigned
//	  Path Length (8) = 1..255,
//	  Path (Path Length * 8),   // e.g. "/v1/chat/completions"
//	  Body (..),                // the JSON request body, to the end
//	}
type Request struct {
	ID   [RequestIDSize]byte
	Time time.Time // second precision on the wire
	// Path is the HTTP path the client sends the request to: printable
	// ASCII starting with "/". The server must check it equals the path
	// the request arrived on.
	Path string
	Body []byte
}

// MarshalBinary encodes the request plaintext.
func (r Request) MarshalBinary() ([]byte, error) {
	if err := validPath(r.Path); err != nil {
		return nil, &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("path %q: %s", r.Path, err.Detail)}
	}
	if r.Time.Unix() < 0 {
		return nil, fmt.Errorf("ohttp: request time %s is before 1970", r.Time)
	}
	b := make([]byte, 0, plaintextFixed+len(r.Path)+len(r.Body))
	b = append(b, r.ID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time.Unix()))
	b = append(b, byte(len(r.Path)))
	b = append(b, r.Path...)
	b = append(b, r.Body...)
	return b, nil
}

// validPath checks a request path. Its error does not quote the path: on
// the server the path comes from the decrypted plaintext, and errors may be
// sent back in the clear or logged.
func validPath(p string) *RequestError {
	if len(p) == 0 || len(p) > MaxPathLen || p[0] != '/' {
		return &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("path of %d bytes, want 1 to %d bytes starting with \"/\"", len(p), MaxPathLen)}
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("path byte %d is not printable ascii", i)}
		}
	}
	return nil
}

// ParseRequest decodes a request plaintext. Errors wrap
// [ErrMalformedPlaintext].
func ParseRequest(b []byte) (Request, error) {
	if len(b) < plaintextFixed {
		return Request{}, &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("%d bytes, shorter than the %d-byte id, timestamp and path length", len(b), plaintextFixed)}
	}
	var r Request
	copy(r.ID[:], b)
	ts := binary.BigEndian.Uint64(b[RequestIDSize:])
	if ts > 1<<62 {
		return Request{}, &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("timestamp %d out of range", ts)}
	}
	r.Time = time.Unix(int64(ts), 0).UTC()
	n := int(b[RequestIDSize+8])
	rest := b[plaintextFixed:]
	if len(rest) < n {
		return Request{}, &RequestError{Err: ErrMalformedPlaintext, Detail: fmt.Sprintf("path length %d but %d bytes left", n, len(rest))}
	}
	r.Path = string(rest[:n])
	if err := validPath(r.Path); err != nil {
		return Request{}, err
	}
	// Errors of this parser never quote plaintext: the server may send
	// them back unencrypted.
	r.Body = rest[n:]
	return r, nil
}
