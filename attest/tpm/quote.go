package tpm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/sparkinfer/cc/attest/check"
)

// Limits of the quote container.
const (
	maxSignatureSize = 1024 // an RSA-8192 signature
	maxMessageSize   = 4096
	maxPCRs          = 24
	pcrSize          = 32 // SHA-256 bank
)

// Quote is a parsed, not yet verified, vTPM quote.
type Quote struct {
	// Message is the TPMS_ATTEST structure the TPM signed.
	Message []byte
	// Signature is the raw RSASSA signature over Message.
	Signature []byte
	// PCRs are the SHA-256 PCR values shipped with the quote, in the order
	// of the quote's PCR selection.
	PCRs [][]byte
	// Attest is Message decoded (go-tpm's TPMS_ATTEST).
	Attest *tpm2.AttestationData
}

func quoteErr(format string, args ...any) error {
	return &check.ParseError{What: "vtpm quote", Err: fmt.Errorf(format, args...)}
}

// ParseTPMQuote parses the vTPM quote container of Azure's az-cvm-vtpm tools
// (quote.bin): the serde/bincode encoding of {signature, message, pcrs},
//
//	u64 LE  signature length, then the raw RSASSA signature
//	u64 LE  message length, then the TPMS_ATTEST bytes
//	u64 LE  PCR count, then count SHA-256 values of 32 bytes each
//
// with nothing after. Errors are *check.ParseError.
func ParseTPMQuote(b []byte) (*Quote, error) {
	r := bytes.NewReader(b)
	readVec := func(what string, max int) ([]byte, error) {
		var n uint64
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return nil, quoteErr("%s length: %v", what, err)
		}
		if n == 0 || n > uint64(max) || n > uint64(r.Len()) {
			return nil, quoteErr("%s length %d is not in 1..%d or exceeds the %d bytes left", what, n, max, r.Len())
		}
		out := make([]byte, n)
		r.Read(out) // cannot fail: n <= r.Len()
		return out, nil
	}
	sig, err := readVec("signature", maxSignatureSize)
	if err != nil {
		return nil, err
	}
	msg, err := readVec("message", maxMessageSize)
	if err != nil {
		return nil, err
	}
	var count uint64
	if err := binary.Read(r, binary.LittleEndian, &count); err != nil {
		return nil, quoteErr("pcr count: %v", err)
	}
	if count > maxPCRs || count*pcrSize != uint64(r.Len()) {
		return nil, quoteErr("pcr count %d does not match the %d bytes left (32 each, at most %d)", count, r.Len(), maxPCRs)
	}
	pcrs := make([][]byte, count)
	for i := range pcrs {
		pcrs[i] = make([]byte, pcrSize)
		r.Read(pcrs[i])
	}
	return newQuote(msg, sig, pcrs)
}

// newQuote decodes the message and checks it is a quote over a SHA-256 PCR
// selection matching the shipped PCR values.
func newQuote(msg, sig []byte, pcrs [][]byte) (*Quote, error) {
	att, err := tpm2.DecodeAttestationData(msg)
	if err != nil {
		return nil, quoteErr("tpms_attest: %v", err)
	}
	if att.Type != tpm2.TagAttestQuote || att.AttestedQuoteInfo == nil {
		return nil, quoteErr("tpms_attest type 0x%x is not a quote (0x%x)", uint16(att.Type), uint16(tpm2.TagAttestQuote))
	}
	sel := att.AttestedQuoteInfo.PCRSelection
	if sel.Hash != tpm2.AlgSHA256 {
		return nil, quoteErr("quote selects pcr bank 0x%x, want sha256 (0x%x)", uint16(sel.Hash), uint16(tpm2.AlgSHA256))
	}
	if len(sel.PCRs) != len(pcrs) {
		return nil, quoteErr("quote selects %d pcrs but %d values were given", len(sel.PCRs), len(pcrs))
	}
	for i, p := range pcrs {
		if len(p) != pcrSize {
			return nil, quoteErr("pcr value %d is %d bytes, want %d", i, len(p), pcrSize)
		}
	}
	return &Quote{Message: msg, Signature: sig, PCRs: pcrs, Attest: att}, nil
}

// Evidence is Azure vTPM evidence as a whole: the HCL report, the vTPM quote
// and the hardware quote (a TD quote for TDX CVMs).
type Evidence struct {
	HCLReport []byte
	Quote     *Quote
	TDQuote   []byte
}

// evidenceV1 is the JSON form (Confidential Containers "az-tdx-vtpm"
// evidence, version 1): binary fields are base64url (padded or not), the quote's
// fields hex.
type evidenceV1 struct {
	Version  int `json:"version"`
	TPMQuote struct {
		Signature string   `json:"signature"`
		Message   string   `json:"message"`
		PCRs      []string `json:"pcrs"`
	} `json:"tpm_quote"`
	HCLReport string `json:"hcl_report"`
	TDQuote   string `json:"td_quote"`
}

func evErr(format string, args ...any) error {
	return &check.ParseError{What: "vtpm evidence json", Err: fmt.Errorf(format, args...)}
}

// ParseEvidenceJSON parses version-1 evidence JSON (evidence-v1.json):
// {"version":1,"tpm_quote":{"signature":hex,"message":hex,"pcrs":[hex…]},
// "hcl_report":base64url,"td_quote":base64url}. Unknown fields are errors.
// Errors are *check.ParseError.
func ParseEvidenceJSON(b []byte) (*Evidence, error) {
	var v evidenceV1
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, evErr("%v", err)
	}
	if dec.More() {
		return nil, evErr("trailing data after the object")
	}
	if v.Version != 1 {
		return nil, evErr("version %d is not 1", v.Version)
	}
	sig, err := hex.DecodeString(v.TPMQuote.Signature)
	if err != nil || len(sig) == 0 || len(sig) > maxSignatureSize {
		return nil, evErr("tpm_quote.signature: not 1..%d bytes of hex (%v)", maxSignatureSize, err)
	}
	msg, err := hex.DecodeString(v.TPMQuote.Message)
	if err != nil || len(msg) == 0 || len(msg) > maxMessageSize {
		return nil, evErr("tpm_quote.message: not 1..%d bytes of hex (%v)", maxMessageSize, err)
	}
	if len(v.TPMQuote.PCRs) > maxPCRs {
		return nil, evErr("tpm_quote.pcrs: %d values, at most %d", len(v.TPMQuote.PCRs), maxPCRs)
	}
	pcrs := make([][]byte, len(v.TPMQuote.PCRs))
	for i, s := range v.TPMQuote.PCRs {
		if pcrs[i], err = hex.DecodeString(s); err != nil || len(pcrs[i]) != pcrSize {
			return nil, evErr("tpm_quote.pcrs[%d]: not %d bytes of hex", i, pcrSize)
		}
	}
	q, err := newQuote(msg, sig, pcrs)
	if err != nil {
		return nil, err
	}
	hcl, err := decodeB64URL(v.HCLReport)
	if err != nil || len(hcl) == 0 {
		return nil, evErr("hcl_report: not base64url (%v)", err)
	}
	td, err := decodeB64URL(v.TDQuote)
	if err != nil || len(td) == 0 {
		return nil, evErr("td_quote: not base64url (%v)", err)
	}
	return &Evidence{HCLReport: hcl, Quote: q, TDQuote: td}, nil
}

// decodeB64URL decodes base64url with or without padding.
func decodeB64URL(s string) ([]byte, error) {
	if len(s)%4 == 0 {
		return base64.URLEncoding.DecodeString(s)
	}
	return base64.RawURLEncoding.DecodeString(s)
}
