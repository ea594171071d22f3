package enclave

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Harden makes the process refuse core dumps and ptrace attachment by
// unprivileged processes of the same user: prctl(PR_SET_DUMPABLE, 0) and
// RLIMIT_CORE = 0. `sparkinfer serve` calls it first thing. It does not stop
// root on the host from reading guest memory; inside a TEE, the hardware does
// that. It is not undone by exec of the same binary (dumpable is reset by
// exec; the appliance does not exec).
func Harden() error {
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0}); err != nil {
		return fmt.Errorf("setrlimit(RLIMIT_CORE, 0): %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Hardened reports whether Harden's settings are in effect.
func Hardened() (bool, error) {
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, err
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &rl); err != nil {
		return false, err
	}
	return d == 0 && rl.Cur == 0 && rl.Max == 0, nil
}
