package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/engine/sample"
	"github.com/sparkinfer/cc/internal/openai"
	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/keys/ohttp"
)

var (
	encOnce sync.Once
	testEnc *enclave.Enclave
	encErr  error
)

func bootEnclave(t testing.TB) *enclave.Enclave {
	t.Helper()
	encOnce.Do(func() { testEnc, encErr = enclave.Boot(enclave.Config{TEE: enclave.TEESim}) })
	if encErr != nil {
		t.Fatal(encErr)
	}
	return testEnc
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newServer(t testing.TB, cfg Config) (*Server, *syncBuf) {
	t.Helper()
	cfg.Enclave = bootEnclave(t)
	logs := &syncBuf{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

func do(t testing.TB, h http.Handler, method, path, ctype string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

type apiErr struct {
	Error struct {
		Message, Type, Code, Param string
	} `json:"error"`
}

func errCode(t testing.TB, body []byte) string {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an error object: %q (%v)", body, err)
	}
	return e.Error.Code
}

// engineText is what `sparkinfer generate` prints for prompt with these
// settings (its defaults: top-p 1, no penalty, window 64).
func engineText(t testing.TB, prompt string, maxTokens int, temp float64, seed uint64) string {
	t.Helper()
	var b strings.Builder
	_, err := bootEnclave(t).Engine.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: maxTokens,
		Sampling: sample.Params{Temperature: temp, TopP: 1, RepeatPenalty: 1, RepeatLastN: sample.DefaultRepeatLastN, Seed: seed}},
		func(s string) error { b.WriteString(s); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestPlaintextMatchesGenerate(t *testing.T) {
	s, _ := newServer(t, Config{AllowPlaintextUnsafe: true})
	for _, c := range []struct {
		temp float64
		seed uint64
		body string
	}{
		{0, 0, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":40}`},
		{0.8, 42, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":40,"temperature":0.8,"seed":42}`},
	} {
		w := do(t, s.Handler(), "POST", CompletionsPath, "application/json", []byte(c.body))
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", c.body, w.Code, w.Body)
		}
		var r openai.CompletionResponse
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("response %s (%v)", w.Body, err)
		}
		want := engineText(t, "Once upon a time", 40, c.temp, c.seed)
		if r.Choices[0].Text != want || want == "" {
			t.Errorf("temperature %v seed %d: server %q, generate %q", c.temp, c.seed, r.Choices[0].Text, want)
		}
		if r.Object != "text_completion" || r.Usage == nil || r.Usage.CompletionTokens == 0 || r.Model != "stories260K" {
			t.Errorf("response shape: %+v", r)
		}
	}
	// A one-message chat on a model without a chat template is the raw prompt.
	w := do(t, s.Handler(), "POST", ChatCompletionsPath, "application/json",
		[]byte(`{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":40}`))
	var cr openai.ChatResponse
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &cr) != nil || len(cr.Choices) != 1 {
		t.Fatalf("chat: %d %s", w.Code, w.Body)
	}
	if got, want := cr.Choices[0].Message.Content, engineText(t, "Once upon a time", 40, 0, 0); got != want {
		t.Errorf("chat %q, generate %q", got, want)
	}
	if cr.Object != "chat.completion" || cr.Choices[0].Message.Role != "assistant" || cr.Choices[0].FinishReason == "" {
		t.Errorf("chat shape: %+v", cr)
	}
}

// readSSE splits an SSE body into its data payloads and checks the framing.
func readSSE(t testing.TB, body []byte) []string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(d, "\n") {
			t.Fatalf("bad event %q", ev)
		}
		out = append(out, d)
	}
	return out
}

func streamText(t testing.TB, events []string, chat bool) (string, string, *openai.Usage) {
	t.Helper()
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("last event %q, want [DONE]", events[len(events)-1])
	}
	var text strings.Builder
	finish := ""
	var u *openai.Usage
	for _, e := range events[:len(events)-1] {
		if chat {
			var c openai.ChatChunk
			if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "chat.completion.chunk" {
				t.Fatalf("chunk %q (%v)", e, err)
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
			if c.Usage != nil {
				u = c.Usage
			}
			continue
		}
		var c openai.CompletionResponse
		if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "text_completion" {
			t.Fatalf("chunk %q (%v)", e, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			u = c.Usage
		}
	}
	return text.String(), finish, u
}

func TestStreamingFraming(t *testing.T) {
	s, _ := newServer(t, Config{AllowPlaintextUnsafe: true})
	want := engineText(t, "Once upon a time", 30, 0, 0)
	for _, chat := range []bool{true, false} {
		path, body := CompletionsPath, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":30,"stream":true,"stream_options":{"include_usage":true}}`
		if chat {
			path, body = ChatCompletionsPath, `{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":30,"stream":true,"stream_options":{"include_usage":true}}`
		}
		w := do(t, s.Handler(), "POST", path, "application/json", []byte(body))
		if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: %d %q", path, w.Code, w.Header().Get("Content-Type"))
		}
		text, finish, u := streamText(t, readSSE(t, w.Body.Bytes()), chat)
		if text != want || finish != "length" || u == nil || u.CompletionTokens != 30 {
			t.Errorf("%s: text %q finish %q usage %+v; want %q, length, 30 tokens", path, text, finish, u, want)
		}
	}
}

func encrypt(t testing.TB, s *Server, path string, body []byte, suite keys.Suite, keyID uint8) ([]byte, *ohttp.ClientRequest) {
	t.Helper()
	for _, c := range s.enc.Keys().Configs() {
		if c.KeyID == keyID {
			id, err := ohttp.NewRequestID(nil)
			if err != nil {
				t.Fatal(err)
			}
			msg, cr, err := ohttp.EncapsulateRequest(c, suite, ohttp.Request{ID: id, Time: time.Now(), Path: path, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			return msg, cr
		}
	}
	t.Fatalf("no key id %d", keyID)
	return nil, nil
}

func TestEncrypted(t *testing.T) {
	s, _ := newServer(t, Config{})
	want := engineText(t, "Once upon a time", 30, 0.5, 9)
	body := []byte(`{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":30,"temperature":0.5,"seed":9}`)
	for _, ks := range []struct {
		id    uint8
		suite keys.Suite
	}{{keys.DefaultKeyIDMLKEM768X25519, keys.DefaultSuite}, {keys.DefaultKeyIDX25519, keys.SuiteX25519AES128GCM}} {
		msg, cr := encrypt(t, s, ChatCompletionsPath, body, ks.suite, ks.id)
		w := do(t, s.Handler(), "POST", ChatCompletionsPath, ohttp.RequestMediaType, msg)
		if w.Code != 200 || w.Header().Get("Content-Type") != ohttp.ResponseMediaType {
			t.Fatalf("%s: %d %q %s", ks.suite, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
		if bytes.Contains(w.Body.Bytes(), []byte(want)) || bytes.Contains(w.Body.Bytes(), []byte("chat.completion")) {
			t.Fatal("plaintext in the encrypted response")
		}
		plain, err := cr.OpenResponse(w.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		var r openai.ChatResponse
		if err := json.Unmarshal(plain, &r); err != nil || r.Choices[0].Message.Content != want {
			t.Errorf("%s: %q (%v), want %q", ks.suite, plain, err, want)
		}
		// The same bytes again: a replay.
		w = do(t, s.Handler(), "POST", ChatCompletionsPath, ohttp.RequestMediaType, msg)
		if w.Code != 400 || errCode(t, w.Body.Bytes()) != "replayed_request" {
			t.Errorf("replay: %d %s", w.Code, w.Body)
		}
	}

	// Streamed and encrypted: authenticated chunk by chunk, SSE inside.
	sbody := []byte(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":30,"temperature":0.5,"seed":9,"stream":true}`)
	msg, cr := encrypt(t, s, CompletionsPath, sbody, keys.DefaultSuite, keys.DefaultKeyIDMLKEM768X25519)
	w := do(t, s.Handler(), "POST", CompletionsPath, ohttp.RequestMediaType, msg)
	if w.Code != 200 {
		t.Fatalf("stream: %d %s", w.Code, w.Body)
	}
	rr := cr.NewResponseReader(bytes.NewReader(w.Body.Bytes()))
	var plain bytes.Buffer
	chunks := 0
	for {
		b, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		plain.Write(b)
	}
	if chunks < 3 {
		t.Errorf("stream sealed in %d chunks: want one per event", chunks)
	}
	if text, _, _ := streamText(t, readSSE(t, plain.Bytes()), false); text != want {
		t.Errorf("encrypted stream %q, want %q", text, want)
	}
	// Truncation is detected by the client.
	cut := w.Body.Bytes()[:w.Body.Len()-5]
	if _, err := cr.OpenResponse(cut); !errors.Is(err, ohttp.ErrTruncated) {
		t.Errorf("truncated stream: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	s, _ := newServer(t, Config{Limits: Limits{MaxBodyBytes: 64 << 10}})
	h := s.Handler()
	good := []byte(`{"model":"stories260K","prompt":"hi","max_tokens":2}`)
	sealedErr := func(path string, body []byte) (int, string) {
		msg, cr := encrypt(t, s, path, body, keys.DefaultSuite, keys.DefaultKeyIDMLKEM768X25519)
		w := do(t, h, "POST", path, ohttp.RequestMediaType, msg)
		if w.Header().Get("Content-Type") != ohttp.ResponseMediaType {
			t.Fatalf("%s: error not encrypted: %d %s", body, w.Code, w.Body)
		}
		plain, err := cr.OpenResponse(w.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return w.Code, errCode(t, plain)
	}
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":"stories260K","prompt":`, 400, "invalid_json"},
		{``, 400, "invalid_json"},
		{`{"model":"stories260K","prompt":"hi"} {}`, 400, "invalid_json"},
		{`{"model":"gpt-4","prompt":"hi"}`, 404, "model_not_found"},
		{`{"prompt":"hi"}`, 400, "invalid_request"},
		{`{"model":"stories260K","prompt":"hi","max_tokens":100000}`, 400, "invalid_request"},
		{`{"model":"stories260K","prompt":"hi","max_tokens":0}`, 400, "invalid_request"},
		{`{"model":"stories260K","prompt":"hi","temperature":"hot"}`, 400, "invalid_json"},
		{`{"model":"stories260K","prompt":"hi","n":2}`, 400, "invalid_request"},
		{`{"model":"stories260K","prompt":"hi","best_of":3}`, 400, "unsupported_field"},
		{`{"model":"stories260K","prompt":"` + strings.Repeat("a b ", 3000) + `"}`, 400, "context_length_exceeded"},
	} {
		st, code := sealedErr(CompletionsPath, []byte(c.body))
		if st != c.status || code != c.code {
			t.Errorf("%.60s: %d %s, want %d %s", c.body, st, code, c.status, c.code)
		}
	}
	if st, code := sealedErr(ChatCompletionsPath, []byte(`{"model":"stories260K","messages":[{"role":"robot","content":"x"}]}`)); st != 400 || code != "invalid_request" {
		t.Errorf("bad role: %d %s", st, code)
	}

	plain := func(name string, w *httptest.ResponseRecorder, status int, code string) {
		t.Helper()
		if w.Code != status || w.Header().Get("Content-Type") != "application/json" || errCode(t, w.Body.Bytes()) != code {
			t.Errorf("%s: %d %q %s, want %d %s", name, w.Code, w.Header().Get("Content-Type"), w.Body, status, code)
		}
	}
	plain("plaintext json", do(t, h, "POST", CompletionsPath, "application/json", good), 415, "encryption_required")
	plain("text/plain", do(t, h, "POST", CompletionsPath, "text/plain", good), 415, "unsupported_media_type")
	plain("no content type", do(t, h, "POST", CompletionsPath, "", good), 415, "unsupported_media_type")
	msg, _ := encrypt(t, s, CompletionsPath, good, keys.DefaultSuite, keys.DefaultKeyIDMLKEM768X25519)
	bad := bytes.Clone(msg)
	bad[0] = 99
	plain("unknown key id", do(t, h, "POST", CompletionsPath, ohttp.RequestMediaType, bad), 400, "unknown_key_id")
	bad = bytes.Clone(msg)
	bad[len(bad)-1] ^= 1
	plain("tampered ciphertext", do(t, h, "POST", CompletionsPath, ohttp.RequestMediaType, bad), 400, "decryption_failed")
	plain("path mismatch", do(t, h, "POST", ChatCompletionsPath, ohttp.RequestMediaType, msg), 400, "path_mismatch")
	plain("short", do(t, h, "POST", CompletionsPath, ohttp.RequestMediaType, []byte{1, 2}), 400, "malformed_request")
	plain("oversize", do(t, h, "POST", CompletionsPath, ohttp.RequestMediaType, make([]byte, 65<<10)), 413, "request_too_large")
	plain("missing nonce", do(t, h, "GET", AttestationPath, "", nil), 400, "missing_nonce")
	plain("non-hex nonce", do(t, h, "GET", AttestationPath+"?nonce=zz", "", nil), 400, "invalid_nonce")
	plain("short nonce", do(t, h, "GET", AttestationPath+"?nonce=00ff", "", nil), 400, "invalid_nonce")
	plain("no route", do(t, h, "GET", "/v1/engines", "", nil), 404, "not_found")
	plain("wrong method", do(t, h, "GET", CompletionsPath, "", nil), 405, "method_not_allowed")

	// The server stays up and serves.
	if w := do(t, h, "GET", HealthPath, "", nil); w.Code != 200 {
		t.Fatalf("healthz after bad input: %d", w.Code)
	}
	if w := do(t, h, "GET", ModelsPath, "", nil); w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"stories260K"`) {
		t.Errorf("models: %d %s", w.Code, w.Body)
	}
}

func TestPlaintextBadInput(t *testing.T) {
	s, _ := newServer(t, Config{AllowPlaintextUnsafe: true, Limits: Limits{MaxBodyBytes: 1024}})
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":`, 400, "invalid_json"},
		{`{"model":"x","prompt":"hi"}`, 404, "model_not_found"},
		{`{"model":"stories260K","prompt":"` + strings.Repeat("x", 2000) + `"}`, 413, "request_too_large"},
	} {
		w := do(t, s.Handler(), "POST", CompletionsPath, "application/json", []byte(c.body))
		if w.Code != c.status || errCode(t, w.Body.Bytes()) != c.code {
			t.Errorf("%.40s: %d %s", c.body, w.Code, w.Body)
		}
	}
}

func TestAttestation(t *testing.T) {
	s, _ := newServer(t, Config{AttestationRate: 0.001, AttestationBurst: 2})
	nonce := bytes.Repeat([]byte{0x42}, 32)
	for i := range 2 {
		w := do(t, s.Handler(), "GET", AttestationPath+"?nonce="+hex.EncodeToString(nonce), "", nil)
		if w.Code != 200 {
			t.Fatalf("evidence %d: %d %s", i, w.Code, w.Body)
		}
		b, err := attest.ParseBundle(w.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := attest.Verify(context.Background(), b, attest.Options{}, attest.Expectations{Nonce: nonce}); err != nil {
			t.Fatalf("served evidence does not verify: %v", err)
		}
	}
	w := do(t, s.Handler(), "GET", AttestationPath+"?nonce="+hex.EncodeToString(nonce), "", nil)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || errCode(t, w.Body.Bytes()) != "rate_limited" {
		t.Errorf("third request within the burst: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

func TestQueueFull(t *testing.T) {
	s, _ := newServer(t, Config{AllowPlaintextUnsafe: true, Concurrency: 1, QueueDepth: 1})
	release, err := s.queue.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// One request waits for the slot.
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		done <- do(t, s.Handler(), "POST", CompletionsPath, "application/json", []byte(`{"model":"stories260K","prompt":"hi","max_tokens":3}`))
	}()
	for {
		s.queue.mu.Lock()
		n := s.queue.waiting
		s.queue.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w := do(t, s.Handler(), "POST", CompletionsPath, "application/json", []byte(`{"model":"stories260K","prompt":"hi","max_tokens":3}`))
	if w.Code != 429 || errCode(t, w.Body.Bytes()) != "queue_full" || w.Header().Get("Retry-After") == "" {
		t.Errorf("full queue: %d %s", w.Code, w.Body)
	}
	// An encrypted request is refused before it is decapsulated: a
	// plaintext 429, and its enc stays unused (the same bytes succeed
	// later; a decapsulated one would be a replay).
	msg, cr := encrypt(t, s, CompletionsPath, []byte(`{"model":"stories260K","prompt":"hi","max_tokens":3}`), keys.DefaultSuite, keys.DefaultKeyIDMLKEM768X25519)
	w = do(t, s.Handler(), "POST", CompletionsPath, ohttp.RequestMediaType, msg)
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/json" || errCode(t, w.Body.Bytes()) != "queue_full" || w.Header().Get("Retry-After") == "" {
		t.Errorf("full queue, encrypted request: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	m := do(t, s.Handler(), "GET", MetricsPath, "", nil).Body.String()
	if !strings.Contains(m, "sparkinfer_queue_depth 1") || !strings.Contains(m, "sparkinfer_generations_running 1") {
		t.Errorf("metrics do not show the queue:\n%s", grep(m, "sparkinfer_"))
	}
	release()
	if w := <-done; w.Code != 200 {
		t.Errorf("the waiting request: %d %s", w.Code, w.Body)
	}
	w = do(t, s.Handler(), "POST", CompletionsPath, ohttp.RequestMediaType, msg)
	if w.Code != 200 {
		t.Fatalf("the refused encrypted request, sent again: %d %s", w.Code, w.Body)
	}
	if _, err := cr.OpenResponse(w.Body.Bytes()); err != nil {
		t.Errorf("its response: %v", err)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestLogsAndMetricsHoldNoContent(t *testing.T) {
	s, logs := newServer(t, Config{AllowPlaintextUnsafe: true})
	prompt := "Zanzibar quokka whispered the secret"
	for _, stream := range []string{"false", "true"} {
		body := `{"model":"stories260K","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":40,"stream":` + stream + `}`
		if w := do(t, s.Handler(), "POST", ChatCompletionsPath, "application/json", []byte(body)); w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	answer := engineText(t, prompt, 40, 0, 0)
	if len(strings.TrimSpace(answer)) < 10 {
		t.Fatalf("answer %q too short to search for", answer)
	}
	m := do(t, s.Handler(), "GET", MetricsPath, "", nil).Body.String()
	if !strings.Contains(m, `sparkinfer_http_requests_total{route="/v1/chat/completions",status="200"} 2`) || !strings.Contains(m, "sparkinfer_generated_tokens_total 80") {
		t.Errorf("metrics:\n%s", grep(m, "sparkinfer_"))
	}
	// What the load test reads to check for memory growth.
	for _, name := range []string{"go_gc_heap_live_bytes ", "go_memstats_heap_inuse_bytes ", "go_gc_duration_seconds_count ", "go_goroutines "} {
		if !strings.Contains(m, "\n"+name) {
			t.Errorf("metrics lack %q:\n%s", name, grep(m, "go_"))
		}
	}
	l := logs.String()
	if !strings.Contains(l, "route=/v1/chat/completions") {
		t.Fatalf("no request line logged:\n%s", l)
	}
	for _, where := range []struct{ name, text string }{{"log", l}, {"metrics", m}} {
		for _, secret := range []string{prompt, "quokka", strings.TrimSpace(answer)} {
			if strings.Contains(where.text, secret) {
				t.Errorf("%s contains %q", where.name, secret)
			}
		}
	}
}

func TestGracefulShutdown(t *testing.T) {
	s, _ := newServer(t, Config{AllowPlaintextUnsafe: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 10*time.Second) }()
	url := "http://" + ln.Addr().String()

	// Hold the only slot so the request below is in flight during shutdown.
	release, err := s.queue.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp := make(chan *http.Response, 1)
	go func() {
		r, err := http.Post(url+CompletionsPath, "application/json", strings.NewReader(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":20,"stream":true}`))
		if err != nil {
			t.Error(err)
		}
		resp <- r
	}()
	for {
		s.queue.mu.Lock()
		n := s.queue.waiting
		s.queue.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel() // SIGTERM
	time.Sleep(50 * time.Millisecond)
	if _, err := http.Get(url + HealthPath); err == nil {
		t.Error("new connections accepted while draining")
	}
	release()
	r := <-resp
	if r == nil {
		t.Fatal("no response")
	}
	b, _ := io.ReadAll(bufio.NewReader(r.Body))
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("in-flight request: %d %s", r.StatusCode, b)
	}
	if text, _, _ := streamText(t, readSSE(t, b), false); text != engineText(t, "Once upon a time", 20, 0, 0) {
		t.Errorf("drained stream %q", text)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}
