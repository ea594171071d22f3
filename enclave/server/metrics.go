package server

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (no global registration). Labels carry routes and status codes only,
// never request content.
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	tokens      prometheus.Counter
	promptToks  prometheus.Counter
	running     prometheus.Gauge
	waiting     prometheus.Gauge
	generation  prometheus.Histogram
	firstToken  prometheus.Histogram
	attestation *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sparkinfer_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sparkinfer_http_request_duration_seconds", Help: "HTTP request latency by route (streams: until the last byte).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"route"}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkinfer_generated_tokens_total", Help: "Tokens generated.",
		}),
		promptToks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sparkinfer_prompt_tokens_total", Help: "Prompt tokens processed.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkinfer_generations_running", Help: "Generations running now.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sparkinfer_queue_depth", Help: "Requests waiting for a generation slot.",
		}),
		generation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sparkinfer_generation_duration_seconds", Help: "Time from the start of a generation to its end.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}),
		firstToken: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sparkinfer_time_to_first_token_seconds", Help: "Time from the start of a generation to its first text.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		attestation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sparkinfer_attestation_requests_total", Help: "Evidence requests by result (ok, rate_limited, bad_nonce, error).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.tokens, m.promptToks, m.running, m.waiting, m.generation, m.firstToken, m.attestation,
		// The Go collector's default set, plus the live heap as of the
		// last completed GC (go_gc_heap_live_bytes): garbage excluded, it
		// shows memory growth that heap_alloc would blur.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
