package quant

import (
	"encoding/binary"
	"math"
)

// Q4_K super-block (256 elements, 144 bytes):
//
//	[0:2]    f16 d     scale of the 6-bit sub-block scales
//	[2:4]    f16 dmin  scale of the 6-bit sub-block mins
//	[4:16]   scales    8 scales sc[j] and 8 mins m[j], 6 bits each (see scaleMinK4)
//	[16:144] qs        4-bit quants: for chunk c in 0..3, qs[32c+l] holds element
//	                   64c+l in its low nibble and element 64c+32+l in its high nibble
//
// Sub-block j (32 elements) dequantizes as y = d*sc[j]*q - dmin*m[j].

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j from the 12 bytes s:
// j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: the low 4 bits are in the
// nibbles of s[j+4] and the high 2 bits in the top bits of s[j-4] (scale) and
// s[j] (min).
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

func packScaleMinK4(sc, m *[8]uint8, s []byte) {
	clear(s[:12])
	for j := range 8 {
		if j < 4 {
			s[j] = sc[j] & 63
			s[j+4] = m[j] & 63
		} else {
			s[j+4] = sc[j]&0xf | (m[j]&0xf)<<4
			s[j-4] |= (sc[j] >> 4) << 6
			s[j] |= (m[j] >> 4) << 6
		}
	}
}

func dequantQ4K(b []byte, y []float32) {
	d := f16Table[binary.LittleEndian.Uint16(b)]
	dmin := f16Table[binary.LittleEndian.Uint16(b[2:])]
	s := b[4:16]
	qs := b[16:144]
	for c := range 4 {
		sc1, m1 := scaleMinK4(2*c, s)
		sc2, m2 := scaleMinK4(2*c+1, s)
		d1, o1 := d*float32(sc1), dmin*float32(m1)
		d2, o2 := d*float32(sc2), dmin*float32(m2)
		q := qs[32*c : 32*c+32]
		for l := range 32 {
			y[64*c+l] = d1*float32(q[l]&0xf) - o1
			y[64*c+32+l] = d2*float32(q[l]>>4) - o2
		}
	}
}

func dotQ4K(row []byte, x []float32) float32 {
	var sum float64
	for b := 0; b < len(x)/256; b++ {
		blk := (*[144]byte)(row[144*b:])
		d := f16Table[uint16(blk[0])|uint16(blk[1])<<8]
		dmin := f16Table[uint16(blk[2])|uint16(blk[3])<<8]
		s := blk[4:16]
		xs := (*[256]float32)(x[256*b:])
		var acc float32
		for c := range 4 {
			sc1, m1 := scaleMinK4(2*c, s)
			sc2, m2 := scaleMinK4(2*c+1, s)
			q := (*[32]byte)(blk[16+32*c:])
			xa := (*[32]float32)(xs[64*c:])
			xb := (*[32]float32)(xs[64*c+32:])
			var qa, qb, sa, sb float32
			for l := range 32 {
				qa += float32(q[l]&0xf) * xa[l]
				qb += float32(q[l]>>4) * xb[l]
				sa += xa[l]
				sb += xb[l]
			}
			acc += d*(float32(sc1)*qa+float32(sc2)*qb) - dmin*(float32(m1)*sa+float32(m2)*sb)
		}
		sum += float64(acc)
	}
	return float32(sum)
}

// fitScaleMin finds s >= 0 and m >= 0 so that x ~ s*q - m with q in 0..nmax,
// trying a few inverse scales around nmax/(max-min), refining each by least
// squares over its assignment, and keeping the fit with the smallest squared
// error (computed from the sums of the assignment).
func fitScaleMin(x []float32, nmax int) (s, m float32) {
	xmin, xmax := x[0], x[0]
	var sx, sxx float32
	for _, v := range x {
		xmin = min(xmin, v)
		xmax = max(xmax, v)
		sx += v
		sxx += v * v
	}
	xmin = min(xmin, 0)
	if xmax <= xmin {
		return 0, -xmin
	}
	n := float32(len(x))
	fmax := float32(nmax)
	bestS, bestM := (xmax-xmin)/fmax, -xmin
	bestErr := sqErr(x, float64(bestS), float64(bestM), nmax)
	for k := -2; k <= 2; k++ {
		iscale := (fmax + 0.4*float32(k)) / (xmax - xmin)
		var sq, sqq, sqx float32
		for _, v := range x {
			q := float32(int32((v-xmin)*iscale + 0.5)) // v-xmin >= 0: rounds half up
			q = min(fmax, q)
			sq += q
			sqq += q * q
			sqx += q * v
		}
		det := n*sqq - sq*sq
		if det <= 0 {
			continue
		}
		sc := (n*sqx - sq*sx) / det
		off := (sx - sc*sq) / n // x ~ sc*q + off, off = -m
		if off > 0 {
			off = 0
			sc = sqx / sqq
		}
		if sc <= 0 {
			continue
		}
		// Squared error of this assignment under (sc, off).
		e := float64(sxx + sc*sc*sqq + n*off*off - 2*sc*sqx - 2*off*sx + 2*sc*off*sq)
		if e < bestErr {
			bestErr, bestS, bestM = e, sc, -off
		}
	}
	return bestS, bestM
}

// sqErr is the squared error of quantizing x with scale s and min m.
func sqErr(x []float32, s, m float64, nmax int) float64 {
	fs, fm, fmax := float32(s), float32(m), float32(nmax)
	inv := 1 / fs
	var e float32
	for _, v := range x {
		q := float32(int32((v+fm)*inv + 0.5))
		q = max(0, min(fmax, q))
		d := v - (fs*q - fm)
		e += d * d
	}
	return float64(e)
}

func quantQ4K(x []float32, b []byte) {
	var scales, mins [8]float32
	var maxS, maxM float32
	for j := range 8 {
		scales[j], mins[j] = fitScaleMin(x[32*j:32*j+32], 15)
		maxS = max(maxS, scales[j])
		maxM = max(maxM, mins[j])
	}
	dh, dminh := F32ToF16(maxS/63), F32ToF16(maxM/63)
	d, dmin := F16ToF32(dh), F16ToF32(dminh)
	if !finite(d) || !finite(dmin) {
		dh, dminh, d, dmin = 0, 0, 0, 0
	}
	// The 6-bit sub-block scale and min: of the floor/ceil roundings of the
	// fitted values, keep the pair with the smallest squared error.
	var sc, m [8]uint8
	var q [256]uint8
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		scCand, mCand := [2]int{}, [2]int{}
		if d > 0 {
			v := float64(scales[j] / d)
			scCand = [2]int{int(max(0, min(63, math.Floor(v)))), int(max(0, min(63, math.Ceil(v))))}
		}
		if dmin > 0 {
			v := float64(mins[j] / dmin)
			mCand = [2]int{int(max(0, min(63, math.Floor(v)))), int(max(0, min(63, math.Ceil(v))))}
		}
		bestErr := math.Inf(1)
		for _, cs := range scCand {
			for _, cm := range mCand {
				step, off := float64(d*float32(cs)), float64(dmin*float32(cm))
				var e float64
				if step == 0 {
					for _, v := range xs {
						e += (float64(v) + off) * (float64(v) + off)
					}
				} else {
					e = sqErr(xs, step, off, 15)
				}
				if e < bestErr {
					bestErr, sc[j], m[j] = e, uint8(cs), uint8(cm)
				}
			}
		}
		step := d * float32(sc[j])
		off := dmin * float32(m[j])
		if step == 0 {
			continue
		}
		inv := 1 / step
		for l := range 32 {
			q[32*j+l] = uint8(clampRound((xs[l]+off)*inv, 0, 15))
		}
	}
	binary.LittleEndian.PutUint16(b, dh)
	binary.LittleEndian.PutUint16(b[2:], dminh)
	packScaleMinK4(&sc, &m, b[4:16])
	qs := b[16:144]
	for c := range 4 {
		for l := range 32 {
			qs[32*c+l] = q[64*c+l] | q[64*c+32+l]<<4
		}
	}
}

func finite(v float32) bool { return !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v)) }
