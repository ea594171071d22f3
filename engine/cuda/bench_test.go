package cuda

// Per-op benchmarks for the lead's GPU runs: each reports achieved
// bandwidth (b.SetBytes: the bytes one call must read) and, for the
// tensor-core ops, TFLOP/s. Calls are enqueued back to back and the device
// is synchronised once at the end, so small ops measure launch throughput
// as much as the kernel: use the large shapes for bandwidth.
//
//	go test -run '^$' -bench . -benchtime 200x ./engine/cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sparkinfer/cc/engine/quant"
)

func benchMatrix(b *testing.B, d *Device, typ quant.Type, rows, cols int) *Matrix {
	b.Helper()
	r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
	data, err := quant.Quantize(typ, randn(r, rows*cols, 0.05))
	if err != nil {
		b.Fatal(err)
	}
	M, err := d.UploadMatrix(typ, data, rows, cols)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(M.Free)
	return M
}

func benchBuf(b *testing.B, d *Device, n int) *Buffer {
	b.Helper()
	buf, err := d.Alloc(4 * n)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, uint64(n)))
	if err := buf.PutFloat32(randn(r, n, 1)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { buf.Free() })
	return buf
}

func benchVariants(b *testing.B, d *Device, f func(b *testing.B)) {
	prev := d.Variant()
	defer d.SetVariant(prev)
	for _, v := range Variants {
		b.Run(fmt.Sprintf("v%d", v), func(b *testing.B) {
			if err := d.SetVariant(v); err != nil {
				b.Fatal(err)
			}
			f(b)
		})
	}
}

// BenchmarkGemv: one decode GEMV (weights read once); 7B and TinyLlama shapes.
func BenchmarkGemv(b *testing.B) {
	d := testDevice(b)
	shapes := []struct{ rows, cols int }{{2048, 2048}, {5632, 2048}, {4096, 4096}, {11008, 4096}, {4096, 11008}}
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.F16} {
		for _, s := range shapes {
			b.Run(fmt.Sprintf("%v/%dx%d", typ, s.rows, s.cols), func(b *testing.B) {
				M := benchMatrix(b, d, typ, s.rows, s.cols)
				X, Y := benchBuf(b, d, s.cols), benchBuf(b, d, s.rows)
				benchVariants(b, d, func(b *testing.B) {
					b.SetBytes(int64(M.DeviceBytes()))
					for i := 0; i < b.N; i++ {
						if err := d.Gemm(M, X, Y, 1, false); err != nil {
							b.Fatal(err)
						}
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkGemvFusedSwiGLU: gate and up in one launch with the norm prologue.
func BenchmarkGemvFusedSwiGLU(b *testing.B) {
	d := testDevice(b)
	for _, s := range []struct{ rows, cols int }{{5632, 2048}, {11008, 4096}} {
		for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K} {
			b.Run(fmt.Sprintf("%v/%dx%d", typ, s.rows, s.cols), func(b *testing.B) {
				G, U := benchMatrix(b, d, typ, s.rows, s.cols), benchMatrix(b, d, typ, s.rows, s.cols)
				X, NW, Y := benchBuf(b, d, s.cols), benchBuf(b, d, s.cols), benchBuf(b, d, s.rows)
				e := &Epilogue{Mode: EpiSwiGLU, Y: Y, LdY: s.rows}
				b.SetBytes(int64(G.DeviceBytes() + U.DeviceBytes()))
				for i := 0; i < b.N; i++ {
					if err := d.GemvFused([]*Matrix{G, U}, X, NW, 1e-5, e); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.Sync(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkGemmPrefill: 512 tokens through one matrix; TFLOP/s.
func BenchmarkGemmPrefill(b *testing.B) {
	d := testDevice(b)
	const n = 512
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.F16} {
		for _, s := range []struct{ rows, cols int }{{2048, 2048}, {4096, 4096}, {11008, 4096}} {
			b.Run(fmt.Sprintf("%v/%dx%d/n%d", typ, s.rows, s.cols, n), func(b *testing.B) {
				M := benchMatrix(b, d, typ, s.rows, s.cols)
				X, Y := benchBuf(b, d, n*s.cols), benchBuf(b, d, n*s.rows)
				benchVariants(b, d, func(b *testing.B) {
					b.SetBytes(int64(M.DeviceBytes()))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := d.Gemm(M, X, Y, n, false); err != nil {
							b.Fatal(err)
						}
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
					sec := b.Elapsed().Seconds()
					b.ReportMetric(2*float64(n)*float64(s.rows)*float64(s.cols)*float64(b.N)/sec/1e12, "TFLOP/s")
				})
			})
		}
	}
}

func benchCache(b *testing.B, d *Device, n int) *Buffer {
	b.Helper()
	buf, err := d.Alloc(2 * n)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, uint64(n)))
	h := make([]uint16, n)
	for i := range h {
		h[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	if err := buf.PutUint16(h); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { buf.Free() })
	return buf
}

// BenchmarkAttentionDecode: one query token at context ctx; bytes = K and V
// rows read once.
func BenchmarkAttentionDecode(b *testing.B) {
	d := testDevice(b)
	for _, s := range []struct {
		name          string
		heads, kv, hd int
	}{{"tinyllama", 32, 4, 64}, {"llama2-7b", 32, 32, 128}} {
		for _, ctx := range []int{128, 4096, 16384, 32768} {
			b.Run(fmt.Sprintf("%s/ctx%d", s.name, ctx), func(b *testing.B) {
				maxCtx := ctx
				K, V := benchCache(b, d, s.kv*maxCtx*s.hd), benchCache(b, d, s.kv*maxCtx*s.hd)
				Q, O := benchBuf(b, d, s.heads*s.hd), benchBuf(b, d, s.heads*s.hd)
				P := benchPos(b, d, ctx-1)
				benchVariants(b, d, func(b *testing.B) {
					b.SetBytes(int64(2 * 2 * s.kv * ctx * s.hd))
					for i := 0; i < b.N; i++ {
						if err := d.AttentionDecode(Q, K, V, O, s.heads, s.kv, s.hd, maxCtx, P); err != nil {
							b.Fatal(err)
						}
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

func benchPos(b *testing.B, d *Device, p int) *Buffer {
	b.Helper()
	buf, err := d.Alloc(4)
	if err != nil {
		b.Fatal(err)
	}
	if err := buf.PutInt32([]int32{int32(p)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { buf.Free() })
	return buf
}

// BenchmarkAttentionPrefill: 512 query tokens after pos0 tokens of context;
// TFLOP/s counts the causal QK and PV products.
func BenchmarkAttentionPrefill(b *testing.B) {
	d := testDevice(b)
	const n = 512
	for _, s := range []struct {
		name          string
		heads, kv, hd int
	}{{"tinyllama", 32, 4, 64}, {"llama2-7b", 32, 32, 128}} {
		for _, pos0 := range []int{0, 4096} {
			b.Run(fmt.Sprintf("%s/pos%d", s.name, pos0), func(b *testing.B) {
				maxCtx := pos0 + n
				K, V := benchCache(b, d, s.kv*maxCtx*s.hd), benchCache(b, d, s.kv*maxCtx*s.hd)
				Q, O := benchBuf(b, d, n*s.heads*s.hd), benchBuf(b, d, n*s.heads*s.hd)
				P := benchPos(b, d, pos0)
				benchVariants(b, d, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						if err := d.Attention(Q, K, V, O, n, s.heads, s.kv, s.hd, maxCtx, P); err != nil {
							b.Fatal(err)
						}
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
					pairs := float64(n)*float64(pos0) + float64(n)*float64(n+1)/2
					flops := 4 * pairs * float64(s.hd) * float64(s.heads)
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
				})
			})
		}
	}
}
