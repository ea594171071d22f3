package client_test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkinfer/cc/client"
)

// TestLoad drives the appliance with many concurrent encrypted requesters
// on loopback. CI runs 16 clients for 5 s;
// SPARKINFER_LOADTEST=1 runs 64 clients for 60 s. It requires no unexpected
// error, at least one 429 (the bounded queue refusing work under overload),
// and no goroutine growth afterwards, in this process or in the server.
func TestLoad(t *testing.T) {
	clients, dur := 16, 5*time.Second
	if os.Getenv("SPARKINFER_LOADTEST") == "1" {
		clients, dur = 64, 60*time.Second
	}
	sparkinfer, _ := binaries(t)
	// A server of its own with a small queue, so that this many clients
	// overload it.
	srv := start(t, sparkinfer, "serve", "--tee", "sim", "--listen", "127.0.0.1:0", "--queue", "2")
	serverBefore := serverGoroutines(t, srv.url())
	before := runtime.NumGoroutine()

	var ok, busy, unexpected, tokens atomic.Int64
	var firstErr sync.Once
	var errMsg string
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	// One Client (one verification, cached) shared by every worker, each
	// with its own connection: the appliance rate-limits evidence requests.
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	c := &client.Client{BaseURL: srv.url(), Policy: devPolicy(t), HTTP: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
	for i := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := ctx(t)
			for n := 0; time.Now().Before(deadline); n++ {
				req := chatReq(i%2 == 1)
				var err error
				if req.Stream {
					var s *client.Stream[client.ChatChunk]
					s, err = c.ChatCompletionStream(ctx, req)
					if err == nil {
						for {
							_, err = s.Next()
							if err != nil {
								break
							}
							tokens.Add(1)
						}
						s.Close()
					}
					if err != nil && errors.Is(err, io.EOF) {
						err = nil
					}
				} else {
					var r *client.ChatResponse
					r, err = c.ChatCompletion(ctx, req)
					if err == nil && r.Usage != nil {
						tokens.Add(int64(r.Usage.CompletionTokens))
					}
				}
				var ae *client.APIError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests:
					busy.Add(1)
					time.Sleep(20 * time.Millisecond)
				default:
					unexpected.Add(1)
					firstErr.Do(func() { errMsg = err.Error() })
				}
			}
		}(i)
	}
	wg.Wait()
	tr.CloseIdleConnections()
	t.Logf("load: %d clients for %v: %d ok, %d answered 429, %d unexpected errors, %d tokens (%.1f requests/s)",
		clients, dur, ok.Load(), busy.Load(), unexpected.Load(), tokens.Load(), float64(ok.Load())/dur.Seconds())
	if unexpected.Load() != 0 {
		t.Errorf("%d unexpected errors; first: %s", unexpected.Load(), errMsg)
	}
	if ok.Load() == 0 {
		t.Error("no request succeeded")
	}
	if busy.Load() == 0 {
		t.Error("no 429 under overload")
	}
	if after := goroutinesSettle(before, 10*time.Second); after > before {
		t.Errorf("client goroutines: %d before, %d after", before, after)
	}
	// The server's goroutines come back to where they were (idle
	// connections closed; allow the metrics request's own).
	var serverAfter int
	for range 100 {
		serverAfter = serverGoroutines(t, srv.url())
		if serverAfter <= serverBefore+2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("server goroutines: %d before, %d after", serverBefore, serverAfter)
	if serverAfter > serverBefore+2 {
		t.Errorf("server goroutines: %d before, %d after", serverBefore, serverAfter)
	}
}

// serverGoroutines reads go_goroutines from the server's /metrics.
func serverGoroutines(t *testing.T, url string) int {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}
