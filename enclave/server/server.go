package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/engine/cuda"
	"github.com/sparkinfer/cc/internal/openai"
	"github.com/sparkinfer/cc/keys/ohttp"
)

// Routes.
const (
	ChatCompletionsPath = "/v1/chat/completions"
	CompletionsPath     = "/v1/completions"
	ModelsPath          = "/v1/models"
	AttestationPath     = "/v1/attestation"
	HealthPath          = "/healthz"
	MetricsPath         = "/metrics"
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Enclave is the booted appliance (required).
	Enclave *enclave.Enclave
	// Limits bound one request (see DefaultLimits).
	Limits Limits
	// Concurrency is the number of generations run at once (default 1;
	// always 1 on the CUDA backend, which holds one sequence) and QueueDepth
	// the number that may wait for a slot (default 16); beyond, 429.
	Concurrency int
	QueueDepth  int
	// AllowPlaintextUnsafe accepts plaintext JSON requests. Without it only
	// encrypted requests (docs/PROTOCOL.md) are served.
	AllowPlaintextUnsafe bool
	// AttestationRate (per second, default 2) and AttestationBurst (default
	// 4) rate-limit GET /v1/attestation: each call makes a new TEE quote.
	AttestationRate  float64
	AttestationBurst int
	// ReadTimeout bounds reading a request (default 30 s); WriteTimeout
	// bounds each write of a response, so a stream may last longer
	// (default 60 s); MaxGenerationTime bounds one generation (default 10 min).
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	MaxGenerationTime time.Duration
	// ReplayCapacity and MaxClockSkew configure the replay cache (defaults
	// ohttp.DefaultReplayCapacity and ohttp.DefaultMaxClockSkew).
	ReplayCapacity int
	MaxClockSkew   time.Duration
	// Logger receives one line per request (method, route, status, sizes,
	// duration) and server events; never bodies, prompts, completions or
	// keys. nil discards.
	Logger *slog.Logger
	// Now and Rand (response nonces, ids) are injected for tests; nil means
	// time.Now and crypto/rand.
	Now  func() time.Time
	Rand io.Reader
}

// Server is the appliance's HTTP API.
type Server struct {
	cfg      Config
	enc      *enclave.Enclave
	eng      *engine.Engine
	lim      Limits
	gw       *ohttp.Gateway
	queue    *queue
	att      *bucket
	met      *metrics
	log      *slog.Logger
	handler  http.Handler
	draining atomic.Bool
	base     context.Context
	cancel   context.CancelFunc
}

// New builds a server.
func New(cfg Config) (*Server, error) {
	if cfg.Enclave == nil {
		return nil, errors.New("server: no enclave")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if _, ok := cfg.Enclave.Engine.Backend.(*cuda.Backend); ok {
		cfg.Concurrency = 1
	}
	if cfg.QueueDepth < 0 {
		return nil, fmt.Errorf("server: queue depth %d is negative", cfg.QueueDepth)
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 16
	}
	if cfg.AttestationRate <= 0 {
		cfg.AttestationRate = 2
	}
	if cfg.AttestationBurst <= 0 {
		cfg.AttestationBurst = 4
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	if cfg.MaxGenerationTime <= 0 {
		cfg.MaxGenerationTime = 10 * time.Minute
	}
	if cfg.ReplayCapacity <= 0 {
		cfg.ReplayCapacity = ohttp.DefaultReplayCapacity
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = ohttp.DefaultMaxClockSkew
	}
	rc, err := ohttp.NewReplayCache(cfg.ReplayCapacity, cfg.MaxClockSkew, cfg.Now)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, enc: cfg.Enclave, eng: cfg.Enclave.Engine, lim: cfg.Limits.withDefaults(), log: cfg.Logger, met: newMetrics()}
	s.gw = &ohttp.Gateway{Keys: cfg.Enclave.Keys(), Replay: rc, MaxRequestSize: int(s.lim.MaxBodyBytes)}
	s.queue = newQueue(cfg.Concurrency, cfg.QueueDepth, func(r, w int) { s.met.running.Set(float64(r)); s.met.waiting.Set(float64(w)) })
	s.att = newBucket(cfg.AttestationRate, cfg.AttestationBurst, cfg.Now)
	s.base, s.cancel = context.WithCancel(context.Background())

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(s.observe, gin.CustomRecoveryWithWriter(io.Discard, s.recovered))
	r.NoRoute(func(c *gin.Context) {
		s.plainError(c, http.StatusNotFound, "not_found", "", "no route "+strconv.Quote(c.Request.Method+" "+c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) {
		s.plainError(c, http.StatusMethodNotAllowed, "method_not_allowed", "", "method "+c.Request.Method+" not allowed on "+strconv.Quote(c.Request.URL.Path))
	})
	r.POST(ChatCompletionsPath, s.completion(true))
	r.POST(CompletionsPath, s.completion(false))
	r.GET(ModelsPath, s.models)
	r.GET(AttestationPath, s.attestation)
	r.GET(HealthPath, s.health)
	mh := promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
	r.GET(MetricsPath, func(c *gin.Context) { mh.ServeHTTP(c.Writer, c.Request) })
	s.handler = r
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx is done, then shuts down gracefully: it stops
// accepting connections, lets running requests (streams included) finish
// for up to drain, then cancels the generations still running and closes
// the connections. It does not close the enclave: the caller does, after
// Serve returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: min(10*time.Second, s.cfg.ReadTimeout),
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.cancel()
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("draining", "timeout", drain.String())
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(dctx)
	s.cancel()
	if err != nil {
		s.log.Warn("drain timed out: cancelling running generations")
		err = srv.Close()
	}
	<-errc
	s.log.Info("stopped")
	return err
}

// observe logs and counts every request: method, route template, status,
// sizes and duration. It never logs the body, the query or headers.
func (s *Server) observe(c *gin.Context) {
	start := s.cfg.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	d := s.cfg.Now().Sub(start)
	s.met.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	s.met.latency.WithLabelValues(route).Observe(d.Seconds())
	s.log.Info("request", "method", c.Request.Method, "route", route, "status", status,
		"bytes_in", c.Request.ContentLength, "bytes_out", c.Writer.Size(), "duration", d.Round(time.Microsecond).String())
}

func (s *Server) recovered(c *gin.Context, _ any) {
	s.log.Error("handler panic", "route", c.FullPath())
	if !c.Writer.Written() {
		s.plainError(c, http.StatusInternalServerError, "internal_error", "", "internal error")
	}
	c.Abort()
}

// errorBody is the OpenAI error object.
func errorBody(status int, code, param, msg string) []byte {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	e := struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   string `json:"param,omitempty"`
	}{msg, typ, code, param}
	b, _ := json.Marshal(map[string]any{"error": e})
	return b
}

func (s *Server) plainError(c *gin.Context, status int, code, param, msg string) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	c.Data(status, "application/json", errorBody(status, code, param, msg))
}

func (s *Server) models(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": []gin.H{{
		"id": s.enc.ModelID, "object": "model", "created": s.enc.BootTime().Unix(), "owned_by": "sparkinfer",
	}}})
}

func (s *Server) health(c *gin.Context) {
	status := "ok"
	if s.draining.Load() {
		status = "draining"
	}
	c.JSON(http.StatusOK, gin.H{
		"status": status, "model": s.enc.ModelID, "tee": s.enc.TEEKind(), "simulated": s.enc.Simulated(),
		"gpus": s.enc.GPUs(), "boot_time": s.enc.BootTime().UTC().Format(time.RFC3339),
		"encryption_required": !s.cfg.AllowPlaintextUnsafe, "backend": s.eng.Backend.Name(),
	})
}

// attestation serves fresh evidence bound to the client's nonce.
func (s *Server) attestation(c *gin.Context) {
	q, ok := c.GetQuery("nonce")
	if !ok || q == "" {
		s.met.attestation.WithLabelValues("bad_nonce").Inc()
		s.plainError(c, http.StatusBadRequest, "missing_nonce", "nonce", "missing query parameter \"nonce\" (16 to 64 bytes, hex)")
		return
	}
	nonce, err := hex.DecodeString(q)
	if err != nil || len(q) > 2*128 {
		s.met.attestation.WithLabelValues("bad_nonce").Inc()
		s.plainError(c, http.StatusBadRequest, "invalid_nonce", "nonce", "nonce is not hex")
		return
	}
	if len(nonce) < attest.MinNonceSize || len(nonce) > attest.MaxNonceSize {
		s.met.attestation.WithLabelValues("bad_nonce").Inc()
		s.plainError(c, http.StatusBadRequest, "invalid_nonce", "nonce", fmt.Sprintf("nonce of %d bytes: want %d to %d bytes", len(nonce), attest.MinNonceSize, attest.MaxNonceSize))
		return
	}
	var ne *enclave.NonceError
	if ok, retry := s.att.take(); !ok {
		s.met.attestation.WithLabelValues("rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(max(1, int(retry.Seconds()+0.999))))
		c.Data(http.StatusTooManyRequests, "application/json", errorBody(429, "rate_limited", "", "too many evidence requests: each makes a new tee quote; retry later"))
		return
	}
	b, err := s.enc.Evidence(nonce)
	switch {
	case errors.As(err, &ne):
		s.met.attestation.WithLabelValues("bad_nonce").Inc()
		s.plainError(c, http.StatusBadRequest, "invalid_nonce", "nonce", err.Error())
		return
	case err != nil:
		s.met.attestation.WithLabelValues("error").Inc()
		s.log.Error("evidence", "err", err.Error())
		s.plainError(c, http.StatusServiceUnavailable, "evidence_unavailable", "", "evidence could not be produced")
		return
	}
	body, err := b.Encode()
	if err != nil {
		s.met.attestation.WithLabelValues("error").Inc()
		s.plainError(c, http.StatusInternalServerError, "internal_error", "", "evidence could not be encoded")
		return
	}
	s.met.attestation.WithLabelValues("ok").Inc()
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "application/json", body)
}

// readBody reads at most limit bytes; more is a *RequestError 413.
func readBody(c *gin.Context, limit int64) ([]byte, error) {
	r := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	b, err := io.ReadAll(r)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &RequestError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large", Message: fmt.Sprintf("request body over %d bytes", limit)}
	}
	if err != nil {
		return nil, &RequestError{Status: http.StatusBadRequest, Code: "malformed_request", Message: "could not read the request body"}
	}
	return b, nil
}

// open reads the request and, for an encrypted one, decapsulates it.
// It answers errors itself (in plaintext: nothing can be encrypted to the
// client yet) and reports ok false.
func (s *Server) open(c *gin.Context) (body []byte, out sink, ok bool) {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil {
		mt = ""
	}
	switch {
	case mt == ohttp.RequestMediaType:
		msg, err := readBody(c, s.lim.MaxBodyBytes)
		if err != nil {
			re := err.(*RequestError)
			s.plainError(c, re.Status, re.Code, "", re.Message)
			return nil, nil, false
		}
		req, err := s.gw.Decapsulate(msg)
		if err == nil {
			err = req.CheckPath(c.Request.URL.Path)
		}
		if err != nil {
			st, b := ohttp.ErrorJSON(err)
			if st == http.StatusServiceUnavailable {
				c.Header("Retry-After", "1")
			}
			c.Data(st, "application/json", b)
			return nil, nil, false
		}
		return req.Body, &sealedSink{c: c, req: req, rnd: s.cfg.Rand, wt: s.cfg.WriteTimeout}, true
	case mt == "application/json" && s.cfg.AllowPlaintextUnsafe:
		b, err := readBody(c, s.lim.MaxBodyBytes)
		if err != nil {
			re := err.(*RequestError)
			s.plainError(c, re.Status, re.Code, "", re.Message)
			return nil, nil, false
		}
		return b, &plainSink{c: c, wt: s.cfg.WriteTimeout}, true
	case mt == "application/json":
		st, b := ohttp.ErrorJSON(&ohttp.RequestError{Err: ohttp.ErrEncryptionRequired, Detail: "send " + ohttp.RequestMediaType + " (docs/PROTOCOL.md)"})
		c.Data(st, "application/json", b)
	default:
		st, b := ohttp.ErrorJSON(&ohttp.RequestError{Err: ohttp.ErrUnsupportedMediaType, Detail: fmt.Sprintf("content type %q: want %s", mt, ohttp.RequestMediaType)})
		c.Data(st, "application/json", b)
	}
	return nil, nil, false
}

// completion serves POST /v1/chat/completions (chat) and /v1/completions.
func (s *Server) completion(chat bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		// Overloaded: refuse before reading and decapsulating, so that
		// refusing costs no KEM work (docs/PROTOCOL.md section 6, step 0).
		// The answer is plaintext and carries nothing of the request.
		if s.queue.saturated() {
			s.plainError(c, http.StatusTooManyRequests, "queue_full", "", "server busy: too many requests waiting; retry later")
			return
		}
		body, out, ok := s.open(c)
		if !ok {
			return
		}
		fail := func(err error) {
			var re *RequestError
			if !errors.As(err, &re) {
				re = &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: "internal error"}
			}
			if re.Status == http.StatusTooManyRequests || re.Status == http.StatusServiceUnavailable {
				c.Header("Retry-After", "1")
			}
			out.reply(re.Status, errorBody(re.Status, re.Code, re.Param, re.Message))
		}
		var job *Job
		var err error
		if chat {
			job, err = DecodeChatRequest(body, s.lim)
		} else {
			job, err = DecodeCompletionRequest(body, s.lim)
		}
		if err != nil {
			fail(err)
			return
		}
		if job.Model != s.enc.ModelID {
			fail(&RequestError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
				Message: fmt.Sprintf("model %q is not served here (serving %q)", job.Model, s.enc.ModelID)})
			return
		}
		if chat && s.eng.Template == nil {
			// No chat template: the conversation is the raw prompt, message
			// contents joined by newlines (a one-message chat equals
			// `sparkinfer generate --prompt` with its text).
			parts := make([]string, len(job.Request.Messages))
			for i, m := range job.Request.Messages {
				parts[i] = m.Content
			}
			job.Request.Prompt, job.Request.Messages = strings.Join(parts, "\n"), nil
		}
		ids, err := s.eng.PromptTokens(job.Request)
		if err != nil {
			fail(&RequestError{Status: http.StatusBadRequest, Code: "invalid_prompt", Message: "the prompt cannot be rendered: " + promptErr(err)})
			return
		}
		if len(ids) >= s.eng.Context {
			fail(&RequestError{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "messages",
				Message: fmt.Sprintf("prompt of %d tokens does not fit the context of %d tokens", len(ids), s.eng.Context)})
			return
		}
		if s.draining.Load() {
			fail(&RequestError{Status: http.StatusServiceUnavailable, Code: "shutting_down", Message: "the server is shutting down"})
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.MaxGenerationTime)
		defer cancel()
		release, err := s.queue.acquire(ctx)
		if errors.Is(err, errQueueFull) {
			fail(&RequestError{Status: http.StatusTooManyRequests, Code: "queue_full", Message: "server busy: too many requests waiting; retry later"})
			return
		}
		if err != nil {
			return // the client went away while waiting
		}
		defer release()
		s.generate(ctx, c, out, job)
	}
}

// promptErr describes a prompt error without quoting the prompt: template
// errors can echo message text, so only the kind is reported.
func promptErr(err error) string {
	var pe *engine.PromptError
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return "the chat template refused the conversation"
}

func (s *Server) newID(prefix string) string {
	var b [12]byte
	if _, err := io.ReadFull(s.cfg.Rand, b[:]); err != nil {
		return prefix + "0"
	}
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) generate(ctx context.Context, c *gin.Context, out sink, job *Job) {
	created := s.cfg.Now().Unix()
	model := s.enc.ModelID
	id := s.newID("cmpl-")
	object, chunkObject := "text_completion", "text_completion"
	if job.Chat {
		id = s.newID("chatcmpl-")
		object, chunkObject = "chat.completion", "chat.completion.chunk"
	}
	start := time.Now()
	first := true
	var text strings.Builder
	var emit func(string) error
	if job.Stream {
		if err := out.startStream(); err != nil {
			return
		}
		if job.Chat {
			if err := out.event(sse(openai.ChatChunk{ID: id, Object: chunkObject, Created: created, Model: model,
				Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{Role: "assistant"}}}})); err != nil {
				return
			}
		}
		emit = func(t string) error {
			if first {
				s.met.firstToken.Observe(time.Since(start).Seconds())
				first = false
			}
			if job.Chat {
				return out.event(sse(openai.ChatChunk{ID: id, Object: chunkObject, Created: created, Model: model,
					Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{Content: t}}}}))
			}
			return out.event(sse(openai.CompletionResponse{ID: id, Object: chunkObject, Created: created, Model: model,
				Choices: []openai.CompletionChoice{{Text: t}}}))
		}
	} else {
		emit = func(t string) error {
			if first {
				s.met.firstToken.Observe(time.Since(start).Seconds())
				first = false
			}
			text.WriteString(t)
			return nil
		}
	}
	res, err := s.eng.Generate(ctx, job.Request, emit)
	s.met.generation.Observe(time.Since(start).Seconds())
	s.met.promptToks.Add(float64(res.PromptTokens))
	s.met.tokens.Add(float64(res.Tokens))
	if err != nil {
		if ctx.Err() != nil && c.Request.Context().Err() != nil {
			return // the client went away
		}
		s.log.Error("generation failed", "route", c.FullPath())
		status, code, msg := http.StatusInternalServerError, "generation_failed", "generation failed"
		if errors.Is(err, context.DeadlineExceeded) {
			status, code, msg = http.StatusServiceUnavailable, "generation_timeout", "generation exceeded the time limit"
		} else if errors.Is(err, context.Canceled) {
			status, code, msg = http.StatusServiceUnavailable, "shutting_down", "generation cancelled: the server is shutting down"
		}
		if job.Stream {
			// The stream ends with the error event and without [DONE].
			out.end(sseRaw(errorBody(status, code, "", msg)))
			return
		}
		out.reply(status, errorBody(status, code, "", msg))
		return
	}
	fr := finishReason(res.StopReason)
	u := openai.Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.Tokens, TotalTokens: res.PromptTokens + res.Tokens}
	if job.Stream {
		var err error
		if job.Chat {
			err = out.event(sse(openai.ChatChunk{ID: id, Object: chunkObject, Created: created, Model: model,
				Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{}, FinishReason: &fr}}}))
		} else {
			err = out.event(sse(openai.CompletionResponse{ID: id, Object: chunkObject, Created: created, Model: model,
				Choices: []openai.CompletionChoice{{Text: "", FinishReason: &fr}}}))
		}
		if err == nil && job.IncludeUsage {
			if job.Chat {
				err = out.event(sse(openai.ChatChunk{ID: id, Object: chunkObject, Created: created, Model: model, Choices: []openai.ChatChunkChoice{}, Usage: &u}))
			} else {
				err = out.event(sse(openai.CompletionResponse{ID: id, Object: chunkObject, Created: created, Model: model, Choices: []openai.CompletionChoice{}, Usage: &u}))
			}
		}
		if err == nil {
			out.end([]byte("data: [DONE]\n\n"))
		}
		return
	}
	var body []byte
	if job.Chat {
		body, _ = json.Marshal(openai.ChatResponse{ID: id, Object: object, Created: created, Model: model, Usage: &u,
			Choices: []openai.ChatChoice{{Message: openai.Message{Role: "assistant", Content: text.String()}, FinishReason: fr}}})
	} else {
		body, _ = json.Marshal(openai.CompletionResponse{ID: id, Object: object, Created: created, Model: model, Usage: &u,
			Choices: []openai.CompletionChoice{{Text: text.String(), FinishReason: &fr}}})
	}
	out.reply(http.StatusOK, body)
}

func sse(v any) []byte {
	b, _ := json.Marshal(v)
	return sseRaw(b)
}

func sseRaw(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
