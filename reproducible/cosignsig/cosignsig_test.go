package cosignsig

import (
	"bytes"
	"context"
	"errors"
	"github.com/sparkinfer/cc/internal/fuzzseed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cosignCLI returns the real cosign binary: $COSIGN, else bin/cosign at the
// repository root (scripts/test.sh installs it there), else cosign on PATH.
// Without one the test is skipped, except in CI (CI=true), where it fails.
func cosignCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("COSIGN"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../bin/cosign"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("cosign"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the cosign CLI is required in CI: run scripts/test.sh, which installs it into bin/cosign")
	}
	t.Skip("cosign CLI not found (bin/cosign, $COSIGN or PATH); scripts/test.sh installs it")
	return ""
}

// runCosign runs the cosign CLI offline: a private HOME and TUF cache, and
// SIGSTORE_REKOR_PUBLIC_KEY set so that verify-blob does not fetch the
// public-good trusted root (it is not needed with --insecure-ignore-tlog).
func runCosign(t *testing.T, bin, password string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"TUF_ROOT=" + filepath.Join(home, "tuf"),
		"SIGSTORE_REKOR_PUBLIC_KEY=" + filepath.Join(home, "no-rekor-key.pem"),
		"COSIGN_PASSWORD=" + password,
		"COSIGN_EXPERIMENTAL=0",
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type fixture struct {
	dir                string
	priv, pub          []byte
	password           []byte
	artifact, other    []byte
	artifactF, otherF  string
	privF, pubF        string
	otherPub, otherPrv []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), password: []byte("correct horse battery staple")}
	var err error
	if f.priv, f.pub, err = GenerateKeyPair(f.password); err != nil {
		t.Fatal(err)
	}
	if f.otherPrv, f.otherPub, err = GenerateKeyPair([]byte("other")); err != nil {
		t.Fatal(err)
	}
	// Real artifacts: this package's own source and its test.
	if f.artifact, err = os.ReadFile("cosignsig.go"); err != nil {
		t.Fatal(err)
	}
	if f.other, err = os.ReadFile("cosignsig_test.go"); err != nil {
		t.Fatal(err)
	}
	f.artifactF = filepath.Join(f.dir, "artifact")
	f.otherF = filepath.Join(f.dir, "other")
	f.privF = filepath.Join(f.dir, "cosign.key")
	f.pubF = filepath.Join(f.dir, "cosign.pub")
	for name, b := range map[string][]byte{f.artifactF: f.artifact, f.otherF: f.other, f.privF: f.priv, f.pubF: f.pub} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestSignVerify(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sig, err := Sign(f.priv, f.password, f.artifact)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, f.pub, sig, f.artifact); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	if err := Verify(ctx, f.pub, append(bytes.Clone(sig), '\n'), f.artifact); err != nil {
		t.Errorf("signature with a final newline: %v", err)
	}
	pub, err := PublicKey(f.priv, f.password)
	if err != nil || !bytes.Equal(pub, f.pub) {
		t.Errorf("PublicKey = %q, %v; want the generated public key", pub, err)
	}
	if _, err := Sign(f.priv, []byte("wrong password"), f.artifact); !isKeyError(err) {
		t.Errorf("wrong password: err = %v, want *KeyError", err)
	}
	rejectCases(t, f, sig)
}

func isKeyError(err error) bool { var ke *KeyError; return errors.As(err, &ke) }

// rejectCases checks that sig (a valid signature of f.artifact by f.priv) is
// rejected for a tampered artifact, another key and another file.
func rejectCases(t *testing.T, f *fixture, sig []byte) {
	t.Helper()
	ctx := context.Background()
	tampered := bytes.Clone(f.artifact)
	tampered[len(tampered)/2] ^= 0x20
	otherSig, err := Sign(f.priv, f.password, f.other)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		pub, sig, art []byte
	}{
		{"tampered artifact", f.pub, sig, tampered},
		{"wrong key", f.otherPub, sig, f.artifact},
		{"signature of another file", f.pub, otherSig, f.artifact},
		{"truncated artifact", f.pub, sig, f.artifact[:len(f.artifact)-1]},
	} {
		err := Verify(ctx, c.pub, c.sig, c.art)
		var ve *VerifyError
		if !errors.As(err, &ve) {
			t.Errorf("%s: err = %v, want *VerifyError", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "does not verify") || ve.KeyFingerprint == "" || ve.ArtifactSHA256 == "" {
			t.Errorf("%s: reason %q does not name key and artifact", c.name, err)
		}
	}
	for _, c := range []struct {
		name string
		sig  []byte
	}{
		{"empty", nil},
		{"not base64", []byte("!!not base64!!")},
		{"raw bytes", []byte{0x30, 0x45, 0x02, 0x21, 0x00, 0xff}},
		{"two newlines", append(bytes.Clone(sig), '\n', '\n')},
	} {
		var se *SignatureError
		if err := Verify(ctx, f.pub, c.sig, f.artifact); !errors.As(err, &se) {
			t.Errorf("signature %s: err = %v, want *SignatureError", c.name, err)
		}
	}
	if err := Verify(ctx, []byte("not a key"), sig, f.artifact); !isKeyError(err) {
		t.Errorf("garbage public key: err = %v, want *KeyError", err)
	}
}

// TestCosignCLIVerifiesOurSignatures: the real cosign CLI accepts what Sign
// writes, and rejects it for a tampered artifact, a wrong key and another file.
func TestCosignCLIVerifiesOurSignatures(t *testing.T) {
	bin := cosignCLI(t)
	f := newFixture(t)
	sig, err := Sign(f.priv, f.password, f.artifact)
	if err != nil {
		t.Fatal(err)
	}
	sigF := filepath.Join(f.dir, "artifact.sig")
	if err := os.WriteFile(sigF, sig, 0o600); err != nil {
		t.Fatal(err)
	}
	verify := func(pubF, sigF, artF string) (string, error) {
		return runCosign(t, bin, "", "verify-blob", "--key", pubF, "--signature", sigF, "--insecure-ignore-tlog=true", artF)
	}
	if out, err := verify(f.pubF, sigF, f.artifactF); err != nil || !strings.Contains(out, "Verified OK") {
		t.Fatalf("cosign verify-blob rejected our signature: %v\n%s", err, out)
	}

	tamperedF := filepath.Join(f.dir, "tampered")
	tampered := bytes.Clone(f.artifact)
	tampered[10] ^= 0x01
	os.WriteFile(tamperedF, tampered, 0o600)
	otherPubF := filepath.Join(f.dir, "other.pub")
	os.WriteFile(otherPubF, f.otherPub, 0o600)
	for name, args := range map[string][3]string{
		"tampered artifact":         {f.pubF, sigF, tamperedF},
		"wrong key":                 {otherPubF, sigF, f.artifactF},
		"signature of another file": {f.pubF, sigF, f.otherF},
	} {
		if out, err := verify(args[0], args[1], args[2]); err == nil {
			t.Errorf("cosign verify-blob accepted the %s:\n%s", name, out)
		}
	}

	// A key pair we generated also signs with the cosign CLI (key format).
	cliSigF := filepath.Join(f.dir, "cli.sig")
	if out, err := runCosign(t, bin, string(f.password), "sign-blob", "--key", f.privF, "--output-signature", cliSigF, "--tlog-upload=false", "--yes", f.artifactF); err != nil {
		t.Fatalf("cosign sign-blob with our key: %v\n%s", err, out)
	}
	cliSig, err := os.ReadFile(cliSigF)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(context.Background(), f.pub, cliSig, f.artifact); err != nil {
		t.Errorf("cosign's signature with our key: %v", err)
	}
}

// TestWeVerifyCosignCLISignatures: signatures made by `cosign sign-blob`
// with a key from `cosign generate-key-pair` verify here; the same rejection
// cases are rejected with a reason.
func TestWeVerifyCosignCLISignatures(t *testing.T) {
	bin := cosignCLI(t)
	f := newFixture(t)
	dir := t.TempDir()
	password := "cli password"
	cmd := exec.Command(bin, "generate-key-pair")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "COSIGN_PASSWORD=" + password}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	priv, err := os.ReadFile(filepath.Join(dir, "cosign.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	sigF := filepath.Join(dir, "artifact.sig")
	if out, err := runCosign(t, bin, password, "sign-blob", "--key", filepath.Join(dir, "cosign.key"), "--output-signature", sigF, "--tlog-upload=false", "--yes", f.artifactF); err != nil {
		t.Fatalf("cosign sign-blob: %v\n%s", err, out)
	}
	sig, err := os.ReadFile(sigF)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(context.Background(), pub, sig, f.artifact); err != nil {
		t.Fatalf("cosign CLI signature rejected: %v", err)
	}
	// The CLI's encrypted private key loads here too.
	if got, err := PublicKey(priv, []byte(password)); err != nil || !bytes.Equal(got, pub) {
		t.Errorf("PublicKey(cosign.key) = %q, %v; want cosign.pub", got, err)
	}
	f.priv, f.pub, f.password = priv, pub, []byte(password)
	rejectCases(t, f, sig)
}

func FuzzParseSignature(f *testing.F) {
	fuzzseed.Files(f, "testdata/*.sig")
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, err := ParseSignature(b)
		if err != nil {
			var se *SignatureError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *SignatureError", err)
			}
			return
		}
		if len(raw) == 0 {
			t.Fatal("accepted an empty signature")
		}
	})
}
