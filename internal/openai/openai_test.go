package openai

import (
	"encoding/json"
	"testing"
)

// TestWireFormat pins the JSON the appliance writes: what OpenAI clients
// expect present (content, finish_reason null while streaming, logprobs
// null, the delta object even when empty) and what they expect absent
// (usage on all but the last stream event, empty delta fields).
func TestWireFormat(t *testing.T) {
	stop := "stop"
	u := &Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"chat response", ChatResponse{ID: "c1", Object: "chat.completion", Created: 7, Model: "m", Usage: u,
			Choices: []ChatChoice{{Message: Message{Role: "assistant"}, FinishReason: "length"}}},
			`{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`},
		{"first chat chunk", ChatChunk{ID: "c1", Object: "chat.completion.chunk", Created: 7, Model: "m",
			Choices: []ChatChunkChoice{{Delta: Delta{Role: "assistant"}}}},
			`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`},
		{"last chat chunk", ChatChunk{ID: "c1", Object: "chat.completion.chunk", Created: 7, Model: "m",
			Choices: []ChatChunkChoice{{Delta: Delta{}, FinishReason: &stop}}},
			`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		{"usage chunk", ChatChunk{ID: "c1", Object: "chat.completion.chunk", Created: 7, Model: "m", Choices: []ChatChunkChoice{}, Usage: u},
			`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`},
		{"completion event", CompletionResponse{ID: "c2", Object: "text_completion", Created: 7, Model: "m",
			Choices: []CompletionChoice{{Text: "Once"}}},
			`{"id":"c2","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"Once","logprobs":null,"finish_reason":null}]}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
	r := ChatResponse{Choices: []ChatChoice{{Message: Message{Content: "hi"}}}}
	if r.Text() != "hi" || (&ChatResponse{}).Text() != "" {
		t.Error("ChatResponse.Text")
	}
	cr := CompletionResponse{Choices: []CompletionChoice{{Text: "yo"}}}
	if cr.Text() != "yo" || (&CompletionResponse{}).Text() != "" {
		t.Error("CompletionResponse.Text")
	}
}
