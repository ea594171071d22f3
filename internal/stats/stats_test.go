package stats

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(c.v)
		if got := Median(in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.v, got, c.want)
		}
		if !slices.Equal(in, c.v) {
			t.Errorf("Median reordered its input: %v", in)
		}
	}
}
