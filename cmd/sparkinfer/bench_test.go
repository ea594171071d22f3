package main

import "testing"

func TestDefaultBenchContexts(t *testing.T) {
	for dev, want := range map[string]string{"cuda": "128,512,4096,16384,32768", "cpu": "128,512,4096", "auto": "128,512,4096"} {
		if got := defaultBenchContexts(dev); got != want {
			t.Errorf("%s: %q, want %q", dev, got, want)
		}
	}
}
