// Package inspect writes a record of every call a communicator runs, one
// JSON line per call in a file of the rank's own (FLAGCX_INSPECT=DIR), in
// the shape of NCCL Inspector's records (header, metadata, coll_perf;
// docs/observability.md) with flagcx-go's fields beside them: the runner
// and plan path that served the call, its count, type, op and root, and
// its start and end in wall-clock nanoseconds.
//
// The caller's cost is a copy into a ring under a mutex: a goroutine of
// the Writer formats and writes the records off the call's path, every
// flushEvery or as soon as the ring is half full. A record that finds
// the ring full is dropped and counted (the next line written says how
// many). A file that reaches its cap is renamed to NAME.1 (replacing the
// previous one) and started anew, so a rank keeps at most twice the cap.
package inspect

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Call is one call's record, as the communicator fills it.
type Call struct {
	Seq        uint64 // the call's number on this communicator, from 1
	Coll       string // "AllReduce", ..., "SendRecv" (a group's sends and receives), "Group"
	DType, Op  string // "" where the call has none
	Count      int    // the count argument (elements)
	Bytes      int64  // the message size as nccl-tests counts it (sdk.Call.MsgBytes)
	Root       int    // -1 where the call has none
	Peer       int    // a Send's or Recv's peer; -1 otherwise
	Runner     string // the funnel's runner that ran it (core/enqueue.go)
	Path       string // the plan's path, "" where no plan ran
	Start, End int64  // wall clock, ns since the Unix epoch
	BusFactor  float64
	Failed     bool
	// Enqueued: the call returned once its work was enqueued on the
	// caller's stream (a homogeneous device communicator's vendor call):
	// its time is the enqueue's ("coll_timing_source": "enqueue"), not
	// the work's; otherwise the call returned with its result in place
	// ("host_wall").
	Enqueued bool
}

// Header is what every record of a communicator's rank repeats.
type Header struct {
	CommID       uint64
	Rank, NRanks int
	NNodes       int
	Host         string
	Pid          int
}

// ringSize bounds the records waiting to be written; flushEvery is the
// longest a record waits.
const (
	ringSize   = 4096
	flushEvery = 100 * time.Millisecond
)

// Writer writes one rank's records.
type Writer struct {
	path string
	max  int64
	hdr  Header

	mu      sync.Mutex
	ring    []Call
	dropped uint64
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	f       *os.File
	bw      *bufio.Writer
	written int64
	line    []byte
	err     error
}

// Open starts the records of one communicator's rank in dir, at most max
// bytes a file (0: no cap).
func Open(dir string, max int64, h Header) (*Writer, error) { return open(dir, max, h, ringSize, true) }

// open is Open with a ring of n records, and without its writing
// goroutine when !start (tests then write with flush).
func open(dir string, max int64, h Header, n int, start bool) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("flagcx-inspect-%s-%d-%014x-r%d.jsonl", h.Host, h.Pid, h.CommID, h.Rank)
	w := &Writer{path: filepath.Join(dir, name), max: max, hdr: h, ring: make([]Call, 0, n),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.open(); err != nil {
		return nil, err
	}
	if start {
		go w.run()
	}
	return w, nil
}

// Path is the file the records go to.
func (w *Writer) Path() string { return w.path }

// Record keeps c for the writer; it does not block on the file.
func (w *Writer) Record(c *Call) {
	w.mu.Lock()
	if len(w.ring) == cap(w.ring) {
		w.dropped++
		w.mu.Unlock()
		return
	}
	w.ring = append(w.ring, *c)
	half := len(w.ring) == cap(w.ring)/2
	w.mu.Unlock()
	if half {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// Close writes what is left and closes the file; it returns the first
// error writing met.
func (w *Writer) Close() error {
	close(w.stop)
	<-w.done
	return w.err
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.bw, w.written = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

// run writes the ring out every flushEvery, when kicked and at stop.
func (w *Writer) run() {
	defer close(w.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	spare := make([]Call, 0, cap(w.ring))
	for {
		stopping := false
		select {
		case <-tick.C:
		case <-w.kick:
		case <-w.stop:
			stopping = true
		}
		w.mu.Lock()
		batch, dropped := w.ring, w.dropped
		w.ring, w.dropped = spare[:0], 0
		w.mu.Unlock()
		w.write(batch, dropped)
		spare = batch
		if stopping {
			w.keep(w.bw.Flush())
			if w.f != nil {
				w.keep(w.f.Close())
			}
			return
		}
	}
}

func (w *Writer) keep(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// write formats batch and writes it, rotating the file at its cap.
func (w *Writer) write(batch []Call, dropped uint64) {
	now := time.Now().UnixMicro()
	for i := range batch {
		w.line = w.appendRecord(w.line[:0], &batch[i], now, dropped)
		dropped = 0
		if w.max > 0 && w.written+int64(len(w.line)) > w.max && w.written > 0 {
			w.rotate()
		}
		n, err := w.bw.Write(w.line)
		w.written += int64(n)
		w.keep(err)
	}
	w.keep(w.bw.Flush())
}

// rotate keeps the full file as NAME.1 and starts NAME anew.
func (w *Writer) rotate() {
	w.keep(w.bw.Flush())
	w.keep(w.f.Close())
	w.keep(os.Rename(w.path, w.path+".1"))
	if err := w.open(); err != nil {
		w.keep(err)
		// The records are lost from here on rather than the caller
		// stopped; Close returns the error.
		w.f, w.bw = nil, bufio.NewWriter(io.Discard)
	}
}

// appendRecord is c as one JSON line. Strings come from flagcx-go's own
// names (collectives, types, runners, paths, a host name), quoted with
// strconv.
func (w *Writer) appendRecord(b []byte, c *Call, nowUS int64, dropped uint64) []byte {
	h := &w.hdr
	b = append(b, `{"header":{"id":"0x`...)
	b = strconv.AppendUint(b, h.CommID, 16)
	b = append(b, `","rank":`...)
	b = strconv.AppendInt(b, int64(h.Rank), 10)
	b = append(b, `,"n_ranks":`...)
	b = strconv.AppendInt(b, int64(h.NRanks), 10)
	b = append(b, `,"nnodes":`...)
	b = strconv.AppendInt(b, int64(h.NNodes), 10)
	b = append(b, `},"metadata":{"inspector_output_format_version":"flagcx-1","rec_mechanism":"flagcx_enqueue","dump_timestamp_us":`...)
	b = strconv.AppendInt(b, nowUS, 10)
	b = append(b, `,"hostname":`...)
	b = strconv.AppendQuote(b, h.Host)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(h.Pid), 10)
	if dropped > 0 {
		b = append(b, `,"records_dropped":`...)
		b = strconv.AppendUint(b, dropped, 10)
	}
	b = append(b, `},"coll_perf":{"coll":`...)
	b = strconv.AppendQuote(b, c.Coll)
	b = append(b, `,"coll_sn":`...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"coll_msg_size_bytes":`...)
	b = strconv.AppendInt(b, c.Bytes, 10)
	ns := c.End - c.Start
	b = append(b, `,"coll_exec_time_us":`...)
	b = strconv.AppendFloat(b, float64(ns)/1e3, 'f', 3, 64)
	b = append(b, `,"coll_timing_source":`...)
	if c.Enqueued {
		b = append(b, `"enqueue"`...)
	} else {
		b = append(b, `"host_wall"`...)
	}
	b = append(b, `,"coll_algobw_gbs":`...)
	alg := 0.0
	if ns > 0 {
		alg = float64(c.Bytes) / float64(ns) // bytes per ns = GB/s
	}
	b = strconv.AppendFloat(b, alg, 'f', 6, 64)
	b = append(b, `,"coll_busbw_gbs":`...)
	b = strconv.AppendFloat(b, alg*c.BusFactor, 'f', 6, 64)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(c.Count), 10)
	b = appendField(b, "datatype", c.DType)
	b = appendField(b, "op", c.Op)
	b = append(b, `,"root":`...)
	b = strconv.AppendInt(b, int64(c.Root), 10)
	if c.Peer >= 0 {
		b = append(b, `,"peer":`...)
		b = strconv.AppendInt(b, int64(c.Peer), 10)
	}
	b = appendField(b, "runner", c.Runner)
	b = appendField(b, "path", c.Path)
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, c.Start, 10)
	b = append(b, `,"end_ns":`...)
	b = strconv.AppendInt(b, c.End, 10)
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, ns, 10)
	if c.Failed {
		b = append(b, `,"failed":true`...)
	}
	return append(b, "}}\n"...)
}

// appendField appends ,"name":"value", or nothing for an empty value.
func appendField(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendQuote(b, value)
}
