package model

import "math"

// The per-op kernels of the CPU backend. Each is the plain loop that defines
// the op; ops_test.go checks each against a float64 reference.

// rmsNorm sets out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]. out may alias x.
// Shapes: x, w, out [n].
func rmsNorm(out, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
}

// ropeAngles fills cs with (cos, sin) pairs of the rotation angles for
// position pos: angle_i = pos/scale * base^(-2i/dim) / freq[i], i < dim/2.
// freq may be nil. Shape: cs [dim] (cos at 2i, sin at 2i+1).
func ropeAngles(cs []float32, pos int, dim int, base, scale float64, freq []float32) {
	p := float64(pos) / scale
	for i := 0; i < dim/2; i++ {
		theta := p * math.Pow(base, -2*float64(i)/float64(dim))
		if freq != nil {
			theta /= float64(freq[i])
		}
		s, c := math.Sincos(theta)
		cs[2*i], cs[2*i+1] = float32(c), float32(s)
	}
}

// ropeNorm rotates adjacent pairs (x[2i], x[2i+1]) of one head by the
// angles in cs (llama.cpp's "NORM" layout). Only the first len(cs) elements
// of x are rotated. Shape: x [headDim], cs [ropeDim].
func ropeNorm(x, cs []float32) {
	for i := 0; i+1 < len(cs); i += 2 {
		c, s := cs[i], cs[i+1]
		x0, x1 := x[i], x[i+1]
		x[i] = x0*c - x1*s
		x[i+1] = x0*s + x1*c
	}
}

// ropeNeox rotates the pairs (x[i], x[i+d/2]), d = len(cs), of one head
// (the "NEOX" halves layout).
func ropeNeox(x, cs []float32) {
	half := len(cs) / 2
	for i := 0; i < half; i++ {
		c, s := cs[2*i], cs[2*i+1]
		x0, x1 := x[i], x[i+half]
		x[i] = x0*c - x1*s
		x[i+half] = x0*s + x1*c
	}
}

// attendHead computes one query head's causal attention over the first n
// cached positions: out = softmax(q·K_j / sqrt(hd)) · V_j. keys and vals
// hold row j at j*stride (stride = KVHeads*HeadDim, already offset to this
// head's kv group). scores is scratch of at least n. Shapes: q, out [hd].
func attendHead(out, q []float32, keys, vals []float32, stride, n int, scores []float32) {
	hd := len(q)
	scale := float32(1 / math.Sqrt(float64(hd)))
	maxs := float32(math.Inf(-1))
	for j := 0; j < n; j++ {
		k := keys[j*stride : j*stride+hd]
		var s float32
		for i, qv := range q {
			s += qv * k[i]
		}
		s *= scale
		scores[j] = s
		maxs = max(maxs, s)
	}
	var sum float32
	for j := 0; j < n; j++ {
		e := float32(math.Exp(float64(scores[j] - maxs)))
		scores[j] = e
		sum += e
	}
	inv := 1 / sum
	clear(out)
	for j := 0; j < n; j++ {
		w := scores[j] * inv
		v := vals[j*stride : j*stride+hd]
		for i := range out {
			out[i] += w * v[i]
		}
	}
}

// swiglu sets gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
func swiglu(gate, up []float32) {
	for i, g := range gate {
		gate[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}
