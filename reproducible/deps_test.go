package reproducible_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/reproducible/release"
)

// goListDeps lists the packages linked into the appliance binary, as the
// release recipe builds it (same GOOS, GOARCH, cgo setting and tags).
func goListDeps(t *testing.T, format string) []string {
	t.Helper()
	r := release.DefaultRecipe()
	var tags string
	for _, f := range r.Flags {
		if v, ok := strings.CutPrefix(f, "-tags="); ok {
			tags = v
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-tags="+tags, "-f", format, "./cmd/sparkinfer")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS="+r.Env["GOOS"], "GOARCH="+r.Env["GOARCH"], "CGO_ENABLED="+r.Env["CGO_ENABLED"], "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestApplianceHasNoSigstore: cosign and its ~250 modules are release
// tooling (sparkctl); none of them may be linked into the measured binary.
func TestApplianceHasNoSigstore(t *testing.T) {
	pkgs := goListDeps(t, "{{.ImportPath}}")
	if len(pkgs) < 10 {
		t.Fatalf("go list -deps found only %d packages: %v", len(pkgs), pkgs)
	}
	found := false
	for _, p := range pkgs {
		if p == "github.com/sparkinfer/cc/reproducible" {
			found = true
		}
		for _, banned := range []string{"github.com/sigstore/", "github.com/sparkinfer/cc/reproducible/cosignsig", "github.com/sparkinfer/cc/reproducible/release"} {
			if strings.HasPrefix(p, banned) {
				t.Errorf("cmd/sparkinfer links %s", p)
			}
		}
	}
	if !found {
		t.Errorf("cmd/sparkinfer does not link package reproducible (sparkinfer version)")
	}
}

const depsFile = "../DEPENDENCIES.md"

func dependenciesMarkdown(t *testing.T) []byte {
	pkgs := goListDeps(t, "{{if not .Standard}}{{with .Module}}{{if not .Main}}{{$.ImportPath}} {{.Path}} {{.Version}}{{end}}{{end}}{{end}}")
	mods := map[string]string{}
	var b bytes.Buffer
	b.WriteString("# Dependencies of the measured binary\n\n")
	b.WriteString("Third-party Go packages linked into `sparkinfer` (the appliance binary whose digest the\n")
	b.WriteString("attestation reports), as the release recipe builds it: linux/amd64, CGO_ENABLED=1, the\n")
	b.WriteString("recipe's build tags. A change here is a change of the trusted computing base: review it.\n\n")
	b.WriteString("Generated; do not edit. Regenerate with\n`UPDATE_DEPENDENCIES=1 go test ./reproducible -run TestDependenciesFile`;\n")
	b.WriteString("the test fails when this file is out of date. The standard library and this module's own\n")
	b.WriteString("packages are not listed; sparkctl (release tooling, with cosign) is not covered.\n\n")
	var pkgLines []string
	for _, l := range pkgs {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("unexpected go list line %q", l)
		}
		mods[f[1]] = f[2]
		pkgLines = append(pkgLines, "- `"+f[0]+"`")
	}
	var modLines []string
	for m, v := range mods {
		modLines = append(modLines, fmt.Sprintf("- `%s` %s", m, v))
	}
	sortStrings(modLines)
	sortStrings(pkgLines)
	fmt.Fprintf(&b, "## Modules (%d)\n\n", len(modLines))
	if len(modLines) == 0 {
		b.WriteString("(none)\n")
	}
	for _, l := range modLines {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "\n## Packages (%d)\n\n", len(pkgLines))
	if len(pkgLines) == 0 {
		b.WriteString("(none)\n")
	}
	for _, l := range pkgLines {
		b.WriteString(l + "\n")
	}
	return b.Bytes()
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestDependenciesFile: DEPENDENCIES.md lists exactly the third-party
// packages the appliance links.
func TestDependenciesFile(t *testing.T) {
	want := dependenciesMarkdown(t)
	if os.Getenv("UPDATE_DEPENDENCIES") == "1" {
		if err := os.WriteFile(depsFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(depsFile)
	if err != nil {
		t.Fatalf("%v (create it with UPDATE_DEPENDENCIES=1 go test ./reproducible -run TestDependenciesFile)", err)
	}
	if !bytes.Equal(got, want) {
		abs, _ := filepath.Abs(depsFile)
		t.Errorf("%s is out of date: the appliance's dependencies changed. Review the change, then run\n"+
			"UPDATE_DEPENDENCIES=1 go test ./reproducible -run TestDependenciesFile\nwant:\n%s", abs, want)
	}
}
