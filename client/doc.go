// Package client is the relying party's library for a SparkInfer CC
// appliance: it fetches the appliance's attestation evidence with a fresh
// nonce, verifies it (package attest) and appraises it against a policy
// (package policy), and only then sends OpenAI-style requests, encrypted end
// to end (package keys/ohttp, docs/PROTOCOL.md) to an HPKE key taken from
// the verified statement. Answers are decrypted and authenticated chunk by
// chunk.
//
// # Use
//
//	pol, err := policy.Parse(policyJSON)
//	c := &client.Client{BaseURL: "https://appliance:8443", Policy: pol}
//	ans, err := c.ChatCompletion(ctx, client.ChatRequest{
//		Model:    "stories260K",
//		Messages: []client.ChatMessage{{Role: "user", Content: "Tell me a story."}},
//	})
//
// Client.Attest verifies explicitly and returns the verdict (every check,
// with pass, fail or skipped and a reason) and the key configurations; the
// request methods do it implicitly. Proxy serves the same as a plain
// OpenAI-compatible endpoint on localhost, for agents and SDKs that cannot
// use this package (`sparkctl proxy`).
//
// # What is checked
//
//   - Evidence is requested with 32 fresh random bytes as nonce and must carry
//     exactly that nonce (check "statement.nonce"), so a recorded answer
//     cannot be replayed. A 429 of the appliance's evidence rate limit is
//     waited out (Retry-After, at most 10 s, 5 times).
//   - attest.Verifier checks signatures, certificate chains and bindings; the
//     policy decides on values (simulation, debug, TCB, measurements, source
//     hash, evidence age). Only a verdict with no failed check is used.
//   - The HPKE key configurations come from the verified statement only,
//     are rebuilt in their binary form and validated (check
//     "client.hpke_key_config"). No other key is ever used.
//   - A verification is reused for at most the policy's max_evidence_age,
//     counted from the earlier of the statement's issue time and the moment
//     the evidence was requested; then fresh evidence is fetched. When the
//     appliance answers "unknown_key_id" (it restarted with new keys) the
//     client verifies fresh evidence and retries once, with a new
//     encapsulation.
//   - Every request is a fresh HPKE encapsulation bound to its path and a
//     timestamp; the appliance rejects a replay (an *APIError for which
//     errors.Is(err, ohttp.ErrReplayedRequest) holds).
//   - A response that was cut, reordered, duplicated, altered or sealed to
//     another request's key fails with an *ohttp.StreamError (errors.Is with
//     ohttp.ErrTruncated, ErrReordered, ErrDuplicated, ErrChunkAuth,
//     ErrWrongKey ...). Readers return io.EOF only at the authenticated end.
//     A streamed answer must also end with "data: [DONE]" right before that
//     end (ErrIncompleteStream).
//
// Fails closed: no policy (ErrNoPolicy), no evidence (*FetchError) or
// rejected evidence (*VerificationError) means no request is sent.
//
// # What is not checked or hidden
//
//   - Simulated evidence (policy allow_simulated) proves nothing; the verdict
//     says Simulated and sparkctl prints SIMULATED.
//   - Plaintext error answers (docs/PROTOCOL.md section 9, APIError with
//     Encrypted false) are not authenticated: the host can forge them. They
//     can deny service, never reveal or alter content.
//   - GET /v1/models through Proxy is plaintext and unauthenticated.
//   - Message sizes, timing and HTTP status codes are visible to the host.
//   - The Proxy itself listens in plaintext: keep it on loopback.
//
// Prompts, answers and keys are never logged by this package.
package client
