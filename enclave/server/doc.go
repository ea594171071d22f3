// Package server is the appliance's HTTP API (gin): an OpenAI-compatible
// endpoint whose requests and responses are encrypted end to end to the
// enclave's HPKE keys (package keys/ohttp, docs/PROTOCOL.md), plus the routes
// that let a client verify it first.
//
// # Routes
//
//	POST /v1/chat/completions   OpenAI chat completion (stream: SSE)
//	POST /v1/completions        OpenAI text completion (stream: SSE)
//	GET  /v1/models             the served model
//	GET  /v1/attestation?nonce=HEX   fresh evidence bundle bound to the nonce
//	                            (16..64 bytes); rate limited (token bucket, 429)
//	GET  /healthz               status, TEE kind, SIMULATED flag, GPUs and their CC mode
//	GET  /metrics               Prometheus: requests by route and status, latency,
//	                            tokens, queue depth, running generations, time to
//	                            first token, evidence requests by result
//
// # Encryption
//
// POST bodies must be application/sparkinfer-ohttp-req: the Gateway opens
// them (key id, suite, AEAD, timestamp, replay), the inner path must equal the
// URL path, and every answer after that, errors included, is sealed to the
// request (application/sparkinfer-ohttp-res): a whole JSON body as one final
// chunk, a stream as one chunk per SSE event and a final chunk carrying
// "data: [DONE]". Errors found before the request is open are plaintext JSON
// with the codes of docs/PROTOCOL.md section 9. Plaintext application/json is
// refused (415 encryption_required) unless Config.AllowPlaintextUnsafe.
//
// # Requests
//
// DecodeChatRequest and DecodeCompletionRequest decode strictly (unknown
// fields, trailing data and wrong types are 400s naming the field) and
// validate: model required; max_tokens (or max_completion_tokens) 1 to
// Limits.MaxTokens, default 256; temperature 0 to 2 (default 0: greedy),
// top_p, top_k, min_p, repeat_penalty, seed (default 0), stop (string or up
// to 4 strings); n only 1; logprobs, echo, non-zero frequency/presence
// penalties refused. The defaults are `sparkinfer generate`'s, so a request
// with a seed yields the text generate yields with that seed. A model without
// a chat template (the embedded stories260K) takes a chat as raw text: the
// message contents joined by newlines.
//
// Errors are the OpenAI error object {"error":{"message","type","code","param"}}:
// invalid_json, unsupported_field, invalid_request, model_not_found (404),
// context_length_exceeded, request_too_large (413), queue_full (429),
// rate_limited (429), shutting_down (503) ... Messages never quote prompt text.
//
// # Limits and shutdown
//
// Bodies are capped (Limits.MaxBodyBytes), reads and each write have a
// deadline, a generation has a time limit, and a bounded queue (Concurrency
// running, QueueDepth waiting) answers 429 beyond. Serve drains on
// cancellation: no new connections, running requests finish within the drain
// time, then running generations are cancelled.
//
// # Logging
//
// One line per request: method, route template, status, byte counts and
// duration. Bodies, query strings, headers, prompts, completions and keys are
// never logged; a test checks the log and /metrics after a chat for the
// prompt and the answer.
package server
