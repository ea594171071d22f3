// Package chat renders a conversation into the prompt text a model was
// trained on, using the model's own Jinja chat template (the GGUF key
// tokenizer.chat_template, or chat_template in a Hugging Face
// tokenizer_config.json), with github.com/ardanlabs/jinja.
//
// The template sees the variables Hugging Face's apply_chat_template
// provides: messages (a list of {role, content}), add_generation_prompt,
// bos_token and eos_token, plus any extra variables the caller passes (for
// example enable_thinking for Qwen3). Tools are not passed.
//
// What is not checked: the rendered text is whatever the template produces;
// roles are not restricted here (templates typically raise_exception on
// roles they do not support, which comes back as a *TemplateError).
package chat

import (
	"fmt"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`    // "system", "user", "assistant", ...
	Content string `json:"content"` // plain text
}

// TemplateError reports a template that does not compile or fails to render.
type TemplateError struct {
	Op  string // "compile" or "render"
	Err error
}

func (e *TemplateError) Error() string { return fmt.Sprintf("chat template: %s: %v", e.Op, e.Err) }
func (e *TemplateError) Unwrap() error { return e.Err }

// Template is a compiled chat template with the special-token texts it
// refers to. It is safe for concurrent use.
type Template struct {
	tmpl     *jinja.Template
	bos, eos string
}

// New compiles source. bosToken and eosToken are the texts of the model's
// BOS and EOS tokens (empty if the model has none), exposed to the template
// as bos_token and eos_token.
func New(source, bosToken, eosToken string) (*Template, error) {
	if source == "" {
		return nil, &TemplateError{Op: "compile", Err: fmt.Errorf("empty template")}
	}
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, &TemplateError{Op: "compile", Err: err}
	}
	return &Template{tmpl: t, bos: bosToken, eos: eosToken}, nil
}

// Render renders msgs. With addGenerationPrompt the text ends with the
// header of an assistant turn, ready for the model to continue. extra holds
// additional template variables (may be nil); it cannot override messages,
// add_generation_prompt, bos_token or eos_token.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool, extra map[string]any) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := make(map[string]any, len(extra)+4)
	for k, v := range extra {
		data[k] = v
	}
	data["messages"] = list
	data["add_generation_prompt"] = addGenerationPrompt
	data["bos_token"] = t.bos
	data["eos_token"] = t.eos
	out, err := t.tmpl.Render(data)
	if err != nil {
		return "", &TemplateError{Op: "render", Err: err}
	}
	return out, nil
}
