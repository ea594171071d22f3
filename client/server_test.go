package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/enclave/server"
	"github.com/sparkinfer/cc/policy"
)

// inProcess boots the real appliance (package enclave, simulated TEE, the
// embedded model) behind the real HTTP server (package enclave/server) in
// an httptest server, and counts the requests that reach it by path.
func inProcess(t *testing.T) (url string, hits func(path string) int64) {
	t.Helper()
	e, err := enclave.Boot(enclave.Config{TEE: enclave.TEESim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	srv, err := server.New(server.Config{Enclave: e})
	if err != nil {
		t.Fatal(err)
	}
	var att, post atomic.Int64
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == client.AttestationPath {
			att.Add(1)
		} else if r.Method == http.MethodPost {
			post.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, func(path string) int64 {
		if path == client.AttestationPath {
			return att.Load()
		}
		return post.Load()
	}
}

func TestClientInProcess(t *testing.T) {
	url, hits := inProcess(t)
	ctx := ctx(t)
	c := newClient(t, url)

	att, err := c.Attest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !att.Simulated() || len(att.KeyConfigs) == 0 || len(att.Nonce) != client.NonceSize {
		t.Fatalf("attestation: simulated %v, %d keys, nonce %d bytes", att.Simulated(), len(att.KeyConfigs), len(att.Nonce))
	}

	r, err := c.ChatCompletion(ctx, chatReq(false))
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	s, err := c.ChatCompletionStream(ctx, chatReq(true))
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for {
		ch, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events++
		if len(ch.Choices) > 0 {
			streamed.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	s.Close()
	if r.Text() == "" || streamed.String() != r.Text() || events < 2 {
		t.Errorf("chat %q, streamed %q in %d events: want the same non-empty text", r.Text(), streamed.String(), events)
	}
	n, temp, seed := e2eMaxTokens, 0.8, int64(e2eSeed)
	cr, err := c.Completion(ctx, client.CompletionRequest{Model: "stories260K", Prompt: "Once upon a time", MaxTokens: &n, Temperature: &temp, Seed: &seed})
	if err != nil || cr.Text() == "" {
		t.Fatalf("completion %+v, %v", cr, err)
	}
	// One attestation served all of it (cached within max_evidence_age).
	if got := hits(client.AttestationPath); got != 1 {
		t.Errorf("%d evidence requests, want 1", got)
	}
	// An error of the OpenAI layer comes back encrypted.
	bad := chatReq(false)
	bad.Model = "no-such-model"
	_, err = c.ChatCompletion(ctx, bad)
	var ae *client.APIError
	if !errors.As(err, &ae) || !ae.Encrypted || ae.StatusCode/100 != 4 {
		t.Errorf("unknown model: err = %v, want an encrypted 4xx *client.APIError", err)
	}
	if ms, err := c.Models(ctx); err != nil || len(ms) == 0 || ms[0].ID != "stories260K" {
		t.Errorf("models %+v, %v", ms, err)
	}
}

func TestClientCacheExpires(t *testing.T) {
	url, hits := inProcess(t)
	ctx := ctx(t)
	now := time.Now()
	c := newClient(t, url)
	c.Now = func() time.Time { return now }
	// The verifier keeps the real clock, so that evidence fetched after the
	// client's clock moved still verifies.
	v, err := attest.NewVerifier(attest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Verifier = v
	if _, err := c.Verified(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verified(ctx); err != nil || hits(client.AttestationPath) != 1 {
		t.Fatalf("second Verified: %v, %d evidence requests, want 1", err, hits(client.AttestationPath))
	}
	// The dev policy's max_evidence_age is 10m: past it, fresh evidence.
	now = now.Add(10*time.Minute + time.Second)
	if _, err := c.Verified(ctx); err != nil {
		t.Fatal(err)
	}
	if hits(client.AttestationPath) != 2 {
		t.Errorf("%d evidence requests after expiry, want 2", hits(client.AttestationPath))
	}
}

func TestClientFailsClosed(t *testing.T) {
	url, hits := inProcess(t)
	ctx := ctx(t)
	// The default policy rejects simulated evidence: no request is sent.
	c := &client.Client{BaseURL: url, Policy: policy.Default()}
	_, err := c.ChatCompletion(ctx, chatReq(false))
	var ve *client.VerificationError
	if !errors.As(err, &ve) || ve.Verdict.Verified {
		t.Fatalf("default policy: err = %v, want *client.VerificationError", err)
	}
	if got := hits("post"); got != 0 {
		t.Errorf("%d requests sent after rejected evidence", got)
	}
	// No policy at all: nothing is fetched.
	_, err = (&client.Client{BaseURL: url}).ChatCompletion(ctx, chatReq(false))
	if !errors.Is(err, client.ErrNoPolicy) {
		t.Errorf("no policy: err = %v, want ErrNoPolicy", err)
	}
	if got := hits(client.AttestationPath); got != 1 {
		t.Errorf("%d evidence requests, want 1", got)
	}
	// A base url with a path is refused before anything is sent.
	if _, err := (&client.Client{BaseURL: url + "/x", Policy: devPolicy(t)}).Attest(ctx); err == nil {
		t.Error("base url with a path accepted")
	}
}

func TestProxyInProcess(t *testing.T) {
	url, _ := inProcess(t)
	p := httptest.NewServer(&client.Proxy{Client: newClient(t, url)})
	t.Cleanup(p.Close)
	body := `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`
	resp, err := http.Post(p.URL+client.ChatCompletionsPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("proxied stream: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// With a rejecting policy: 502 and the reason.
	bad := httptest.NewServer(&client.Proxy{Client: &client.Client{BaseURL: url, Policy: policy.Default()}})
	t.Cleanup(bad.Close)
	resp, err = http.Post(bad.URL+client.ChatCompletionsPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "attestation_failed") || !strings.Contains(string(b), "policy.simulated") {
		t.Errorf("rejecting proxy: %d %s", resp.StatusCode, b)
	}
}
