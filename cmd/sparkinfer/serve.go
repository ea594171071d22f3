package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sparkinfer/cc/enclave"
	"github.com/sparkinfer/cc/enclave/server"
	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/internal/cli"
)

// bootFlags are the flags serve and attest share.
type bootFlags struct {
	tee, gpuEvidence, model, modelID, device, kernels, license *string
	simGPUs, threads, ctx                                      *int
	anyDigest                                                  *bool
}

func addBootFlags(fs interface {
	String(string, string, string) *string
	Int(string, int, string) *int
	Bool(string, bool, string) *bool
}) *bootFlags {
	return &bootFlags{
		tee:         fs.String("tee", "auto", "TEE: "+strings.Join(enclave.TEEs, ", ")+" (sim: simulated evidence, proves nothing)"),
		gpuEvidence: fs.String("gpu-evidence", "auto", "GPU evidence: "+strings.Join(enclave.GPUEvidenceSources, ", ")+" (auto: sim with --tee sim, else nvml)"),
		simGPUs:     fs.Int("sim-gpus", 1, "number of simulated GPUs with --gpu-evidence sim"),
		model:       fs.String("model", "", "GGUF model file (default: the embedded stories260K)"),
		modelID:     fs.String("model-id", "", "model name in the API (default: the file name without .gguf)"),
		device:      fs.String("device", "cpu", "device: "+strings.Join(engine.Devices, ", ")),
		kernels:     fs.String("kernels", "", "CUDA kernels library (default: beside the binary, or $SPARKINFER_KERNELS)"),
		anyDigest:   fs.Bool("kernels-any-digest-unsafe", false, "load a kernels library whatever its digest (development only)"),
		threads:     fs.Int("threads", 0, "CPU threads (0: all)"),
		ctx:         fs.Int("ctx", 0, fmt.Sprintf("context length in tokens (0: the model's, at most %d)", engine.DefaultContext)),
		license:     fs.String("license-id", "", "license id written into the statement"),
	}
}

func (b *bootFlags) config(logf func(string, ...any)) enclave.Config {
	n := *b.simGPUs
	return enclave.Config{
		TEE: *b.tee, GPUEvidence: *b.gpuEvidence, SimGPUs: n, ModelPath: *b.model, ModelID: *b.modelID,
		Engine: engine.Options{Device: *b.device, Threads: *b.threads, Context: *b.ctx, Kernels: *b.kernels,
			KernelsAnyDigestUnsafe: *b.anyDigest},
		LicenseID: *b.license, Logf: logf,
	}
}

// bootErr turns a boot failure into the CLI's error kinds: a missing TEE is a
// usage error with a hint.
func bootErr(err error) (int, error) {
	var nt *enclave.NoTEEError
	if errors.As(err, &nt) {
		return 2, &cli.UsageError{Err: err, Hint: "on a machine without a TEE, add --tee sim (simulated evidence; only a policy with allow_simulated accepts it)"}
	}
	return 1, err
}

// cmdServe boots the appliance and serves the HTTP API until SIGTERM or
// SIGINT, then drains and wipes the keys.
func cmdServe(args []string, env cli.Env) (int, error) {
	fs := cli.NewFlagSet("sparkinfer", "serve", env)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (port 0: any free port)")
	bf := addBootFlags(fs)
	plaintext := fs.Bool("allow-plaintext-unsafe", false, "also accept plaintext JSON requests (the host sees prompts and answers)")
	concurrency := fs.Int("concurrency", 1, "generations run at once (1 on the CUDA backend)")
	queueDepth := fs.Int("queue", 16, "requests that may wait for a generation slot; beyond, 429")
	maxTokens := fs.Int("max-tokens", server.DefaultLimits.MaxTokens, "largest max_tokens a request may ask for")
	maxBody := fs.Int64("max-body", server.DefaultLimits.MaxBodyBytes, "largest request body in bytes")
	attRate := fs.Float64("attestation-rate", 2, "evidence requests per second (each makes a new TEE quote)")
	attBurst := fs.Int("attestation-burst", 4, "evidence requests allowed in a burst")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, how long running requests may take to finish")
	if err := cli.Parse(fs, args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := enclave.Harden(); err != nil {
		return 1, err
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, nil))
	logf := func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) }
	enc, err := enclave.Boot(bf.config(logf))
	if err != nil {
		return bootErr(err)
	}
	defer enc.Close()
	if enc.Simulated() {
		log.Warn("SIMULATED evidence: it proves nothing; only a policy with allow_simulated accepts it")
	}
	if *plaintext {
		log.Warn("--allow-plaintext-unsafe: plaintext requests are accepted; the host can read them")
	}
	srv, err := server.New(server.Config{
		Enclave: enc, Limits: server.Limits{MaxBodyBytes: *maxBody, MaxTokens: *maxTokens},
		Concurrency: *concurrency, QueueDepth: *queueDepth, AllowPlaintextUnsafe: *plaintext,
		AttestationRate: *attRate, AttestationBurst: *attBurst, Logger: log,
	})
	if err != nil {
		return 2, &cli.UsageError{Err: err}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return 1, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(env.Stderr, "listening on %s\n", ln.Addr())
	if err := srv.Serve(ctx, ln, *drain); err != nil {
		return 1, err
	}
	if err := enc.Close(); err != nil {
		return 1, err
	}
	log.Info("keys wiped; bye")
	return 0, nil
}
