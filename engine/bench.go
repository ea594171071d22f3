package engine

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sparkinfer/cc/engine/cuda"
	"github.com/sparkinfer/cc/engine/model"
	"github.com/sparkinfer/cc/internal/stats"
)

// BenchConfig says what Bench measures.
type BenchConfig struct {
	Contexts      []int // decode is timed with the KV cache filled to each of these lengths
	Tokens        int   // decode steps timed per run
	Runs          int   // runs per measurement (the median is reported)
	PrefillTokens int   // length of the standalone prefill measurement (0: 512)
}

// BenchPoint is one measurement: tokens per second of each run and their median.
type BenchPoint struct {
	Context   int       `json:"context"` // tokens in the cache before the timed tokens
	Tokens    int       `json:"tokens"`  // tokens timed per run
	Runs      []float64 `json:"runs_tok_s"`
	Median    float64   `json:"median_tok_s"`
	WeightGBs float64   `json:"weight_gb_s,omitempty"` // decode only: weight bytes per token x median tok/s
	// RooflinePct (GPU decode only) is the median as a percentage of the
	// memory-bandwidth roofline: measured copy bandwidth / weight bytes per token.
	RooflinePct float64 `json:"roofline_pct,omitempty"`
}

// GPUInfo describes the GPU a benchmark ran on.
type GPUInfo struct {
	Name              string  `json:"name"`
	ComputeCapability string  `json:"compute_capability"`
	SMs               int     `json:"sms"`
	MaxSMClockMHz     int     `json:"max_sm_clock_mhz"`
	MemClockMHz       int     `json:"mem_clock_mhz"`
	CopyGBs           float64 `json:"copy_gb_s"` // measured device-to-device copy, bytes read + written
	Driver            int     `json:"driver_version"`
	KernelsDigest     string  `json:"kernels_digest"`
	// DecodeStep is how the decode steps ran: "persistent" (one cooperative
	// kernel per token) or "per-op" (one kernel per operation).
	DecodeStep string `json:"decode_step,omitempty"`
}

// BenchResult is the outcome of Bench.
type BenchResult struct {
	Model               string       `json:"model"`
	Arch                string       `json:"arch"`
	Device              string       `json:"device"`
	CPU                 string       `json:"cpu"`
	Cores               int          `json:"cores"`
	WeightBytesPerToken int64        `json:"weight_bytes_per_token"`
	Decode              []BenchPoint `json:"decode"`
	// Prefill holds PrefillTokens from an empty cache (context 0); for each
	// context c, c tokens from an empty cache (context 0, tokens c: the
	// cache fill); and PrefillTokens more after c (context c), where they
	// fit the engine's context.
	Prefill []BenchPoint `json:"prefill"`
	GPU     *GPUInfo     `json:"gpu,omitempty"`
	Date    string       `json:"date"`
}

// Bench measures decode and prefill speed: cfg.Runs prefills of
// cfg.PrefillTokens into an empty cache; then for each context c, cfg.Runs
// prefills of c tokens into an empty cache (which also fill the cache),
// cfg.Runs prefills of cfg.PrefillTokens more tokens after the c cached ones
// (llama-bench's "pp512 @ d4096"; skipped where they do not fit the engine's
// context), and cfg.Runs timings of cfg.Tokens decode steps starting at c
// (truncating back to c between runs). The prompt tokens are a fixed,
// deterministic cycle over the vocabulary; speed does not depend on their
// values.
func (e *Engine) Bench(cfg BenchConfig, progress func(string)) (*BenchResult, error) {
	if cfg.Runs < 1 || cfg.Tokens < 1 || len(cfg.Contexts) == 0 {
		return nil, fmt.Errorf("engine: bench needs at least one context, one token and one run")
	}
	if cfg.PrefillTokens == 0 {
		cfg.PrefillTokens = 512
	}
	for _, c := range append([]int{cfg.PrefillTokens}, cfg.Contexts...) {
		if c < 1 || c+cfg.Tokens > e.Context {
			return nil, fmt.Errorf("engine: bench context %d + %d tokens does not fit the engine's context of %d tokens", c, cfg.Tokens, e.Context)
		}
	}
	if progress == nil {
		progress = func(string) {}
	}
	m := e.Model
	r := &BenchResult{Model: e.Name, Arch: m.Arch, Device: e.Backend.Name(), CPU: cpuModel(), Cores: runtime.NumCPU(),
		WeightBytesPerToken: m.WeightBytesPerToken(), Date: time.Now().UTC().Format(time.RFC3339)}
	if gb, ok := e.Backend.(*cuda.Backend); ok {
		in, err := gb.Device().Info()
		if err != nil {
			return nil, err
		}
		bw, err := gb.Device().CopyBandwidth(1<<30, 20)
		if err != nil {
			return nil, err
		}
		r.GPU = &GPUInfo{Name: in.Name, ComputeCapability: in.ComputeCapability, SMs: in.SMs, MaxSMClockMHz: in.ClockMHz,
			MemClockMHz: in.MemoryClockMHz, CopyGBs: bw / 1e9, Driver: in.DriverVersion, KernelsDigest: gb.KernelsDigest()}
		r.WeightBytesPerToken = gb.WeightBytes()
	}
	toks := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 1 + (i*7919)%(m.Vocab-1)
		}
		return out
	}
	point := func(c, n int, runs []float64) BenchPoint {
		return BenchPoint{Context: c, Tokens: n, Runs: runs, Median: stats.Median(runs)}
	}
	seq, err := e.Backend.NewSequence(e.Context)
	if err != nil {
		return nil, err
	}
	// measure times cfg.Runs runs of work, each after truncating the cache
	// to from and each processing tokens tokens.
	measure := func(label string, from, tokens int, work func() error) (BenchPoint, error) {
		runs := make([]float64, 0, cfg.Runs)
		for i := range cfg.Runs {
			progress(fmt.Sprintf("%s, run %d/%d", label, i+1, cfg.Runs))
			if err := seq.Truncate(from); err != nil {
				return BenchPoint{}, err
			}
			t0 := time.Now()
			if err := work(); err != nil {
				return BenchPoint{}, err
			}
			runs = append(runs, float64(tokens)/time.Since(t0).Seconds())
		}
		return point(from, tokens, runs), nil
	}
	prefill := func(n int) func() error {
		return func() error { _, err := seq.Forward(toks(n), false); return err }
	}
	gs, greedy := seq.(model.GreedySequence)
	decode := func() error {
		for j := range cfg.Tokens {
			tok := 1 + j%(m.Vocab-1)
			var err error
			if greedy {
				// the device picks the token; only its id comes back
				_, err = gs.Greedy(tok)
			} else {
				_, err = seq.Forward([]int{tok}, false)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	// Standalone prefill.
	p, err := measure(fmt.Sprintf("prefill %d tokens", cfg.PrefillTokens), 0, cfg.PrefillTokens, prefill(cfg.PrefillTokens))
	if err != nil {
		return nil, err
	}
	r.Prefill = append(r.Prefill, p)
	for _, c := range cfg.Contexts {
		if p, err = measure(fmt.Sprintf("prefill (cache fill) to %d tokens", c), 0, c, prefill(c)); err != nil {
			return nil, err
		}
		r.Prefill = append(r.Prefill, p)
		if c+cfg.PrefillTokens <= e.Context {
			if p, err = measure(fmt.Sprintf("prefill %d tokens after %d", cfg.PrefillTokens, c), c, cfg.PrefillTokens, prefill(cfg.PrefillTokens)); err != nil {
				return nil, err
			}
			r.Prefill = append(r.Prefill, p)
		}
		if p, err = measure(fmt.Sprintf("decode at %d", c), c, cfg.Tokens, decode); err != nil {
			return nil, err
		}
		p.WeightGBs = p.Median * float64(r.WeightBytesPerToken) / 1e9
		if r.GPU != nil && r.GPU.CopyGBs > 0 {
			p.RooflinePct = 100 * p.WeightGBs / r.GPU.CopyGBs
		}
		r.Decode = append(r.Decode, p)
	}
	if gb, ok := e.Backend.(*cuda.Backend); ok && len(r.Decode) > 0 {
		r.GPU.DecodeStep = "per-op"
		if gb.Persistent() {
			r.GPU.DecodeStep = "persistent"
		}
	}
	return r, nil
}

// cpuModel reads the CPU's model name (Linux); "unknown" elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
