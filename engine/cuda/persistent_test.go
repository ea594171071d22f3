package cuda

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/model"
	"github.com/sparkinfer/cc/engine/parity"
	"github.com/sparkinfer/cc/engine/synth"
)

// TestDecodePersistent runs the same prompt and greedy continuation through
// the persistent decode step (one cooperative kernel per token) and the
// kernel-per-op step, on synthetic models of both attention head sizes the
// persistent kernel is built for and of uniform (Q8_0) and mixed (Q4_K_M:
// Q4_K with Q6_K) weights. The two run the same device functions in the
// same order for every output element, so their logits must be bit-identical
// at every step; the contexts cross several attention splits, and in the
// first case (4 heads per kv head: at least 64 keys per split) position 512,
// past which a context can take more than one cluster of 8 splits: the
// kernel-per-op step switches to its second graph, whose attention combines
// in two levels, as the persistent step does. Every case runs with the FFN's
// f32 and f16 hand-off (SPARKINFER_DOWN_F16=0 and 1): both steps take the
// same one.
func TestDecodePersistent(t *testing.T) {
	d := variant2Device(t)
	cases := []struct {
		typ    string
		shape  synth.Shape
		prompt int // tokens (0: 490)
	}{
		// head_dim 32 (one 64-wide slot), 4 heads per kv head
		{"Q8_0", synth.Shape{Dim: 256, Layers: 3, FFN: 768, Heads: 8, KVHeads: 2, Vocab: 1000, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 128, 2 heads per kv head, mixed Q4_K / Q6_K weights
		{"Q4_K_M", synth.Shape{Dim: 512, Layers: 2, FFN: 1280, Heads: 4, KVHeads: 2, Vocab: 1000, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 128 without GQA: the per-op step's eight-lanes-per-key
		// attention kernel against the persistent step's copy of its loop
		{"Q8_0", synth.Shape{Dim: 256, Layers: 2, FFN: 512, Heads: 2, KVHeads: 2, Vocab: 500, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 128, 8 heads per kv head: the kernel-per-op step stages the
		// keys (one lane per key), so the persistent step must not take the
		// eight-lanes-per-key loop there
		{"Q8_0", synth.Shape{Dim: 1024, Layers: 2, FFN: 1536, Heads: 8, KVHeads: 1, Vocab: 500, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 64 without GQA, odd FFN row count per pair layout
		{"Q4_K_M", synth.Shape{Dim: 256, Layers: 2, FFN: 768, Heads: 4, KVHeads: 4, Vocab: 777, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 64 with 8 and 2 heads per kv head: the tensor-core attention
		// (ATT_MMA), its fragments loaded from shared memory by ldmatrix in the
		// kernel-per-op step and from global memory in the persistent step
		{"Q8_0", synth.Shape{Dim: 512, Layers: 2, FFN: 1024, Heads: 8, KVHeads: 1, Vocab: 500, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		{"Q4_K_M", synth.Shape{Dim: 256, Layers: 2, FFN: 768, Heads: 4, KVHeads: 2, Vocab: 600, Ctx: 1024, RopeBase: 10000, NormEps: 1e-5}, 0},
		// head_dim 128 without GQA at 7B's 32 kv heads, past att2_short_max
		// (1,024 tokens on an H200): the per-op step's ring kernel (ATT_RING)
		// against the persistent step's copy of its arithmetic (rg_keys)
		{"Q8_0", synth.Shape{Dim: 4096, Layers: 1, FFN: 256, Heads: 32, KVHeads: 32, Vocab: 500, Ctx: 1100, RopeBase: 10000, NormEps: 1e-5}, 1030},
	}
	for _, down16 := range []string{"0", "1"} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/dim%d/h%d/kv%d/down_f16=%s", c.typ, c.shape.Dim, c.shape.Heads, c.shape.KVHeads, down16), func(t *testing.T) {
				t.Setenv("SPARKINFER_DOWN_F16", down16)
				m := synthModel(t, c.typ, c.shape, 11)
				np := c.prompt
				if np == 0 {
					np = 490
				}
				prompt := make([]int, np)
				for i := range prompt {
					prompt[i] = (i*37 + 5) % c.shape.Vocab
				}
				const steps = 40
				run := func(persistent bool) ([][]float32, bool) {
					t.Setenv("SPARKINFER_PERSISTENT", map[bool]string{false: "0", true: "1"}[persistent])
					return decodeSteps(t, d, m, prompt, steps, func(_ int, lg []float32) int { return parity.Argmax(lg) })
				}
				ref, usedRef := run(false)
				got, used := run(true)
				if usedRef {
					t.Fatal("SPARKINFER_PERSISTENT=0: the persistent step ran anyway")
				}
				if !used {
					t.Fatal("the persistent step did not run (cooperative launch unavailable?)")
				}
				for i := range ref {
					for j := range ref[i] {
						if v := got[i][j]; math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("step %d logit %d: %v", i, j, v)
						}
						if math.Float32bits(got[i][j]) != math.Float32bits(ref[i][j]) {
							t.Fatalf("step %d logit %d: persistent %v, per-op %v", i, j, got[i][j], ref[i][j])
						}
					}
				}
			})
		}
	}
}

// TestDecodeDownF16 decodes the same tokens (teacher-forced: the f32 run's
// greedy continuation) with the FFN's hand-off in f32 and in f16
// (SPARKINFER_DOWN_F16=1: the gate/up GEMV writes its SwiGLU as f16, the down
// GEMV reads it so). The logits must differ (the f16 path ran) by little:
// relative L2 error at most 1e-2 per step and the same top-1 at 95% of the
// steps at least. Widths: 7B's FFN of 11,008 columns (a second block of 32
// per prologue thread in the down GEMV) and one of 1,536 (two threads per
// block). An unknown setting fails the model's creation.
func TestDecodeDownF16(t *testing.T) {
	d := variant2Device(t)
	cases := []struct {
		typ   string
		shape synth.Shape
	}{
		{"Q8_0", synth.Shape{Dim: 256, Layers: 2, FFN: 11008, Heads: 2, KVHeads: 2, Vocab: 1000, Ctx: 512, RopeBase: 10000, NormEps: 1e-5}},
		{"Q4_K_M", synth.Shape{Dim: 256, Layers: 2, FFN: 11008, Heads: 2, KVHeads: 2, Vocab: 1000, Ctx: 512, RopeBase: 10000, NormEps: 1e-5}},
		{"Q8_0", synth.Shape{Dim: 512, Layers: 2, FFN: 1536, Heads: 8, KVHeads: 2, Vocab: 1000, Ctx: 512, RopeBase: 10000, NormEps: 1e-5}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/ffn%d", c.typ, c.shape.FFN), func(t *testing.T) {
			m := synthModel(t, c.typ, c.shape, 13)
			prompt := make([]int, 100)
			for i := range prompt {
				prompt[i] = (i*53 + 7) % c.shape.Vocab
			}
			const steps = 64
			var toks []int // the f32 run's continuation, fed to both
			run := func(down16 string) [][]float32 {
				t.Setenv("SPARKINFER_DOWN_F16", down16)
				out, _ := decodeSteps(t, d, m, prompt, steps, func(i int, lg []float32) int {
					if down16 == "0" {
						toks = append(toks, parity.Argmax(lg))
					}
					return toks[i]
				})
				return out
			}
			ref, got := run("0"), run("1")
			differ, agree := false, 0
			for i := range ref {
				var num, den float64
				for j, r := range ref[i] {
					g := got[i][j]
					if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
						t.Fatalf("step %d logit %d: %v", i, j, g)
					}
					if math.Float32bits(g) != math.Float32bits(r) {
						differ = true
					}
					num += (float64(g) - float64(r)) * (float64(g) - float64(r))
					den += float64(r) * float64(r)
				}
				if rel := math.Sqrt(num / max(den, 1e-30)); rel > 1e-2 {
					t.Fatalf("step %d: logits' relative L2 error %.3g > 1e-2", i, rel)
				}
				if parity.Argmax(got[i]) == parity.Argmax(ref[i]) {
					agree++
				}
			}
			if !differ {
				t.Fatal("SPARKINFER_DOWN_F16=1 gave the f32 hand-off's logits bit for bit: the f16 path did not run")
			}
			if agree*100 < 95*steps {
				t.Fatalf("top-1 agreement %d of %d steps", agree, steps)
			}
		})
	}
	t.Run("bad setting", func(t *testing.T) {
		m := synthModel(t, "Q8_0", cases[2].shape, 13)
		t.Setenv("SPARKINFER_DOWN_F16", "yes")
		b, err := NewBackend(d, m, 0)
		if err == nil {
			b.Close()
			t.Fatal("SPARKINFER_DOWN_F16=yes: the model was created")
		}
		if !strings.Contains(err.Error(), "SPARKINFER_DOWN_F16") {
			t.Fatalf("error %q does not name the variable", err)
		}
	})
}

// synthModel is a synthetic llama model of the shape and weight type.
func synthModel(t *testing.T, typ string, shape synth.Shape, seed uint64) *model.Model {
	t.Helper()
	var buf bytes.Buffer
	if err := synth.Write(&buf, synth.Options{Arch: "llama", Shape: shape, Type: typ, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// decodeSteps runs the prompt through a new backend for m, then steps
// tokens, step i's token chosen by next from the logits before it; it
// returns each step's logits and whether the persistent step ran.
func decodeSteps(t *testing.T, d *Device, m *model.Model, prompt []int, steps int, next func(i int, lg []float32) int) ([][]float32, bool) {
	t.Helper()
	b, err := NewBackend(d, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seq, err := b.NewSequence(0)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := seq.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for i := 0; i < steps; i++ {
		if lg, err = seq.Forward([]int{next(i, lg)}, false); err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), lg...))
	}
	return out, b.Persistent()
}

// variant2Device is the test device set to kernel variant 2 until the test
// ends.
func variant2Device(t *testing.T) *Device {
	d := testDevice(t)
	prev := d.Variant()
	t.Cleanup(func() { d.SetVariant(prev) })
	if err := d.SetVariant(2); err != nil {
		t.Fatal(err)
	}
	return d
}
