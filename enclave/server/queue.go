package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errQueueFull is returned by queue.acquire when every slot is busy and the
// waiting line is full.
var errQueueFull = errors.New("server busy: generation queue full")

// queue admits at most slots concurrent generations and lets at most
// maxWait more wait for a slot; the rest are refused at once (429).
type queue struct {
	slots   chan struct{}
	mu      sync.Mutex
	waiting int
	maxWait int
	onDepth func(running, waiting int)
}

func newQueue(slots, maxWait int, onDepth func(running, waiting int)) *queue {
	return &queue{slots: make(chan struct{}, slots), maxWait: maxWait, onDepth: onDepth}
}

func (q *queue) report() {
	if q.onDepth != nil {
		q.onDepth(len(q.slots), q.waiting)
	}
}

// saturated reports whether acquire would refuse a request now (every slot
// busy, the waiting line full). It is a hint taken before the expensive
// work of opening a request; acquire decides.
func (q *queue) saturated() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.slots) == cap(q.slots) && q.waiting >= q.maxWait
}

// acquire takes a slot, waiting if allowed; release must be called once.
func (q *queue) acquire(ctx context.Context) (release func(), err error) {
	release = func() { <-q.slots; q.mu.Lock(); q.report(); q.mu.Unlock() }
	q.mu.Lock()
	select {
	case q.slots <- struct{}{}:
		q.report()
		q.mu.Unlock()
		return release, nil
	default:
	}
	if q.waiting >= q.maxWait {
		q.mu.Unlock()
		return nil, errQueueFull
	}
	q.waiting++
	q.report()
	q.mu.Unlock()
	defer func() { q.mu.Lock(); q.waiting--; q.report(); q.mu.Unlock() }()
	select {
	case q.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// bucket is a token bucket: rate tokens per second, at most burst.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newBucket(rate float64, burst int, now func() time.Time) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst), now: now, last: now()}
}

// take takes one token, or says how long until one is available.
func (b *bucket) take() (ok bool, retry time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	if el := t.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.burst, b.tokens+el*b.rate)
	}
	b.last = t
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}
