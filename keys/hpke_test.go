package keys

import (
	"bytes"
	"crypto/hpke"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/keys/internal/protovec"
)

func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

// docVectors returns the test vectors of docs/PROTOCOL.md (checked
// against the code by keys/ohttp's TestProtocolVectors).
func docVectors(t testing.TB) map[string][]byte {
	t.Helper()
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	v, err := protovec.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) == 0 {
		t.Fatal("no test vectors in docs/PROTOCOL.md")
	}
	return v
}

func TestKEMIDs(t *testing.T) {
	if id := hpke.MLKEM768X25519().ID(); id != 0x647a {
		t.Errorf("crypto/hpke X-Wing id 0x%04x", id)
	}
	s := DefaultSuite
	kem, kdf, aead, err := s.HPKE()
	if err != nil {
		t.Fatal(err)
	}
	if kem.ID() != s.KEM || kdf.ID() != s.KDF || aead.ID() != s.AEAD {
		t.Errorf("HPKE() ids %04x %04x %04x", kem.ID(), kdf.ID(), aead.ID())
	}
	for _, s := range []Suite{SuiteX25519AES128GCM, SuiteX25519ChaCha20Poly1305} {
		kem, _, aead, err := s.HPKE()
		if err != nil || kem.ID() != s.KEM || aead.ID() != s.AEAD {
			t.Errorf("%v: %v", s, err)
		}
	}
	if got := DefaultSuite.String(); got != "MLKEM768-X25519/HKDF-SHA256/ChaCha20-Poly1305" {
		t.Errorf("String() = %q", got)
	}
	var ue *UnsupportedError
	for _, s := range []Suite{{KEM: 0x0010, KDF: 1, AEAD: 1}, {KEM: 0x20, KDF: 2, AEAD: 1}, {KEM: 0x20, KDF: 1, AEAD: 0xffff}} {
		if _, _, _, err := s.HPKE(); !errors.As(err, &ue) {
			t.Errorf("%v: %v", s, err)
		}
	}
}

func TestKeySetMatchesVectors(t *testing.T) {
	v := docVectors(t)
	ks, err := GenerateKeySet(bytes.NewReader(append(bytes.Clone(v["xwing/private-key"]), v["x25519/private-key"]...)))
	if err != nil {
		t.Fatal(err)
	}
	list, err := ks.MarshalConfigs()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(list, v["keyset/ohttp-keys"]) {
		t.Errorf("key set encodes to %x, docs say %x", list, v["keyset/ohttp-keys"])
	}
	cfgs, err := ParseKeyConfigs(list)
	if err != nil || len(cfgs) != 2 {
		t.Fatalf("%v %v", cfgs, err)
	}
	for i, name := range []string{"xwing", "x25519"} {
		c, err := ParseKeyConfig(v[name+"/key-config"])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := c.MarshalBinary()
		if !bytes.Equal(b, v[name+"/key-config"]) {
			t.Errorf("%s: not canonical", name)
		}
		if c.KeyID != cfgs[i].KeyID || !bytes.Equal(c.PublicKey, cfgs[i].PublicKey) {
			t.Errorf("%s: list and single config differ", name)
		}
	}
	xw, _ := ks.Lookup(DefaultKeyIDMLKEM768X25519)
	if !xw.Config().Supports(DefaultSuite) || xw.Config().Supports(SuiteX25519AES128GCM) {
		t.Error("X-Wing key offers the wrong suites")
	}
	x, _ := ks.Lookup(DefaultKeyIDX25519)
	if got := x.Config().Suites(); len(got) != 2 || got[0] != SuiteX25519AES128GCM || got[1] != SuiteX25519ChaCha20Poly1305 {
		t.Errorf("X25519 suites %v", got)
	}
	if _, ok := ks.Lookup(7); ok {
		t.Error("lookup of an unknown key id succeeded")
	}
}

func TestKeyPairLifecycle(t *testing.T) {
	kp, err := GenerateKeyPair(nil, 5, KEMMLKEM768X25519, SymmetricAlgorithm{KDF: KDFHKDFSHA256, AEAD: AEADChaCha20Poly1305})
	if err != nil {
		t.Fatal(err)
	}
	pk, err := kp.Config().HPKEPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	enc, snd, err := hpke.NewSender(pk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), []byte("info"))
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := snd.Seal(nil, []byte("secret"))
	r, err := kp.NewRecipient(enc, DefaultSuite, []byte("info"))
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := r.Open(nil, ct); err != nil || string(pt) != "secret" {
		t.Fatalf("%q %v", pt, err)
	}
	var se *SuiteError
	if _, err := kp.NewRecipient(enc, SuiteX25519AES128GCM, nil); !errors.As(err, &se) {
		t.Errorf("suite not offered: %v", err)
	}
	// Close wipes the seed crypto/hpke keeps and makes the pair unusable.
	seed, _ := kp.priv.Bytes()
	if err := kp.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seed, make([]byte, 32)) {
		t.Error("the hybrid private key's seed was not zeroed")
	}
	if _, err := kp.NewRecipient(enc, DefaultSuite, []byte("info")); !errors.Is(err, ErrKeyClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := kp.Close(); err != nil {
		t.Error("second Close failed")
	}
	// The public configuration stays readable.
	if len(kp.Config().PublicKey) != 1216 {
		t.Error("config lost after Close")
	}
}

func TestGenerateKeyPairRejects(t *testing.T) {
	alg := SymmetricAlgorithm{KDF: KDFHKDFSHA256, AEAD: AEADAES128GCM}
	if _, err := GenerateKeyPair(bytes.NewReader(seq(0, 31)), 1, KEMX25519HKDFSHA256, alg); err == nil {
		t.Error("short randomness accepted")
	}
	var ue *UnsupportedError
	if _, err := GenerateKeyPair(nil, 1, 0x0011, alg); !errors.As(err, &ue) {
		t.Errorf("unknown KEM: %v", err)
	}
	if _, err := GenerateKeyPair(nil, 1, KEMX25519HKDFSHA256); err == nil {
		t.Error("no algorithms accepted")
	}
	if _, err := GenerateKeyPair(nil, 1, KEMX25519HKDFSHA256, alg, alg); err == nil {
		t.Error("duplicate algorithms accepted")
	}
	a, _ := GenerateKeyPair(nil, 1, KEMX25519HKDFSHA256, alg)
	b, _ := GenerateKeyPair(nil, 1, KEMX25519HKDFSHA256, alg)
	if _, err := NewKeySet(a, b); err == nil {
		t.Error("duplicate key ids accepted")
	}
	if _, err := NewKeySet(); err == nil {
		t.Error("empty key set accepted")
	}
	if _, err := NewKeySet(a, nil); err == nil {
		t.Error("nil key pair accepted")
	}
}

func TestParseKeyConfigRejects(t *testing.T) {
	v := docVectors(t)
	good := v["x25519/key-config"]
	xgood := v["xwing/key-config"]
	mod := func(b []byte, f func([]byte) []byte) []byte { return f(bytes.Clone(b)) }
	badMLKEM := mod(xgood, func(b []byte) []byte {
		// ML-KEM coefficients are 12-bit values below q = 3329; 0xfff is not.
		b[3], b[4] = 0xff, 0xff
		return b
	})
	cases := []struct {
		name, want string
		b          []byte
		unsup      bool
	}{
		{"empty", "shorter than", nil, false},
		{"unknown kem", "kem id 0x0010", []byte{1, 0, 0x10, 0, 0}, true},
		{"p256 kem", "kem id 0x0010", mod(good, func(b []byte) []byte { b[2] = 0x10; return b }), true},
		{"short public key", "needs a 32-byte public key", good[:20], false},
		{"zero algorithms", "symmetric algorithms length 0", append(bytes.Clone(good[:35]), 0, 0), false},
		{"algorithms not multiple of 4", "multiple of 4", append(bytes.Clone(good[:35]), 0, 6, 0, 1, 0, 1, 0, 1), false},
		{"too many algorithms", "multiple of 4 from 4 to 64", append(bytes.Clone(good[:35]), 0, 68), false},
		{"algorithms truncated", "bytes left", good[:len(good)-1], false},
		{"trailing byte", "bytes left", append(bytes.Clone(good), 0), false},
		{"duplicate algorithm", "duplicate symmetric algorithm", append(bytes.Clone(good[:35]), 0, 8, 0, 1, 0, 1, 0, 1, 0, 1), false},
		{"unknown aead", "aead id 0x0002", append(bytes.Clone(good[:35]), 0, 4, 0, 1, 0, 2), true},
		{"export-only aead", "aead id 0xffff", append(bytes.Clone(good[:35]), 0, 4, 0, 1, 0xff, 0xff), true},
		{"unknown kdf", "kdf id 0x0003", append(bytes.Clone(good[:35]), 0, 4, 0, 3, 0, 1), true},
		{"invalid ml-kem key", "invalid public key", badMLKEM, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeyConfig(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			var pe *ParseError
			var ue *UnsupportedError
			if tc.unsup && !errors.As(err, &ue) || !tc.unsup && !errors.As(err, &pe) {
				t.Errorf("error type %T", err)
			}
		})
	}
}

func TestParseKeyConfigsRejects(t *testing.T) {
	v := docVectors(t)
	one := v["x25519/key-config"]
	entry := binary.BigEndian.AppendUint16(nil, uint16(len(one)))
	entry = append(entry, one...)
	var many []byte
	for i := range MaxKeyConfigs + 1 {
		e := bytes.Clone(entry)
		e[2] = byte(10 + i) // distinct key ids
		many = append(many, e...)
	}
	altered := bytes.Clone(entry)
	altered[2] = 3 // key id 3
	cases := []struct {
		name, want string
		b          []byte
	}{
		{"empty", "empty", nil},
		{"truncated length", "truncated length", []byte{0}},
		{"length overrun", "bytes left", entry[:len(entry)-1]},
		{"duplicate key id", "duplicate key id 2", append(bytes.Clone(entry), entry...)},
		{"too many", "more than 16 key configs", many},
		{"oversize", "cap", make([]byte, MaxKeyConfigsSize+1)},
		{"bad inner config at its offset", "offset 52", append(bytes.Clone(altered), append(binary.BigEndian.AppendUint16(nil, 3), 2, 0, 0x20)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeyConfigs(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := MarshalKeyConfigs(nil); err == nil {
		t.Error("empty list marshalled")
	}
	c, _ := ParseKeyConfig(one)
	if _, err := MarshalKeyConfigs([]KeyConfig{c, c}); err == nil {
		t.Error("duplicate key ids marshalled")
	}
	if b, err := MarshalKeyConfigs([]KeyConfig{c}); err != nil || !bytes.Equal(b, entry) {
		t.Errorf("%x %v", b, err)
	}
}

// FuzzParseKeyConfig checks that the key configuration parsers never panic,
// return typed errors, and accept only canonical encodings.
func FuzzParseKeyConfig(f *testing.F) {
	v := docVectors(f)
	n := 0
	for _, name := range []string{"xwing/key-config", "x25519/key-config", "keyset/ohttp-keys"} {
		if b, ok := v[name]; ok {
			f.Add(b)
			n++
		}
	}
	if n != 3 {
		f.Fatalf("only %d of 3 key config seeds found in docs/PROTOCOL.md", n)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var pe *ParseError
		var ue *UnsupportedError
		c, err := ParseKeyConfig(b)
		if err != nil {
			if !errors.As(err, &pe) && !errors.As(err, &ue) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		} else {
			out, err := c.MarshalBinary()
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("accepted non-canonical config %x (re-encodes to %x, %v)", b, out, err)
			}
		}
		cs, err := ParseKeyConfigs(b)
		if err != nil {
			if !errors.As(err, &pe) && !errors.As(err, &ue) {
				t.Fatalf("untyped list error %T: %v", err, err)
			}
			return
		}
		out, err := MarshalKeyConfigs(cs)
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("accepted non-canonical list %x", b)
		}
	})
}
