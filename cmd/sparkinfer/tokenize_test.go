package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestTokenizeScript runs testdata/tokenize/*.txtar with the tokenizer
// package's real vocabulary files copied into $WORK/vocab.
func TestTokenizeScript(t *testing.T) {
	files, _ := filepath.Glob("testdata/tokenize/*.txtar")
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/tokenize")
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/tokenize",
		Setup: func(env *testscript.Env) error {
			dir := filepath.Join(env.WorkDir, "vocab")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for _, name := range []string{"llama-spm", "gpt-2"} {
				b, err := os.ReadFile(filepath.Join("..", "..", "engine", "tokenizer", "testdata", "ggml-vocab-"+name+".gguf"))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, name+".gguf"), b, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	})
}
