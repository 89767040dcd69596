package host

import (
	"context"
	"runtime/trace"
	"sync"
)

// A pipe runs one rank's part of a pipelined ring or chain: a sequence of
// total messages sent to one peer and total messages received from another
// (message j goes out as j and comes in as j on every rank, so both ends
// compute the same length for it), with three goroutines:
//
//   - the sender sends message j once its data is ready (processed has
//     passed the index sendMsg names) and counts it in sent;
//   - the receiver receives message j into the buffer recvMsg names once
//     that buffer is free (processed and sent have passed the indices
//     recvMsg names) and counts it in received;
//   - the caller's goroutine processes received messages in order (a
//     reduction, or nothing) and counts them in processed.
//
// Every wait is on a smaller message index than the one it guards, on this
// rank or on a neighbour, so the pipe cannot deadlock however the Peers
// buffer (it is checked over LocalPeers, which do not buffer at all). Two
// Sends to the same peer or two Recvs from the same peer never overlap:
// each side has one goroutine. Zero-length messages are skipped by both
// ends alike.
type pipe struct {
	name     string
	total    int
	to, from int // peers; -1 for none
	// sendMsg gives the data of message j and the message that must be
	// processed before it is sent (-1 for none).
	sendMsg func(j int) (buf []byte, afterProcessed int)
	// recvMsg gives where message j lands, and the messages that must be
	// processed and sent before it may be overwritten (-1 for none). It
	// must not depend on state: the processing goroutine calls it again.
	recvMsg func(j int) (dst []byte, afterProcessed, afterSent int)
	// process handles received message j (may be nil).
	process func(j int, data []byte)
	// processAfterSent: message j is processed only once message j was
	// sent (processing overwrites what the sender reads, in place).
	processAfterSent bool
}

// flow holds a pipe's progress counters and its first error.
type flow struct {
	mu                        sync.Mutex
	cond                      sync.Cond
	sent, received, processed int
	err                       error
}

// wait blocks until *c > idx (the message idx has passed) or the pipe
// failed; it reports whether to go on.
func (f *flow) wait(c *int, idx int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for *c <= idx && f.err == nil {
		f.cond.Wait()
	}
	return f.err == nil
}

func (f *flow) advance(c *int) {
	f.mu.Lock()
	*c++
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *flow) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (e *Engine) runPipe(p *pipe) error {
	f := &flow{}
	f.cond.L = &f.mu
	var wg sync.WaitGroup
	if p.to >= 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < p.total; j++ {
				buf, after := p.sendMsg(j)
				if !f.wait(&f.processed, after) {
					return
				}
				if len(buf) > 0 {
					r := trace.StartRegion(context.Background(), "pipe send")
					err := e.send(p.name, p.to, buf)
					r.End()
					if err != nil {
						f.fail(err)
						return
					}
				}
				f.advance(&f.sent)
			}
		}()
	}
	if p.from >= 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < p.total; j++ {
				dst, afterProc, afterSent := p.recvMsg(j)
				if !f.wait(&f.processed, afterProc) || !f.wait(&f.sent, afterSent) {
					return
				}
				if len(dst) > 0 {
					r := trace.StartRegion(context.Background(), "pipe recv")
					err := e.recv(p.name, p.from, dst)
					r.End()
					if err != nil {
						f.fail(err)
						return
					}
				}
				f.advance(&f.received)
			}
		}()
		for j := 0; j < p.total; j++ {
			if !f.wait(&f.received, j) || (p.processAfterSent && !f.wait(&f.sent, j)) {
				break
			}
			if p.process != nil {
				data, _, _ := p.recvMsg(j)
				r := trace.StartRegion(context.Background(), "pipe process")
				p.process(j, data)
				r.End()
			}
			f.advance(&f.processed)
		}
	}
	wg.Wait()
	return f.err
}
