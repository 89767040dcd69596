package inspect

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func lines(t *testing.T, path string) []map[string]map[string]any {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

// TestWriterRotatesAtItsCap: past the cap the file is kept as NAME.1 and
// started anew; no file grows past the cap, and the newest records are
// in NAME.
func TestWriterRotatesAtItsCap(t *testing.T) {
	dir := t.TempDir()
	const max = 1500
	w, err := Open(dir, max, Header{CommID: 0xabc, Rank: 1, NRanks: 2, NNodes: 1, Host: "h", Pid: 7})
	require.NoError(t, err)
	for i := 1; i <= 20; i++ {
		w.Record(&Call{Seq: uint64(i), Coll: "AllReduce", DType: "float32", Op: "sum", Count: 4, Bytes: 16, Root: -1, Peer: -1, Runner: "host engine", Start: 1000, End: 2000, BusFactor: 1})
	}
	require.NoError(t, w.Close())
	for _, p := range []string{w.Path(), w.Path() + ".1"} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Size(), int64(max), p)
	}
	now, old := lines(t, w.Path()), lines(t, w.Path()+".1")
	require.NotEmpty(t, now)
	require.NotEmpty(t, old)
	require.Equal(t, 20.0, now[len(now)-1]["coll_perf"]["coll_sn"], "the newest record is in NAME")
	require.Equal(t, now[0]["coll_perf"]["coll_sn"], old[len(old)-1]["coll_perf"]["coll_sn"].(float64)+1, "NAME.1 holds the records just before")
	p := now[0]["coll_perf"]
	require.Equal(t, 1.0, p["coll_exec_time_us"])
	require.Equal(t, 0.016, p["coll_algobw_gbs"])
	require.Equal(t, "0xabc", now[0]["header"]["id"])
}

// TestWriterCountsWhatItDrops: a record that finds the ring full is
// dropped, and the next line says how many were.
func TestWriterCountsWhatItDrops(t *testing.T) {
	w, err := open(t.TempDir(), 0, Header{Host: "h"}, 4, false)
	require.NoError(t, err)
	for i := 1; i <= 7; i++ {
		w.Record(&Call{Seq: uint64(i), Coll: "Barrier", Root: -1, Peer: -1})
	}
	go w.run()
	require.NoError(t, w.Close())
	got := lines(t, w.Path())
	require.Len(t, got, 4)
	require.Equal(t, 3.0, got[0]["metadata"]["records_dropped"])
	require.NotContains(t, got[1]["metadata"], "records_dropped")
}
