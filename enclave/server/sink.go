package server

import (
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sparkinfer/cc/keys/ohttp"
)

// sink writes a response in plaintext or sealed to the request's key.
type sink interface {
	// reply writes a whole JSON response with status.
	reply(status int, body []byte)
	// startStream starts a streamed 200 response; event writes one SSE
	// event and flushes; end writes the last bytes and ends the response.
	startStream() error
	event(b []byte) error
	end(b []byte) error
}

// deadlineWriter extends the connection's write deadline before each write
// and flushes after it.
type deadlineWriter struct {
	w  gin.ResponseWriter
	rc *http.ResponseController
	wt time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.wt))
	n, err := d.w.Write(p)
	if err == nil {
		err = d.rc.Flush()
	}
	return n, err
}

func newDeadlineWriter(c *gin.Context, wt time.Duration) *deadlineWriter {
	return &deadlineWriter{w: c.Writer, rc: http.NewResponseController(c.Writer), wt: wt}
}

type plainSink struct {
	c  *gin.Context
	wt time.Duration
	dw *deadlineWriter
}

func (p *plainSink) reply(status int, body []byte) {
	_ = http.NewResponseController(p.c.Writer).SetWriteDeadline(time.Now().Add(p.wt))
	p.c.Data(status, "application/json", body)
}

func (p *plainSink) startStream() error {
	h := p.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	p.c.Writer.WriteHeader(http.StatusOK)
	p.dw = newDeadlineWriter(p.c, p.wt)
	return p.dw.rc.Flush()
}

func (p *plainSink) event(b []byte) error { _, err := p.dw.Write(b); return err }
func (p *plainSink) end(b []byte) error   { _, err := p.dw.Write(b); return err }

// sealedSink seals every response to the request's response key
// (docs/PROTOCOL.md sections 7 and 8): a whole reply as one final chunk, a
// stream as one chunk per event and a final chunk.
type sealedSink struct {
	c   *gin.Context
	req *ohttp.ServerRequest
	rnd io.Reader
	wt  time.Duration
	rw  *ohttp.ResponseWriter
}

func (s *sealedSink) reply(status int, body []byte) {
	sealed, err := s.req.SealResponse(s.rnd, body)
	if err != nil {
		s.c.Data(http.StatusInternalServerError, "application/json", errorBody(500, "internal_error", "", "response could not be sealed"))
		return
	}
	_ = http.NewResponseController(s.c.Writer).SetWriteDeadline(time.Now().Add(s.wt))
	s.c.Data(status, ohttp.ResponseMediaType, sealed)
}

func (s *sealedSink) startStream() error {
	dw := newDeadlineWriter(s.c, s.wt)
	rw, err := s.req.NewResponseWriter(dw, s.rnd)
	if err != nil {
		return err
	}
	s.rw = rw
	s.c.Writer.Header().Set("Content-Type", ohttp.ResponseMediaType)
	s.c.Writer.Header().Set("Cache-Control", "no-cache")
	s.c.Writer.WriteHeader(http.StatusOK)
	return dw.rc.Flush()
}

func (s *sealedSink) event(b []byte) error { _, err := s.rw.Write(b); return err }
func (s *sealedSink) end(b []byte) error   { return s.rw.Final(b) }
