package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/reproducible/cosignsig"
)

// password reads COSIGN_PASSWORD, as the cosign CLI does. It must be set
// (to the empty string for an unencrypted-password key): sparkctl does not
// prompt.
func password() ([]byte, error) {
	p, ok := os.LookupEnv("COSIGN_PASSWORD")
	if !ok {
		return nil, &cli.UsageError{Err: errors.New("COSIGN_PASSWORD is not set"), Hint: "export COSIGN_PASSWORD (it may be empty, as with cosign)"}
	}
	return []byte(p), nil
}

// cmdKeygen writes a cosign-compatible key pair.
func cmdKeygen(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "keygen", env)
	prefix := fs.String("out", "cosign", "write PREFIX.key (encrypted private key) and PREFIX.pub")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	pw, err := password()
	if err != nil {
		return 2, err
	}
	priv, pub, err := cosignsig.GenerateKeyPair(pw)
	if err != nil {
		return 1, err
	}
	// O_EXCL: never overwrite a key.
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{*prefix + ".key", priv, 0o600}, {*prefix + ".pub", pub, 0o644}} {
		fh, err := os.OpenFile(f.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.perm)
		if err != nil {
			return 2, err
		}
		_, err = fh.Write(f.data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 1, err
		}
	}
	fp, _ := cosignsig.Fingerprint(pub)
	fmt.Fprintf(env.Stdout, "wrote %s.key and %s.pub (key sha256:%s)\n", *prefix, *prefix, fp)
	return 0, nil
}

// cmdSign writes FILE.sig, a cosign blob signature.
func cmdSign(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "sign", env)
	key := fs.String("key", "", "cosign encrypted private key (required; password in COSIGN_PASSWORD)")
	out := fs.String("output-signature", "", "signature file (default FILE.sig)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if *key == "" || fs.NArg() != 1 {
		return 2, cli.Usagef("usage: sparkctl sign --key KEY FILE")
	}
	file := fs.Arg(0)
	if *out == "" {
		*out = file + ".sig"
	}
	pw, err := password()
	if err != nil {
		return 2, err
	}
	priv, err := os.ReadFile(*key)
	if err != nil {
		return 2, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 2, err
	}
	sig, err := cosignsig.Sign(priv, pw, data)
	var ke *cosignsig.KeyError
	if errors.As(err, &ke) {
		return 2, err
	}
	if err != nil {
		return 1, err
	}
	if err := os.WriteFile(*out, sig, 0o644); err != nil {
		return 1, err
	}
	fmt.Fprintf(env.Stdout, "wrote %s\n", *out)
	return 0, nil
}

// cmdVerifyArtifact checks a cosign blob signature with a public key.
func cmdVerifyArtifact(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "verify-artifact", env)
	key := fs.String("key", "", "cosign public key, PEM (required)")
	sigPath := fs.String("signature", "", "signature file (default FILE.sig)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if *key == "" || fs.NArg() != 1 {
		return 2, cli.Usagef("usage: sparkctl verify-artifact --key KEY.pub [--signature FILE.sig] FILE")
	}
	file := fs.Arg(0)
	if *sigPath == "" {
		*sigPath = file + ".sig"
	}
	pub, err := os.ReadFile(*key)
	if err != nil {
		return 2, err
	}
	sig, err := os.ReadFile(*sigPath)
	if err != nil {
		return 2, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 2, err
	}
	err = cosignsig.Verify(context.Background(), pub, sig, data)
	var ve *cosignsig.VerifyError
	switch {
	case errors.As(err, &ve):
		return 1, fmt.Errorf("%s: %w", file, err)
	case err != nil:
		return 2, err
	}
	fp, _ := cosignsig.Fingerprint(pub)
	fmt.Fprintf(env.Stdout, "verified %s: signed by key sha256:%s\n", file, fp)
	return 0, nil
}
