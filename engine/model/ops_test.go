package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randVec(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// closeTo fails on NaN and on any element off by more than tol*(1+|want|).
func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) || !(math.Abs(g-want[i]) <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v (tol %g)", what, i, g, want[i], tol)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 64, 4096} {
		x, w := randVec(r, n, 3), randVec(r, n, 1)
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		want := make([]float64, n)
		for i := range x {
			want[i] = float64(x[i]) / math.Sqrt(ss/float64(n)+1e-5) * float64(w[i])
		}
		got := make([]float32, n)
		rmsNorm(got, x, w, 1e-5)
		closeTo(t, "rmsnorm", got, want, 1e-5)
		rmsNorm(x, x, w, 1e-5) // in place
		closeTo(t, "rmsnorm in place", x, want, 1e-5)
	}
}

// refRope rotates x (float64) at position pos by the reference formula,
// pairing element a(i) with b(i).
func refRope(x []float32, pos int, dim int, base, scale float64, freq []float32, neox bool) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		out[i] = float64(x[i])
	}
	for i := 0; i < dim/2; i++ {
		th := float64(pos) / scale / math.Pow(base, float64(2*i)/float64(dim))
		if freq != nil {
			th /= float64(freq[i])
		}
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+dim/2
		}
		x0, x1 := float64(x[a]), float64(x[b])
		out[a] = x0*math.Cos(th) - x1*math.Sin(th)
		out[b] = x0*math.Sin(th) + x1*math.Cos(th)
	}
	return out
}

func TestRope(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		hd, dim int
		base    float64
		scale   float64
		freq    bool
	}{{8, 8, 10000, 1, false}, {64, 64, 10000, 1, false}, {128, 128, 1e6, 1, false}, {64, 32, 10000, 4, false}, {64, 64, 500000, 1, true}} {
		var freq []float32
		if c.freq {
			freq = make([]float32, c.dim/2)
			for i := range freq {
				freq[i] = 1 + float32(i%5)
			}
		}
		cs := make([]float32, c.dim)
		for _, pos := range []int{0, 1, 17, 4095} {
			ropeAngles(cs, pos, c.dim, c.base, c.scale, freq)
			for _, neox := range []bool{false, true} {
				x := randVec(r, c.hd, 1)
				want := refRope(x, pos, c.dim, c.base, c.scale, freq, neox)
				if neox {
					ropeNeox(x, cs)
				} else {
					ropeNorm(x, cs)
				}
				closeTo(t, "rope", x, want, 2e-6)
			}
		}
	}
	// The two layouts differ: same input, different output.
	x1, x2 := []float32{1, 2, 3, 4}, []float32{1, 2, 3, 4}
	cs := make([]float32, 4)
	ropeAngles(cs, 3, 4, 10000, 1, nil)
	ropeNorm(x1, cs)
	ropeNeox(x2, cs)
	if x1[1] == x2[1] {
		t.Fatal("NORM and NEOX layouts gave the same result")
	}
}

func TestAttendHead(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ hd, n, stride, off int }{{8, 1, 8, 0}, {8, 5, 32, 16}, {64, 300, 256, 192}, {128, 37, 128, 0}} {
		q := randVec(r, c.hd, 1)
		keys := randVec(r, c.n*c.stride, 1)
		vals := randVec(r, c.n*c.stride, 1)
		// reference
		sc := make([]float64, c.n)
		maxs := math.Inf(-1)
		for j := range c.n {
			var s float64
			for i := range c.hd {
				s += float64(q[i]) * float64(keys[j*c.stride+c.off+i])
			}
			sc[j] = s / math.Sqrt(float64(c.hd))
			maxs = math.Max(maxs, sc[j])
		}
		var sum float64
		for j := range sc {
			sc[j] = math.Exp(sc[j] - maxs)
			sum += sc[j]
		}
		want := make([]float64, c.hd)
		for j := range c.n {
			for i := range c.hd {
				want[i] += sc[j] / sum * float64(vals[j*c.stride+c.off+i])
			}
		}
		got := make([]float32, c.hd)
		attendHead(got, q, keys[c.off:], vals[c.off:], c.stride, c.n, make([]float32, c.n))
		closeTo(t, "attention", got, want, 1e-5)
	}
}

func TestSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g, u := randVec(r, 1000, 4), randVec(r, 1000, 1)
	want := make([]float64, len(g))
	for i := range g {
		x := float64(g[i])
		want[i] = x / (1 + math.Exp(-x)) * float64(u[i])
	}
	swiglu(g, u)
	closeTo(t, "swiglu", g, want, 1e-6)
}

func TestPoolCoversEveryIndexOnce(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	for _, n := range []int{1, 2, 15, 16, 17, 1000, 4097} {
		hits := make([]int32, n)
		p.For(n, 4, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				hits[i]++ // each index belongs to one chunk: no race
			}
		})
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("n=%d index %d visited %d times", n, i, h)
			}
		}
	}
}
