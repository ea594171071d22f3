package nvml

import (
	"errors"
	"testing"
)

// TestOpen runs against this machine's real NVML: with a driver and GPUs it
// lists them and reads the CC state; without, Open must say unavailable.
func TestOpen(t *testing.T) {
	lib, err := Open()
	var ue *UnavailableError
	if errors.As(err, &ue) {
		t.Skipf("no usable nvml on this machine: %v", err)
	}
	if err != nil {
		t.Fatalf("open: %v, want success or *UnavailableError", err)
	}
	defer lib.Close()
	v, err := lib.DriverVersion()
	if err != nil || v == "" {
		t.Fatalf("driver version %q (%v)", v, err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	st, serr := lib.SystemCCState()
	t.Logf("driver %s, %d gpus, cc state %+v (%v)", v, n, st, serr)
	for i := range n {
		d, err := lib.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("gpu %d: %s %s", i, d.Name, d.UUID)
		if serr == nil && !st.CCEnabled {
			var nonce [32]byte
			if _, err := d.AttestationReport(nonce); err == nil {
				t.Error("attestation report with cc off")
			}
		}
	}
}

func TestErrorKinds(t *testing.T) {
	for _, c := range []struct {
		code int
		ns   bool
	}{{3, true}, {-1, true}, {2, false}, {9, false}} {
		err := &Error{Op: "x", Code: c.code}
		if errors.Is(err, ErrNotSupported) != c.ns {
			t.Errorf("code %d: errors.Is(ErrNotSupported) = %v", c.code, !c.ns)
		}
	}
}
