// Package cli is the shared shape of sparkinfer's and sparkctl's subcommands:
// a table of commands, each a function from flags to an exit code, and the
// conventions for errors and exit codes. Only main exits the process.
//
// Exit codes: 0 success; 1 the operation ran and failed (for verifiers: the
// evidence was rejected); 2 unusable input (bad flags, unreadable or malformed
// files). Error lines are lowercase, prefixed with the program and command
// name, and may be followed by a "hint:" line.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Env is what a command may touch of the outside world.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(args []string, env Env) (exitCode int, err error)
}

// UsageError is an error in the command line or its input files: exit code 2.
type UsageError struct {
	Err  error
	Hint string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NewFlagSet returns a flag set that reports errors instead of exiting and
// writes its usage text to env.Stderr.
func NewFlagSet(prog, name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// Parse parses flags; -h gives exit 0 through ErrHelp, other errors are usage errors.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{Err: err}
	}
	return nil
}

// Main dispatches args to the matching command and returns the exit code.
func Main(prog string, commands []Command, args []string, env Env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(prog, commands, env.Stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.Name != args[0] {
			continue
		}
		code, err := c.Run(args[1:], env)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "%s %s: %v\n", prog, c.Name, err)
			var ue *UsageError
			if errors.As(err, &ue) {
				if ue.Hint != "" {
					fmt.Fprintf(env.Stderr, "hint: %s\n", ue.Hint)
				}
				if code == 0 {
					code = 2
				}
			}
			if code == 0 {
				code = 1
			}
		}
		return code
	}
	fmt.Fprintf(env.Stderr, "%s: unknown command %q\n", prog, args[0])
	usage(prog, commands, env.Stderr)
	return 2
}

func usage(prog string, commands []Command, w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", prog)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-14s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nrun '%s <command> -h' for a command's flags\n", prog)
}
