package chat

import (
	"errors"
	"os"
	"testing"
)

func load(t *testing.T, name, bos, eos string) *Template {
	t.Helper()
	src, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := New(string(src), bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

var conv = []Message{
	{Role: "system", Content: "You are a helpful assistant."},
	{Role: "user", Content: " Hello! \n"},
	{Role: "assistant", Content: "Hi there."},
}

// Llama 3's template: every message is
// <|start_header_id|>ROLE<|end_header_id|>\n\n + trim(content) + <|eot_id|>,
// the first prefixed with bos_token; the assistant header is always
// appended (the template ignores add_generation_prompt).
func TestLlama3(t *testing.T) {
	tm := load(t, "llama3.jinja", "<|begin_of_text|>", "<|end_of_text|>")
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>" +
		"<|start_header_id|>assistant<|end_header_id|>\n\n"
	for _, gen := range []bool{true, false} {
		got, err := tm.Render(conv, gen, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("add_generation_prompt=%v:\n got %q\nwant %q", gen, got, want)
		}
	}
}

// Qwen3's template: ChatML (<|im_start|>ROLE\n content <|im_end|>\n); an
// assistant turn after the last user query gets an empty think block
// (<think>\n\n</think>\n\n) unless it carries reasoning; the generation
// prompt is <|im_start|>assistant\n, plus an empty think block when
// enable_thinking is false.
func TestQwen3(t *testing.T) {
	tm := load(t, "qwen3.jinja", "", "<|im_end|>")
	sysUser := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hello! \n<|im_end|>\n"
	cases := []struct {
		name  string
		msgs  []Message
		gen   bool
		extra map[string]any
		want  string
	}{
		{"system user assistant", conv, true, nil,
			sysUser + "<|im_start|>assistant\n<think>\n\n</think>\n\nHi there.<|im_end|>\n<|im_start|>assistant\n"},
		{"no generation prompt", conv, false, nil,
			sysUser + "<|im_start|>assistant\n<think>\n\n</think>\n\nHi there.<|im_end|>\n"},
		{"reasoning kept in last turn", []Message{conv[0], conv[1], {Role: "assistant", Content: "<think>\nhmm\n</think>\n\nHi there."}}, false, nil,
			sysUser + "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHi there.<|im_end|>\n"},
		{"earlier assistant turn plain, reasoning dropped", []Message{conv[0], conv[1], {Role: "assistant", Content: "<think>\nhmm\n</think>\n\nHi there."}, {Role: "user", Content: "Bye"}}, true, nil,
			sysUser + "<|im_start|>assistant\nHi there.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
		{"thinking disabled", conv[:2], true, map[string]any{"enable_thinking": false},
			sysUser + "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tm.Render(c.msgs, c.gen, c.extra)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	var te *TemplateError
	if _, err := New("", "", ""); !errors.As(err, &te) {
		t.Fatalf("empty template: %v", err)
	}
	if _, err := New("{% for x in %}", "", ""); !errors.As(err, &te) || te.Op != "compile" {
		t.Fatalf("bad template: %v", err)
	}
	tm, err := New("{{ raise_exception('only user and assistant roles are supported') }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Render(conv, true, nil); !errors.As(err, &te) || te.Op != "render" {
		t.Fatalf("raise_exception: %v", err)
	}
}
