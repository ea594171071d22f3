package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/keys/ohttp"
	"github.com/sparkinfer/cc/policy"
)

// ErrNoPolicy is returned when a Client has no Policy: nothing is verified,
// so nothing is sent.
var ErrNoPolicy = errors.New("client: no policy: refusing to verify or send anything")

// ErrNoUsableKey is returned when the verified statement lists no key
// configuration with a suite this client implements.
var ErrNoUsableKey = errors.New("client: the verified statement lists no usable hpke key configuration")

// ErrUnexpectedResponse is returned when the server's answer to an
// encrypted request is neither an encrypted response nor a plaintext JSON
// error (docs/PROTOCOL.md section 8.2: treat it as an attack).
var ErrUnexpectedResponse = errors.New("client: unexpected response to an encrypted request")

// ErrIncompleteStream is returned when an authenticated event stream ends
// without "data: [DONE]", or carries data after it.
var ErrIncompleteStream = errors.New("client: event stream not terminated by [DONE]")

// VerificationError is returned when the appliance's evidence was not
// accepted: verification failed, could not be carried out, or the policy
// rejected the claims. Nothing was sent to the appliance.
type VerificationError struct {
	// Verdict lists every check with its outcome.
	Verdict policy.Verdict
	// Err is the verifier's error (a *check.ParseError, *check.VerifyError
	// or *check.UnavailableError), or nil when only policy checks failed.
	Err error
}

func (e *VerificationError) Error() string {
	var failed []string
	for _, c := range e.Verdict.Checks {
		if c.Status == check.Fail {
			failed = append(failed, c.Name+": "+c.Reason)
		}
	}
	switch {
	case len(failed) > 0:
		more := ""
		if len(failed) > 1 {
			more = fmt.Sprintf(" (and %d more failed checks)", len(failed)-1)
		}
		return "client: appliance evidence rejected: " + failed[0] + more
	case e.Err != nil:
		return "client: appliance evidence rejected: " + e.Err.Error()
	default:
		return "client: appliance evidence rejected"
	}
}

func (e *VerificationError) Unwrap() error { return e.Err }

// FailedChecks returns the names of the failed checks.
func (e *VerificationError) FailedChecks() []string {
	var names []string
	for _, c := range e.Verdict.Checks {
		if c.Status == check.Fail {
			names = append(names, c.Name)
		}
	}
	return names
}

// FetchError is a failure to obtain evidence: the appliance could not be
// reached, or answered the attestation request with an error or with
// something that is not an evidence bundle.
type FetchError struct {
	URL string
	Err error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("client: fetch evidence from %q: %v", e.URL, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// APIError is an error answer of the appliance in the OpenAI error shape:
//
//	{"error": {"message": "...", "type": "...", "code": "..."}}
//
// Encrypted is true when the error came inside an authenticated encrypted
// response (errors of the OpenAI layer: unknown model, malformed JSON,
// overload); false when it came in plaintext, which the protocol uses only
// for errors found before the request could be opened (docs/PROTOCOL.md
// section 9) and which the host could have forged.
type APIError struct {
	StatusCode int
	Type       string
	Code       string
	Message    string
	Encrypted  bool
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: appliance answered %d", e.StatusCode)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if !e.Encrypted {
		b.WriteString(" (plaintext, unauthenticated)")
	}
	return b.String()
}

// plaintextKinds maps the codes of docs/PROTOCOL.md section 9 to the error
// kinds of package ohttp, so that callers can test with errors.Is.
var plaintextKinds = map[string]error{
	"request_too_large":      ohttp.ErrRequestTooLarge,
	"malformed_request":      ohttp.ErrMalformedRequest,
	"unknown_key_id":         ohttp.ErrUnknownKeyID,
	"unsupported_suite":      ohttp.ErrUnsupportedSuite,
	"decryption_failed":      ohttp.ErrDecryption,
	"malformed_plaintext":    ohttp.ErrMalformedPlaintext,
	"stale_request":          ohttp.ErrStaleRequest,
	"replayed_request":       ohttp.ErrReplayedRequest,
	"replay_cache_full":      ohttp.ErrReplayCacheFull,
	"path_mismatch":          ohttp.ErrPathMismatch,
	"encryption_required":    ohttp.ErrEncryptionRequired,
	"unsupported_media_type": ohttp.ErrUnsupportedMediaType,
}

// Unwrap returns the package ohttp error kind of a plaintext protocol error
// (for example ohttp.ErrReplayedRequest for "replayed_request"), or nil.
func (e *APIError) Unwrap() error {
	if e.Encrypted {
		return nil
	}
	return plaintextKinds[e.Code]
}

// ProtocolCode reports whether the error is a plaintext protocol error of
// docs/PROTOCOL.md section 9 (a problem between this client and the
// appliance's encryption layer, not with the OpenAI request).
func (e *APIError) ProtocolCode() bool {
	return !e.Encrypted && plaintextKinds[e.Code] != nil
}
