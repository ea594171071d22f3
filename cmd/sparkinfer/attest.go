package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdAttest boots the appliance (TEE, model, keys, GPU evidence) and writes
// one fresh evidence bundle, bound to --nonce when given. The keys of this
// boot are discarded on exit, so the bundle is for checking the evidence
// path (e.g. with `sparkctl evidence verify`), not for encrypting to.
func cmdAttest(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "attest", env)
	bf := addBootFlags(fs)
	nonceHex := fs.String("nonce", "", "client nonce, 16 to 64 bytes of hex (default: none)")
	out := fs.String("out", "", "write the bundle to this file (default: stdout)")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	var nonce []byte
	if *nonceHex != "" {
		n, err := hex.DecodeString(*nonceHex)
		if err != nil {
			return 2, cli.Usagef("--nonce %q is not hex", *nonceHex)
		}
		nonce = n
	}
	if err := enclave.Harden(); err != nil {
		return 1, err
	}
	enc, err := enclave.Boot(bf.config(func(f string, a ...any) { fmt.Fprintf(env.Stderr, "sparkinfer attest: "+f+"\n", a...) }))
	if err != nil {
		return bootErr(err)
	}
	defer enc.Close()
	b, err := enc.Evidence(nonce)
	if err != nil {
		var ne *enclave.NonceError
		if isNonce := asNonce(err, &ne); isNonce {
			return 2, &cli.UsageError{Err: err}
		}
		return 1, err
	}
	data, err := b.Encode()
	if err != nil {
		return 1, err
	}
	data = append(data, '\n')
	if enc.Simulated() {
		fmt.Fprintln(env.Stderr, "sparkinfer attest: SIMULATED evidence: it proves nothing")
	}
	if *out == "" {
		_, err = env.Stdout.Write(data)
		return 0, err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return 1, err
	}
	return 0, nil
}

func asNonce(err error, ne **enclave.NonceError) bool { return errors.As(err, ne) }
