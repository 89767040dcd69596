//go:build unix

package loader

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// useCallRecord makes this process record its plugin calls, as a rank of
// a local launch does, in a new record; it returns the launcher's end.
func useCallRecord(t *testing.T) *os.File {
	t.Helper()
	f, err := NewCallRecord()
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fd, err := syscall.Dup(int(f.Fd()))
	require.NoError(t, err)
	mem := mapCallRecord(fd)
	require.NotNil(t, mem, "a fresh record is taken")
	require.Equal(t, recordSize, len(mem))
	callRecord.Store(newRecord(mem))
	// Not unmapped: a wrapped entry of a plugin opened meanwhile may still
	// hold a slot.
	t.Cleanup(func() { callRecord.Store(nil) })
	return f
}

// TestCallRecordNamesCallsInFlight: in a recording process, a call in
// flight is in the record, named by its entry and the plugin's absolute
// path, until it returns; concurrent calls each have theirs; calls that
// returned leave nothing; bound entries still work through their wrapper,
// and the collectives still allocate nothing.
func TestCallRecordNamesCallsInFlight(t *testing.T) {
	f := useCallRecord(t)
	p, path := openMock(t) // init ran through the recording wrapper
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	inFlight := func() []InFlight {
		calls, err := ReadCallRecord(f)
		require.NoError(t, err)
		return calls
	}
	require.Empty(t, inFlight(), "init returned")

	s := enterCall(p.t.CCL.AllReduce)
	require.Equal(t, []InFlight{{Entry: "allReduce", Plugin: abs, Addr: p.t.CCL.AllReduce}}, inFlight())
	leaveCall(s)
	require.Empty(t, inFlight())

	var wg sync.WaitGroup
	slots := make([]*atomic.Uint64, 40)
	for i := range slots {
		wg.Add(1)
		go func() { defer wg.Done(); slots[i] = enterCall(p.t.CCL.Broadcast) }()
	}
	wg.Wait()
	require.Len(t, inFlight(), len(slots), "each call its own slot")
	for _, s := range slots {
		leaveCall(s)
	}
	require.Empty(t, inFlight())

	dev, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	defer p.DeviceFree(dev)
	s0, err := p.StreamCreate(0)
	require.NoError(t, err)
	defer p.StreamDestroy(s0)
	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 1, id, 0)
	require.NoError(t, err)
	defer comm.Destroy()
	p.SetPointerChecks(false)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = comm.AllReduce(dev, dev, 16, sdk.Float32, sdk.Sum, s0)
	}), "marking a call allocates nothing")
	require.Empty(t, inFlight(), "every call returned")
}

// TestCallRecordTakesOnlyARecord: a descriptor that is not a call record
// (a pipe, another file) is left alone, open.
func TestCallRecordTakesOnlyARecord(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.Nil(t, mapCallRecord(int(r.Fd())))

	other, err := os.CreateTemp(t.TempDir(), "other")
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, other.Truncate(recordSize))
	require.Nil(t, mapCallRecord(int(other.Fd())), "the right size, but no magic")
	_, err = other.Stat()
	require.NoError(t, err, "still open")

	require.Nil(t, mapCallRecord(999), "no such descriptor")
}

// TestCallRecordSharedFunctions: entries that share one C function are
// named together.
func TestCallRecordSharedFunctions(t *testing.T) {
	names := parseRecordNames([]byte("plugin \"/p/libflagcx-a.so\"\n10 streamDestroy\n10 eventDestroy\n20 allReduce\nplugin \"/p/libflagcx-b.so\"\n30 init\n"))
	require.Equal(t, map[uintptr]InFlight{
		0x10: {Entry: "streamDestroy or eventDestroy", Plugin: "/p/libflagcx-a.so"},
		0x20: {Entry: "allReduce", Plugin: "/p/libflagcx-a.so"},
		0x30: {Entry: "init", Plugin: "/p/libflagcx-b.so"},
	}, names)
}
