// Package metrics serves what a process's communicators did as Prometheus
// metrics (FLAGCX_METRICS; docs/observability.md): calls, bytes and a
// latency histogram per collective, plan path and size bucket, failed
// calls, and revocations. One registry serves every communicator of the
// process, over HTTP (FLAGCX_METRICS=host:port, at /metrics) or as a node
// exporter textfile (FLAGCX_METRICS=PATH.prom, rewritten every
// textfileEvery and when the process's communicators are destroyed).
//
// Metrics are fed from the records of core's funnel (core/inspect.go), so
// the two always count the same calls.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Call is what a communicator reports of one call.
type Call struct {
	Comm    string // the communicator's id, as its records name it
	Rank    int
	Coll    string
	Path    string // the runner's plan path, or the runner where no plan ran
	Bytes   int64
	Seconds float64
	Failed  bool
}

// Sink takes the calls of a process's communicators.
type Sink struct {
	calls    *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	failures *prometheus.CounterVec
	revoked  *prometheus.CounterVec
	reg      *prometheus.Registry

	srv      *http.Server
	addr     string
	textfile string
	stop     chan struct{}
	done     chan struct{}
}

// textfileEvery is how often a textfile is rewritten.
const textfileEvery = 10 * time.Second

// Start serves the metrics where where says: host:port (port 0: any free
// one, Addr says which) or a path ending in .prom.
func Start(where string) (*Sink, error) {
	s := newSink()
	if strings.HasSuffix(where, ".prom") {
		s.textfile = where
		if err := s.writeTextfile(); err != nil {
			return nil, err
		}
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.rewrite()
		return s, nil
	}
	l, err := net.Listen("tcp", where)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.addr = l.Addr().String()
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func newSink() *Sink {
	labels := []string{"comm", "rank", "coll", "path"}
	s := &Sink{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagcx_calls_total",
			Help: "Calls run, by communicator, rank, collective, plan path and size bucket."}, append(labels, "size")),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagcx_bytes_total",
			Help: "Bytes of the calls run (nccl-tests' size of each call)."}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flagcx_call_seconds",
			Help:    "Time of the calls run, from the call to its return.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}, append(labels, "size")),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagcx_call_failures_total",
			Help: "Calls that returned an error."}, []string{"comm", "rank", "coll"}),
		revoked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagcx_revocations_total",
			Help: "Communicators revoked after a peer was lost."}, []string{"comm", "rank"}),
		reg: prometheus.NewRegistry(),
	}
	s.reg.MustRegister(s.calls, s.bytes, s.latency, s.failures, s.revoked)
	return s
}

// Addr is the address the HTTP server listens on ("" for a textfile).
func (s *Sink) Addr() string { return s.addr }

// Observe counts one call.
func (s *Sink) Observe(c *Call) {
	rank := strconv.Itoa(c.Rank)
	size := SizeBucket(c.Bytes)
	s.calls.WithLabelValues(c.Comm, rank, c.Coll, c.Path, size).Inc()
	s.bytes.WithLabelValues(c.Comm, rank, c.Coll, c.Path).Add(float64(c.Bytes))
	s.latency.WithLabelValues(c.Comm, rank, c.Coll, c.Path, size).Observe(c.Seconds)
	if c.Failed {
		s.failures.WithLabelValues(c.Comm, rank, c.Coll).Inc()
	}
}

// Revoked counts a revocation of a communicator's rank.
func (s *Sink) Revoked(comm string, rank int) {
	s.revoked.WithLabelValues(comm, strconv.Itoa(rank)).Inc()
}

// SizeBucket names the power of 4 a size falls under ("<=1K", ...,
// "<=1G", ">1G"), bounding the label's values.
func SizeBucket(n int64) string {
	const (
		kib = 1 << 10
		gib = 1 << 30
	)
	if n > gib {
		return ">1G"
	}
	b := int64(kib)
	for b < n {
		b *= 4
	}
	switch {
	case b >= gib:
		return "<=1G"
	case b >= 1<<20:
		return fmt.Sprintf("<=%dM", b>>20)
	}
	return fmt.Sprintf("<=%dK", b>>10)
}

// Flush writes the textfile now (nothing over HTTP, where a scrape reads
// the registry itself).
func (s *Sink) Flush() error {
	if s.textfile == "" {
		return nil
	}
	return s.writeTextfile()
}

// Close stops the server or the rewriting, writing the textfile last.
func (s *Sink) Close() error {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return s.srv.Shutdown(ctx)
	}
	close(s.stop)
	<-s.done
	return s.writeTextfile()
}

func (s *Sink) rewrite() {
	defer close(s.done)
	t := time.NewTicker(textfileEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.writeTextfile()
		}
	}
}

// writeTextfile writes the registry to a temporary file and renames it,
// so that a collector never reads half a file.
func (s *Sink) writeTextfile() error {
	tmp := s.textfile + ".tmp"
	if err := prometheus.WriteToTextfile(tmp, s.reg); err != nil {
		return err
	}
	return os.Rename(tmp, s.textfile)
}

// The process's sink: communicators share it (one port, one file).
var (
	procMu   sync.Mutex
	procSink *Sink
	procAt   string
)

// Shared is the process's sink at where, started by the first caller;
// every later caller must name the same place.
func Shared(where string) (*Sink, error) {
	procMu.Lock()
	defer procMu.Unlock()
	if procSink != nil {
		if where != procAt {
			return nil, errors.New("this process serves its metrics at " + procAt + " already")
		}
		return procSink, nil
	}
	s, err := Start(where)
	if err != nil {
		return nil, err
	}
	procSink, procAt = s, where
	return s, nil
}
