package model

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/sparkinfer/cc/engine/quant"
)

// BenchmarkMemoryBandwidth measures this machine's read bandwidth the way
// decode uses memory: every core streams through its share of a buffer far
// larger than the last-level cache (256 MiB), summing it. MB/s is the
// achieved read bandwidth; docs/PERF.md compares decode against it.
func BenchmarkMemoryBandwidth(b *testing.B) {
	const size = 256 << 20
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("read/threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			sums := make([]uint64, len(buf)/(1<<16)+1)
			b.SetBytes(size)
			for b.Loop() {
				p.For(len(buf), 1<<16, func(lo, hi int) {
					var s0, s1, s2, s3 uint64
					x := buf[lo:hi]
					for i := 0; i+3 < len(x); i += 4 {
						s0 += x[i]
						s1 += x[i+1]
						s2 += x[i+2]
						s3 += x[i+3]
					}
					sums[lo>>16] = s0 + s1 + s2 + s3
				})
			}
		})
	}
}

// BenchmarkMatVec times one decode-shaped product (TinyLlama's FFN up
// projection, 5632x2048) and reports the weight bytes streamed per second.
func BenchmarkMatVec(b *testing.B) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.F16} {
		for _, T := range []int{1, 16} {
			b.Run(fmt.Sprintf("%v/tokens=%d", typ, T), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				rows, cols := 5632, 2048
				q, _ := quant.Quantize(typ, randVec(r, rows*cols, 0.02))
				rb, _ := quant.RowBytes(typ, cols)
				w := Matrix{Type: typ, Rows: rows, Cols: cols, RowBytes: rb, Data: q}
				x := randVec(r, T*cols, 1)
				out := make([]float32, T*rows)
				c := NewCPU(nil, 0)
				defer c.Close()
				b.SetBytes(w.Bytes())
				for b.Loop() {
					c.matMul(&w, x, T, out)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(T), "ns/token")
			})
		}
	}
}
