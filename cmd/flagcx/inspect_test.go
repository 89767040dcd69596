package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// record is what the test reads of a FLAGCX_INSPECT line
// (core/internal/inspect).
type record struct {
	Header struct {
		Rank   int `json:"rank"`
		NRanks int `json:"n_ranks"`
	} `json:"header"`
	Perf struct {
		Coll     string  `json:"coll"`
		Bytes    int64   `json:"coll_msg_size_bytes"`
		BusBW    float64 `json:"coll_busbw_gbs"`
		Duration int64   `json:"duration_ns"`
		StartNS  int64   `json:"start_ns"`
		EndNS    int64   `json:"end_ns"`
		Source   string  `json:"coll_timing_source"`
		Runner   string  `json:"runner"`
		Path     string  `json:"path"`
	} `json:"coll_perf"`
}

// benchRow is what the test reads of bench's --json rows.
type benchRow struct {
	Op         string `json:"op"`
	Size       int64  `json:"size"`
	OutOfPlace struct {
		TimeUS float64 `json:"time_us"`
		BusBW  float64 `json:"busbw"`
	} `json:"out_of_place"`
	InPlace struct {
		TimeUS float64 `json:"time_us"`
	} `json:"in_place"`
}

func readRecords(t *testing.T, dir string) map[int][]record {
	files, err := filepath.Glob(filepath.Join(dir, "flagcx-inspect-*.jsonl"))
	require.NoError(t, err)
	out := map[int][]record{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r record
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
			out[r.Header.Rank] = append(out[r.Header.Rank], r)
		}
		fh.Close()
	}
	return out
}

// timed are a rank's records of the timed calls of one bench row's half:
// bench barriers (an empty HostAllGather) right before it times iters
// calls (cmd/flagcx/internal/bench/timing.go), so the first barrier
// followed by calls of coll and size opens the row's out-of-place half,
// the second its in-place half.
func timed(recs []record, coll string, size int64, iters, half int) []record {
	seen := 0
	for i := 0; i+iters < len(recs); i++ {
		if recs[i].Perf.Coll != "HostAllGather" || recs[i].Perf.Bytes != 0 {
			continue
		}
		next := recs[i+1].Perf
		if next.Coll != coll || (size >= 0 && next.Bytes != size) {
			continue
		}
		if seen == half {
			return recs[i+1 : i+1+iters]
		}
		seen++
	}
	return nil
}

// TestBenchInspect: `bench all -c 1` with FLAGCX_INSPECT writes a record
// of every call on every rank (host ranks, an emulated split 1,1 and an
// emulated nvidia:2,host:2): after each of bench's barriers, the timed
// calls of the row, with its size and a runner. Where bench times every
// rank on the host, the records of a row's timed calls give its time:
// the slowest rank's span over its calls is bench's time within 5%, and
// its bus bandwidth bench's.
func TestBenchInspect(t *testing.T) {
	plugins := pluginDir(t)
	const iters = 20
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		// hostTimed: bench times every rank on the host, as the records
		// do. A device rank's bench time is its runtime's events'
		// (cmd/flagcx/internal/bench/device.go), which the emulated
		// runtime stamps when its stream thread gets there: on a busy
		// machine that differs from the host's clock by more than 5%.
		hostTimed bool
	}{
		{"host ranks", nil, []string{"--np", "2"}, true},
		{"split 1,1", []string{"FLAGCX_CLUSTER_SPLIT_LIST=1,1"}, []string{"--emulated", "--ranks", "nvidia:2"}, false},
		{"nvidia:2,host:2", nil, []string{"--emulated", "--ranks", "nvidia:2,host:2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, js := t.TempDir(), filepath.Join(t.TempDir(), "rows.json")
			env := cleanEnv(append(tc.env, "FLAGCX_INSPECT="+dir)...)
			args := append([]string{"--plugin-dir", plugins, "bench", "all", "-b", "256K", "-e", "1M", "-f", "4", "-w", "2", "-n", "20", "-c", "1", "--json", js}, tc.args...)
			r := runFlagcx(t, 5*time.Minute, env, args...)
			require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			b, err := os.ReadFile(js)
			require.NoError(t, err)
			var report struct {
				Results []benchRow `json:"results"`
			}
			require.NoError(t, json.Unmarshal(b, &report))
			rows := report.Results
			require.NotEmpty(t, rows)
			recs := readRecords(t, dir)
			require.NotEmpty(t, recs)
			nranks := recs[0][0].Header.NRanks
			require.Len(t, recs, nranks, "a file a rank")
			rowsOf := map[string]int{} // rows matched without their size
			for _, row := range rows {
				c, err := sdk.ParseCollective(row.Op)
				require.NoError(t, err)
				coll := c.Title()
				if c == sdk.SendRecv {
					coll = "Group" // bench's sendrecv is a Send and a Recv in a group
				}
				size := row.Size
				if c == sdk.AlltoAllv {
					// A record's size is the elements its counts move;
					// bench's row is its buffers' (sdk.Call.MsgBytes).
					size = -1
				}
				slowest, slowestBus := 0.0, 0.0
				for rank := 0; rank < nranks; rank++ {
					got := timed(recs[rank], coll, size, iters, 2*rowsOf[coll])
					require.Len(t, got, iters, "rank %d: %s of %d bytes: the timed calls after bench's barrier", rank, coll, row.Size)
					for _, g := range got {
						require.Equal(t, "host_wall", g.Perf.Source)
						require.NotEmpty(t, g.Perf.Runner)
						require.Positive(t, g.Perf.Duration)
					}
					// Bench times the loop, from before its first call to
					// after its last: the records' span, gaps between
					// calls included (a rank descheduled there).
					span := float64(got[iters-1].Perf.EndNS - got[0].Perf.StartNS)
					if mean := span / iters / 1e3; mean > slowest {
						slowest = mean
						slowestBus = row.OutOfPlace.BusBW * row.OutOfPlace.TimeUS / mean
					}
				}
				if size < 0 {
					rowsOf[coll]++ // the next row's halves come after this one's
				}
				if !tc.hostTimed {
					continue
				}
				require.InEpsilon(t, row.OutOfPlace.TimeUS, slowest, 0.05, "%s %s of %d bytes: bench's time %.1f us against the records' %.1f (slowest rank's mean)", tc.name, coll, row.Size, row.OutOfPlace.TimeUS, slowest)
				if size >= 0 {
					require.InEpsilon(t, row.OutOfPlace.BusBW, slowestBus, 0.05)
				}
			}
		})
	}
}
