package server

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sparkinfer/cc/client"
	"github.com/sparkinfer/cc/policy"
)

// TestClientInterop runs the project's client library (verify with a fresh
// nonce, encrypt, decrypt) against this server over real HTTP on loopback.
func TestClientInterop(t *testing.T) {
	s, _ := newServer(t, Config{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	pb, err := os.ReadFile("../../policy/dev-simulated.json")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse(pb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := &client.Client{BaseURL: ts.URL, Policy: pol}
	seed, mt := int64(5), 30
	temp := 0.7
	want := engineText(t, "Once upon a time", mt, temp, uint64(seed))
	ans, err := c.ChatCompletion(ctx, client.ChatRequest{Model: "stories260K", MaxTokens: &mt, Temperature: &temp, Seed: &seed,
		Messages: []client.ChatMessage{{Role: "user", Content: "Once upon a time"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Text() != want {
		t.Errorf("client chat %q, want %q", ans.Text(), want)
	}
	st, err := c.ChatCompletionStream(ctx, client.ChatRequest{Model: "stories260K", MaxTokens: &mt, Temperature: &temp, Seed: &seed,
		Messages: []client.ChatMessage{{Role: "user", Content: "Once upon a time"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var b strings.Builder
	for {
		ch, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			b.WriteString(c.Delta.Content)
		}
	}
	if b.String() != want {
		t.Errorf("client stream %q, want %q", b.String(), want)
	}
	// The default policy refuses simulated evidence: no request is sent.
	strict := &client.Client{BaseURL: ts.URL, Policy: policy.Default()}
	if _, err := strict.ChatCompletion(ctx, client.ChatRequest{Model: "stories260K", Messages: []client.ChatMessage{{Role: "user", Content: "x"}}}); err == nil {
		t.Error("the default policy accepted the sim appliance")
	}
}
