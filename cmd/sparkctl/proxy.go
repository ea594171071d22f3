package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/internal/cli"
)

// cmdProxy serves a plain OpenAI-compatible endpoint on a loopback address
// and forwards every request, encrypted, to a verified appliance.
func cmdProxy(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkctl", "proxy", env)
	listen := fs.String("listen", "127.0.0.1:8080", "local address to serve the OpenAI API on (loopback only)")
	upstream := fs.String("upstream", "", "the appliance's origin, e.g. https://appliance:8443; required")
	policyPath := fs.String("policy", "", "appraisal policy file; required")
	anyUnsafe := fs.Bool("listen-any-unsafe", false, "allow a non-loopback listen address: whoever reaches it uses the appliance and sees plaintext")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *upstream == "" || *policyPath == "" {
		return 2, &cli.UsageError{Err: errors.New("--upstream and --policy are required"), Hint: "sparkctl proxy --listen 127.0.0.1:8080 --upstream URL --policy P.json"}
	}
	if err := client.CheckLoopback(*listen); err != nil && !*anyUnsafe {
		return 2, &cli.UsageError{Err: err, Hint: "the proxy serves plaintext; pass --listen-any-unsafe to listen elsewhere anyway"}
	}
	c, err := newClient(*upstream, *policyPath)
	if err != nil {
		return 2, err
	}
	c.HTTP = &http.Client{} // streamed answers may take long: deadlines come from the local request
	p := &client.Proxy{Client: c, ErrorLog: func(format string, args ...any) {
		fmt.Fprintf(env.Stderr, "sparkctl proxy: "+format+"\n", args...)
	}}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return 1, err
	}
	srv := client.NewProxyServer(*listen, p)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Verify once at start so that a misconfiguration shows at once; the
	// proxy still starts (and answers 502) when it fails.
	if att, err := c.Attest(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "sparkctl proxy: %v\n", err)
	} else if att.Simulated() {
		fmt.Fprintln(env.Stderr, "sparkctl proxy: upstream verified (SIMULATED evidence: proves nothing)")
	} else {
		fmt.Fprintln(env.Stderr, "sparkctl proxy: upstream verified")
	}
	fmt.Fprintf(env.Stderr, "listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return 1, err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return 1, err
	}
	return 0, nil
}
