package enclave

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-configfs-tsm/configfs/configfsi"
	"github.com/google/go-configfs-tsm/configfs/faketsm"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/tdx"
	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/keys"
	"github.com/sparkinfer/cc/policy"
)

var (
	simOnce sync.Once
	simEnc  *Enclave
	simErr  error
)

// simEnclave boots one sim enclave with the embedded model for the tests
// that only read it.
func simEnclave(t *testing.T) *Enclave {
	t.Helper()
	simOnce.Do(func() { simEnc, simErr = Boot(Config{TEE: TEESim, SimGPUs: 2}) })
	if simErr != nil {
		t.Fatal(simErr)
	}
	return simEnc
}

func readPolicy(t *testing.T, path string) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSimBootEvidenceVerifies(t *testing.T) {
	e := simEnclave(t)
	st := e.Statement()
	if st.ModelDigest != attest.Digest(embedded.Stories260K) {
		t.Errorf("model digest %s, want sha256 of the embedded model", st.ModelDigest)
	}
	if st.KernelsDigest != ZeroDigest {
		t.Errorf("cpu engine kernels digest %s, want zeros", st.KernelsDigest)
	}
	exe, _ := os.Executable()
	if b, err := os.ReadFile(exe); err != nil || attest.Digest(b) != st.BinaryDigest {
		t.Errorf("binary digest %s is not sha256 of %s (%v)", st.BinaryDigest, exe, err)
	}
	if len(st.HPKEKeyConfigs) != 2 || len(st.GPUEvidenceDigests) != 2 {
		t.Fatalf("statement has %d key configs and %d gpu digests, want 2 and 2", len(st.HPKEKeyConfigs), len(st.GPUEvidenceDigests))
	}
	if !e.Simulated() || e.TEEKind() != attest.KindSim {
		t.Errorf("sim enclave: simulated %v, kind %q", e.Simulated(), e.TEEKind())
	}

	nonce := bytes.Repeat([]byte{0xa5}, 32)
	b, err := e.Evidence(nonce)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b2, err := attest.ParseBundle(enc)
	if err != nil {
		t.Fatal(err)
	}
	res, verr := attest.Verify(context.Background(), b2, attest.Options{}, attest.Expectations{Nonce: nonce})
	if verr != nil {
		t.Fatalf("verify: %v", verr)
	}
	if !res.Claims.Simulated || res.Claims.Statement.Nonce != hex.EncodeToString(nonce) || len(res.Claims.GPUs) != 2 {
		t.Errorf("claims: simulated %v nonce %q gpus %d", res.Claims.Simulated, res.Claims.Statement.Nonce, len(res.Claims.GPUs))
	}
	for _, g := range res.Claims.GPUs {
		if !g.NonceBound || !g.InStatement || !g.CCEnabled {
			t.Errorf("gpu %d: nonce bound %v, in statement %v, cc %v", g.Index, g.NonceBound, g.InStatement, g.CCEnabled)
		}
	}
	if v := policy.Appraise(res, verr, readPolicy(t, "../policy/dev-simulated.json")); !v.Verified {
		t.Errorf("dev-simulated policy rejects sim evidence: %+v", v.Mismatches)
	}
	if v := policy.Appraise(res, verr, policy.Default()); v.Verified {
		t.Error("the default policy accepts simulated evidence")
	}
	// Another nonce: the verifier must notice.
	if _, err := attest.Verify(context.Background(), b2, attest.Options{}, attest.Expectations{Nonce: bytes.Repeat([]byte{1}, 32)}); err == nil {
		t.Error("evidence verified against a different nonce")
	}
}

func TestEvidenceIsFreshPerRequest(t *testing.T) {
	e := simEnclave(t)
	n1, n2 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	b1, err := e.Evidence(n1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := e.Evidence(n2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(b1.TEE.Quote, b2.TEE.Quote) || bytes.Equal(b1.Statement, b2.Statement) {
		t.Error("two nonces gave the same quote or statement")
	}
	if !bytes.Equal(b1.GPUs[0].Report, b2.GPUs[0].Report) {
		t.Error("gpu evidence changed between requests; it is taken once per boot")
	}
}

func TestNonceSizes(t *testing.T) {
	e := simEnclave(t)
	for _, n := range []int{0, 15, 65} {
		_, err := e.Evidence(make([]byte, n))
		var ne *NonceError
		if !errors.As(err, &ne) || ne.Len != n {
			t.Errorf("nonce of %d bytes: %v, want *NonceError", n, err)
		}
	}
	for _, n := range []int{16, 64} {
		if _, err := e.Evidence(make([]byte, n)); err != nil {
			t.Errorf("nonce of %d bytes: %v", n, err)
		}
	}
}

func TestSignReceiptAndClose(t *testing.T) {
	e, err := Boot(Config{TEE: TEESim, GPUEvidence: GPUEvidenceNone})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Statement().GPUEvidenceDigests); n != 0 {
		t.Errorf("gpu evidence none: %d digests", n)
	}
	msg := []byte("receipt")
	sig, err := e.SignReceipt(msg)
	if err != nil || !ed25519.Verify(e.ReceiptPublicKey(), msg, sig) {
		t.Fatalf("receipt signature does not verify (%v)", err)
	}
	priv := e.receipt
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(priv, make([]byte, len(priv))) {
		t.Error("Close left the receipt key in memory")
	}
	kp, ok := e.Keys().Lookup(1)
	if !ok {
		t.Fatal("no key id 1")
	}
	if _, err := kp.NewRecipient(make([]byte, 1120), keys.DefaultSuite, nil); !errors.Is(err, keys.ErrKeyClosed) {
		t.Errorf("hpke key after close: %v, want keys.ErrKeyClosed", err)
	}
	if _, err := e.Evidence(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("evidence after close: %v, want ErrClosed", err)
	}
	if _, err := e.SignReceipt(msg); !errors.Is(err, ErrClosed) {
		t.Errorf("sign after close: %v, want ErrClosed", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestBootRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{TEE: "sgx"},
		{TEE: TEESim, GPUEvidence: "magic"},
		{TEE: TEESim, SimGPUs: 17},
		{TEE: TEESim, ModelPath: "testdata/does-not-exist.gguf"},
		{TEE: TEESim, ModelPath: "testdata/tdx_quote_v4.dat"},
	} {
		if e, err := Boot(c); err == nil {
			e.Close()
			t.Errorf("%+v: booted", c)
		}
	}
}

func TestAutoWithoutTEE(t *testing.T) {
	for _, p := range []string{TSMReportPath, TDXGuestPath, SEVGuestPath} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("this machine has %s", p)
		}
	}
	_, err := Boot(Config{})
	var ne *NoTEEError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "--tee sim") {
		t.Fatalf("boot without a tee: %v, want *NoTEEError naming --tee sim", err)
	}
	// --tee tpm needs an Azure TDX CVM's vTPM (vtpm_test.go tests it on a
	// TPM simulator); without one it fails with a tdx-vtpm *TEEError.
	var te *TEEError
	if _, err := OpenTEE(TEETPM); !errors.As(err, &te) || te.Kind != attest.KindTDXVTPM {
		t.Errorf("tpm without an azure vtpm: %v, want a tdx-vtpm *TEEError", err)
	}
}

// fakeTDX is go-configfs-tsm's fake configfs whose outblob is a recorded
// real TDX quote with the requested REPORTDATA patched in.
func fakeTDX(t *testing.T, quote []byte, provider string) configfsi.Client {
	sub := faketsm.ReportV7(0)
	sub.ReadAttr = func(e *faketsm.ReportEntry, attr string) ([]byte, error) {
		switch attr {
		case "provider":
			return []byte(provider + "\n"), nil
		case "privlevel_floor":
			return []byte("0\n"), nil
		case "outblob":
			in := e.InAttrs["inblob"]
			if in == nil || len(in.Value) != 64 {
				return nil, syscall.EINVAL
			}
			q := bytes.Clone(quote)
			pq, err := tdx.ParseQuote(q)
			if err != nil {
				return nil, err
			}
			copy(pq.ReportData(), in.Value) // aliases q
			return q, nil
		}
		return nil, os.ErrNotExist
	}
	return &faketsm.Client{Subsystems: map[string]configfsi.Client{"report": sub}}
}

func TestTDXThroughFakeConfigFS(t *testing.T) {
	quote, err := os.ReadFile("testdata/tdx_quote_v4.dat")
	if err != nil {
		t.Fatal(err)
	}
	tee, err := NewConfigFSTEE(fakeTDX(t, quote, "tdx_guest"), "")
	if err != nil {
		t.Fatal(err)
	}
	if tee.Kind() != attest.KindTDX {
		t.Fatalf("kind %q", tee.Kind())
	}
	e, err := Boot(Config{TEEImpl: tee, GPUEvidence: GPUEvidenceNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	nonce := bytes.Repeat([]byte{7}, 32)
	b, err := e.Evidence(nonce)
	if err != nil {
		t.Fatal(err)
	}
	if b.TEE.Kind != attest.KindTDX || len(b.GPUs) != 0 {
		t.Fatalf("bundle kind %q with %d gpus", b.TEE.Kind, len(b.GPUs))
	}
	q, err := tdx.ParseQuote(b.TEE.Quote)
	if err != nil {
		t.Fatal(err)
	}
	want := attest.ReportData(b.Statement)
	if !bytes.Equal(q.ReportData(), want[:]) {
		t.Error("quote REPORTDATA does not bind the statement")
	}
	st, err := attest.ParseStatement(b.Statement)
	if err != nil || st.Nonce != hex.EncodeToString(nonce) {
		t.Fatalf("statement nonce %q (%v)", st.Nonce, err)
	}
	// The recorded quote's signature covers its original REPORTDATA, so
	// verification must now fail on the signature: collection does not
	// forge anything.
	if _, err := attest.Verify(context.Background(), b, attest.Options{Now: func() time.Time { return time.Date(2024, 10, 1, 0, 0, 0, 0, time.UTC) }}, attest.Expectations{Nonce: nonce}); err == nil {
		t.Error("a patched quote verified")
	}
}

func TestConfigFSRejectsWrongProviderAndData(t *testing.T) {
	quote, err := os.ReadFile("testdata/tdx_quote_v4.dat")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewConfigFSTEE(fakeTDX(t, quote, "arm_cca_guest"), ""); err == nil {
		t.Error("unknown provider accepted")
	}
	if _, err := NewConfigFSTEE(fakeTDX(t, quote, "tdx_guest"), attest.KindSEVSNP); err != nil {
		t.Fatal(err) // kind given: no probe
	} else {
		tee, _ := NewConfigFSTEE(fakeTDX(t, quote, "tdx_guest"), attest.KindSEVSNP)
		if _, err := tee.Evidence([64]byte{1}); err == nil {
			t.Error("tdx provider accepted for sev-snp")
		}
	}
	// A device that ignores the requested report data is caught.
	sub := faketsm.ReportV7(0)
	sub.ReadAttr = func(e *faketsm.ReportEntry, attr string) ([]byte, error) {
		switch attr {
		case "provider":
			return []byte("tdx_guest\n"), nil
		case "outblob":
			return bytes.Clone(quote), nil
		}
		return nil, os.ErrNotExist
	}
	tee, err := NewConfigFSTEE(&faketsm.Client{Subsystems: map[string]configfsi.Client{"report": sub}}, attest.KindTDX)
	if err != nil {
		t.Fatal(err)
	}
	var te *TEEError
	if _, err := tee.Evidence([64]byte{1, 2, 3}); !errors.As(err, &te) {
		t.Errorf("quote without the requested report data: %v, want *TEEError", err)
	}
}

func TestHarden(t *testing.T) {
	if err := Harden(); err != nil {
		t.Fatal(err)
	}
	ok, err := Hardened()
	if err != nil || !ok {
		t.Fatalf("hardened %v (%v)", ok, err)
	}
}
