package model

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that split loops into chunks.
// The calling goroutine works too, so a pool of n runs n chunks at once.
// Results do not depend on the number of workers: each output element is
// computed by exactly one chunk, the same way.
type Pool struct {
	n    int
	work chan *job
	once sync.Once
}

type job struct {
	fn    func(lo, hi int)
	n     int
	grain int
	next  atomic.Int64
	wg    sync.WaitGroup
}

// NewPool starts a pool of n workers (n <= 0: GOMAXPROCS).
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &Pool{n: n, work: make(chan *job, n)}
	for range n - 1 {
		go func() {
			for j := range p.work {
				j.run()
				j.wg.Done()
			}
		}()
	}
	return p
}

// Workers returns the pool's size.
func (p *Pool) Workers() int { return p.n }

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() { p.once.Do(func() { close(p.work) }) }

func (j *job) run() {
	for {
		lo := int(j.next.Add(int64(j.grain))) - j.grain
		if lo >= j.n {
			return
		}
		j.fn(lo, min(lo+j.grain, j.n))
	}
}

// For calls fn(lo, hi) over [0, n) in chunks of about n/(4*workers)
// elements, but at least minGrain, and returns when all are done.
func (p *Pool) For(n, minGrain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain := max(minGrain, (n+4*p.n-1)/(4*p.n), 1)
	chunks := (n + grain - 1) / grain
	if p.n == 1 || chunks == 1 {
		fn(0, n)
		return
	}
	j := &job{fn: fn, n: n, grain: grain}
	helpers := min(p.n-1, chunks-1)
	j.wg.Add(helpers)
	for range helpers {
		p.work <- j
	}
	j.run()
	j.wg.Wait()
}
