package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the scripts run this binary as "sparkinfer".
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"sparkinfer": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScript runs the end-to-end CLI scripts in testdata/script.
func TestScript(t *testing.T) {
	files, _ := filepath.Glob("testdata/script/*.txtar")
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/script")
	}
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
