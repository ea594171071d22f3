// Package attest defines the attestation statement and the evidence bundle
// of SparkInfer CC, and verifies bundles into claims.
//
// # The statement
//
// The appliance vouches for everything in one JSON object, the [Statement]:
// source hash, binary, kernels and model digests, HPKE key configurations,
// the receipt-signing key, a per-boot nonce, the digest of each GPU's
// report, the license id, boot and issue times and, for fresh evidence, the
// client's nonce. Its encoding is canonical ([Statement.Marshal]) and a
// verifier hashes the exact bytes it received:
//
//	REPORTDATA (64 bytes) = SHA-512("sparkinfer attestation v1" || 0x00 || statement bytes)
//
// TDX puts it in the quote's REPORTDATA, SEV-SNP in REPORT_DATA, a vTPM in
// the quote's nonce, the simulator in its quote. GPU reports are requested
// with [Statement.GPUNonce], 32 bytes derived from the statement's keys and
// boot nonce, and the statement lists SHA-256 of each report, so the GPU
// evidence is bound to this boot and to these keys.
//
// # The bundle
//
// [Bundle] is what GET /v1/attestation?nonce=… serves: the statement bytes,
// the TEE evidence and the per-GPU evidence. [ParseBundle] decodes it
// strictly (unknown fields, trailing data, unknown kinds and oversize parts
// are *check.ParseError). docs/EVIDENCE.md specifies the format.
//
// # Verifying
//
// A [Verifier] is built once with trust material and a clock ([Options]);
// [Verifier.Verify] takes a bundle and per-request [Expectations] (the
// client nonce) and returns a [Result]: [Claims] and a check.List naming
// every check with pass, fail or skipped and a reason. Verify checks
// signatures, certificate chains and bindings (REPORTDATA, GPU nonces, GPU
// evidence digests, the client nonce). It does not judge values — debug
// mode, TCB status, measurements, CC mode, evidence age, simulation — that
// is package policy's job, on the claims.
//
// Evidence kinds: "sim" (package attest/sim) is verified here under the
// simulation root and marked SIMULATED in the claims and the checklist.
// A kind whose verifier is not part of this build yields a
// *check.UnavailableError wrapping *UnsupportedKindError: not a pass, not
// a rejection.
package attest
