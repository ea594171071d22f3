package ohttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Kinds of request errors, wrapped in a [*RequestError]; test with
// errors.Is. [HTTPError] maps each to the HTTP status and error code of
// docs/PROTOCOL.md.
var (
	ErrRequestTooLarge    = errors.New("encapsulated request too large")
	ErrMalformedRequest   = errors.New("malformed encapsulated request")
	ErrUnknownKeyID       = errors.New("unknown key id")
	ErrUnsupportedSuite   = errors.New("unsupported hpke suite")
	ErrDecryption         = errors.New("request decryption failed")
	ErrMalformedPlaintext = errors.New("malformed request plaintext")
	ErrStaleRequest       = errors.New("request timestamp outside the allowed clock skew")
	ErrReplayedRequest    = errors.New("replayed request")
	ErrReplayCacheFull    = errors.New("replay cache full")

	// Kinds the server reports itself (see docs/PROTOCOL.md section 9).
	ErrPathMismatch         = errors.New("request path does not match the url path")
	ErrEncryptionRequired   = errors.New("plaintext request refused: encryption required")
	ErrUnsupportedMediaType = errors.New("unsupported media type")
)

// RequestError is a request the gateway (or the plaintext parser) rejected.
// Err is one of the Err* kinds above; Detail says what was wrong.
type RequestError struct {
	Err    error
	Detail string
}

func (e *RequestError) Error() string {
	if e.Detail == "" {
		return "ohttp: " + e.Err.Error()
	}
	return "ohttp: " + e.Err.Error() + ": " + e.Detail
}

func (e *RequestError) Unwrap() error { return e.Err }

// Kinds of response stream errors, wrapped in a [*StreamError]; test with
// errors.Is.
var (
	// ErrTruncated: the stream ended before a final chunk.
	ErrTruncated = errors.New("response truncated: no final chunk")
	// ErrReordered: a chunk opened only under a later chunk index, so
	// chunks were reordered or dropped.
	ErrReordered = errors.New("response chunk out of order")
	// ErrDuplicated: a chunk opened only under an earlier index: a replay of
	// a chunk already read.
	ErrDuplicated = errors.New("response chunk duplicated")
	// ErrAfterFinal: bytes follow the final chunk.
	ErrAfterFinal = errors.New("data after the final response chunk")
	// ErrWrongKey: the first chunk does not open under this request's
	// response key: the response was sealed for another request or key, or
	// its nonce or first chunk was altered (these cannot be told apart).
	ErrWrongKey = errors.New("response not sealed to this request's key")
	// ErrChunkAuth: a later chunk failed authentication and matched no
	// nearby index or flag: it was altered.
	ErrChunkAuth = errors.New("response chunk authentication failed")
	// ErrMalformedChunk: the framing itself is invalid (unknown flags, a
	// length out of range).
	ErrMalformedChunk = errors.New("malformed response chunk")
)

// StreamError is a response stream rejected by a [ResponseReader]. Chunk
// is the index of the chunk position where it happened; for ErrReordered
// and ErrDuplicated, Got is the index the chunk was sealed under.
type StreamError struct {
	Err    error
	Chunk  uint64
	Got    uint64
	Detail string
}

func (e *StreamError) Error() string {
	s := fmt.Sprintf("ohttp: %v at chunk %d", e.Err, e.Chunk)
	if e.Err == ErrReordered || e.Err == ErrDuplicated {
		s += fmt.Sprintf(" (sealed as chunk %d)", e.Got)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *StreamError) Unwrap() error { return e.Err }

// ErrorJSON returns the status and the plaintext JSON error body of
// docs/PROTOCOL.md section 9 for an error of this package:
//
//	{"error":{"message":"...","type":"invalid_request_error","code":"unknown_key_id"}}
//
// The messages of this package's errors never quote decrypted plaintext.
func ErrorJSON(err error) (status int, body []byte) {
	status, code := HTTPError(err)
	typ := "invalid_request_error"
	msg := err.Error()
	if status >= 500 {
		typ = "server_error"
		if code == "internal_error" {
			msg = "internal error" // not ours: do not echo unknown error text
		}
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Type, e.Error.Code = msg, typ, code
	body, _ = json.Marshal(e)
	return status, body
}

// HTTPError maps an error of this package to the HTTP status and the
// machine-readable code that docs/PROTOCOL.md assigns it. Other errors map
// to 500 and "internal_error".
func HTTPError(err error) (status int, code string) {
	switch {
	case errors.Is(err, ErrRequestTooLarge):
		return http.StatusRequestEntityTooLarge, "request_too_large"
	case errors.Is(err, ErrMalformedRequest):
		return http.StatusBadRequest, "malformed_request"
	case errors.Is(err, ErrUnknownKeyID):
		return http.StatusBadRequest, "unknown_key_id"
	case errors.Is(err, ErrUnsupportedSuite):
		return http.StatusBadRequest, "unsupported_suite"
	case errors.Is(err, ErrDecryption):
		return http.StatusBadRequest, "decryption_failed"
	case errors.Is(err, ErrMalformedPlaintext):
		return http.StatusBadRequest, "malformed_plaintext"
	case errors.Is(err, ErrStaleRequest):
		return http.StatusBadRequest, "stale_request"
	case errors.Is(err, ErrReplayedRequest):
		return http.StatusBadRequest, "replayed_request"
	case errors.Is(err, ErrReplayCacheFull):
		return http.StatusServiceUnavailable, "replay_cache_full"
	case errors.Is(err, ErrPathMismatch):
		return http.StatusBadRequest, "path_mismatch"
	case errors.Is(err, ErrEncryptionRequired):
		return http.StatusUnsupportedMediaType, "encryption_required"
	case errors.Is(err, ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, "unsupported_media_type"
	}
	return http.StatusInternalServerError, "internal_error"
}
