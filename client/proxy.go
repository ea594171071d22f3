package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// MaxProxyRequestSize caps a request body the proxy accepts from a local
// client (the appliance's own default cap).
const MaxProxyRequestSize = 8 << 20

// Proxy is a plain OpenAI-compatible HTTP endpoint for local agents and
// SDKs. It forwards POST /v1/chat/completions and POST /v1/completions
// through its Client: each request goes encrypted to an appliance whose
// evidence was verified (fresh nonce, the Client's policy) and the answer is
// decrypted and authenticated before it is passed on; streamed answers pass
// through as server-sent events, one event per authenticated chunk.
//
// Answers of the proxy itself:
//   - 502 with {"error": {"code": "attestation_failed", ...}} when the
//     appliance's evidence could not be fetched or was rejected: nothing was
//     sent;
//   - 502 with code "upstream_protocol_error" when the appliance refused the
//     encrypted request (a plaintext protocol error: replayed, stale,
//     undecryptable ...) or its answer failed authentication;
//   - in a stream that fails after it started, an event
//     data: {"error": {"code": "stream_integrity", ...}} and no [DONE];
//   - GET /v1/models is forwarded in plaintext (model names are not secret;
//     the answer is not authenticated), after verification;
//   - GET /healthz answers 200 locally; GET /v1/attestation/verdict returns
//     the current verdict (fetching evidence when needed).
//
// The proxy listens in plaintext and must only be reachable from the local
// machine: anyone who can reach it can use the appliance, and it sees
// prompts and answers in the clear.
type Proxy struct {
	Client *Client
	// ErrorLog receives one line per failed request, without prompts or
	// answers; nil discards.
	ErrorLog func(format string, args ...any)
}

func (p *Proxy) logf(format string, args ...any) {
	if p.ErrorLog != nil {
		p.ErrorLog(format, args...)
	}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == ChatCompletionsPath || r.URL.Path == CompletionsPath:
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", fmt.Sprintf("method %q not allowed: use POST", r.Method))
			return
		}
		p.forward(w, r)
	case r.URL.Path == "/v1/models":
		p.models(w, r)
	case r.URL.Path == "/healthz":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	case r.URL.Path == "/v1/attestation/verdict":
		att, err := p.Client.Verified(r.Context())
		if err != nil {
			p.attestationFailed(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(att.Verdict)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", fmt.Sprintf("no route %q", r.URL.Path))
	}
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Type, body.Error.Code = msg, typ, code
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func (p *Proxy) attestationFailed(w http.ResponseWriter, err error) {
	p.logf("attestation failed: %v", err)
	writeError(w, http.StatusBadGateway, "attestation_error", "attestation_failed", err.Error())
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type", fmt.Sprintf("content type %q: want application/json", ct))
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxProxyRequestSize))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", fmt.Sprintf("request body over %d bytes", MaxProxyRequestSize))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read_error", "could not read the request body")
		return
	}
	// Only to choose the local content type; the appliance validates the body.
	var probe struct {
		Stream bool `json:"stream"`
	}
	streamed := json.Unmarshal(body, &probe) == nil && probe.Stream

	resp, err := p.Client.Do(r.Context(), r.URL.Path, body)
	if err != nil {
		var ve *VerificationError
		var fe *FetchError
		var ae *APIError
		switch {
		case errors.As(err, &ve) || errors.As(err, &fe) || errors.Is(err, ErrNoPolicy):
			p.attestationFailed(w, err)
		case errors.As(err, &ae) && !ae.ProtocolCode():
			// Plaintext errors outside the protocol's list (overload,
			// rate limits): keep the status so SDKs can retry.
			p.logf("upstream error %d %s", ae.StatusCode, ae.Code)
			writeError(w, ae.StatusCode, ae.Type, ae.Code, ae.Message)
		default:
			p.logf("upstream protocol error: %v", err)
			writeError(w, http.StatusBadGateway, "upstream_error", "upstream_protocol_error", err.Error())
		}
		return
	}
	defer resp.Close()
	if !streamed || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(io.LimitReader(resp, MaxResponseSize+1))
		if err == nil && len(b) > MaxResponseSize {
			err = fmt.Errorf("response larger than %d bytes", MaxResponseSize)
		}
		if err != nil {
			p.logf("upstream response rejected: %v", err)
			writeError(w, http.StatusBadGateway, "upstream_error", "upstream_protocol_error", "client: response rejected: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for {
		chunk, err := resp.NextChunk()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			p.logf("upstream stream rejected: %v", err)
			var body struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    string `json:"code"`
				} `json:"error"`
			}
			body.Error.Message = "client: stream rejected: " + err.Error()
			body.Error.Type, body.Error.Code = "upstream_error", "stream_integrity"
			b, _ := json.Marshal(body)
			fmt.Fprintf(w, "data: %s\n\n", b)
			rc.Flush()
			return
		}
		if len(chunk) == 0 {
			continue
		}
		if _, err := w.Write(chunk); err != nil {
			return // the local client went away
		}
		rc.Flush()
	}
}

func (p *Proxy) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", fmt.Sprintf("method %q not allowed: use GET", r.Method))
		return
	}
	if _, err := p.Client.Verified(r.Context()); err != nil {
		p.attestationFailed(w, err)
		return
	}
	u, err := p.Client.endpoint("/v1/models")
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", "upstream_protocol_error", err.Error())
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", "upstream_protocol_error", err.Error())
		return
	}
	resp, err := p.Client.httpClient().Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_error", "upstream_unreachable", err.Error())
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodySize+1))
	if err != nil || len(b) > MaxErrorBodySize || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		writeError(w, http.StatusBadGateway, "upstream_error", "upstream_protocol_error", "unexpected /v1/models answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}

// NewProxyServer returns an http.Server for p with conservative timeouts
// (no write timeout: streamed answers may take long).
func NewProxyServer(addr string, p *Proxy) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// CheckLoopback returns an error unless addr (host:port) names a loopback
// address: 127.0.0.0/8, ::1 or "localhost". An empty host means every
// interface and is refused.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("client: listen address %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("client: listen address %q is not a loopback address", addr)
	}
	return nil
}
