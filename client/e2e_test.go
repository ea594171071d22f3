package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/attesttest"
	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/keys/ohttp"
)

// The end-to-end tests run the real programs on loopback: `sparkinfer serve
// --tee sim` (built with go build into a temporary directory), `sparkctl`,
// the client library in this process, relays between them, and the official
// OpenAI npm client through `sparkctl proxy`.

const (
	e2ePrompt    = "Lily and Tom found a shiny red zebra kite"
	e2eMaxTokens = 24
	e2eSeed      = 7
	e2eTemp      = "0.8"
)

var (
	serverOnce sync.Once
	serverProc *process
)

// appliance returns the shared `sparkinfer serve --tee sim` process.
func appliance(t *testing.T) *process {
	t.Helper()
	sparkinfer, _ := binaries(t)
	// One server for all tests of this process: started outside any test's
	// cleanup, stopped by the process's end (TestMain removes the binaries).
	serverOnce.Do(func() {
		serverProc = startDetached(t, sparkinfer, "serve", "--tee", "sim", "--listen", "127.0.0.1:0")
	})
	if serverProc == nil {
		t.Fatal("appliance did not start")
	}
	return serverProc
}

func TestE2EVerify(t *testing.T) {
	srv := appliance(t)
	_, sparkctl := binaries(t)

	out, errOut, code := runCmd(t, sparkctl, "verify", srv.url(), "--policy", devPolicyPath(t))
	if code != 0 {
		t.Fatalf("verify with the dev-simulated policy: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"SIMULATED", "statement.nonce", "verdict: verified (SIMULATED)"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}

	out, errOut, code = runCmd(t, sparkctl, "verify", srv.url())
	if code != 1 {
		t.Fatalf("verify with the default policy: exit %d, want 1\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "verdict: rejected") || !strings.Contains(out, "fail") {
		t.Errorf("default-policy output does not say rejected:\n%s", out)
	}

	out, _, code = runCmd(t, sparkctl, "verify", "--json", srv.url(), "--policy", devPolicyPath(t))
	var v struct {
		Verdict struct {
			Verified, Simulated bool
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || !v.Verdict.Verified || !v.Verdict.Simulated {
		t.Errorf("verify --json: exit %d, %+v\n%s", code, v, out)
	}

	if _, _, code := runCmd(t, sparkctl, "verify", "not a url"); code != 2 {
		t.Errorf("verify of a bad url: exit %d, want 2", code)
	}
	if _, _, code := runCmd(t, sparkctl, "verify", srv.url(), "--policy", "/nonexistent.json"); code != 2 {
		t.Errorf("verify with a missing policy file: exit %d, want 2", code)
	}
}

// generateText is what `sparkinfer generate` prints for the e2e prompt. The
// embedded model has no chat template, so the appliance answers a chat of
// one user message as a completion of its text (enclave/server), which is
// what generate does without --chat.
func generateText(t *testing.T) string {
	sparkinfer, _ := binaries(t)
	out, errOut, code := runCmd(t, sparkinfer, "generate", "--prompt", e2ePrompt,
		"--max-tokens", strconv.Itoa(e2eMaxTokens), "--seed", strconv.Itoa(e2eSeed), "--temperature", e2eTemp)
	if code != 0 {
		t.Fatalf("sparkinfer generate: exit %d\n%s", code, errOut)
	}
	return strings.TrimSpace(out)
}

func TestE2EChatMatchesGenerate(t *testing.T) {
	srv := appliance(t)
	_, sparkctl := binaries(t)
	want := generateText(t)
	if want == "" {
		t.Fatal("sparkinfer generate printed nothing")
	}
	rec := newTCPRecorder(t, srv.addr)
	common := []string{"chat", rec.url(), "--policy", devPolicyPath(t), "--prompt", e2ePrompt,
		"--max-tokens", strconv.Itoa(e2eMaxTokens), "--seed", strconv.Itoa(e2eSeed), "--temperature", e2eTemp}
	for _, stream := range []bool{false, true} {
		args := common
		if stream {
			args = append(append([]string{}, common...), "--stream")
		}
		out, errOut, code := runCmd(t, sparkctl, args...)
		if code != 0 {
			t.Fatalf("sparkctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("stream=%v: encrypted chat answered %q, sparkinfer generate %q", stream, got, want)
		}
		if !strings.Contains(errOut, "SIMULATED") {
			t.Errorf("stream=%v: stderr does not say SIMULATED: %q", stream, errOut)
		}
	}
	// What crossed the wire: evidence (public) and ciphertext only.
	wire := rec.recorded()
	if len(wire) == 0 {
		t.Fatal("the relay recorded nothing")
	}
	for _, secret := range []string{e2ePrompt, want, "zebra kite"} {
		if bytes.Contains(wire, []byte(secret)) {
			t.Errorf("plaintext %q seen on the wire", secret)
		}
	}
	// Every word of the answer longer than 5 letters is absent too.
	for _, w := range strings.Fields(want) {
		if len(w) > 5 && bytes.Contains(wire, []byte(w)) {
			t.Errorf("answer word %q seen on the wire", w)
		}
	}
	if !bytes.Contains(wire, []byte(ohttp.RequestMediaType)) {
		t.Errorf("no encrypted request media type on the wire")
	}
}

// mitm is an HTTP relay between the client library and the real appliance
// that can alter what passes, as a hostile host could.
type mitm struct {
	upstream string
	mu       sync.Mutex
	// evidence, request and response, when set, rewrite the evidence
	// answer, an encrypted request before it goes upstream, and an
	// encrypted answer before it reaches the client.
	evidence  func(b []byte) []byte
	request   func(b []byte) []byte
	response  func(b []byte) []byte
	lastEvid  []byte
	lastReq   []byte
	lastResp  []byte
	forwarded int
}

func (m *mitm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	if m.request != nil && r.Method == http.MethodPost {
		body = m.request(body)
	}
	m.mu.Unlock()
	req, _ := http.NewRequest(r.Method, m.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests {
		// The appliance's rate limit answered, not the appliance's evidence or
		// generation: pass it through untouched and uncounted (the client
		// waits and asks again).
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(rb)
		return
	}
	m.mu.Lock()
	if r.URL.Path == client.AttestationPath {
		if m.evidence != nil {
			rb = m.evidence(rb)
		}
	} else if m.response != nil {
		rb = m.response(rb)
	}
	if r.URL.Path == client.AttestationPath {
		m.lastEvid = rb
	} else {
		m.lastReq, m.lastResp = body, rb
	}
	m.forwarded++
	m.mu.Unlock()
	for k, vs := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
}

func (m *mitm) set(f func(m *mitm)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

func chatReq(stream bool) client.ChatRequest {
	n, s := e2eMaxTokens, int64(e2eSeed)
	temp, _ := strconv.ParseFloat(e2eTemp, 64)
	return client.ChatRequest{Model: "stories260K", Messages: []client.ChatMessage{{Role: "user", Content: e2ePrompt}}, MaxTokens: &n, Seed: &s, Temperature: &temp, Stream: stream}
}

func TestE2ETampering(t *testing.T) {
	srv := appliance(t)
	m := &mitm{upstream: srv.url()}
	relay := httptest.NewServer(m)
	t.Cleanup(relay.Close)
	ctx := ctx(t)

	// Untampered, through the relay: works, and records a request/response.
	c := newClient(t, relay.URL)
	if _, err := c.ChatCompletion(ctx, chatReq(false)); err != nil {
		t.Fatalf("untampered chat through the relay: %v", err)
	}
	oldEvidence, oldReq, oldResp := m.lastEvid, m.lastReq, m.lastResp

	t.Run("modified evidence", func(t *testing.T) {
		m.set(func(m *mitm) {
			m.evidence = func(b []byte) []byte {
				bun, err := attest.ParseBundle(b)
				if err != nil {
					t.Errorf("relay: %v", err)
					return b
				}
				out, _ := attesttest.FlipQuoteByte(bun, 100).Encode()
				return out
			}
		})
		defer m.set(func(m *mitm) { m.evidence = nil })
		n := m.forwarded
		_, err := newClient(t, relay.URL).ChatCompletion(ctx, chatReq(false))
		var ve *client.VerificationError
		if !errors.As(err, &ve) {
			t.Fatalf("err = %v, want *client.VerificationError", err)
		}
		t.Logf("rejected: %v (failed checks %v)", err, ve.FailedChecks())
		if m.forwarded != n+1 {
			t.Errorf("%d requests forwarded after rejected evidence, want only the evidence request", m.forwarded-n-1)
		}
	})

	t.Run("wrong nonce", func(t *testing.T) {
		m.set(func(m *mitm) { m.evidence = func([]byte) []byte { return oldEvidence } })
		defer m.set(func(m *mitm) { m.evidence = nil })
		_, err := newClient(t, relay.URL).ChatCompletion(ctx, chatReq(false))
		var ve *client.VerificationError
		if !errors.As(err, &ve) {
			t.Fatalf("err = %v, want *client.VerificationError", err)
		}
		if got := ve.FailedChecks(); len(got) == 0 || !contains(got, "statement.nonce") {
			t.Errorf("failed checks %v, want statement.nonce", got)
		}
		t.Logf("rejected: %v", err)
	})

	t.Run("replayed request", func(t *testing.T) {
		m.set(func(m *mitm) { m.request = func([]byte) []byte { return oldReq } })
		defer m.set(func(m *mitm) { m.request = nil })
		_, err := c.ChatCompletion(ctx, chatReq(false))
		if !errors.Is(err, ohttp.ErrReplayedRequest) {
			t.Fatalf("err = %v, want ohttp.ErrReplayedRequest", err)
		}
		t.Logf("rejected: %v", err)
	})

	t.Run("response sealed to another key", func(t *testing.T) {
		m.set(func(m *mitm) { m.response = func([]byte) []byte { return oldResp } })
		defer m.set(func(m *mitm) { m.response = nil })
		_, err := c.ChatCompletion(ctx, chatReq(false))
		if !errors.Is(err, ohttp.ErrWrongKey) {
			t.Fatalf("err = %v, want ohttp.ErrWrongKey", err)
		}
		t.Logf("rejected: %v", err)
	})

	streamWith := func(t *testing.T, edit func(nonce []byte, cs [][]byte) []byte) error {
		m.set(func(m *mitm) {
			m.response = func(b []byte) []byte {
				nonce, cs := chunks(t, b, 32)
				if len(cs) < 4 {
					t.Errorf("stream of %d chunks, want at least 4", len(cs))
					return b
				}
				return edit(nonce, cs)
			}
		})
		defer m.set(func(m *mitm) { m.response = nil })
		s, err := c.ChatCompletionStream(ctx, chatReq(true))
		if err != nil {
			return err
		}
		defer s.Close()
		for {
			_, err := s.Next()
			if err != nil {
				return err
			}
		}
	}
	t.Run("truncated stream", func(t *testing.T) {
		err := streamWith(t, func(nonce []byte, cs [][]byte) []byte {
			return bytes.Join(append([][]byte{nonce}, cs[:len(cs)-1]...), nil)
		})
		if !errors.Is(err, ohttp.ErrTruncated) {
			t.Fatalf("err = %v, want ohttp.ErrTruncated", err)
		}
		t.Logf("rejected: %v", err)
	})
	t.Run("reordered stream", func(t *testing.T) {
		err := streamWith(t, func(nonce []byte, cs [][]byte) []byte {
			cs[1], cs[2] = cs[2], cs[1]
			return bytes.Join(append([][]byte{nonce}, cs...), nil)
		})
		if !errors.Is(err, ohttp.ErrReordered) {
			t.Fatalf("err = %v, want ohttp.ErrReordered", err)
		}
		t.Logf("rejected: %v", err)
	})
	t.Run("untampered stream", func(t *testing.T) {
		err := streamWith(t, func(nonce []byte, cs [][]byte) []byte {
			return bytes.Join(append([][]byte{nonce}, cs...), nil)
		})
		if !errors.Is(err, io.EOF) {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestE2EOpenAINodeClient runs the official OpenAI npm client (tools/npm)
// against `sparkctl proxy`.
func TestE2EOpenAINodeClient(t *testing.T) {
	srv := appliance(t)
	_, sparkctl := binaries(t)
	npmDir := filepath.Join(repoRoot(t), "tools", "npm")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(npmDir, "node_modules", "openai", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node or the openai npm package is missing (run scripts/test.sh): %v", err)
		}
		t.Skipf("node or the openai npm package is missing (run scripts/test.sh): %v", err)
	}
	proxy := start(t, sparkctl, "proxy", "--listen", "127.0.0.1:0", "--upstream", srv.url(), "--policy", devPolicyPath(t))

	// The same request through the Go client, for the expected text.
	want := generateText(t)

	cmd := exec.Command(node, filepath.Join("testdata", "openai-client.cjs"))
	cmd.Env = append(os.Environ(),
		"OPENAI_NPM_DIR="+npmDir,
		"PROXY_URL="+proxy.url()+"/v1",
		"PROMPT="+e2ePrompt,
		"MAX_TOKENS="+strconv.Itoa(e2eMaxTokens),
		"SEED="+strconv.Itoa(e2eSeed),
		"TEMPERATURE="+e2eTemp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node openai-client.cjs: %v\n%s\nproxy log:\n%s", err, stderr.String(), proxy.stderr.String())
	}
	var res struct {
		Chat, ChatStream, Completion, CompletionStream string
		StreamChunks                                   int
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	if strings.TrimSpace(res.Chat) != want || strings.TrimSpace(res.ChatStream) != want {
		t.Errorf("openai client chat %q, streamed %q; sparkinfer generate %q", res.Chat, res.ChatStream, want)
	}
	if res.StreamChunks < 2 {
		t.Errorf("streamed chat arrived in %d chunks, want several", res.StreamChunks)
	}
	if res.Completion == "" || strings.TrimSpace(res.Completion) != strings.TrimSpace(res.CompletionStream) {
		t.Errorf("completion %q, streamed %q: want the same non-empty text", res.Completion, res.CompletionStream)
	}

	// A proxy whose upstream fails verification answers 502 with the reason.
	bad := start(t, sparkctl, "proxy", "--listen", "127.0.0.1:0", "--upstream", srv.url(), "--policy", filepath.Join(repoRoot(t), "policy", "default.json"))
	resp, err := http.Post(bad.url()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"stories260K","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "attestation_failed") {
		t.Errorf("proxy with a rejecting policy: %d %s", resp.StatusCode, body)
	}

	// The proxy refuses a non-loopback listen address.
	if _, errOut, code := runCmd(t, sparkctl, "proxy", "--listen", "0.0.0.0:0", "--upstream", srv.url(), "--policy", devPolicyPath(t)); code != 2 {
		t.Errorf("proxy on 0.0.0.0: exit %d, want 2 (%s)", code, errOut)
	}
}
