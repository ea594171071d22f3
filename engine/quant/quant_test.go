package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16Conversion(t *testing.T) {
	// Every finite half round-trips exactly.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if got := F32ToF16(f); got != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)=%g) = %#04x", h, f, got)
		}
	}
	known := []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {0.5, 0x3800},
		{float32(math.Ldexp(1, -24)), 0x0001}, {float32(math.Ldexp(1, -25)), 0x0000},
		{float32(math.Ldexp(1.5, -25)), 0x0001}, {float32(math.Ldexp(1, -14)), 0x0400},
		{float32(math.Inf(-1)), 0xfc00}, {1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02},
	}
	for _, k := range known {
		if got := F32ToF16(k.f); got != k.h {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", k.f, got, k.h)
		}
	}
	// Random floats round to the nearest half, ties to even.
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-28)))
		h := F32ToF16(f)
		e := math.Abs(float64(f) - float64(F16ToF32(h)))
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7c00 == 0x7c00 || (nb^h)&0x8000 != 0 {
				continue
			}
			en := math.Abs(float64(f) - float64(F16ToF32(nb)))
			if en < e || (en == e && h&1 == 1) {
				t.Fatalf("F32ToF16(%g) = %#04x (err %g), neighbour %#04x is better (err %g)", f, h, e, nb, en)
			}
		}
	}
	if F16ToF32(0x7e00) == F16ToF32(0x7e00) || F32ToF16(float32(math.NaN()))&0x7c00 != 0x7c00 {
		t.Error("NaN not preserved")
	}
}

func TestBF16Conversion(t *testing.T) {
	for _, k := range []struct {
		f float32
		h uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1 + 1.0/256, 0x3f80}, {1 + 3.0/256, 0x3f82}, {3.0e38, 0x7f62}} {
		if got := F32ToBF16(k.f); got != k.h {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", k.f, got, k.h)
		}
		if got := BF16ToF32(k.h); math.Abs(float64(got-k.f)) > math.Abs(float64(k.f))/128 {
			t.Errorf("BF16ToF32(%#04x) = %g, want about %g", k.h, got, k.f)
		}
	}
}

func TestTypeProperties(t *testing.T) {
	want := map[Type][3]any{
		F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2},
		Q8_0: {"Q8_0", 32, 34}, Q4_K: {"Q4_K", 256, 144}, Q6_K: {"Q6_K", 256, 210},
	}
	for typ, w := range want {
		if typ.String() != w[0] || typ.BlockSize() != w[1] || typ.BlockBytes() != w[2] || !typ.Supported() {
			t.Errorf("%d: got %s %d %d", typ, typ, typ.BlockSize(), typ.BlockBytes())
		}
		if p, err := ParseType(typ.String()); err != nil || p != typ {
			t.Errorf("ParseType(%s) = %v, %v", typ, p, err)
		}
	}
	if Type(2).Supported() || Type(2).String() != "type(2)" {
		t.Error("Q4_0 (2) must be unsupported and print as type(2)")
	}
	var ute *UnsupportedTypeError
	if _, err := RowBytes(Type(2), 32); !errors.As(err, &ute) || ute.Type != 2 {
		t.Errorf("RowBytes(type 2) error = %v", err)
	} else if msg := err.Error(); msg != "unsupported tensor type type(2) (supported: F32, F16, Q8_0, Q4_K, Q6_K, BF16)" {
		t.Errorf("message %q", msg)
	}
	var se *SizeError
	if _, err := RowBytes(Q4_K, 255); !errors.As(err, &se) {
		t.Errorf("RowBytes(Q4_K, 255) error = %v", err)
	}
	if n, _ := RowBytes(Q6_K, 512); n != 420 {
		t.Errorf("RowBytes(Q6_K, 512) = %d", n)
	}
	if err := Dequantize(Q8_0, make([]byte, 33), make([]float32, 32)); !errors.As(err, &se) {
		t.Errorf("short source error = %v", err)
	}
	if _, err := Quantize(Q8_0, make([]float32, 31)); !errors.As(err, &se) {
		t.Errorf("Quantize(31 elements) error = %v", err)
	}
}

func TestDequantQ8_0HandBuilt(t *testing.T) {
	b := make([]byte, 34)
	binary.LittleEndian.PutUint16(b, 0x3800) // d = 0.5
	for i := range 32 {
		b[2+i] = byte(int8(i*8 - 128))
	}
	y := make([]float32, 32)
	if err := Dequantize(Q8_0, b, y); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if want := 0.5 * float32(i*8-128); y[i] != want {
			t.Errorf("y[%d] = %g, want %g", i, y[i], want)
		}
	}
}

// A Q4_K block whose scale bytes were packed by hand from
// sc = 1,2,3,4,17,33,50,63 and m = 5,6,7,8,20,36,49,62.
var handQ4KScales = []byte{0x41, 0x82, 0xc3, 0xc4, 0x45, 0x86, 0xc7, 0xc8, 0x41, 0x41, 0x12, 0xef}
var handSc = [8]uint8{1, 2, 3, 4, 17, 33, 50, 63}
var handM = [8]uint8{5, 6, 7, 8, 20, 36, 49, 62}

func TestDequantQ4KHandBuilt(t *testing.T) {
	packed := make([]byte, 12)
	packScaleMinK4(&handSc, &handM, packed)
	if string(packed) != string(handQ4KScales) {
		t.Fatalf("packScaleMinK4 = %x, want %x", packed, handQ4KScales)
	}
	b := make([]byte, 144)
	binary.LittleEndian.PutUint16(b, 0x3c00)     // d = 1
	binary.LittleEndian.PutUint16(b[2:], 0x3800) // dmin = 0.5
	copy(b[4:], handQ4KScales)
	for i := range 128 {
		b[16+i] = 0xf1 // low nibble 1, high nibble 15
	}
	y := make([]float32, 256)
	if err := Dequantize(Q4_K, b, y); err != nil {
		t.Fatal(err)
	}
	for e := range 256 {
		j := e / 32 // sub-block
		q := float32(1)
		if j%2 == 1 { // odd sub-blocks are the high nibbles
			q = 15
		}
		if want := float32(handSc[j])*q - 0.5*float32(handM[j]); y[e] != want {
			t.Fatalf("y[%d] = %g, want %g", e, y[e], want)
		}
	}
}

func TestDequantQ6KHandBuilt(t *testing.T) {
	b := make([]byte, 210)
	for i := range 128 {
		b[i] = 0x21 // low nibble 1, high nibble 2
	}
	for i := range 64 {
		b[128+i] = 0xe4 // 2-bit fields 0,1,2,3 from the bottom
	}
	for i := range 16 {
		b[192+i] = byte(int8(i - 8))
	}
	binary.LittleEndian.PutUint16(b[208:], 0x3800) // d = 0.5
	y := make([]float32, 256)
	if err := Dequantize(Q6_K, b, y); err != nil {
		t.Fatal(err)
	}
	// Within each half of 128: elements 0-31 take (low nibble 1 | field0 0<<4) = 1,
	// 32-63: 1 | 1<<4 = 17, 64-95: 2 | 2<<4 = 34, 96-127: 2 | 3<<4 = 50; minus 32.
	qv := [4]float32{1 - 32, 17 - 32, 34 - 32, 50 - 32}
	for e := range 256 {
		want := 0.5 * float32(e/16-8) * qv[(e%128)/32]
		if y[e] != want {
			t.Fatalf("y[%d] = %g, want %g", e, y[e], want)
		}
	}
}

func gaussian(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

func TestQuantizeErrorBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	bounds := map[Type]float64{F32: 0, F16: 5e-4, BF16: 4e-3, Q8_0: 0.008, Q4_K: 0.10, Q6_K: 0.025}
	for _, typ := range SupportedTypes {
		for _, std := range []float64{0.02, 1, 300} {
			x := gaussian(r, 256*64, std)
			// Make some blocks awkward: all zero, constant, one outlier, all positive.
			for i := range 256 {
				x[i] = 0
				x[256+i] = float32(std)
				x[768+i] = float32(math.Abs(float64(x[768+i])))
			}
			x[512+7] = float32(40 * std)
			q, err := Quantize(typ, x)
			if err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(x))
			if err := Dequantize(typ, q, y); err != nil {
				t.Fatal(err)
			}
			var se, ss float64
			for i := range x {
				d := float64(x[i] - y[i])
				se += d * d
				ss += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / ss)
			t.Logf("%s std %g: rms error / rms = %.5f", typ, std, rel)
			if !(rel <= bounds[typ]) {
				t.Errorf("%s std %g: rms error / rms = %g > %g", typ, std, rel, bounds[typ])
			}
			for i := range 256 {
				if y[i] != 0 {
					t.Fatalf("%s: zero block dequantized to %g", typ, y[i])
				}
			}
			checkElementBound(t, typ, x, q, y)
		}
	}
}

// checkElementBound checks the per-element bounds documented on Quantize.
func checkElementBound(t *testing.T, typ Type, x []float32, q []byte, y []float32) {
	t.Helper()
	for i := range x {
		err := math.Abs(float64(x[i] - y[i]))
		var bound float64
		switch typ {
		case F32:
			bound = 0
		case F16:
			bound = math.Abs(float64(x[i]))*(1.0/2048) + math.Ldexp(1, -25) // half the subnormal spacing
		case BF16:
			bound = math.Abs(float64(x[i])) * (1.0 / 256)
		case Q8_0:
			bound = 0.57 * float64(F16ToF32(binary.LittleEndian.Uint16(q[34*(i/32):])))
		case Q4_K:
			blk := q[144*(i/256):]
			sc, _ := scaleMinK4(i%256/32, blk[4:16])
			bound = float64(F16ToF32(binary.LittleEndian.Uint16(blk))) * float64(sc)
		case Q6_K:
			blk := q[210*(i/256):]
			bound = math.Abs(float64(F16ToF32(binary.LittleEndian.Uint16(blk[208:]))) * float64(int8(blk[192+i%256/16])))
		}
		if typ == Q4_K || typ == Q6_K {
			bound *= 1.5 // elements clipped at a sub-block's range may exceed one step
		}
		if err > bound*(1+1e-6) {
			t.Fatalf("%s element %d: |%g - %g| = %g > bound %g", typ, i, x[i], y[i], err, bound)
		}
	}
}

func TestDotRowMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, typ := range SupportedTypes {
		bs := typ.BlockSize()
		for _, n := range []int{bs, 2 * bs, 7 * bs, 13 * bs, 4096, 11008, 5632} {
			if n%bs != 0 {
				continue
			}
			w := gaussian(r, n, 0.02)
			x := gaussian(r, n, 1)
			for i := 0; i < n; i += 97 {
				x[i] *= 30 // some large activations
			}
			row, err := Quantize(typ, w)
			if err != nil {
				t.Fatal(err)
			}
			wd := make([]float32, n)
			if err := Dequantize(typ, row, wd); err != nil {
				t.Fatal(err)
			}
			var ref, mag float64
			for i := range wd {
				ref += float64(wd[i]) * float64(x[i])
				mag += math.Abs(float64(wd[i]) * float64(x[i]))
			}
			// Trailing garbage after the row must be ignored.
			got := DotRow(typ, append(row, 0xff, 0xff), x)
			if rel := math.Abs(float64(got)-ref) / mag; !(rel <= 1e-5) {
				t.Errorf("%s n=%d: DotRow = %g, reference %g (|diff|/sum|w*x| = %g)", typ, n, got, ref, rel)
			}
		}
	}
}

func TestDotRowNoAllocation(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := gaussian(r, 4096, 1)
	for _, typ := range SupportedTypes {
		row, _ := Quantize(typ, gaussian(r, 4096, 0.02))
		if a := testing.AllocsPerRun(10, func() { DotRow(typ, row, x) }); a != 0 {
			t.Errorf("%s: DotRow allocates %v times", typ, a)
		}
	}
}

func TestDotRowPanicsOnBadSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("DotRow on a partial block did not panic")
		}
	}()
	DotRow(Q8_0, make([]byte, 34), make([]float32, 31))
}

func BenchmarkDotRow(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const n = 4096
	x := gaussian(r, n, 1)
	for _, typ := range SupportedTypes {
		row, _ := Quantize(typ, gaussian(r, n, 0.02))
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			var s float32
			for b.Loop() {
				s += DotRow(typ, row, x)
			}
			_ = s
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	x := gaussian(r, 4096, 0.02)
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(4 * int64(len(x)))
			for b.Loop() {
				Quantize(typ, x)
			}
		})
	}
}
