package hfparity

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkinfer/cc/engine/convert"
	"github.com/sparkinfer/cc/engine/gguf"
	"github.com/sparkinfer/cc/engine/model"
	"github.com/sparkinfer/cc/engine/parity"
)

// TestWriteCheckpoints writes the checkpoints and the prompt for the
// transformers run when HFPARITY_OUT names a directory (see
// testdata/README.md); otherwise it only checks that they are
// deterministic.
func TestWriteCheckpoints(t *testing.T) {
	out := os.Getenv("HFPARITY_OUT")
	if out == "" {
		a, b := t.TempDir(), t.TempDir()
		for _, d := range []string{a, b} {
			if err := writeCheckpoint(d, specs[0]); err != nil {
				t.Fatal(err)
			}
		}
		x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
		y, _ := os.ReadFile(filepath.Join(b, "model.safetensors"))
		if !bytes.Equal(x, y) || len(x) == 0 {
			t.Fatal("checkpoint generation is not deterministic")
		}
		return
	}
	for _, s := range specs {
		if err := writeCheckpoint(filepath.Join(out, s.name), s); err != nil {
			t.Fatal(err)
		}
		pb, _ := json.Marshal(map[string]any{"prompt": prompt(s.vocab), "greedy": greedyLen})
		if err := os.WriteFile(filepath.Join(out, s.name, "prompt.json"), pb, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type golden struct {
	Prompt       []int  `json:"prompt"`
	Greedy       []int  `json:"greedy"`
	Transformers string `json:"transformers"`
	Torch        string `json:"torch"`
}

func readGolden(t *testing.T, name string) (golden, []float32) {
	t.Helper()
	var g golden
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", name+".logits.f32"))
	if err != nil {
		t.Fatal(err)
	}
	l := make([]float32, len(raw)/4)
	for i := range l {
		l[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return g, l
}

func TestTransformersParity(t *testing.T) {
	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			g, want := readGolden(t, s.name)
			p := prompt(s.vocab)
			if len(g.Prompt) != len(p) {
				t.Fatalf("golden prompt has %d tokens, want %d", len(g.Prompt), len(p))
			}
			for i := range p {
				if g.Prompt[i] != p[i] {
					t.Fatalf("golden prompt differs at %d: the generator changed; regenerate testdata", i)
				}
			}
			if len(want) != promptLen*s.vocab {
				t.Fatalf("golden logits: %d values, want %d", len(want), promptLen*s.vocab)
			}
			dir := t.TempDir()
			if err := writeCheckpoint(dir, s); err != nil {
				t.Fatal(err)
			}
			ck, err := convert.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			err = ck.Write(&buf, convert.Options{Type: "F32", Name: s.name})
			ck.Close()
			if err != nil {
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
			cpu := model.NewCPU(m, 0)
			defer cpu.Close()
			seq, err := cpu.NewSequence(promptLen + greedyLen)
			if err != nil {
				t.Fatal(err)
			}
			got, err := seq.Forward(p, true)
			if err != nil {
				t.Fatal(err)
			}
			var maxDiff, maxLogit float64
			for i := range want {
				if math.IsNaN(float64(got[i])) {
					t.Fatalf("logit %d is NaN", i)
				}
				maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-float64(want[i])))
				maxLogit = math.Max(maxLogit, math.Abs(float64(want[i])))
			}
			for pos := 0; pos < promptLen; pos++ {
				a := parity.Argmax(got[pos*s.vocab : (pos+1)*s.vocab])
				b := parity.Argmax(want[pos*s.vocab : (pos+1)*s.vocab])
				if a != b {
					t.Errorf("position %d: argmax %d, transformers %d", pos, a, b)
				}
			}
			rel := maxDiff / maxLogit
			t.Logf("%s: max |logit diff| %.3g, max |logit| %.3g, ratio %.3g (transformers %s, torch %s)", s.name, maxDiff, maxLogit, rel, g.Transformers, g.Torch)
			if !(rel <= 1e-4) {
				t.Fatalf("max |logit diff| / max |logit| = %.3g > 1e-4", rel)
			}
			// Greedy continuation from the end of the prompt.
			next := parity.Argmax(got[(promptLen-1)*s.vocab:])
			var gen []int
			for len(gen) < greedyLen {
				gen = append(gen, next)
				l, err := seq.Forward([]int{next}, false)
				if err != nil {
					t.Fatal(err)
				}
				next = parity.Argmax(l)
			}
			for i := range g.Greedy {
				if i >= len(gen) || gen[i] != g.Greedy[i] {
					t.Fatalf("greedy continuation differs at %d: got %v, transformers %v", i, gen, g.Greedy)
				}
			}
			if len(g.Greedy) != greedyLen {
				t.Fatalf("golden greedy has %d tokens, want %d", len(g.Greedy), greedyLen)
			}
		})
	}
}
