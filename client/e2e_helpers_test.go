package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/policy"
)

// repoRoot is the module root, two levels above this package's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds sparkinfer and sparkctl once per test process, into a
// temporary directory removed by TestMain.
func binaries(t testing.TB) (sparkinfer, sparkctl string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sparkinfer-e2e-")
		if buildErr != nil {
			return
		}
		for _, prog := range []string{"sparkinfer", "sparkctl"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, prog), "./cmd/"+prog)
			cmd.Dir = repoRoot(t)
			out, err := cmd.CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", prog, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "sparkinfer"), filepath.Join(buildDir, "sparkctl")
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range detached {
		if err := p.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// process is a child process that printed "listening on ADDR".
type process struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs bin with args and waits until it prints "listening on ADDR" on
// stderr. The process is stopped (SIGINT, then killed) when the test ends.
func start(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	p, err := startProc(bin, args...)
	if p != nil {
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	detachedMu sync.Mutex
	detached   []*process
)

// startDetached is start for a process shared by several tests: TestMain
// stops it.
func startDetached(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	p, err := startProc(bin, args...)
	if p != nil {
		detachedMu.Lock()
		detached = append(detached, p)
		detachedMu.Unlock()
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startProc(bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	pr, pw := io.Pipe()
	p := &process{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = pw
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if a, ok := strings.CutPrefix(line, "listening on "); ok && !sent {
				addrc <- strings.TrimSpace(a)
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-p.done:
		return p, fmt.Errorf("%s %s exited before listening:\n%s", filepath.Base(bin), strings.Join(args, " "), p.stderr.String())
	case <-time.After(120 * time.Second):
		return p, fmt.Errorf("%s did not print \"listening on\" within 120 s:\n%s", filepath.Base(bin), p.stderr.String())
	}
}

func (p *process) url() string { return "http://" + p.addr }

// stop interrupts the process and waits for it; it kills it after 15 s.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 15 s of SIGINT; killed", p.cmd.Path)
	}
}

// runCmd runs bin with args and returns stdout, stderr and the exit code.
func runCmd(t testing.TB, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return o.String(), e.String(), ee.ExitCode()
		}
		t.Fatalf("run %s: %v", bin, err)
	}
	return o.String(), e.String(), 0
}

// devPolicyPath is the repository's development policy, which accepts
// simulated evidence.
func devPolicyPath(t testing.TB) string {
	return filepath.Join(repoRoot(t), "policy", "dev-simulated.json")
}

func devPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile(devPolicyPath(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newClient returns a client of the appliance at url with the development
// policy and its own HTTP transport (closed when the test ends).
func newClient(t testing.TB, url string) *client.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &client.Client{BaseURL: url, Policy: devPolicy(t), HTTP: &http.Client{Transport: tr, Timeout: 5 * time.Minute}}
}

// tcpRecorder is a TCP relay that records every byte in both directions.
type tcpRecorder struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	rec      bytes.Buffer
	wg       sync.WaitGroup
}

func newTCPRecorder(t testing.TB, upstream string) *tcpRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRecorder{ln: ln, upstream: upstream}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.relay(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *tcpRecorder) url() string { return "http://" + r.ln.Addr().String() }

type recWriter struct{ r *tcpRecorder }

func (w recWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.rec.Write(p)
}

func (r *tcpRecorder) relay(c net.Conn) {
	defer c.Close()
	u, err := net.Dial("tcp", r.upstream)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(io.MultiWriter(dst, recWriter{r}), src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(u, c)
	go cp(c, u)
	<-done
	<-done
}

func (r *tcpRecorder) recorded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.rec.Bytes())
}

// chunks splits an encrypted response (docs/PROTOCOL.md section 8.1) into
// its response nonce and its chunks (flags, length and sealed bytes each).
func chunks(t testing.TB, resp []byte, nonceSize int) (nonce []byte, cs [][]byte) {
	t.Helper()
	if len(resp) < nonceSize {
		t.Fatalf("response of %d bytes", len(resp))
	}
	nonce, rest := resp[:nonceSize], resp[nonceSize:]
	for len(rest) > 0 {
		if len(rest) < 5 {
			t.Fatalf("%d stray bytes", len(rest))
		}
		n := 5 + int(binary.BigEndian.Uint32(rest[1:5]))
		if n > len(rest) {
			t.Fatalf("chunk of %d bytes, %d left", n, len(rest))
		}
		cs = append(cs, rest[:n])
		rest = rest[n:]
	}
	return nonce, cs
}

// goroutinesSettle waits until the number of goroutines is at most want.
func goroutinesSettle(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	n := runtime.NumGoroutine()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// ctx returns a context cancelled when the test ends.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}
