package ohttp

import (
	"container/heap"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
)

// Defaults for NewReplayCache.
const (
	DefaultReplayCapacity = 1 << 16
	DefaultMaxClockSkew   = 60 * time.Second
)

// ReplayCache rejects replayed requests. A request carries a timestamp
// (Unix seconds); the cache accepts it only when the timestamp is within
// MaxSkew of its clock, and only once: it remembers the SHA-256 of the
// request's encapsulated key (fresh for every HPKE encapsulation) until the
// timestamp itself falls out of the skew window, when a replay would be
// rejected as stale anyway. Both checks use the same clock, so a clock step
// cannot open a gap between them.
//
// Memory is bounded: at most Capacity entries. When the cache is full of
// entries still inside the window, Check fails closed with
// ErrReplayCacheFull (the server answers 503) instead of forgetting an entry
// that would let a replay through. Size it as (request rate) x (2 x skew).
// A ReplayCache is safe for concurrent use.
type ReplayCache struct {
	mu       sync.Mutex
	capacity int
	skew     int64 // seconds
	now      func() time.Time
	seen     map[[32]byte]struct{}
	byExpiry expiryHeap
}

type replayEntry struct {
	key     [32]byte
	expires int64 // Unix seconds after which the entry may go
}

type expiryHeap []replayEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(replayEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// NewReplayCache returns a cache of fixed capacity accepting timestamps
// within maxSkew (whole seconds, at least 1 s) of now(). now nil means
// time.Now.
func NewReplayCache(capacity int, maxSkew time.Duration, now func() time.Time) (*ReplayCache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("ohttp: replay cache capacity %d, want > 0", capacity)
	}
	if maxSkew < time.Second {
		return nil, fmt.Errorf("ohttp: replay cache max skew %s, want at least 1s", maxSkew)
	}
	if now == nil {
		now = time.Now
	}
	return &ReplayCache{
		capacity: capacity,
		skew:     int64(maxSkew / time.Second),
		now:      now,
		seen:     make(map[[32]byte]struct{}),
	}, nil
}

// MaxSkew returns the accepted clock skew.
func (c *ReplayCache) MaxSkew() time.Duration { return time.Duration(c.skew) * time.Second }

// Len returns the number of remembered requests.
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// Check accepts a request with encapsulated key enc and timestamp ts once,
// or returns a [*RequestError] of kind ErrStaleRequest, ErrReplayedRequest
// or ErrReplayCacheFull.
func (c *ReplayCache) Check(enc []byte, ts time.Time) error {
	now := c.now().Unix()
	t := ts.Unix()
	if t < now-c.skew || t > now+c.skew {
		return &RequestError{Err: ErrStaleRequest, Detail: fmt.Sprintf("timestamp %d is %+d s from the server clock, allowed ±%d s", t, t-now, c.skew)}
	}
	key := sha256.Sum256(enc)
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.byExpiry) > 0 && c.byExpiry[0].expires < now {
		e := heap.Pop(&c.byExpiry).(replayEntry)
		delete(c.seen, e.key)
	}
	if _, ok := c.seen[key]; ok {
		return &RequestError{Err: ErrReplayedRequest, Detail: "encapsulated key already used"}
	}
	if len(c.seen) >= c.capacity {
		return &RequestError{Err: ErrReplayCacheFull, Detail: fmt.Sprintf("%d requests within the window", c.capacity)}
	}
	c.seen[key] = struct{}{}
	heap.Push(&c.byExpiry, replayEntry{key: key, expires: t + c.skew})
	return nil
}
