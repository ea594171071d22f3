package sevsnp

import (
	"context"
	"errors"
	"testing"

	"github.com/sparkinfer/cc/attest/check"
)

// TestMutation flips one byte at every position of each real report (signed
// body, signature, reserved tail) and of its certificate's DER, and requires
// every copy to be rejected: as unusable input (ParseError) or as failing
// verification (VerifyError). With -short it takes every 7th position.
func TestMutation(t *testing.T) {
	step := 1
	if testing.Short() {
		step = 7
	}
	type counts struct{ tried, parse, verify int }
	for _, v := range vectors[:2] {
		raw, cert := read(t, v.report), read(t, v.cert)
		regions := []struct {
			name   string
			target []byte
			lo, hi int
		}{
			{"report signed body 0x000-0x29f", raw, 0, offSignedEnd},
			{"report signature r,s 0x2a0-0x32f", raw, offSigR, offSigS + sigComponentLen},
			{"report reserved tail 0x330-0x49f", raw, offSigS + sigComponentLen, ReportSize},
			{"certificate der", cert, 0, len(cert)},
		}
		total := counts{}
		for _, reg := range regions {
			var c counts
			for pos := reg.lo; pos < reg.hi; pos += step {
				mask := byte(1) << (pos % 8)
				reg.target[pos] ^= mask
				_, err := Verify(context.Background(), raw, cert, Options{Now: asOf})
				reg.target[pos] ^= mask
				c.tried++
				var pe *check.ParseError
				var ve *check.VerifyError
				switch {
				case errors.As(err, &pe):
					c.parse++
				case errors.As(err, &ve):
					c.verify++
				case err == nil:
					t.Errorf("%s: %s: flip of bit %d at 0x%x was accepted", v.name, reg.name, pos%8, pos)
				default:
					t.Errorf("%s: %s: flip at 0x%x gave an untyped error: %v", v.name, reg.name, pos, err)
				}
			}
			t.Logf("%s: %-34s %4d flips: %4d parse errors, %4d verify errors, %d accepted",
				v.name, reg.name, c.tried, c.parse, c.verify, c.tried-c.parse-c.verify)
			total.tried += c.tried
			total.parse += c.parse
			total.verify += c.verify
		}
		t.Logf("%s: total %d flips: %d rejected (%d parse, %d verify)", v.name, total.tried, total.parse+total.verify, total.parse, total.verify)
		if total.tried < 200 {
			t.Errorf("%s: only %d flips", v.name, total.tried)
		}
		// The originals still verify after the loop restored every byte.
		if _, err := Verify(context.Background(), raw, cert, Options{Now: asOf}); err != nil {
			t.Fatalf("%s: original no longer verifies: %v", v.name, err)
		}
	}
}
