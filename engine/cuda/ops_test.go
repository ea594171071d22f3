package cuda

// Per-op parity: every kernel against a naive float64 Go reference (the
// specification), on awkward shapes, with NaN/Inf checked first and guard
// regions after each output to catch out-of-bounds writes. Needs a GPU and
// the built library (make -C kernels); skipped otherwise, saying why.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/engine/quant"
)

var (
	testDev *Device
	testLib *Library // testDev's library
)

// testDevice opens the library and GPU 0 once, or skips.
func testDevice(t testing.TB) *Device {
	t.Helper()
	if testDev != nil {
		return testDev
	}
	path := os.Getenv("SPARKINFER_KERNELS")
	if path == "" {
		path = filepath.Join("..", "..", "kernels", "build", LibraryName)
	}
	lib, err := Open(path, Options{AllowAnyDigestUnsafe: true})
	var ue *UnavailableError
	if errors.As(err, &ue) {
		t.Skipf("no kernels library (build it with make -C kernels): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := lib.NewDevice(0)
	if errors.As(err, &ue) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	testDev, testLib = d, lib
	return d
}

const guard = 64 // guard elements after every output

// out allocates n floats plus a guard region, all poisoned with NaN bytes.
func out(t *testing.T, d *Device, n int) *Buffer {
	t.Helper()
	b, err := d.Alloc(4 * (n + guard))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Fill(0xFF); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

func in(t *testing.T, d *Device, v []float32) *Buffer {
	t.Helper()
	b, err := d.Alloc(4 * max(len(v), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutFloat32(v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

func ints(t *testing.T, d *Device, v []int32) *Buffer {
	t.Helper()
	b, err := d.Alloc(4 * max(len(v), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutInt32(v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// read downloads n floats and checks the guard region was not written.
func read(t *testing.T, b *Buffer, n int) []float32 {
	t.Helper()
	all := make([]float32, n+guard)
	if err := b.GetFloat32(all); err != nil {
		t.Fatal(err)
	}
	for i := n; i < n+guard; i++ {
		if math.Float32bits(all[i]) != 0xFFFFFFFF {
			t.Fatalf("out-of-bounds write: guard element %d (output length %d) = %v", i-n, n, all[i])
		}
	}
	return all[:n]
}

// compare checks got against want: every element finite first, then the
// relative L2 error against tol. NaN never passes.
func compare(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	var num, den float64
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Fatalf("%s: element %d is %v (want %v)", what, i, g, want[i])
		}
		d := float64(g) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	rel := math.Sqrt(num / math.Max(den, 1e-30))
	if !(rel <= tol) {
		t.Fatalf("%s: relative error %.3g > %.3g", what, rel, tol)
	}
}

func randn(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

func TestGemmAllTypes(t *testing.T) {
	d := testDevice(t)
	r, r300 := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(3, 4))
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_K, quant.Q6_K}
	shapes := []struct{ rows, cols int }{{1, 256}, {3, 512}, {67, 768}, {130, 4352}, {257, 2048}}
	odd := []struct{ rows, cols int }{{5, 250}, {33, 100}, {7, 36}} // float types only: cols not a multiple of 8
	// cols a multiple of 32 but not of 64: the tensor-core GEMM's 32-column k-tiles
	k32 := []struct{ rows, cols int }{{9, 96}}
	withVariants(t, d, func(t *testing.T, variant int) {
		for _, typ := range types {
			sh := shapes
			if !isQuant(typ) {
				sh = append(append([]struct{ rows, cols int }{}, shapes...), odd...)
			}
			if typ == quant.Q8_0 || typ == quant.F16 || typ == quant.BF16 {
				sh = append(append([]struct{ rows, cols int }{}, sh...), k32...)
			}
			for _, s := range sh {
				// n >= 16 reaches v2's tensor-core GEMM (64-token tiles: 77 and 130 leave
				// partial tiles; from 256 tokens 128-token tiles: 300 leaves a partial one,
				// its data from a generator of its own so the other cases keep theirs)
				for _, n := range []int{1, 2, 3, 8, 13, 16, 17, 77, 130, 300} {
					r := r
					if n == 300 {
						r = r300
					}
					t.Run(fmt.Sprintf("%v/%dx%d/n%d", typ, s.rows, s.cols, n), func(t *testing.T) {
						w := randn(r, s.rows*s.cols, 0.05)
						data, err := quant.Quantize(typ, w)
						if err != nil {
							t.Fatal(err)
						}
						deq := make([]float32, len(w))
						if err := quant.Dequantize(typ, data, deq); err != nil {
							t.Fatal(err)
						}
						M, err := d.UploadMatrix(typ, data, s.rows, s.cols)
						if err != nil {
							t.Fatal(err)
						}
						defer M.Free()
						x := randn(r, n*s.cols, 1)
						X := in(t, d, x)
						// what the variant multiplies: exact operands, int8
						// activations (v2 decode GEMV of quantized weights) or
						// f16 operands (v2 tensor-core GEMM)
						model := arithExact
						if variant == VariantV2 {
							if n == 1 {
								model = gemvModel(typ)
							} else {
								model = gemmModel(typ, s.cols)
							}
						}
						for _, acc := range []bool{false, true} {
							Y := out(t, d, n*s.rows)
							y0 := randn(r, n*s.rows, 1)
							if acc {
								if err := Y.PutFloat32(y0); err != nil {
									t.Fatal(err)
								}
							}
							if err := d.Gemm(M, X, Y, n, acc); err != nil {
								t.Fatal(err)
							}
							got := read(t, Y, n*s.rows)
							for _, m := range []arith{model, arithExact} {
								want := make([]float64, n*s.rows)
								for b := 0; b < n; b++ {
									xb := m.acts(x[b*s.cols : (b+1)*s.cols])
									for row := 0; row < s.rows; row++ {
										sum := m.dot(deq[row*s.cols:(row+1)*s.cols], xb)
										if acc {
											sum += float64(y0[b*s.rows+row])
										}
										want[b*s.rows+row] = sum
									}
								}
								tol := m.tol
								if m.name != model.name {
									tol = model.exactTol
								}
								compare(t, fmt.Sprintf("accumulate=%v against %s", acc, m.name), got, want, tol)
							}
						}
					})
				}
			}
		}
	})
}

func TestGetRows(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			rows, cols := 37, 512
			w := randn(r, rows*cols, 0.1)
			data, _ := quant.Quantize(typ, w)
			deq := make([]float32, len(w))
			quant.Dequantize(typ, data, deq)
			M, err := d.UploadMatrix(typ, data, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			defer M.Free()
			ids := []int32{0, 36, 5, 5, 17}
			Y := out(t, d, len(ids)*cols)
			if err := d.GetRows(M, ints(t, d, ids), Y, len(ids)); err != nil {
				t.Fatal(err)
			}
			got := read(t, Y, len(ids)*cols)
			want := make([]float64, len(got))
			for i, id := range ids {
				for c := 0; c < cols; c++ {
					want[i*cols+c] = float64(deq[int(id)*cols+c])
				}
			}
			compare(t, "get_rows", got, want, 1e-7)
		})
	}
}

func TestRMSNorm(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range []struct{ n, rows int }{{8, 1}, {64, 3}, {100, 7}, {2048, 2}, {4096, 5}, {5000, 1}} {
		t.Run(fmt.Sprintf("%dx%d", s.rows, s.n), func(t *testing.T) {
			x := randn(r, s.n*s.rows, 2)
			w := randn(r, s.n, 1)
			Y := out(t, d, s.n*s.rows)
			const eps = 1e-5
			if err := d.RMSNorm(in(t, d, x), in(t, d, w), Y, s.n, s.rows, eps); err != nil {
				t.Fatal(err)
			}
			got := read(t, Y, s.n*s.rows)
			want := make([]float64, len(got))
			for row := 0; row < s.rows; row++ {
				var ss float64
				for i := 0; i < s.n; i++ {
					v := float64(x[row*s.n+i])
					ss += v * v
				}
				sc := 1 / math.Sqrt(ss/float64(s.n)+eps)
				for i := 0; i < s.n; i++ {
					want[row*s.n+i] = float64(x[row*s.n+i]) * sc * float64(w[i])
				}
			}
			compare(t, "rmsnorm", got, want, 1e-6)
		})
	}
}

func TestRope(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		ntok, heads, hd, rd, pos0 int
		neox                      bool
		freq                      bool
		base, scale               float64
	}{
		{1, 8, 8, 8, 0, false, false, 10000, 1},
		{1, 32, 64, 64, 4095, false, false, 10000, 1},
		{5, 4, 128, 128, 17, true, false, 1e6, 1},
		{3, 2, 128, 64, 100, true, false, 10000, 1},
		{2, 3, 64, 64, 31000, false, true, 500000, 0.25},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			n := c.ntok * c.heads * c.hd
			x := randn(r, n, 1)
			X := out(t, d, n)
			if err := X.PutFloat32(x); err != nil {
				t.Fatal(err)
			}
			var freq []float32
			var F *Buffer
			if c.freq {
				freq = make([]float32, c.rd/2)
				for i := range freq {
					freq[i] = float32(1 + r.Float64()*7)
				}
				F = in(t, d, freq)
			}
			if err := d.Rope(X, c.ntok, c.heads, c.hd, c.rd, ints(t, d, []int32{int32(c.pos0)}), float32(c.base), float32(c.scale), c.neox, F); err != nil {
				t.Fatal(err)
			}
			got := read(t, X, n)
			want := make([]float64, n)
			for i := range x {
				want[i] = float64(x[i])
			}
			rc := ropeCase{heads: c.heads, hd: c.hd, rd: c.rd, neox: c.neox, base: c.base, scale: c.scale}
			for tk := 0; tk < c.ntok; tk++ {
				ropeRef(want[tk*c.heads*c.hd:], c.heads, rc, c.pos0+tk, freq)
			}
			compare(t, "rope", got, want, 1e-6)
		})
	}
}

func TestSwiGLU(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 255, 5632, 11008} {
		g, u := randn(r, n, 3), randn(r, n, 1)
		O := out(t, d, n)
		if err := d.SwiGLU(in(t, d, g), in(t, d, u), O, n); err != nil {
			t.Fatal(err)
		}
		got := read(t, O, n)
		want := make([]float64, n)
		for i := range want {
			a := float64(g[i])
			want[i] = a / (1 + math.Exp(-a)) * float64(u[i])
		}
		compare(t, fmt.Sprintf("swiglu n=%d", n), got, want, 1e-6)
	}
}

func TestArgmax(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 512, 32000, 151936} {
		x := randn(r, n, 1)
		want := r.IntN(n)
		x[want] = 100
		if n > 10 {
			// a tie later in the vector: the lowest index wins
			x[n-1] = 100
			if want == n-1 {
				want = n - 1
			}
		}
		O := ints(t, d, []int32{-1})
		if err := d.Argmax(in(t, d, x), n, O); err != nil {
			t.Fatal(err)
		}
		got := make([]int32, 1)
		O.GetInt32(got)
		if int(got[0]) != want {
			t.Fatalf("argmax n=%d: got %d, want %d", n, got[0], want)
		}
	}
}

func TestAttentionDecode(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(13, 14))
	withVariants(t, d, func(t *testing.T, variant int) {
		testAttentionDecode(t, d, r, attentionDecodeCases)
	})
}

// TestAttentionDecodeClusterSettings runs the decode attention cases on
// contexts with the other cluster settings (the test device has the default,
// 2: clusters with the two-level combine of more than 8 splits).
// SPARKINFER_CLUSTERS=0 is a device that cannot place a cluster of the
// attention kernel: the splits of grouped heads are combined through L2 by
// the last block. 1 is the kernel that decode steps at short contexts run:
// one cluster merges up to 8 splits, and more go through L2.
func TestAttentionDecodeClusterSettings(t *testing.T) {
	testDevice(t) // skips without a GPU
	for _, setting := range []string{"0", "1"} {
		t.Run("SPARKINFER_CLUSTERS="+setting, func(t *testing.T) {
			t.Setenv("SPARKINFER_CLUSTERS", setting)
			d, err := testLib.NewDevice(0)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			r := rand.New(rand.NewPCG(13, 14))
			withVariants(t, d, func(t *testing.T, variant int) {
				testAttentionDecode(t, d, r, attentionDecodeCases)
			})
		})
	}
	// any other value is refused, naming the variable, not taken as the default
	t.Run("SPARKINFER_CLUSTERS=3", func(t *testing.T) {
		t.Setenv("SPARKINFER_CLUSTERS", "3")
		d, err := testLib.NewDevice(0)
		if err == nil {
			d.Close()
			t.Fatal("SPARKINFER_CLUSTERS=3: the context was created")
		}
		if !strings.Contains(err.Error(), "SPARKINFER_CLUSTERS=3") {
			t.Fatalf("SPARKINFER_CLUSTERS=3: error %q does not name the setting", err)
		}
	})
}

var attentionDecodeCases = []struct{ heads, kv, hd, maxCtx, pos int }{
	{8, 4, 8, 256, 0}, {8, 4, 8, 256, 255}, {32, 4, 64, 2048, 700},
	{32, 8, 128, 4096, 4095}, {4, 4, 256, 600, 513}, {6, 2, 96, 1000, 300},
	// v2: one split only, chunk boundaries, long context, group of 8, head_dim 40 (not a multiple of 64)
	{32, 4, 64, 20000, 63}, {32, 4, 64, 20000, 64}, {32, 4, 64, 20000, 16999}, {16, 2, 40, 300, 299},
	// more than 8 heads per group: v2 falls back to v1
	{16, 1, 64, 100, 77},
	// head_dim 128 without staging (eight lanes per key): 7B's shape at 4k, a
	// last split with a partial 32-key batch, one split of 38 keys; on an H200
	// the first runs the long-context kernel (its context can exceed
	// att2_short_max), the others the one of one block per SM (ATT_LD8_1SM),
	// the last at 7B's shape with every split of the largest short context
	{32, 32, 128, 4352, 4095}, {8, 8, 128, 700, 650}, {4, 4, 128, 300, 37}, {32, 32, 128, 1024, 1023},
	// head_dim 128 past att2_short_max on an H200 (ATT_RING, the first case
	// above too): six splits, the last with a partial stage whose last warps
	// have no keys; one split of 201 keys (64 kv heads)
	{32, 32, 128, 2000, 1500}, {64, 64, 128, 1200, 200},
	// the ring at 16k tokens of context: 8 splits of 2,016 keys, each ending
	// in a half stage; four kv heads at 3k (on an H200 the one-block-per-SM
	// kernel with 12 splits per kv head)
	{32, 32, 128, 16384, 16000}, {4, 4, 128, 3000, 2999},
	// head_dim 64 on the tensor cores (2..8 heads per kv head): 4 and 2 heads
	// per kv head (stripes left empty), 6 (rows of the A operand past the
	// group), a context of one partial 16-key tile, one past a staging round
	{8, 2, 64, 3000, 2999}, {6, 3, 64, 500, 400}, {24, 4, 64, 300, 16}, {32, 4, 64, 200, 96},
	// TinyLlama's shape at 32k: past the fat splits, where two blocks of 256
	// staged keys fit an SM, splits of 608 keys in pipelined stages of 128
	// (the two buffers taken in turn five times, the last stage partial),
	// as many splits as one wave of clusters holds (56 on an H200)
	{32, 4, 64, 32768, 32767},
}

func testAttentionDecode(t *testing.T, d *Device, r *rand.Rand, cases []struct{ heads, kv, hd, maxCtx, pos int }) {
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			kvn := c.kv * c.maxCtx * c.hd
			k16, v16 := make([]uint16, kvn), make([]uint16, kvn)
			kf, vf := make([]float64, kvn), make([]float64, kvn)
			for i := range k16 {
				k16[i] = quant.F32ToF16(float32(r.NormFloat64()))
				v16[i] = quant.F32ToF16(float32(r.NormFloat64()))
				kf[i], vf[i] = float64(quant.F16ToF32(k16[i])), float64(quant.F16ToF32(v16[i]))
			}
			K, _ := d.Alloc(2 * kvn)
			V, _ := d.Alloc(2 * kvn)
			defer K.Free()
			defer V.Free()
			K.PutUint16(k16)
			V.PutUint16(v16)
			q := randn(r, c.heads*c.hd, 1)
			O := out(t, d, c.heads*c.hd)
			if err := d.AttentionDecode(in(t, d, q), K, V, O, c.heads, c.kv, c.hd, c.maxCtx, ints(t, d, []int32{int32(c.pos)})); err != nil {
				t.Fatal(err)
			}
			got := read(t, O, c.heads*c.hd)
			want := make([]float64, len(got))
			n := c.pos + 1
			for h := 0; h < c.heads; h++ {
				kvh := h / (c.heads / c.kv)
				sc := make([]float64, n)
				mx := math.Inf(-1)
				for p := 0; p < n; p++ {
					var s float64
					for i := 0; i < c.hd; i++ {
						s += float64(q[h*c.hd+i]) * kf[(kvh*c.maxCtx+p)*c.hd+i]
					}
					sc[p] = s / math.Sqrt(float64(c.hd))
					mx = math.Max(mx, sc[p])
				}
				var sum float64
				for p := range sc {
					sc[p] = math.Exp(sc[p] - mx)
					sum += sc[p]
				}
				for p := 0; p < n; p++ {
					for i := 0; i < c.hd; i++ {
						want[h*c.hd+i] += sc[p] / sum * vf[(kvh*c.maxCtx+p)*c.hd+i]
					}
				}
			}
			compare(t, "attention", got, want, 1e-5)
		})
	}
}

func TestKVStore(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(15, 16))
	ntok, kv, hd, maxCtx, pos0 := 3, 4, 64, 50, 47
	k, v := randn(r, ntok*kv*hd, 1), randn(r, ntok*kv*hd, 1)
	n := kv * maxCtx * hd
	K, _ := d.Alloc(2 * n)
	V, _ := d.Alloc(2 * n)
	defer K.Free()
	defer V.Free()
	K.Fill(0)
	V.Fill(0)
	if err := d.KVStore(in(t, d, k), in(t, d, v), K, V, ntok, kv, hd, maxCtx, ints(t, d, []int32{int32(pos0)})); err != nil {
		t.Fatal(err)
	}
	kc, vc := make([]uint16, n), make([]uint16, n)
	K.GetUint16(kc)
	V.GetUint16(vc)
	for tk := 0; tk < ntok; tk++ {
		for h := 0; h < kv; h++ {
			for i := 0; i < hd; i++ {
				o := (h*maxCtx+pos0+tk)*hd + i
				src := (tk*kv+h)*hd + i
				if kc[o] != quant.F32ToF16(k[src]) || vc[o] != quant.F32ToF16(v[src]) {
					t.Fatalf("kv_store t=%d h=%d i=%d: got %04x/%04x want %04x/%04x", tk, h, i, kc[o], vc[o], quant.F32ToF16(k[src]), quant.F32ToF16(v[src]))
				}
			}
		}
	}
	// positions outside the cache are never written
	for h := 0; h < kv; h++ {
		for p := 0; p < pos0; p++ {
			for i := 0; i < hd; i++ {
				if kc[(h*maxCtx+p)*hd+i] != 0 {
					t.Fatalf("kv_store wrote position %d", p)
				}
			}
		}
	}
}
