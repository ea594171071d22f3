package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/sparkinfer/cc/engine"
	"github.com/sparkinfer/cc/engine/chat"
	"github.com/sparkinfer/cc/engine/sample"
)

// Limits bound what one request may ask for. Zero fields take the defaults
// of DefaultLimits.
type Limits struct {
	// MaxBodyBytes caps a request body (plaintext JSON, or the encapsulated
	// request).
	MaxBodyBytes int64
	// MaxTokens caps max_tokens; DefaultMaxTokens is used when a request
	// gives none (as `sparkinfer generate` does).
	MaxTokens        int
	DefaultMaxTokens int
	// MaxMessages caps the messages of a chat request; MaxStops the stop
	// strings.
	MaxMessages int
	MaxStops    int
}

// DefaultLimits are the limits when a field of Limits is zero.
var DefaultLimits = Limits{
	MaxBodyBytes:     1 << 20,
	MaxTokens:        4096,
	DefaultMaxTokens: 256,
	MaxMessages:      256,
	MaxStops:         4,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxBodyBytes > 0 {
		d.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxTokens > 0 {
		d.MaxTokens = l.MaxTokens
	}
	if l.DefaultMaxTokens > 0 {
		d.DefaultMaxTokens = l.DefaultMaxTokens
	}
	if l.MaxMessages > 0 {
		d.MaxMessages = l.MaxMessages
	}
	if l.MaxStops > 0 {
		d.MaxStops = l.MaxStops
	}
	d.DefaultMaxTokens = min(d.DefaultMaxTokens, d.MaxTokens)
	return d
}

// RequestError is a request body the server rejects: Status is the HTTP
// status, Code the machine-readable code of the OpenAI error object, Param
// the offending field when there is one. Messages never quote prompt text.
type RequestError struct {
	Status  int
	Code    string
	Param   string
	Message string
}

func (e *RequestError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *RequestError {
	return &RequestError{Status: 400, Code: "invalid_request", Param: param, Message: fmt.Sprintf(format, args...)}
}

// ChatMessage is one message of a chat request. Content is a string or an
// array of {"type":"text","text":...} parts (other part types are refused).
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// StreamOptions are OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatRequest is the body of POST /v1/chat/completions: the OpenAI fields
// the appliance serves, plus top_k, min_p and repeat_penalty (as llama.cpp's
// server). Fields OpenAI defines but the appliance cannot honour are accepted
// only at values that change nothing (n 1, logprobs false, ...); any other
// field is refused, so a client never silently gets what it did not ask for.
type ChatRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            *bool         `json:"logprobs"`
	Sampling
}

// CompletionRequest is the body of POST /v1/completions (same rules as
// ChatRequest). Prompt is a string, or an array of exactly one string.
type CompletionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Echo     *bool           `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	Sampling
}

// Sampling holds the generation and streaming fields both request kinds
// share.
type Sampling struct {
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	Seed             *json.Number    `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	Stream           bool            `json:"stream"`
	StreamOptions    *StreamOptions  `json:"stream_options"`
	N                *int            `json:"n"`
	User             string          `json:"user"`
}

// Job is a decoded request: the engine request and how to answer.
type Job struct {
	Model        string
	Chat         bool
	Stream       bool
	IncludeUsage bool
	Request      engine.Request
}

// strictDecode decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func strictDecode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &RequestError{Status: 400, Code: "invalid_json", Message: "empty request body: want a json object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		msg := err.Error()
		switch {
		case errors.As(err, &ute):
			return &RequestError{Status: 400, Code: "invalid_json", Param: ute.Field, Message: fmt.Sprintf("field %q: json %s where %s is expected", ute.Field, ute.Value, ute.Type)}
		case strings.HasPrefix(msg, "json: unknown field "):
			f := strings.TrimPrefix(msg, "json: unknown field ")
			return &RequestError{Status: 400, Code: "unsupported_field", Param: strings.Trim(f, `"`), Message: "unsupported field " + f}
		}
		return &RequestError{Status: 400, Code: "invalid_json", Message: "malformed json: " + msg}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &RequestError{Status: 400, Code: "invalid_json", Message: "malformed json: data after the request object"}
	}
	return nil
}

// streaming sets j's streaming fields from s.
func (s Sampling) streaming(j *Job) error {
	j.Stream = s.Stream
	if s.StreamOptions != nil {
		if !s.Stream {
			return badRequest("stream_options", "stream_options is only allowed with stream true")
		}
		j.IncludeUsage = s.StreamOptions.IncludeUsage
	}
	return nil
}

// apply validates s against lim and sets r's token limit (maxTokens, nil
// for the default), sampling parameters and stop strings.
func (c Sampling) apply(lim Limits, maxTokens *int, r *engine.Request) error {
	r.MaxTokens = lim.DefaultMaxTokens
	if maxTokens != nil {
		if *maxTokens < 1 || *maxTokens > lim.MaxTokens {
			return badRequest("max_tokens", "max_tokens %d: want 1 to %d", *maxTokens, lim.MaxTokens)
		}
		r.MaxTokens = *maxTokens
	}
	// The same defaults as `sparkinfer generate`: greedy, top-p 1, no
	// penalty, the default penalty window, seed 0.
	p := sample.Params{TopP: 1, RepeatPenalty: 1, RepeatLastN: sample.DefaultRepeatLastN}
	fl := func(name string, v *float64, lo, hi float64, dst *float64) error {
		if v == nil {
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return badRequest(name, "%s %v: want %v to %v", name, *v, lo, hi)
		}
		*dst = *v
		return nil
	}
	if err := fl("temperature", c.Temperature, 0, 2, &p.Temperature); err != nil {
		return err
	}
	if err := fl("top_p", c.TopP, 0, 1, &p.TopP); err != nil {
		return err
	}
	if err := fl("min_p", c.MinP, 0, 1, &p.MinP); err != nil {
		return err
	}
	if err := fl("repeat_penalty", c.RepeatPenalty, 0.01, 10, &p.RepeatPenalty); err != nil {
		return err
	}
	if c.TopK != nil {
		if *c.TopK < 0 {
			return badRequest("top_k", "top_k %d: want 0 (off) or more", *c.TopK)
		}
		p.TopK = *c.TopK
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"frequency_penalty", c.FrequencyPenalty}, {"presence_penalty", c.PresencePenalty}} {
		if f.v != nil && *f.v != 0 {
			return badRequest(f.name, "%s is not supported (only 0); use repeat_penalty", f.name)
		}
	}
	if c.N != nil && *c.N != 1 {
		return badRequest("n", "n %d: only one choice per request is supported", *c.N)
	}
	if c.Seed != nil {
		s := c.Seed.String()
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			p.Seed = u
		} else if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			p.Seed = uint64(i) // negative seeds wrap, as two's complement
		} else {
			return badRequest("seed", "seed %q is not a 64-bit integer", s)
		}
	}
	if err := p.Validate(); err != nil {
		return badRequest("", "sampling parameters: %v", err)
	}
	r.Sampling = p
	stops, err := decodeStop(c.Stop, lim.MaxStops)
	if err != nil {
		return err
	}
	r.Stop = stops
	return nil
}

func decodeStop(raw json.RawMessage, maxStops int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badRequest("stop", "empty stop string")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > maxStops {
		return nil, badRequest("stop", "%d stop strings: at most %d", len(many), maxStops)
	}
	for _, s := range many {
		if s == "" {
			return nil, badRequest("stop", "empty stop string")
		}
	}
	return many, nil
}

// messageText returns a message's text: a JSON string, or the concatenated
// text of an array of text parts.
func messageText(i int, raw json.RawMessage) (string, error) {
	param := fmt.Sprintf("messages[%d].content", i)
	if len(raw) == 0 || string(raw) == "null" {
		return "", badRequest(param, "%s is missing", param)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&parts); err != nil {
		return "", badRequest(param, "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest(param, "%s[%d]: part type %q is not supported (only \"text\")", param, j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true}

// DecodeChatRequest decodes and validates a chat completion request body.
func DecodeChatRequest(body []byte, lim Limits) (*Job, error) {
	lim = lim.withDefaults()
	var req ChatRequest
	if err := strictDecode(body, &req); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, badRequest("model", "missing required field \"model\"")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	if len(req.Messages) > lim.MaxMessages {
		return nil, badRequest("messages", "%d messages: at most %d", len(req.Messages), lim.MaxMessages)
	}
	if req.Logprobs != nil && *req.Logprobs {
		return nil, badRequest("logprobs", "logprobs are not supported")
	}
	j := &Job{Model: req.Model, Chat: true}
	if err := req.streaming(j); err != nil {
		return nil, err
	}
	for i, m := range req.Messages {
		role := m.Role
		if !roles[role] {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q: want system, developer, user or assistant", i, role)
		}
		if role == "developer" {
			role = "system"
		}
		text, err := messageText(i, m.Content)
		if err != nil {
			return nil, err
		}
		j.Request.Messages = append(j.Request.Messages, chat.Message{Role: role, Content: text})
	}
	mt := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		if mt != nil && *mt != *req.MaxCompletionTokens {
			return nil, badRequest("max_completion_tokens", "max_tokens and max_completion_tokens differ")
		}
		mt = req.MaxCompletionTokens
	}
	if err := req.apply(lim, mt, &j.Request); err != nil {
		return nil, err
	}
	return j, nil
}

// DecodeCompletionRequest decodes and validates a completion request body.
func DecodeCompletionRequest(body []byte, lim Limits) (*Job, error) {
	lim = lim.withDefaults()
	var req CompletionRequest
	if err := strictDecode(body, &req); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, badRequest("model", "missing required field \"model\"")
	}
	if req.Echo != nil && *req.Echo {
		return nil, badRequest("echo", "echo is not supported")
	}
	if req.Logprobs != nil && *req.Logprobs != 0 {
		return nil, badRequest("logprobs", "logprobs are not supported")
	}
	j := &Job{Model: req.Model}
	if err := req.streaming(j); err != nil {
		return nil, err
	}
	if len(req.Prompt) == 0 || string(req.Prompt) == "null" {
		return nil, badRequest("prompt", "missing required field \"prompt\"")
	}
	var prompt string
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		var many []string
		if err := json.Unmarshal(req.Prompt, &many); err != nil || len(many) != 1 {
			return nil, badRequest("prompt", "prompt must be a string or an array of exactly one string")
		}
		prompt = many[0]
	}
	j.Request.Prompt = prompt
	if err := req.apply(lim, req.MaxTokens, &j.Request); err != nil {
		return nil, err
	}
	return j, nil
}

// finishReason maps an engine stop reason to OpenAI's.
func finishReason(stop string) string {
	switch stop {
	case engine.StopLength, engine.StopContext:
		return "length"
	}
	return "stop"
}
