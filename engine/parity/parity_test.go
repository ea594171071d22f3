package parity

import (
	"math"
	"testing"

	"github.com/sparkinfer/cc/engine/embedded"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/model"
)

func TestKL(t *testing.T) {
	p := []float32{1, 2, 3}
	if kl := KL(p, p); kl != 0 {
		t.Fatalf("KL(p||p) = %v, want 0", kl)
	}
	// KL of two-point distributions, computed by hand.
	a, b := []float32{0, 0}, []float32{0, float32(math.Log(3))} // (1/2,1/2) vs (1/4,3/4)
	want := 0.5*math.Log(0.5/0.25) + 0.5*math.Log(0.5/0.75)
	if got := KL(a, b); math.Abs(got-want) > 1e-7 {
		t.Fatalf("KL = %v, want %v", got, want)
	}
	if Argmax([]float32{1, 5, 5, 2}) != 1 {
		t.Fatal("argmax must pick the lowest index on ties")
	}
}

func TestSeededPromptDeterministic(t *testing.T) {
	a, b := SeededPrompt(7, 64, 512, 1), SeededPrompt(7, 64, 512, 1)
	for i := range a {
		if a[i] != b[i] || a[i] < 0 || a[i] >= 512 {
			t.Fatalf("prompt differs or out of range at %d: %d %d", i, a[i], b[i])
		}
	}
	if a[0] != 1 {
		t.Fatal("bos not first")
	}
	if c := SeededPrompt(8, 64, 512, 1); equal(a, c) {
		t.Fatal("different seeds gave the same prompt")
	}
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The CPU backend against itself with different thread counts: identical
// argmax everywhere and KL ~ 0. This checks the harness on real weights.
func TestCompareCPUWithItself(t *testing.T) {
	f, err := gguf.Parse(embedded.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	a, b := model.NewCPU(m, 1), model.NewCPU(m, 2)
	defer a.Close()
	defer b.Close()
	res, err := Compare(a, b, SeededPrompt(1, 48, m.Vocab, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Top1Agree != 1 || res.MeanKL > 1e-9 || res.Positions != 48 {
		t.Fatalf("cpu vs cpu: %+v", res)
	}
}
