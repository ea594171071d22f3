package tdx

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tdx-guest/pcs"
	"github.com/sparkinfer/cc/attest/check"
)

// recordedPCS serves the Intel PCS responses recorded in a Polaris receipt,
// standing in for the network (no test uses the network); it counts calls.
type recordedPCS struct {
	items map[string][]byte
	calls int
	down  bool
}

func newRecordedPCS(t testing.TB, r *receipt) *recordedPCS {
	raw, err := base64.StdEncoding.DecodeString(r.TDX.Collateral)
	if err != nil {
		t.Fatal(err)
	}
	var p polarisCollateral
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	g := &recordedPCS{items: map[string][]byte{}}
	for u, b64 := range p.Items {
		b, _ := base64.StdEncoding.DecodeString(b64)
		g.items[u] = b
	}
	return g
}

func (g *recordedPCS) Get(u string) (map[string][]string, []byte, error) {
	g.calls++
	if g.down {
		return nil, nil, errors.New("dial tcp: network is unreachable")
	}
	b, ok := g.items[u]
	if !ok {
		return nil, nil, fmt.Errorf("404 for %q", u)
	}
	return nil, b, nil
}

func TestPCSFetchAndCache(t *testing.T) {
	r := loadReceipts(t)[0]
	g := newRecordedPCS(t, r)
	now := r.asOf(t)
	p := &PCS{Getter: g, CacheDir: t.TempDir(), Now: func() time.Time { return now }}
	q, err := ParseQuote(r.quote(t))
	if err != nil {
		t.Fatal(err)
	}
	exts, err := pcs.PckCertificateExtensions(q.PCKChain[0])
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{AsOf: r.asOf(t), PCS: p, ReportData: r.wantReportData()}
	cl, err := Verify(r.quote(t), opts)
	if err != nil {
		t.Fatalf("online verify: %v\n%s", err, cl.Checks)
	}
	if cl.CollateralSource != "pcs" || g.calls != 4 {
		t.Fatalf("source %q after %d calls, want pcs after 4", cl.CollateralSource, g.calls)
	}
	// Second run: served from the cache, no network.
	g.down = true
	cl, err = Verify(r.quote(t), opts)
	if err != nil || cl.CollateralSource != "pcs cache" || g.calls != 4 {
		t.Fatalf("cached verify: %v, source %q, calls %d", err, cl.CollateralSource, g.calls)
	}
	// After the earliest nextUpdate the cache is stale; with the network down
	// verification cannot be completed: UnavailableError, not a rejection.
	now = now.AddDate(0, 2, 0)
	cl, err = Verify(r.quote(t), opts)
	var ue *check.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "network is unreachable") {
		t.Fatalf("stale cache, network down: got %v, want UnavailableError", err)
	}
	if c, _ := cl.Checks.Find(CheckTCBLevel); c.Status != check.Skipped {
		t.Fatalf("tcb level %s, want skipped", c.Status)
	}
	if exts.FMSPC == "" {
		t.Fatal("no fmspc")
	}
}
