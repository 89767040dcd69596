package core

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// inspectLine is what a record line holds (core/internal/inspect).
type inspectLine struct {
	Header struct {
		ID     string `json:"id"`
		Rank   int    `json:"rank"`
		NRanks int    `json:"n_ranks"`
		NNodes int    `json:"nnodes"`
	} `json:"header"`
	Metadata struct {
		Version  string `json:"inspector_output_format_version"`
		Hostname string `json:"hostname"`
		Pid      int    `json:"pid"`
	} `json:"metadata"`
	Perf struct {
		Coll     string  `json:"coll"`
		Seq      uint64  `json:"coll_sn"`
		Bytes    int64   `json:"coll_msg_size_bytes"`
		TimeUS   float64 `json:"coll_exec_time_us"`
		AlgBW    float64 `json:"coll_algobw_gbs"`
		BusBW    float64 `json:"coll_busbw_gbs"`
		Count    int     `json:"count"`
		DType    string  `json:"datatype"`
		Op       string  `json:"op"`
		Root     int     `json:"root"`
		Peer     *int    `json:"peer"`
		Runner   string  `json:"runner"`
		Path     string  `json:"path"`
		StartNS  int64   `json:"start_ns"`
		EndNS    int64   `json:"end_ns"`
		Duration int64   `json:"duration_ns"`
		Failed   bool    `json:"failed"`
	} `json:"coll_perf"`
}

func readInspect(t *testing.T, path string) []inspectLine {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []inspectLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l inspectLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "line %q", sc.Text())
		out = append(out, l)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestInspectRecordsEveryCall: with FLAGCX_INSPECT, every rank writes one
// line per call it ran, in order, with the call's shape, the runner that
// ran it and times whose bandwidths follow nccl-tests' formulas; a group
// is one line.
func TestInspectRecordsEveryCall(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FLAGCX_INSPECT", dir)
	comms := startComms(t, 2, testNet(10*time.Second))
	errs := onAll(comms, func(c *Comm) error {
		b := HostBuffer(make([]byte, 4096))
		r := HostBuffer(make([]byte, 8192))
		if err := c.AllReduce(b, b, 1024, sdk.Float32, sdk.Sum, 0); err != nil {
			return err
		}
		if err := c.AllGather(b, r, 1024, sdk.Float32, 0); err != nil {
			return err
		}
		if err := c.Broadcast(b, b, 10, sdk.Int8, 1, 0); err != nil {
			return err
		}
		var err error
		if c.Rank() == 0 {
			err = c.Send(b, 100, sdk.Float64, 1, 0)
		} else {
			err = c.Recv(b, 100, sdk.Float64, 0, 0)
		}
		if err != nil {
			return err
		}
		c.GroupStart()
		_ = c.AllReduce(b, b, 8, sdk.Float32, sdk.Max, 0)
		_ = c.AllReduce(r, r, 8, sdk.Float32, sdk.Max, 0)
		if err := c.GroupEnd(); err != nil {
			return err
		}
		return c.Destroy()
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "flagcx-inspect-*.jsonl"))
	require.NoError(t, err)
	require.Len(t, files, 2, "one file a rank")
	for _, f := range files {
		lines := readInspect(t, f)
		require.Len(t, lines, 5, f)
		want := []struct {
			coll, dtype, op string
			bytes           int64
			root            int
			factor          float64
		}{
			{"AllReduce", "float32", "sum", 4096, -1, 1},
			{"AllGather", "float32", "", 8192, -1, 0.5},
			{"Broadcast", "int8", "", 10, 1, 1},
			{"", "float64", "", 800, -1, 1},
			{"Group", "", "", 64, -1, 1},
		}
		rank := lines[0].Header.Rank
		for i, l := range lines {
			w := want[i]
			if w.coll == "" {
				w.coll = map[int]string{0: "Send", 1: "Recv"}[rank]
				require.NotNil(t, l.Perf.Peer)
				require.Equal(t, 1-rank, *l.Perf.Peer)
			}
			p := l.Perf
			require.Equal(t, rank, l.Header.Rank)
			require.Equal(t, 2, l.Header.NRanks)
			require.Equal(t, 1, l.Header.NNodes)
			require.Equal(t, os.Getpid(), l.Metadata.Pid)
			require.Equal(t, lines[0].Header.ID, l.Header.ID, "one communicator")
			require.Equal(t, w.coll, p.Coll, "line %d", i)
			require.Equal(t, uint64(i+1), p.Seq)
			require.Equal(t, w.dtype, p.DType, p.Coll)
			require.Equal(t, w.op, p.Op, p.Coll)
			require.Equal(t, w.bytes, p.Bytes, p.Coll)
			require.Equal(t, w.root, p.Root, p.Coll)
			require.Equal(t, "host engine", p.Runner, p.Coll)
			require.False(t, p.Failed)
			require.Positive(t, p.Duration)
			require.Equal(t, p.EndNS-p.StartNS, p.Duration)
			require.InDelta(t, float64(p.Duration)/1e3, p.TimeUS, 1e-3)
			require.InDelta(t, float64(p.Bytes)/float64(p.Duration), p.AlgBW, 1e-6)
			require.InDelta(t, p.AlgBW*w.factor, p.BusBW, 1e-6)
			require.InDelta(t, time.Now().UnixNano(), p.StartNS, float64(time.Minute), "wall clock")
			if i > 0 {
				require.GreaterOrEqual(t, p.StartNS, lines[i-1].Perf.EndNS, "in call order")
			}
		}
	}
}

// TestInspectRefusesADirectoryItCannotWrite: one error naming the
// variable and what to do, not a communicator that drops its records.
func TestInspectRefusesADirectoryItCannotWrite(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	t.Setenv("FLAGCX_INSPECT", filepath.Join(file, "sub"))
	cfg := testNet(5 * time.Second)
	id, err := GetUniqueID(WithIDNetConfig(cfg))
	require.NoError(t, err)
	_, err = InitRank(id, 1, 0, WithNetConfig(cfg))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	require.ErrorContains(t, err, "FLAGCX_INSPECT=")
	require.ErrorContains(t, err, "name a directory this process can write, or unset it")
}

// TestMetricsServeTheCalls: with FLAGCX_METRICS=host:port the process
// serves its communicators' calls over HTTP; a scrape parsed by the
// Prometheus parser counts every call of every rank, by collective and
// runner.
func TestMetricsServeTheCalls(t *testing.T) {
	t.Setenv("FLAGCX_METRICS", "127.0.0.1:0")
	comms := startComms(t, 2, testNet(10*time.Second))
	const calls = 5
	errs := onAll(comms, func(c *Comm) error {
		b := HostBuffer(make([]byte, 4096))
		for i := 0; i < calls; i++ {
			if err := c.AllReduce(b, b, 1024, sdk.Float32, sdk.Sum, 0); err != nil {
				return err
			}
		}
		return c.Broadcast(b, b, 1, sdk.Int8, 0, 0)
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NotNil(t, comms[0].insp.m)
	resp, err := http.Get("http://" + comms[0].insp.m.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	got := map[string]float64{}
	for _, m := range fams["flagcx_calls_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		require.Equal(t, comms[0].insp.commID, l["comm"])
		got[l["rank"]+" "+l["coll"]+" "+l["path"]+" "+l["size"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{
		"0 AllReduce host engine <=4K": calls, "1 AllReduce host engine <=4K": calls,
		"0 Broadcast host engine <=1K": 1, "1 Broadcast host engine <=1K": 1,
	}, got)
}
