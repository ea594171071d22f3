package enclave

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gatt "github.com/google/go-attestation/attest"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/attesttest"
	"github.com/sparkinfer/cc/attest/check"
	"github.com/sparkinfer/cc/attest/tpm"
)

// The vTPM tests run the collector against a real TPM 2.0: go-tpm-tools'
// simulator (Microsoft's reference implementation, built with cgo; imported
// only here, so release binaries do not contain it). The Azure paravisor's
// part is played by the test: it defines NV index 0x01400001 holding a real
// HCL report and puts an attestation key at 0x81000003. A local HTTP server
// serves the real TD quote in place of the instance metadata service.

// vtpmTime is when the real TD quote's PCK chain is valid (as in
// attest's TestRealVTPMEvidence).
var vtpmTime = time.Date(2026, 7, 10, 1, 47, 29, 0, time.UTC)

// bigNVEnv marks the re-run of TestVTPMSimulator with a simulator built to
// hold 4 KiB NV indices.
const bigNVEnv = "SPARKINFER_TEST_VTPM_BIG_NV"

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nvIndexMax is the TPM's TPM_PT_NV_INDEX_MAX.
func nvIndexMax(t *testing.T, rw io.ReadWriter) int {
	t.Helper()
	vals, _, err := tpm2.GetCapability(rw, tpm2.CapabilityTPMProperties, 1, uint32(tpm2.NVIndexMax))
	if err != nil || len(vals) != 1 {
		t.Fatalf("TPM_PT_NV_INDEX_MAX: %v %v", vals, err)
	}
	p, ok := vals[0].(tpm2.TaggedProperty)
	if !ok || p.Tag != tpm2.NVIndexMax {
		t.Fatalf("TPM_PT_NV_INDEX_MAX: %#v", vals[0])
	}
	return int(p.Value)
}

// definePlantNV defines an owner-read/write NV index holding data.
func plantNV(t *testing.T, rw io.ReadWriter, idx uint32, attrs tpm2.NVAttr, data []byte) {
	t.Helper()
	pub := tpm2.NVPublic{NVIndex: tpmutil.Handle(idx), NameAlg: tpm2.AlgSHA256, Attributes: attrs, DataSize: uint16(len(data))}
	auth := tpm2.AuthCommand{Session: tpm2.HandlePasswordSession, Attributes: tpm2.AttrContinueSession, Auth: tpm2.EmptyAuth}
	if err := tpm2.NVDefineSpaceEx(rw, tpm2.HandleOwner, "", pub, auth); err != nil {
		t.Fatalf("define nv 0x%08x (%d bytes): %v", idx, len(data), err)
	}
	if attrs&tpm2.AttrOwnerWrite == 0 {
		return
	}
	for off := 0; off < len(data); off += 1024 { // TPM_PT_NV_BUFFER_MAX
		end := min(off+1024, len(data))
		if err := tpm2.NVWrite(rw, tpm2.HandleOwner, tpmutil.Handle(idx), "", data[off:end], uint16(off)); err != nil {
			t.Fatalf("write nv 0x%08x at %d: %v", idx, off, err)
		}
	}
}

const ownerRW = tpm2.AttrOwnerWrite | tpm2.AttrOwnerRead | tpm2.AttrAuthWrite | tpm2.AttrAuthRead | tpm2.AttrNoDA

// plantAK creates a key in the owner hierarchy and makes it persistent at
// AKHandle: an RSA-2048 restricted signing key with RSASSA/SHA-256 like
// Azure's, or (signing false) a restricted decryption key.
func plantAK(t *testing.T, rw io.ReadWriter, signing bool) tpm2.Public {
	t.Helper()
	tmpl := tpm2.Public{
		Type:       tpm2.AlgRSA,
		NameAlg:    tpm2.AlgSHA256,
		Attributes: tpm2.FlagSignerDefault | tpm2.FlagNoDA,
		RSAParameters: &tpm2.RSAParams{
			Sign:    &tpm2.SigScheme{Alg: tpm2.AlgRSASSA, Hash: tpm2.AlgSHA256},
			KeyBits: 2048,
		},
	}
	if !signing {
		tmpl.Attributes = tpm2.FlagStorageDefault
		tmpl.RSAParameters = &tpm2.RSAParams{Symmetric: &tpm2.SymScheme{Alg: tpm2.AlgAES, KeyBits: 128, Mode: tpm2.AlgCFB}, KeyBits: 2048}
	}
	h, _, err := tpm2.CreatePrimary(rw, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "", tmpl)
	if err != nil {
		t.Fatalf("create ak: %v", err)
	}
	defer tpm2.FlushContext(rw, h)
	if err := tpm2.EvictControl(rw, "", tpm2.HandleOwner, h, tpmutil.Handle(AKHandle)); err != nil {
		t.Fatalf("persist ak: %v", err)
	}
	pub, _, _, err := tpm2.ReadPublic(rw, tpmutil.Handle(AKHandle))
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// imds is a local stand-in for the instance metadata service's
// /acc/tdquote: it checks the request carries want (the TD report) and
// answers with answer.
type imds struct {
	t      *testing.T
	want   []byte
	status int
	answer []byte
	calls  int
}

func (s *imds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls++
	var req struct {
		Report string `json:"report"`
	}
	if r.Method != http.MethodPost || r.URL.Path != "/acc/tdquote" || r.Header.Get("Content-Type") != "application/json" {
		s.t.Errorf("imds request %s %s %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.t.Errorf("imds request body: %v", err)
	}
	if got, err := base64.RawURLEncoding.DecodeString(req.Report); err != nil || !bytes.Equal(got, s.want) {
		s.t.Errorf("imds request report (%d bytes, %v) is not the hcl report's td report", len(got), err)
	}
	w.WriteHeader(s.status)
	w.Write(s.answer)
}

func quoteAnswer(q []byte) []byte {
	b, _ := json.Marshal(map[string]string{"quote": base64.RawURLEncoding.EncodeToString(q)})
	return b
}

func TestVTPMNoDevice(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenVTPM(VTPMConfig{Device: filepath.Join(dir, "tpmrm0")})
	var nt *NoTPMError
	var te *TEEError
	if !errors.As(err, &nt) || !errors.As(err, &te) || te.Kind != attest.KindTDXVTPM || !strings.Contains(err.Error(), "tpmrm0") {
		t.Errorf("missing device: %v, want *NoTPMError in a *TEEError", err)
	}
	// A path that exists but is no TPM.
	f := filepath.Join(dir, "not-a-tpm")
	if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *TPMCommandError
	if _, err := OpenVTPM(VTPMConfig{Device: f}); !errors.As(err, &ce) {
		t.Errorf("regular file: %v, want *TPMCommandError", err)
	}
	// The default paths, where this machine has none.
	for _, p := range TPMDevicePaths {
		if _, err := os.Stat(p); err == nil {
			t.Logf("this machine has %s: default-path refusal not checked", p)
			return
		}
	}
	if _, err := OpenTEE(TEETPM); !errors.As(err, &nt) || !strings.Contains(err.Error(), "/dev/tpmrm0") || !strings.Contains(err.Error(), "/dev/tpm0") {
		t.Errorf("--tee tpm without a tpm: %v, want *NoTPMError naming both devices", err)
	}
}

func TestVTPMSimulator(t *testing.T) {
	hcl := readTestdata(t, "az-tdx-vtpm/hcl-report.bin")
	tdQuote := readTestdata(t, "az-tdx-vtpm/td-quote.bin")
	otherTD := readTestdata(t, "tdx_quote_v4.dat")
	hclParsed, err := tpm.ParseHCLReport(hcl)
	if err != nil {
		t.Fatal(err)
	}
	tdReport := hclParsed.HardwareReport()

	sim, err := simulator.Get()
	if err != nil {
		t.Fatalf("tpm simulator: %v", err)
	}
	defer sim.Close()
	// The reference TPM caps NV indices at MAX_NV_INDEX_SIZE, a build-time
	// constant (2048 by default); Azure's HCL report index holds 2600
	// bytes. Without a large enough simulator, run this test again with
	// one built for 4 KiB indices.
	if max := nvIndexMax(t, sim); max < len(hcl) {
		if os.Getenv(bigNVEnv) != "" {
			t.Fatalf("simulator holds nv indices of at most %d bytes, even when built with -DMAX_NV_INDEX_SIZE=4096", max)
		}
		sim.Close()
		rerunWithBigNV(t)
		return
	}

	// fresh resets the simulator and plays the paravisor: the HCL report
	// at its index, an attestation key at AKHandle.
	fresh := func(t *testing.T, hclData []byte, ak bool) {
		t.Helper()
		if err := sim.ManufactureReset(); err != nil {
			t.Fatal(err)
		}
		if hclData != nil {
			plantNV(t, sim, HCLReportNVIndex, ownerRW, hclData)
		}
		if ak {
			plantAK(t, sim, true)
		}
	}
	server := func(t *testing.T, status int, answer []byte) (*imds, VTPMConfig) {
		s := &imds{t: t, want: tdReport, status: status, answer: answer}
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		return s, VTPMConfig{IMDSQuoteURL: ts.URL + "/acc/tdquote", HTTPClient: ts.Client()}
	}
	// collector opens the simulator with an IMDS that answers 200 with answer.
	collector := func(t *testing.T, answer []byte) *VTPMTEE {
		t.Helper()
		_, cfg := server(t, http.StatusOK, answer)
		v, err := NewVTPMTEE(sim, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stmt := attesttest.Statement(vtpmTime, bytes.Repeat([]byte{0x5a}, 16))
	sb, err := stmt.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rd := attest.ReportData(sb)

	t.Run("collect", func(t *testing.T) {
		fresh(t, hcl, true)
		// A user-data index of the wrong size is redefined.
		plantNV(t, sim, UserDataNVIndex, ownerRW, make([]byte, 32))
		// Non-trivial PCR values.
		for _, i := range []int{7, 16, 23} {
			d := sha256.Sum256([]byte{byte(i)})
			if err := tpm2.PCRExtend(sim, tpmutil.Handle(i), tpm2.AlgSHA256, d[:], ""); err != nil {
				t.Fatal(err)
			}
		}
		srv, cfg := server(t, http.StatusOK, quoteAnswer(tdQuote))
		v, err := NewVTPMTEE(sim, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if v.Kind() != attest.KindTDXVTPM {
			t.Errorf("kind %q", v.Kind())
		}
		ev, err := v.collect(rd)
		if err != nil {
			t.Fatalf("collect: %v", err)
		}
		if srv.calls != 1 {
			t.Errorf("%d imds calls", srv.calls)
		}

		// (a) The bundle's parts, in the verifier's format.
		if ev.Kind != attest.KindTDXVTPM || !bytes.Equal(ev.Quote, tdQuote) || !bytes.Equal(ev.HCLReport, hcl) {
			t.Errorf("evidence kind %q, td quote %d bytes (want the served one), hcl report %d bytes (want the planted one)", ev.Kind, len(ev.Quote), len(ev.HCLReport))
		}
		ud, err := tpm2.NVReadEx(sim, tpmutil.Handle(UserDataNVIndex), tpm2.HandleOwner, "", 0)
		if err != nil || !bytes.Equal(ud, rd[:]) {
			t.Errorf("user data index holds %x (%v), want the report data %x", ud, err, rd)
		}
		q, err := tpm.ParseTPMQuote(ev.TPMQuote)
		if err != nil {
			t.Fatalf("tpm quote container: %v", err)
		}
		if !bytes.Equal(q.Attest.ExtraData, rd[:]) {
			t.Errorf("extradata %x, want the statement's report data %x", []byte(q.Attest.ExtraData), rd)
		}
		sel := q.Attest.AttestedQuoteInfo.PCRSelection
		if sel.Hash != tpm2.AlgSHA256 || len(sel.PCRs) != 24 || len(q.PCRs) != 24 {
			t.Fatalf("pcr selection %+v with %d values, want sha256 0-23", sel, len(q.PCRs))
		}
		var pcrs []gatt.PCR
		for i, idx := range sel.PCRs {
			m, err := tpm2.ReadPCRs(sim, tpm2.PCRSelection{Hash: tpm2.AlgSHA256, PCRs: []int{idx}})
			if idx != i || err != nil || !bytes.Equal(m[idx], q.PCRs[i]) {
				t.Errorf("pcr %d (position %d): %x, simulator has %x (%v)", idx, i, q.PCRs[i], m[idx], err)
			}
			pcrs = append(pcrs, gatt.PCR{Index: idx, Digest: q.PCRs[i], DigestAlg: crypto.SHA256})
		}
		// The quote verifies against the simulator's key with go-attestation.
		pub, _, _, err := tpm2.ReadPublic(sim, tpmutil.Handle(AKHandle))
		if err != nil {
			t.Fatal(err)
		}
		pubBytes, err := pub.Encode()
		if err != nil {
			t.Fatal(err)
		}
		akp, err := gatt.ParseAKPublic(pubBytes)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := tpm2.Signature{Alg: tpm2.AlgRSASSA, RSA: &tpm2.SignatureRSA{HashAlg: tpm2.AlgSHA256, Signature: q.Signature}}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := akp.Verify(gatt.Quote{Quote: q.Message, Signature: sig}, pcrs, rd[:]); err != nil {
			t.Errorf("go-attestation rejects the quote with the simulator's key: %v", err)
		}
		if err := akp.Verify(gatt.Quote{Quote: q.Message, Signature: sig}, pcrs, bytes.Repeat([]byte{1}, 64)); err == nil {
			t.Error("go-attestation accepts the quote for another nonce")
		}

		// (b) The verifier rejects it: the simulator's key is not the
		// HCLAkPub the real HCL report binds.
		b := &attest.Bundle{Version: attest.BundleVersion, Statement: sb, TEE: ev}
		enc, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		b, err = attest.ParseBundle(enc)
		if err != nil {
			t.Fatal(err)
		}
		vr, err := attest.NewVerifier(attesttest.PublicAuthority().Options(vtpmTime))
		if err != nil {
			t.Fatal(err)
		}
		r, err := vr.Verify(context.Background(), b, attest.Expectations{Nonce: bytes.Repeat([]byte{0x5a}, 16)})
		var ve *check.VerifyError
		if !errors.As(err, &ve) || ve.Check != tpm.CheckQuoteSignature || !strings.Contains(err.Error(), "HCLAkPub") {
			t.Fatalf("verify: %v, want a %s rejection naming HCLAkPub", err, tpm.CheckQuoteSignature)
		}
		t.Logf("verifier:\n%s", r.Checks)
		for _, name := range []string{"tdx.quote.signature", "tee.signature", tpm.CheckReportDataBinding, tpm.CheckHWReportData, tpm.CheckQuoteNonce, tpm.CheckQuotePCRDigest} {
			if c, _ := r.Checks.Find(name); c.Status != check.Pass {
				t.Errorf("%s = %+v, want pass", name, c)
			}
		}
		for _, name := range []string{tpm.CheckQuoteSignature, tpm.CheckQuoteLibrary, "tee.vtpm"} {
			if c, _ := r.Checks.Find(name); c.Status != check.Fail {
				t.Errorf("%s = %+v, want fail", name, c)
			}
		}
		if c, _ := r.Checks.Find("tee.report_data"); c.Status == check.Pass || r.Claims.TEE.ReportDataBound {
			t.Errorf("tee.report_data = %+v, bound %v: must not pass", c, r.Claims.TEE.ReportDataBound)
		}

		// Evidence refuses to hand it out: its own check finds the key
		// mismatch first.
		_, err = v.Evidence(rd)
		var ee *VTPMEvidenceError
		if !errors.As(err, &ee) || ee.Check != "ak_binding" || !strings.Contains(err.Error(), "HCLAkPub") {
			t.Errorf("Evidence: %v, want the ak_binding check naming HCLAkPub", err)
		}
		// With the key check passed (as if the simulator's key were
		// HCLAkPub), attest/tpm's signature check still catches it.
		if err := checkVTPMEvidence(ev, hclParsed.AttestationKey(), rd); !errors.As(err, &ee) || ee.Check != tpm.CheckQuoteSignature {
			t.Errorf("check with the bound key: %v, want %s", err, tpm.CheckQuoteSignature)
		}
	})

	t.Run("imds_quote_for_another_td", func(t *testing.T) {
		fresh(t, hcl, true)
		v := collector(t, quoteAnswer(otherTD))
		ev, err := v.collect(rd)
		if err != nil {
			t.Fatal(err)
		}
		var ee *VTPMEvidenceError
		if err := checkVTPMEvidence(ev, hclParsed.AttestationKey(), rd); !errors.As(err, &ee) || ee.Check != tpm.CheckReportDataBinding {
			t.Errorf("td quote of another td: %v, want %s", err, tpm.CheckReportDataBinding)
		}
	})

	t.Run("imds_errors", func(t *testing.T) {
		fresh(t, hcl, true)
		huge := quoteAnswer(make([]byte, attest.MaxQuoteSize+1))
		for _, c := range []struct {
			name   string
			status int
			answer []byte
		}{
			{"status 500", http.StatusInternalServerError, []byte(`{"error":"internal"}`)},
			{"not json", http.StatusOK, []byte("<html>hello</html>")},
			{"no quote", http.StatusOK, []byte(`{"report":"x"}`)},
			{"not base64url", http.StatusOK, []byte(`{"quote":"!!!"}`)},
			{"not a td quote", http.StatusOK, quoteAnswer([]byte("garbage, not a quote"))},
			{"oversize quote", http.StatusOK, huge},
			{"trailing data", http.StatusOK, append(quoteAnswer(tdQuote), "{}"...)},
		} {
			_, cfg := server(t, c.status, c.answer)
			v, err := NewVTPMTEE(sim, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Evidence(rd)
			var ie *IMDSError
			if !errors.As(err, &ie) || ie.Status != c.status {
				t.Errorf("%s: %v, want *IMDSError with status %d", c.name, err, c.status)
			}
		}
		// Nothing listening.
		ts := httptest.NewServer(http.NotFoundHandler())
		url := ts.URL
		ts.Close()
		v, err := NewVTPMTEE(sim, VTPMConfig{IMDSQuoteURL: url})
		if err != nil {
			t.Fatal(err)
		}
		var ie *IMDSError
		if _, err := v.Evidence(rd); !errors.As(err, &ie) || ie.Status != 0 {
			t.Errorf("unreachable imds: %v, want *IMDSError without status", err)
		}
	})

	t.Run("hcl_index_missing", func(t *testing.T) {
		fresh(t, nil, true)
		_, cfg := server(t, http.StatusOK, quoteAnswer(tdQuote))
		_, err := NewVTPMTEE(sim, cfg)
		var ne *NVIndexError
		if !errors.As(err, &ne) || ne.Index != HCLReportNVIndex || !ne.Missing {
			t.Errorf("no hcl index: %v, want *NVIndexError for 0x01400001, missing", err)
		}
	})

	t.Run("hcl_index_garbage", func(t *testing.T) {
		fresh(t, []byte("not an hcl report, just text"), true)
		v := collector(t, quoteAnswer(tdQuote))
		var ee *VTPMEvidenceError
		var pe *check.ParseError
		if _, err := v.Evidence(rd); !errors.As(err, &ee) || ee.Check != "hcl_report" || !errors.As(err, &pe) {
			t.Errorf("garbage hcl report: %v, want the hcl_report check with a *check.ParseError", err)
		}
	})

	t.Run("hcl_index_auth_read_only", func(t *testing.T) {
		// An index readable with its own authorization but not the
		// owner's is read that way.
		if err := sim.ManufactureReset(); err != nil {
			t.Fatal(err)
		}
		plantNV(t, sim, HCLReportNVIndex, tpm2.AttrOwnerWrite|tpm2.AttrAuthRead|tpm2.AttrNoDA, hcl)
		plantAK(t, sim, true)
		v := collector(t, quoteAnswer(tdQuote))
		ev, err := v.collect(rd)
		if err != nil || !bytes.Equal(ev.HCLReport, hcl) {
			t.Errorf("collect: %v (hcl report %d bytes)", err, len(ev.HCLReport))
		}
	})

	t.Run("ak_missing", func(t *testing.T) {
		fresh(t, hcl, false)
		_, cfg := server(t, http.StatusOK, quoteAnswer(tdQuote))
		_, err := NewVTPMTEE(sim, cfg)
		var ce *TPMCommandError
		var he tpm2.HandleError
		if !errors.As(err, &ce) || !errors.As(err, &he) || !strings.Contains(err.Error(), "0x81000003") {
			t.Errorf("no ak: %v, want *TPMCommandError wrapping the tpm's handle error", err)
		}
	})

	t.Run("ak_not_signing", func(t *testing.T) {
		fresh(t, hcl, false)
		plantAK(t, sim, false)
		_, cfg := server(t, http.StatusOK, quoteAnswer(tdQuote))
		_, err := NewVTPMTEE(sim, cfg)
		var ce *TPMCommandError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "restricted signing") {
			t.Errorf("decryption key at the ak handle: %v, want *TPMCommandError", err)
		}
	})

	t.Run("user_data_write_refused", func(t *testing.T) {
		fresh(t, hcl, true)
		// Writable only with a policy the collector cannot satisfy.
		plantNV(t, sim, UserDataNVIndex, tpm2.AttrPolicyWrite|tpm2.AttrOwnerRead|tpm2.AttrAuthRead|tpm2.AttrNoDA, make([]byte, 64))
		v := collector(t, quoteAnswer(tdQuote))
		_, err := v.Evidence(rd)
		var ne *NVIndexError
		if !errors.As(err, &ne) || ne.Index != UserDataNVIndex || ne.Op != "write" {
			t.Errorf("write refused: %v, want *NVIndexError writing 0x01400002", err)
		}
	})

	t.Run("tpm_gone", func(t *testing.T) {
		fresh(t, hcl, true)
		v := collector(t, quoteAnswer(tdQuote))
		// The simulator stops answering; the collector reports it.
		if err := sim.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := v.Evidence(rd)
		var ne *NVIndexError
		if !errors.As(err, &ne) || !errors.Is(err, simulator.ErrUsingClosedSimulator) {
			t.Errorf("closed tpm: %v, want *NVIndexError wrapping the closed simulator", err)
		}
	})
}

// rerunWithBigNV runs TestVTPMSimulator again in a child `go test` whose
// simulator is compiled with -DMAX_NV_INDEX_SIZE=4096 (a cgo build flag;
// the go build cache keeps that build for later runs).
func rerunWithBigNV(t *testing.T) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the simulator holds nv indices of at most 2048 bytes and no go command is found to rebuild it larger: %v", err)
	}
	cflags := os.Getenv("CGO_CFLAGS")
	if cflags == "" {
		out, err := exec.Command(goBin, "env", "CGO_CFLAGS").Output()
		if err != nil {
			t.Fatalf("go env CGO_CFLAGS: %v", err)
		}
		cflags = strings.TrimSpace(string(out))
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-v", "-run", "^TestVTPMSimulator$", ".")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS="+cflags+" -DMAX_NV_INDEX_SIZE=4096", bigNVEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("re-run with a simulator for 4 KiB nv indices:\n%s", out)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
}

// FuzzParseIMDSQuote: the instance metadata service's answer never panics
// the parser, and what it accepts is a TD quote of bounded size.
func FuzzParseIMDSQuote(f *testing.F) {
	seeds := 0
	for _, name := range []string{"az-tdx-vtpm/td-quote.bin", "tdx_quote_v4.dat"} {
		q := readTestdata(f, name)
		f.Add(quoteAnswer(q))
		b, _ := json.Marshal(map[string]string{"quote": base64.URLEncoding.EncodeToString(q)})
		f.Add(b)
		seeds += 2
	}
	if seeds == 0 {
		f.Fatal("empty seed corpus")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := parseIMDSQuote(data)
		if err == nil && (len(q) == 0 || len(q) > attest.MaxQuoteSize) {
			t.Fatalf("accepted a %d-byte quote", len(q))
		}
	})
}
