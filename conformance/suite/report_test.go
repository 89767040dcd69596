package suite

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleReport(emulated bool) *Report {
	r := &Report{Version: "test", Emulated: emulated, Started: time.Unix(0, 0).UTC(), Seconds: 2.5, Dir: "build/plugins", NP: []int{2, 3}, Seed: 1}
	mk := func(plugin, id string, level Level, area string, st Status, reason string) Result {
		return Result{Plugin: plugin, ID: id, Level: level, Area: area, Description: "d " + id, Ranks: 2, Status: st,
			Reason: reason, Seconds: 0.01, Emulated: emulated}
	}
	good := &PluginReport{Info: PluginInfo{Name: "good", Vendor: "GOOD", Version: "1.0", Path: "/p/libflagcx-good.so", ABI: 1, Emulated: emulated,
		Libraries: []LibraryInfo{{Role: "ccl", Path: "/sim/libgood.so", Version: "2.0", Loaded: true, Emulated: emulated}}},
		Results: []Result{
			mk("good", "plugin.load", MUST, "plugin", Passed, ""),
			mk("good", "coll.allreduce.float32.sum.n2.count1.outofplace", MUST, "allreduce", Passed, ""),
			mk("good", "coll.alltoallv.float32.n2.count1.outofplace", MAY, "alltoallv", Skipped, "not supported: OPTIONAL entry alltoAllv is NULL"),
			mk("good", "coll.gather.float32.n2.root1.count1.outofplace", SHOULD, "gather", Failed, "wrong result: rank 1: recv buffer: 1 of 2 float32 elements differ"),
		}}
	bad := &PluginReport{Info: PluginInfo{Name: "bad", Path: "/p/libflagcx-bad.so"}, Problem: "unknown ABI version: abiVersion 2",
		Results: []Result{mk("bad", "plugin.load", MUST, "plugin", Failed, "unknown ABI version: abiVersion 2")}}
	r.Plugins = []*PluginReport{good, bad}
	return r
}

func TestReportVerdict(t *testing.T) {
	r := sampleReport(false)
	n, per := r.Failures()
	require.Equal(t, 2, n)
	require.Equal(t, map[string]int{"good": 1, "bad": 1}, per)
	require.False(t, r.Passed())
	r.Plugins = r.Plugins[:1] // a SHOULD failure alone fails the run too
	require.False(t, r.Passed())
	r.Plugins[0].Results = r.Plugins[0].Results[:len(r.Plugins[0].Results)-1] // without it, a skipped MAY case passes
	require.True(t, r.Passed())
	r = sampleReport(false)
	r.Plugins = r.Plugins[:1]
	all, byLevel := r.Plugins[0].Counts()
	require.Equal(t, Counts{Passed: 2, Failed: 1, Skipped: 1}, all)
	require.Equal(t, 1, byLevel[SHOULD].Failed)
	require.Equal(t, 1, byLevel[MAY].Skipped)
}

func TestWriteText(t *testing.T) {
	for _, emulated := range []bool{false, true} {
		var b bytes.Buffer
		sampleReport(emulated).WriteText(&b)
		out := b.String()
		require.Contains(t, out, "== good 1.0 (GOOD, ABI v1, /p/libflagcx-good.so)")
		require.Regexp(t, `(?m)^   allreduce +1 +0 +0$`, out)
		require.Regexp(t, `(?m)^   gather +0 +1 +0$`, out)
		require.Regexp(t, `(?m)^   total +2 +1 +1$`, out)
		require.Contains(t, out, "[SHOULD] coll.gather.float32.n2.root1.count1.outofplace: wrong result")
		require.Contains(t, out, "not tested: unknown ABI version")
		require.Contains(t, out, "result: FAIL: 1 cases failed (MUST 1)")
		require.Contains(t, out, "result: FAIL: 1 cases failed (SHOULD 1)")
		require.Contains(t, out, "FAIL (2 cases failed: good 1, bad 1)")
		require.Equal(t, emulated, strings.Contains(out, "EMULATED vendor runtimes"), out)
		require.Equal(t, emulated, strings.Contains(out, "conformance (emulated vendor runtimes):"), out)
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport(true).WriteJSON(&b))
	var got struct {
		Tool     string `json:"tool"`
		Emulated bool   `json:"emulated"`
		Passed   bool   `json:"passed"`
		Counts   Counts `json:"counts"`
		Plugins  []struct {
			Plugin  PluginInfo `json:"plugin"`
			Problem string     `json:"problem"`
		} `json:"plugins"`
		Cases []struct {
			Plugin, ID, Level, Status, Reason string
			Emulated                          bool
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Equal(t, "flagcx conformance", got.Tool)
	require.True(t, got.Emulated)
	require.False(t, got.Passed)
	require.Equal(t, Counts{Passed: 2, Failed: 2, Skipped: 1}, got.Counts)
	require.Len(t, got.Cases, 5)
	require.Equal(t, "MAY", got.Cases[2].Level)
	require.Equal(t, "skipped", got.Cases[2].Status)
	require.True(t, got.Cases[0].Emulated)
	require.Equal(t, "unknown ABI version: abiVersion 2", got.Plugins[1].Problem)
	require.True(t, got.Plugins[0].Plugin.Emulated)
}

func TestWriteJUnit(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport(true).WriteJUnit(&b))
	require.True(t, strings.HasPrefix(b.String(), xml.Header))
	var got junitSuites
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got))
	require.Equal(t, "flagcx conformance (emulated vendor runtimes)", got.Name)
	require.Equal(t, 5, got.Tests)
	require.Equal(t, 2, got.Failures)
	require.Equal(t, 1, got.Skipped)
	require.Len(t, got.Suites, 2)
	s := got.Suites[0]
	require.Equal(t, "good (emulated)", s.Name)
	require.Contains(t, s.Properties, junitProperty{"emulated", "true"})
	require.Contains(t, s.Properties, junitProperty{"np", "2,3"})
	require.Len(t, s.Cases, 4)
	require.Equal(t, "coll.gather.float32.n2.root1.count1.outofplace [SHOULD]", s.Cases[3].Name)
	require.Equal(t, "good.gather", s.Cases[3].Classname)
	require.NotNil(t, s.Cases[3].Failure)
	require.Equal(t, "SHOULD", s.Cases[3].Failure.Type)
	require.Equal(t, "wrong result", s.Cases[3].Failure.Message)
	require.NotNil(t, s.Cases[2].Skipped)
	require.Nil(t, s.Cases[0].Failure)
	require.Equal(t, "bad", got.Suites[1].Name)
	require.Contains(t, got.Suites[1].SystemOut, "not tested")
}
