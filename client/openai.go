package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sparkinfer/cc/internal/openai"
)

// Paths of the OpenAI-compatible routes the client encrypts to.
const (
	ChatCompletionsPath = "/v1/chat/completions"
	CompletionsPath     = "/v1/completions"
)

// MaxResponseSize caps a non-streamed decrypted response body.
const MaxResponseSize = 16 << 20

// ChatMessage is one message of a chat.
type ChatMessage struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// ChatRequest is the body of POST /v1/chat/completions (the subset of the
// OpenAI request the appliance serves). Optional numbers are pointers so that
// "unset" and 0 differ.
type ChatRequest struct {
	Model       string        `json:"model"`
	Messages    []ChatMessage `json:"messages"`
	MaxTokens   *int          `json:"max_tokens,omitempty"`
	Temperature *float64      `json:"temperature,omitempty"`
	TopP        *float64      `json:"top_p,omitempty"`
	Seed        *int64        `json:"seed,omitempty"`
	Stop        []string      `json:"stop,omitempty"`
	Stream      bool          `json:"stream,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model       string   `json:"model"`
	Prompt      string   `json:"prompt"`
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	Stream      bool     `json:"stream,omitempty"`
}

// The response shapes, shared with the appliance (internal/openai).
type (
	// Usage is token accounting.
	Usage = openai.Usage
	// ChatResponse is a non-streamed chat completion; Text returns the first
	// choice's content.
	ChatResponse = openai.ChatResponse
	// ChatChoice is one choice of a chat completion.
	ChatChoice = openai.ChatChoice
	// ChatChunk is one event of a streamed chat completion.
	ChatChunk = openai.ChatChunk
	// ChatChunkChoice is one choice of a chat chunk: Delta carries new text.
	ChatChunkChoice = openai.ChatChunkChoice
	// CompletionResponse is a non-streamed completion, and the shape of each
	// event of a streamed one; Text returns the first choice's text.
	CompletionResponse = openai.CompletionResponse
	// CompletionChoice is one choice of a completion.
	CompletionChoice = openai.CompletionChoice
)

// ChatCompletion sends a chat completion request (Stream must be false)
// and returns the decrypted, authenticated answer. An error answer of the
// appliance is an *APIError.
func (c *Client) ChatCompletion(ctx context.Context, req ChatRequest) (*ChatResponse, error) {
	if req.Stream {
		return nil, errors.New("client: ChatCompletion with Stream set: use ChatCompletionStream")
	}
	var out ChatResponse
	if err := c.call(ctx, ChatCompletionsPath, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Completion sends a completion request (Stream must be false).
func (c *Client) Completion(ctx context.Context, req CompletionRequest) (*CompletionResponse, error) {
	if req.Stream {
		return nil, errors.New("client: Completion with Stream set: use CompletionStream")
	}
	var out CompletionResponse
	if err := c.call(ctx, CompletionsPath, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) call(ctx context.Context, path string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.Do(ctx, path, body)
	if err != nil {
		return err
	}
	defer resp.Close()
	b, err := io.ReadAll(io.LimitReader(resp, MaxResponseSize+1))
	if err != nil {
		return fmt.Errorf("client: read response: %w", err)
	}
	if len(b) > MaxResponseSize {
		return fmt.Errorf("client: response larger than %d bytes", MaxResponseSize)
	}
	if resp.StatusCode != http.StatusOK {
		return parseAPIError(resp.StatusCode, b, true)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: decode response: %w", err)
	}
	return nil
}

// Stream is a streamed answer: server-sent events, decrypted and
// authenticated chunk by chunk. Next returns io.EOF only after "data: [DONE]"
// and the authenticated end of the response.
type Stream[T any] struct {
	resp *Response
	sse  *SSEReader
	done bool
	err  error
}

// ChatCompletionStream sends a streamed chat completion request (Stream is
// set by this method).
func (c *Client) ChatCompletionStream(ctx context.Context, req ChatRequest) (*Stream[ChatChunk], error) {
	req.Stream = true
	return openStream[ChatChunk](ctx, c, ChatCompletionsPath, req)
}

// CompletionStream sends a streamed completion request (Stream is set by
// this method).
func (c *Client) CompletionStream(ctx context.Context, req CompletionRequest) (*Stream[CompletionResponse], error) {
	req.Stream = true
	return openStream[CompletionResponse](ctx, c, CompletionsPath, req)
}

func openStream[T any](ctx context.Context, c *Client, path string, req any) (*Stream[T], error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Close()
		b, err := io.ReadAll(io.LimitReader(resp, MaxErrorBodySize))
		if err != nil {
			return nil, fmt.Errorf("client: read error response: %w", err)
		}
		return nil, parseAPIError(resp.StatusCode, b, true)
	}
	return &Stream[T]{resp: resp, sse: NewSSEReader(resp)}, nil
}

// Next returns the next event. Errors: an *ohttp.StreamError when the
// response was cut, reordered, altered or sealed to another key; an
// *APIError for an error event; ErrIncompleteStream when the authenticated
// stream did not end with [DONE] right before its end.
func (s *Stream[T]) Next() (*T, error) {
	if s.err != nil {
		return nil, s.err
	}
	v, err := s.next()
	if err != nil {
		s.err = err
	}
	return v, err
}

func (s *Stream[T]) next() (*T, error) {
	for {
		ev, err := s.sse.Next()
		if errors.Is(err, io.EOF) {
			if !s.done {
				return nil, ErrIncompleteStream
			}
			return nil, io.EOF
		}
		if err != nil {
			return nil, err
		}
		if s.done {
			return nil, fmt.Errorf("%w: event after [DONE]", ErrIncompleteStream)
		}
		if string(ev.Data) == "[DONE]" {
			s.done = true
			continue
		}
		var probe struct {
			Error json.RawMessage `json:"error"`
		}
		if ev.Event == "error" || (json.Unmarshal(ev.Data, &probe) == nil && len(probe.Error) > 0 && string(probe.Error) != "null") {
			return nil, parseAPIError(s.resp.StatusCode, ev.Data, true)
		}
		var v T
		if err := json.Unmarshal(ev.Data, &v); err != nil {
			return nil, fmt.Errorf("client: decode stream event: %w", err)
		}
		return &v, nil
	}
}

// Close releases the connection.
func (s *Stream[T]) Close() error { return s.resp.Close() }

// Attestation returns the verified evidence the request was encrypted under.
func (s *Stream[T]) Attestation() *Attestation { return s.resp.Attestation }

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	OwnedBy string `json:"owned_by,omitempty"`
}

// Models lists the appliance's models (GET /v1/models) after verifying its
// evidence. The list is public and travels in plaintext, unauthenticated:
// use it to pick a name, never to decide what to trust.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	if _, err := c.Verified(ctx); err != nil {
		return nil, err
	}
	u, err := c.endpoint("/v1/models")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: get %q: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readAPIError(resp, false)
	}
	var list struct {
		Data []Model `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxErrorBodySize)).Decode(&list); err != nil {
		return nil, fmt.Errorf("client: decode model list: %w", err)
	}
	return list.Data, nil
}
