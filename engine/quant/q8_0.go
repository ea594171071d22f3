package quant

import (
	"encoding/binary"
	"math"
)

// Q8_0 block: f16 d, then 32 int8 quants; y[i] = d * q[i].

func dequantQ8_0(b []byte, y []float32) {
	d := f16Table[binary.LittleEndian.Uint16(b)]
	q := b[2:34]
	for i := range 32 {
		y[i] = d * float32(int8(q[i]))
	}
}

func quantQ8_0(x []float32, b []byte) {
	var amax float32
	for _, v := range x[:32] {
		amax = max(amax, abs32(v))
	}
	dh := F32ToF16(amax / 127)
	d := F16ToF32(dh)
	binary.LittleEndian.PutUint16(b, dh)
	q := b[2:34]
	if d == 0 || math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
		clear(q)
		return
	}
	id := 1 / d
	for i, v := range x[:32] {
		q[i] = byte(int8(clampRound(v*id, -127, 127)))
	}
}

func dotQ8_0(row []byte, x []float32) float32 {
	var sum float64
	for b := 0; b < len(x)/32; b++ {
		blk := (*[34]byte)(row[34*b:])
		d := f16Table[uint16(blk[0])|uint16(blk[1])<<8]
		xs := (*[32]float32)(x[32*b:])
		var s0, s1, s2, s3 float32
		for i := 0; i < 32; i += 4 {
			s0 += float32(int8(blk[2+i])) * xs[i]
			s1 += float32(int8(blk[3+i])) * xs[i+1]
			s2 += float32(int8(blk[4+i])) * xs[i+2]
			s3 += float32(int8(blk[5+i])) * xs[i+3]
		}
		sum += float64(d * ((s0 + s1) + (s2 + s3)))
	}
	return float32(sum)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// clampRound rounds v to the nearest integer (halves away from zero) and
// clamps it to [lo, hi]; NaN gives 0.
func clampRound(v float32, lo, hi int) int {
	if v != v {
		return 0
	}
	r := math.Round(float64(v))
	if r < float64(lo) {
		return lo
	}
	if r > float64(hi) {
		return hi
	}
	return int(r)
}
