package protovec

import (
	"bytes"
	"strings"
	"testing"
)

const sample = "# t\n\n```hex vector:a\n0102\n03\n```\n\ntext\n\n```text vector:b\nhello\n```\n\n```go\nx := 1\n```\n"

func TestParseRewrite(t *testing.T) {
	v, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v["a"], []byte{1, 2, 3}) || string(v["b"]) != "hello" || len(v) != 2 {
		t.Fatalf("%q", v)
	}
	out, err := Rewrite([]byte(sample), map[string][]byte{"a": bytes.Repeat([]byte{0xab}, 40), "b": []byte("bye")})
	if err != nil {
		t.Fatal(err)
	}
	want := "# t\n\n```hex vector:a\n" + strings.Repeat("ab", 32) + "\n" + strings.Repeat("ab", 8) + "\n```\n\ntext\n\n```text vector:b\nbye\n```\n\n```go\nx := 1\n```\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := Rewrite([]byte(sample), map[string][]byte{"a": nil}); err == nil {
		t.Error("missing value accepted")
	}
	if _, err := Rewrite([]byte(sample), map[string][]byte{"a": nil, "b": nil, "c": nil}); err == nil {
		t.Error("value without a block accepted")
	}
}

func TestParseRejects(t *testing.T) {
	for _, doc := range []string{
		"```hex vector:a\n01\n",                                // unclosed
		"```hex vector:a\n01\n```\n```hex vector:a\n02\n```\n", // duplicate
		"```hex vector:a\nzz\n```\n",                           // bad hex
		"```bin vector:a\n01\n```\n",                           // unknown kind
		"```hex vector:\n01\n```\n",                            // empty name
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("accepted %q", doc)
		}
	}
}
