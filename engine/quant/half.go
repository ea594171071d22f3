package quant

import "math"

// f16Table maps every IEEE 754 binary16 bit pattern to its float32 value.
// The conversion is exact, so a table is both correct and fast.
var f16Table = makeF16Table()

func makeF16Table() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32Slow(uint16(i))
	}
	return &t
}

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man * 2^-24
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// F16ToF32 converts an IEEE 754 binary16 value to float32 (exact).
func F16ToF32(h uint16) float32 { return f16Table[h] }

// F32ToF16 converts a float32 to IEEE 754 binary16, rounding to nearest even.
// Values too large become ±Inf; NaN stays NaN (quiet).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): value = m * 2^-24 with m = round(full * 2^(e-1-13+...)).
		if e < -10 {
			return sign // rounds to zero (|f| < 2^-25)
		}
		full := man | 0x800000 // 24-bit significand
		shift := uint32(14 - e)
		q := full >> shift
		rem := full & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q) // q may carry into the smallest normal, which is the right encoding
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to Inf: correct
	}
	return sign | uint16(q)
}

// BF16ToF32 converts a bfloat16 value to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts a float32 to bfloat16, rounding to nearest even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
