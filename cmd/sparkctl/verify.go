package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/internal/cli"
	"github.com/sparkinfer/cc/policy"
)

// loadPolicy reads a policy file, or returns the default policy (which
// enforces everything) when path is empty.
func loadPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return policy.Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.Usagef("read policy: %v", err)
	}
	p, err := policy.Parse(b)
	if err != nil {
		return nil, cli.Usagef("%q: %v", path, err)
	}
	return p, nil
}

// newClient builds a client for url with the policy file at policyPath.
func newClient(url, policyPath string) (*client.Client, error) {
	pol, err := loadPolicy(policyPath)
	if err != nil {
		return nil, err
	}
	c := &client.Client{BaseURL: url, Policy: pol, HTTP: &http.Client{Timeout: 10 * time.Minute}}
	// Check the URL now, as unusable input.
	if _, err := client.ParseBaseURL(url); err != nil {
		return nil, &cli.UsageError{Err: err, Hint: "give the appliance's origin, e.g. http://127.0.0.1:8080"}
	}
	return c, nil
}

// verifyOutput is the --json output of `sparkctl verify`.
type verifyOutput struct {
	URL     string         `json:"url"`
	Verdict policy.Verdict `json:"verdict"`
	Claims  *attest.Claims `json:"claims,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// cmdVerify fetches an appliance's evidence with a fresh nonce, verifies it
// and prints the checklist. Exit 0: verified; 1: rejected or unreachable;
// 2: unusable input.
func cmdVerify(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "verify", env)
	policyPath := fs.String("policy", "", "appraisal policy file (default: the built-in default policy, which enforces everything; see docs/POLICY.md)")
	asJSON := fs.Bool("json", false, "print the verdict and claims as JSON")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := cli.Parse(fs, reorderFlags(args)); err != nil {
		return 2, err
	}
	if fs.NArg() != 1 {
		return 2, &cli.UsageError{Err: fmt.Errorf("want exactly one appliance url, got %d arguments", fs.NArg()), Hint: "sparkctl verify URL [--policy P.json] [--json]"}
	}
	c, err := newClient(fs.Arg(0), *policyPath)
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	att, err := c.Attest(ctx)
	out := verifyOutput{URL: fs.Arg(0)}
	var ve *client.VerificationError
	switch {
	case err == nil:
		out.Verdict, out.Claims = att.Verdict, &att.Claims
	case errors.As(err, &ve):
		out.Verdict, out.Error = ve.Verdict, err.Error()
	default:
		if *asJSON {
			out.Error = err.Error()
			writeJSON(env, out)
			return 1, nil
		}
		return 1, err
	}
	if *asJSON {
		if err := writeJSON(env, out); err != nil {
			return 1, err
		}
	} else {
		printVerdict(env, out.Verdict)
	}
	if err != nil {
		return 1, nil
	}
	return 0, nil
}

func writeJSON(env cli.Env, v any) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// reorderFlags moves positional arguments after the flags, so that
// `sparkctl verify URL --policy P` works as well as `--policy P URL`.
// Flags that take a value are recognised by the flag set's definitions
// being "name value" pairs: every flag of these commands except booleans.
func reorderFlags(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			name := a[1:]
			if len(name) > 0 && name[0] == '-' {
				name = name[1:]
			}
			if !boolFlags[name] && !strings.Contains(name, "=") && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

// boolFlags are the boolean flags of verify, chat and proxy (they take no
// separate value).
var boolFlags = map[string]bool{"json": true, "stream": true, "listen-any-unsafe": true, "h": true, "help": true, "completion": true}
