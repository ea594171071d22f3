package quant

import (
	"encoding/binary"
	"math"
)

// Q6_K super-block (256 elements, 210 bytes):
//
//	[0:128]   ql      low 4 bits of the quants
//	[128:192] qh      high 2 bits of the quants
//	[192:208] scales  16 int8 sub-block scales (sub-blocks of 16 elements)
//	[208:210] f16 d
//
// The block is two halves of 128 elements; half h uses ql[64h:64h+64],
// qh[32h:32h+32] and scales[8h:8h+8]. Within a half, for l in 0..31:
//
//	element l      = ql[l]    & 0xf | (qh[l]>>0 & 3)<<4, scale index l/16
//	element l+32   = ql[l+32] & 0xf | (qh[l]>>2 & 3)<<4, scale index l/16+2
//	element l+64   = ql[l]    >> 4  | (qh[l]>>4 & 3)<<4, scale index l/16+4
//	element l+96   = ql[l+32] >> 4  | (qh[l]>>6 & 3)<<4, scale index l/16+6
//
// and y = d * scale * (q - 32).

func dequantQ6K(b []byte, y []float32) {
	d := f16Table[binary.LittleEndian.Uint16(b[208:])]
	for h := range 2 {
		ql := b[64*h : 64*h+64]
		qh := b[128+32*h : 128+32*h+32]
		sc := b[192+8*h : 192+8*h+8]
		yy := y[128*h : 128*h+128]
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			yy[l] = d * float32(int8(sc[is])) * float32(q1)
			yy[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			yy[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			yy[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
	}
}

func dotQ6K(row []byte, x []float32) float32 {
	var sum float64
	for b := 0; b < len(x)/256; b++ {
		blk := row[210*b : 210*b+210]
		d := f16Table[binary.LittleEndian.Uint16(blk[208:])]
		var acc float32
		for h := range 2 {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			sc := blk[192+8*h : 192+8*h+8]
			xs := x[256*b+128*h : 256*b+128*h+128]
			for is := range 2 {
				var a1, a2, a3, a4 float32
				for l := 16 * is; l < 16*is+16; l++ {
					a1 += float32(int(ql[l]&0xf|(qh[l]&3)<<4)-32) * xs[l]
					a2 += float32(int(ql[l+32]&0xf|(qh[l]>>2&3)<<4)-32) * xs[l+32]
					a3 += float32(int(ql[l]>>4|(qh[l]>>4&3)<<4)-32) * xs[l+64]
					a4 += float32(int(ql[l+32]>>4|(qh[l]>>6&3)<<4)-32) * xs[l+96]
				}
				acc += float32(int8(sc[is]))*a1 + float32(int8(sc[is+2]))*a2 +
					float32(int8(sc[is+4]))*a3 + float32(int8(sc[is+6]))*a4
			}
		}
		sum += float64(d * acc)
	}
	return float32(sum)
}

// fitScale finds a signed scale s so that x ~ s*q with q in -32..31, trying
// inverse scales around the one that maps the largest-magnitude element to
// -32, refining each by least squares over its assignment and keeping the
// one with the smallest squared error.
func fitScale(x []float32) float32 {
	var vmax, sxx float32
	for _, v := range x {
		if abs32(v) > abs32(vmax) {
			vmax = v
		}
		sxx += v * v
	}
	if vmax == 0 {
		return 0
	}
	best, bestErr := -vmax/32, float32(math.Inf(1))
	for k := -2; k <= 2; k++ {
		iscale := -(32 + 0.4*float32(k)) / vmax
		var sqq, sqx float32
		for _, v := range x {
			q := float32(max(-32, min(31, round32(v*iscale))))
			sqq += q * q
			sqx += q * v
		}
		if sqq == 0 {
			continue
		}
		// With s = sqx/sqq the squared error is sxx - sqx^2/sqq.
		if e := sxx - sqx*sqx/sqq; e < bestErr {
			best, bestErr = sqx/sqq, e
		}
	}
	return best
}

// round32 rounds to the nearest integer, halves away from zero.
func round32(v float32) int32 {
	if v < 0 {
		return int32(v - 0.5)
	}
	return int32(v + 0.5)
}

func quantQ6K(x []float32, b []byte) {
	var scales [16]float32
	var amax float32
	for i := range 16 {
		scales[i] = fitScale(x[16*i : 16*i+16])
		amax = max(amax, abs32(scales[i]))
	}
	dh := F32ToF16(amax / 127)
	d := F16ToF32(dh)
	if !finite(d) {
		dh, d = 0, 0
	}
	binary.LittleEndian.PutUint16(b[208:], dh)
	var q [256]uint8
	for i := range 16 {
		// Of the two roundings of the fitted scale, keep the better one.
		var sc int
		if d > 0 {
			v := float64(scales[i] / d)
			bestErr := float32(math.Inf(1))
			for _, c := range [2]float64{math.Floor(v), math.Ceil(v)} {
				c = max(-127, min(127, c))
				var e float32
				step := d * float32(c)
				var inv float32
				if step != 0 {
					inv = 1 / step
				}
				for _, xv := range x[16*i : 16*i+16] {
					r := xv - step*float32(max(-32, min(31, round32(xv*inv))))
					e += r * r
				}
				if e < bestErr {
					bestErr, sc = e, int(c)
				}
			}
		}
		b[192+i] = byte(int8(sc))
		step := d * float32(sc)
		for l := range 16 {
			v := 32
			if step != 0 {
				v = clampRound(x[16*i+l]/step, -32, 31) + 32
			}
			q[16*i+l] = uint8(v)
		}
	}
	for h := range 2 {
		ql := b[64*h : 64*h+64]
		qh := b[128+32*h : 128+32*h+32]
		qq := q[128*h : 128*h+128]
		for l := range 32 {
			q1, q2, q3, q4 := qq[l], qq[l+32], qq[l+64], qq[l+96]
			ql[l] = q1&0xf | (q3&0xf)<<4
			ql[l+32] = q2&0xf | (q4&0xf)<<4
			qh[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}
