// Package openai holds the OpenAI API's response shapes as the appliance
// writes them and the client reads them (one definition for both sides of
// the wire). Field order and tags are the wire format: "content",
// "finish_reason" (null while a stream runs), "logprobs" (always null) and
// the message fields are always present; a stream's delta leaves out empty
// fields; usage is left out of stream events but the last.
package openai

// Usage is token accounting.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Message is the assistant message of a non-streamed chat completion.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

// ChatResponse is a non-streamed chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// Text returns the first choice's message content ("" without choices).
func (r *ChatResponse) Text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	return r.Choices[0].Message.Content
}

// Delta is the new part of a streamed chat message: the role in the first
// event, then text.
type Delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat chunk.
type ChatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// ChatChunk is one event of a streamed chat completion.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a completion.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// CompletionResponse is a non-streamed completion; a streamed completion's
// events have the same shape, each with the new text.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// Text returns the first choice's text ("" without choices).
func (r *CompletionResponse) Text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	return r.Choices[0].Text
}
