package loader

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

// The metax plugin's tests. The fake (metax_fake_test.go) records every
// argument, so a wrong argument order, enum value, unique-id offset or
// handle makes a test fail; the emulator tests run the plugin on the
// make-built vendorsim MACA/MCCL, in one process and in 2 and 3 processes.

func TestMetaxInitFailsCleanly(t *testing.T) {
	t.Run("mccl path does not exist", func(t *testing.T) {
		p, fake := fakeMetax(t)
		requireCCLMissing(t, p, fake, "FLAGCX_METAX_MCCL", "libmccl.so")
		require.Contains(t, p.Info().Libraries[1].Error, "FLAGCX_METAX_MCCL")

		// a later init with a good path succeeds (the failed one closed everything)
		t.Setenv("FLAGCX_METAX_MCCL", fake)
		require.NoError(t, p.Init(InitOptions{}))
	})
	t.Run("wrong library lacks the vendor symbols", func(t *testing.T) {
		p, fake := fakeMetax(t)
		other := compileC(t, filepath.Join(t.TempDir(), "libother.so"), "int unrelated(void) { return 0; }\n")
		t.Setenv("FLAGCX_METAX_MCCL", other)
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "plugin metax: init")
		require.Contains(t, err.Error(), other+" lacks mcclGetVersion: it is not MetaX MCCL")
		require.Contains(t, err.Error(), "point FLAGCX_METAX_MCCL at")

		p2, _ := fakeMetax(t)
		t.Setenv("FLAGCX_METAX_MCRUNTIME", other)
		t.Setenv("FLAGCX_METAX_MCCL", fake)
		err = p2.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), other+" lacks mcGetDeviceCount: it is not MetaX MACA runtime")
		require.Contains(t, err.Error(), "FLAGCX_METAX_MCRUNTIME")
	})
	t.Run("not a shared object", func(t *testing.T) {
		p, _ := fakeMetax(t)
		text := filepath.Join(t.TempDir(), "libmcruntime.so")
		require.NoError(t, os.WriteFile(text, []byte("not an ELF file\n"), 0o644))
		t.Setenv("FLAGCX_METAX_MCRUNTIME", text)
		err := p.Init(InitOptions{})
		require.ErrorIs(t, err, sdk.ErrSystemError)
		require.Contains(t, err.Error(), "cannot load libmcruntime.so from FLAGCX_METAX_MCRUNTIME="+text)
	})
	t.Run("MACA_PATH is searched first, a Moore Threads library is skipped", func(t *testing.T) {
		plugin := builtPlugin(t, "metax")
		fake := compileC(t, filepath.Join(t.TempDir(), "libfakemaca.so"), fakeMetaxC)
		b, err := os.ReadFile(fake)
		require.NoError(t, err)
		tree := func(dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "lib"), 0o755))
			for _, n := range []string{"libmcruntime.so", "libmccl.so"} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "lib", n), b, 0o755))
			}
		}
		maca, musa := filepath.Join(t.TempDir(), "maca"), filepath.Join(t.TempDir(), "musa")
		tree(maca)
		tree(musa)
		t.Setenv("FLAGCX_METAX_MCRUNTIME", "")
		t.Setenv("FLAGCX_METAX_MCCL", "")

		t.Setenv("MACA_PATH", maca)
		p, err := Open(plugin)
		require.NoError(t, err)
		require.NoError(t, p.Init(InitOptions{}))
		require.Equal(t, filepath.Join(maca, "lib", "libmcruntime.so"), p.Info().Libraries[0].Path)
		require.Equal(t, filepath.Join(maca, "lib", "libmccl.so"), p.Info().Libraries[1].Path)

		t.Setenv("MACA_PATH", musa)
		p, err = Open(builtPlugin(t, "metax"))
		require.NoError(t, err)
		err = p.Init(InitOptions{})
		if err == nil {
			require.NotContains(t, p.Info().Libraries[0].Path, musa, "a MUSA library must never be taken for MetaX's")
			t.Skip("this machine has MetaX MACA installed")
		}
		require.Contains(t, err.Error(), "cannot load libmcruntime.so (tried "+filepath.Join(musa, "lib", "libmcruntime.so"))
		require.Contains(t, err.Error(), "install MetaX MACA or set FLAGCX_METAX_MCRUNTIME")
	})
	t.Run("loader skips it and goes on", func(t *testing.T) {
		requireLoaderSkips(t, "metax", "FLAGCX_METAX_MCRUNTIME", "libfakemaca.so", fakeMetaxC, "FLAGCX_METAX_MCCL", "/nonexistent/libmccl.so")
	})
}

// mxPtr reads a pointer-sized data symbol of the fake.
func mxPtr(t *testing.T, lib, sym string) uintptr { return *(*uintptr)(cSymbol(t, lib, sym)) }

// TestMetaxMapsOntoMacaAndMccl proves the mapping value by value against
// the recording fake.
func TestMetaxMapsOntoMacaAndMccl(t *testing.T) {
	p, fake := fakeMetax(t)
	require.NoError(t, p.Init(InitOptions{}))
	require.Equal(t, "MetaX", p.Vendor)
	info := p.Info()
	require.False(t, info.Emulated)
	require.Equal(t, "FLAGCX_METAX_MCRUNTIME", info.Libraries[0].EnvVar)
	require.Equal(t, "FLAGCX_METAX_MCCL", info.Libraries[1].EnvVar)
	require.Equal(t, fake, info.Libraries[1].Path)
	require.Equal(t, "2.16.5", info.Libraries[1].Version, "mcclGetVersion 21605")
	require.Equal(t, sdk.AllDataTypes(), info.DataTypes, "mccl.h has all ten, float64 included")
	require.Equal(t, sdk.AllRedOps(), info.RedOps, "mccl.h has mcclAvg")
	ival := func(sym string) int { return cInt(t, fake, sym) }
	calls := func() string { return cText(t, fake, "fake_calls") }

	t.Run("devices", func(t *testing.T) {
		n, err := p.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n)
		di, err := p.DeviceInfo(1)
		require.NoError(t, err)
		require.Equal(t, "0000:1b:00.0", di.PCIBusID, "mcDeviceGetPCIBusId(buf, len, dev=1), lower-cased")
		require.Equal(t, "MetaX GPU 1", di.Name)
		_, err = p.DeviceInfo(5)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin metax: getDeviceInfo: ")
		require.Contains(t, err.Error(), "mcDeviceGetPCIBusId: invalid device ordinal (mcError 101)")
		_, err = p.Link(0, 1)
		require.ErrorIs(t, err, sdk.ErrNotSupported, "no MACA call for links in the reference")
		require.NoError(t, p.SetDevice(1))
		require.Equal(t, 1, ival("fake_set_device"))
	})

	dev, err := p.DeviceMalloc(1, 256)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "deviceMalloc sets the device it was given")
	dev2, err := p.DeviceMalloc(0, 256)
	require.NoError(t, err)
	require.Equal(t, 0, ival("fake_set_device"))
	s, err := p.StreamCreate(1)
	require.NoError(t, err)
	require.Equal(t, 1, ival("fake_set_device"), "streamCreate sets the device it was given")
	require.Equal(t, 1, ival("fake_stream_flags"), "mcStreamNonBlocking")

	t.Run("runtime errors quote MACA", func(t *testing.T) {
		before := ival("fake_last_error_calls")
		_, err := p.DeviceMalloc(0, 1<<41)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
		require.Contains(t, err.Error(), "plugin metax: deviceMalloc: ")
		require.Contains(t, err.Error(), "mcMalloc: out of memory (mcError 2)")
		require.Equal(t, before+1, ival("fake_last_error_calls"), "mcGetLastError clears the error")
	})

	t.Run("memcpy direction", func(t *testing.T) {
		tests := []struct {
			kind   MemcpyKind
			mcKind int // mcMemcpyKind (⚠ 1, 2, 3)
		}{{HostToDevice, 1}, {DeviceToHost, 2}, {DeviceToDevice, 3}}
		for _, tc := range tests {
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, s))
			require.Equal(t, tc.mcKind, ival("fake_kind"), "%s reaches mcMemcpyAsync as %d", tc.kind, tc.mcKind)
			require.Equal(t, 0, ival("fake_sync_copy"))
			require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_stream"))
			require.NoError(t, p.Memcpy(dev2, dev, 8, tc.kind, 0))
			require.Equal(t, tc.mcKind, ival("fake_kind"), "%s reaches mcMemcpy as %d", tc.kind, tc.mcKind)
			require.Equal(t, 1, ival("fake_sync_copy"))
		}
	})

	t.Run("memset", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, p.Memset(dev, 0xAB, 16, s))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_memset_stream"))
		require.Equal(t, 0xAB, ival("fake_memset_value"))
		require.Equal(t, 16, int(*(*uint64)(cSymbol(t, fake, "fake_memset_bytes"))))
		require.Equal(t, "mcMemsetAsync;", calls()[before:], "no synchronize with a stream")
		before = len(calls())
		require.NoError(t, p.Memset(dev, 0x11, 8, 0))
		require.Equal(t, "mcMemsetAsync;mcStreamSynchronize;", calls()[before:])
		require.Zero(t, mxPtr(t, fake, "fake_synced_stream"), "a NULL stream is waited for")
	})

	t.Run("pinned host memory is mcMallocHost", func(t *testing.T) {
		before := len(calls())
		h, err := p.HostMalloc(64)
		require.NoError(t, err)
		require.NoError(t, p.HostFree(h))
		require.Equal(t, "mcMallocHost;mcFreeHost;", calls()[before:])
	})

	t.Run("events", func(t *testing.T) {
		e0, err := p.EventCreate(0)
		require.NoError(t, err)
		require.Equal(t, 0, ival("fake_event_flags"), "mcEventDefault: timed")
		require.Equal(t, 0, ival("fake_set_device"), "eventCreate sets the device it was given")
		e1, err := p.EventCreate(0)
		require.NoError(t, err)
		require.NoError(t, p.EventRecord(e0, s))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_stream"))
		done, err := p.EventQuery(e1)
		require.NoError(t, err)
		require.False(t, done, "mcErrorNotReady means pending, not failed")
		done, err = p.EventQuery(e1)
		require.NoError(t, err)
		require.True(t, done)
		_, err = p.EventQuery(e1)
		require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError, "other codes are failures")
		require.Contains(t, err.Error(), "mcEventQuery: fake MACA: context is destroyed (mcError 709)")

		require.True(t, p.HasEventTiming())
		d, err := p.EventElapsed(e0, e1)
		require.NoError(t, err)
		require.Equal(t, 2500*time.Microsecond, d)
		require.Equal(t, uintptr(e0), mxPtr(t, fake, "fake_elapsed_start"), "mcEventElapsedTime(ms, start, end)")
		require.Equal(t, uintptr(e1), mxPtr(t, fake, "fake_elapsed_end"))

		require.NoError(t, p.StreamWaitEvent(s, e1))
		require.Equal(t, uintptr(s), mxPtr(t, fake, "fake_wait_stream"), "mcStreamWaitEvent(stream, event, flags)")
		require.Equal(t, uintptr(e1), mxPtr(t, fake, "fake_wait_event"))
		require.Equal(t, 0, ival("fake_wait_flags"))
		require.NoError(t, p.EventDestroy(e0))
		require.NoError(t, p.EventDestroy(e1))
	})

	id, err := p.UniqueID()
	require.NoError(t, err)
	require.Len(t, id, 128, "MCCL_UNIQUE_ID_BYTES")
	for i, b := range id {
		require.Equal(t, byte(i*5+2), b, "unique id byte %d as mcclGetUniqueId wrote it", i)
	}

	t.Run("unique id arrives intact, by value, nranks before rank", func(t *testing.T) {
		mine := make([]byte, 128)
		for i := range mine {
			mine[i] = byte(255 - 3*i)
		}
		c, err := p.CommInitRank(1, 4, mine, 3)
		require.NoError(t, err)
		require.Equal(t, mine, unsafe.Slice((*byte)(cSymbol(t, fake, "fake_uid")), 128))
		require.Equal(t, 4, ival("fake_nranks"))
		require.Equal(t, 3, ival("fake_rank"))
		require.Equal(t, 1, ival("fake_set_device"), "the communicator's device is set first")
		require.NoError(t, c.Destroy())

		_, err = p.CommInitRank(0, 13, mine, 0)
		require.ErrorIs(t, err, sdk.ErrInvalidUsage)
		require.Contains(t, err.Error(), "plugin metax: commInitRank: invalid usage: mcclCommInitRank: invalid usage: fake MCCL: 13 ranks are unlucky (mcclResult 5)")
	})

	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)

	t.Run("data types and ops", func(t *testing.T) {
		// flagcx -> mcclDataType_t / mcclRedOp_t (mccl.h): NCCL's numbers.
		mcclType := map[sdk.DataType]int{sdk.Int8: 0, sdk.Uint8: 1, sdk.Int32: 2, sdk.Uint32: 3, sdk.Int64: 4,
			sdk.Uint64: 5, sdk.Float16: 6, sdk.Float32: 7, sdk.Float64: 8, sdk.Bfloat16: 9}
		mcclOp := map[sdk.RedOp]int{sdk.Sum: 0, sdk.Prod: 1, sdk.Max: 2, sdk.Min: 3, sdk.Avg: 4}
		for dt, want := range mcclType {
			for op, wantOp := range mcclOp {
				require.NoError(t, comm.AllReduce(dev, dev2, 3, dt, op, s))
				require.Equal(t, want, ival("fake_dtype"), dt.String())
				require.Equal(t, wantOp, ival("fake_op"), op.String())
				require.Equal(t, []uintptr{dev, dev2, 3, uintptr(s)},
					[]uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv"), mxPtr(t, fake, "fake_count"), mxPtr(t, fake, "fake_stream")})
			}
		}
		buffers := func(what string) {
			require.Equal(t, []uintptr{dev, dev2, uintptr(s)},
				[]uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv"), mxPtr(t, fake, "fake_stream")}, what)
		}
		require.NoError(t, comm.Reduce(dev, dev2, 5, sdk.Bfloat16, sdk.Avg, 1, s))
		require.Equal(t, []int{9, 4, 1, 5}, []int{ival("fake_dtype"), ival("fake_op"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))})
		buffers("reduce")
		require.NoError(t, comm.Broadcast(dev, dev2, 6, sdk.Uint64, 1, s))
		require.Equal(t, []int{5, 1, 6}, []int{ival("fake_dtype"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))})
		buffers("broadcast")
		require.NoError(t, comm.AllGather(dev, dev2, 7, sdk.Float64, s))
		require.Equal(t, []int{8, 7}, []int{ival("fake_dtype"), int(mxPtr(t, fake, "fake_count"))})
		buffers("allGather")
		require.NoError(t, comm.ReduceScatter(dev, dev2, 8, sdk.Float16, sdk.Min, s))
		require.Equal(t, []int{6, 3, 8}, []int{ival("fake_dtype"), ival("fake_op"), int(mxPtr(t, fake, "fake_count"))})
		buffers("reduceScatter")
	})

	t.Run("MCCL errors quote MCCL", func(t *testing.T) {
		err := comm.AllReduce(dev, dev2, 7777, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrInvalidArgument)
		require.Contains(t, err.Error(), "plugin metax: allReduce: invalid argument: mcclAllReduce: invalid argument: fake MCCL: count 7777 rejected (mcclResult 4)")
		err = comm.ReduceScatter(dev, dev2, 8888, sdk.Float32, sdk.Sum, s)
		require.ErrorIs(t, err, sdk.ErrUnhandledCCLError, "a code MCCL may add later is not one of ours")
		require.Contains(t, err.Error(), "mcclReduceScatter: fake MCCL error: fake MCCL: a code from the future (mcclResult 8)")
		err = comm.AsyncError()
		require.ErrorIs(t, err, sdk.ErrRemoteError)
		require.Contains(t, err.Error(), "fake MCCL: peer 1 vanished")
	})

	t.Run("gather scatter alltoall are MCCL's own", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			run   func() error
			call  string
			vals  []int // dtype, root, count
			roots bool
		}{
			{"gather", func() error { return comm.Gather(dev, dev2, 4, sdk.Float32, 1, s) }, "mcclGather;", []int{7, 1, 4}, true},
			{"scatter", func() error { return comm.Scatter(dev, dev2, 2, sdk.Int8, 0, s) }, "mcclScatter;", []int{0, 0, 2}, true},
			{"alltoall", func() error { return comm.AlltoAll(dev, dev2, 3, sdk.Int32, s) }, "mcclAllToAll;", []int{2, -1, 3}, false},
		} {
			before := len(calls())
			require.NoError(t, tc.run(), tc.name)
			require.Equal(t, tc.call, calls()[before:], tc.name)
			require.Equal(t, tc.vals, []int{ival("fake_dtype"), ival("fake_root"), int(mxPtr(t, fake, "fake_count"))}, tc.name)
			require.Equal(t, []uintptr{dev, dev2}, []uintptr{mxPtr(t, fake, "fake_send"), mxPtr(t, fake, "fake_recv")}, tc.name)
		}
	})

	t.Run("alltoallv is grouped send/recv at the displacements", func(t *testing.T) {
		before := len(calls())
		require.NoError(t, comm.AlltoAllv(dev, []int{1, 0}, []int{3, 1}, dev2, []int{2, 5}, []int{0, 2}, sdk.Int32, s))
		want := fmt.Sprintf("GroupStart;Send(0,1,2,@%x);Recv(0,2,2,@%x);Recv(1,5,2,@%x);GroupEnd;", dev+12, dev2, dev2+8)
		require.Equal(t, want, calls()[before:])
	})

	t.Run("abort", func(t *testing.T) {
		c, err := p.CommInitRank(0, 2, id, 1)
		require.NoError(t, err)
		before := len(calls())
		require.NoError(t, c.Abort())
		require.Equal(t, "mcclCommAbort;", calls()[before:])
	})

	require.NoError(t, comm.Destroy())
	require.NoError(t, p.StreamDestroy(s))
	require.NoError(t, p.DeviceFree(dev))
	require.NoError(t, p.DeviceFree(dev2))
}

// TestMetaxComposesWhatMcclLacks: with an MCCL without mcclGather,
// mcclScatter and mcclAllToAll, the plugin issues grouped mcclSend/mcclRecv
// with the right peers, counts and offsets.
func TestMetaxComposesWhatMcclLacks(t *testing.T) {
	p, fake := fakeMetax(t, "-DNO_NATIVE")
	require.NoError(t, p.Init(InitOptions{}))
	s, r := uintptr(0x10000), uintptr(0x20000) // never dereferenced by the fake
	id, err := p.UniqueID()
	require.NoError(t, err)
	comm, err := p.CommInitRank(0, 2, id, 0)
	require.NoError(t, err)
	defer comm.Destroy()
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"gather at root", func() error { return comm.Gather(s, r, 4, sdk.Float32, 0, 0) },
			fmt.Sprintf("GroupStart;Send(0,4,7,@%x);Recv(0,4,7,@%x);Recv(1,4,7,@%x);GroupEnd;", s, r, r+16)},
		{"gather elsewhere", func() error { return comm.Gather(s, r, 4, sdk.Float32, 1, 0) },
			fmt.Sprintf("GroupStart;Send(1,4,7,@%x);GroupEnd;", s)},
		{"scatter at root", func() error { return comm.Scatter(s, r, 2, sdk.Int8, 0, 0) },
			fmt.Sprintf("GroupStart;Send(0,2,0,@%x);Recv(0,2,0,@%x);Send(1,2,0,@%x);GroupEnd;", s, r, s+2)},
		{"scatter elsewhere", func() error { return comm.Scatter(s, r, 2, sdk.Int8, 1, 0) },
			fmt.Sprintf("GroupStart;Recv(1,2,0,@%x);GroupEnd;", r)},
		{"alltoall", func() error { return comm.AlltoAll(s, r, 3, sdk.Uint64, 0) },
			fmt.Sprintf("GroupStart;Send(0,3,5,@%x);Recv(0,3,5,@%x);Send(1,3,5,@%x);Recv(1,3,5,@%x);GroupEnd;", s, r, s+24, r+24)},
	} {
		before := len(cText(t, fake, "fake_calls"))
		require.NoError(t, tc.run(), tc.name)
		require.Equal(t, tc.want, cText(t, fake, "fake_calls")[before:], tc.name)
	}
}

// TestMetaxNotReadyIsNeverDone: mcErrorNotReady's number is unknown (❌).
// A pending query is recognized by 600 or by MACA's own text; any other
// code is an error, never "done".
func TestMetaxNotReadyIsNeverDone(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		pending    bool
	}{
		{"another number, text says not ready", `"operation not ready yet"`, true},
		{"another number and text", `"busy"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := fakeMetax(t, "-DNOT_READY=34", "-DNOT_READY_TEXT="+tc.text)
			require.NoError(t, p.Init(InitOptions{}))
			e, err := p.EventCreate(0)
			require.NoError(t, err)
			done, err := p.EventQuery(e)
			require.False(t, done)
			if tc.pending {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
				require.Contains(t, err.Error(), "mcEventQuery: busy (mcError 34)")
			}
		})
	}
}

// TestMetaxEmulatedSelection: with Emulated the loader points
// FLAGCX_METAX_* at <vendorsim>/metax/ and the plugin reports the marker.
func TestMetaxEmulatedSelection(t *testing.T) {
	plugin := builtPlugin(t, "metax")
	sim, rt := fakeVendorsim(t, "metax", fakeMetaxC, "libmcruntime.so", "libmccl.so", "FLAGCX_METAX_MCCL")
	requireEmulatedMissing(t, plugin, sim, "metax")
	requireEmulatedInit(t, plugin, sim, rt, "FLAGCX_METAX_MCCL")

	// a library without the marker is refused when emulation was asked for
	plain := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(plain, "metax"), 0o755))
	compileC(t, filepath.Join(plain, "metax", "libmcruntime.so"), fakeMetaxC)
	require.NoError(t, os.Symlink("libmcruntime.so", filepath.Join(plain, "metax", "libmccl.so")))
	p, err := Open(builtPlugin(t, "metax"))
	require.NoError(t, err)
	err = p.Init(InitOptions{Emulated: true, VendorsimDir: plain})
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.Contains(t, err.Error(), "is not a vendorsim build")
}

func metaxEmulated(t *testing.T) *Plugin {
	t.Helper()
	sim := builtVendorsim(t, "metax", "libmcruntime.so", "libmccl.so")
	p, err := Open(builtPlugin(t, "metax"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
	return p
}

// TestMetaxEmulatorDisagreementFails builds the emulated MACA runtime with
// another numbering of the copy directions (a MACA whose values differ
// from the plugin's belief): the plugin's copies must then fail, with the
// vendor call named, while they succeed on the emulator as built.
func TestMetaxEmulatorDisagreementFails(t *testing.T) {
	root := repoRoot(t)
	sim := builtVendorsim(t, "metax", "libmcruntime.so", "libmccl.so")
	data := []byte("sixteen bytes!!!")

	good := metaxEmulated(t)
	d, err := good.DeviceMalloc(0, len(data))
	require.NoError(t, err)
	require.NoError(t, good.CopyToDevice(d, data))
	back := make([]byte, len(data))
	require.NoError(t, good.CopyFromDevice(back, d))
	require.Equal(t, data, back)
	require.NoError(t, good.DeviceFree(d))

	other := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(other, "metax"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(sim, "libflagcx-vendorsim-core.so"), filepath.Join(other, "libflagcx-vendorsim-core.so")))
	mccl, err := os.ReadFile(filepath.Join(sim, "metax", "libmccl.so"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(other, "metax", "libmccl.so"), mccl, 0o755))
	src, err := os.ReadFile(filepath.Join(root, "conformance", "vendorsim", "metax", "mcruntime.c"))
	require.NoError(t, err)
	compileC(t, filepath.Join(other, "metax", "libmcruntime.so"), string(src),
		"-DVSIM_MC_H2D=2", "-DVSIM_MC_D2H=1", "-pthread", "-fvisibility=hidden",
		"-I", filepath.Join(root, "conformance", "vendorsim", "metax"),
		"-L", sim, "-lflagcx-vendorsim-core", "-Wl,-rpath,"+sim)

	p, err := Open(builtPlugin(t, "metax"))
	require.NoError(t, err)
	require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: other}))
	d, err = p.DeviceMalloc(0, len(data))
	require.NoError(t, err)
	err = p.CopyToDevice(d, data)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "plugin metax: memCopy: unhandled device error: mcMemcpy: invalid argument")
	err = p.CopyFromDevice(back, d)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcMemcpy")
	require.NoError(t, p.DeviceFree(d))
}

// TestMetaxEmulatedOneProcess: the plugin on the built emulators, one rank.
func TestMetaxEmulatedOneProcess(t *testing.T) {
	p := metaxEmulated(t)
	require.True(t, p.Emulated())
	sim := builtVendorsim(t, "metax", "libmcruntime.so", "libmccl.so")
	for _, l := range p.Info().Libraries {
		require.True(t, l.Loaded && l.Emulated, l.Path)
		require.True(t, strings.HasPrefix(l.Path, filepath.Join(sim, "metax")), l.Path)
	}
	n, err := p.DeviceCount()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 2)
	di, err := p.DeviceInfo(1)
	require.NoError(t, err)
	require.Equal(t, "0000:11:00.0", di.PCIBusID)
	_, err = p.DeviceMalloc(n+3, 8)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcSetDevice: invalid device ordinal (emulated mcErrorInvalidDevice) (mcError 101)")

	// copies in every direction agree with the emulator's registry
	s, err := p.StreamCreate(0)
	require.NoError(t, err)
	a, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	b, err := p.DeviceMalloc(0, 64)
	require.NoError(t, err)
	h, err := p.HostMalloc(64)
	require.NoError(t, err)
	pinned := HostSlice(h, 64)
	for i := range pinned {
		pinned[i] = byte(i * 7)
	}
	require.NoError(t, p.Memcpy(a, h, 64, HostToDevice, s))
	require.NoError(t, p.Memcpy(b, a, 64, DeviceToDevice, s))
	require.NoError(t, p.Memset(a, 0, 64, s))
	require.NoError(t, p.Memcpy(h, b, 64, DeviceToHost, s))
	require.NoError(t, p.StreamSynchronize(s))
	for i := range pinned {
		require.Equal(t, byte(i*7), pinned[i])
	}
	err = p.Memcpy(a, h, 64, DeviceToHost, s)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError, "the emulator catches a direction that contradicts the pointers")
	require.Contains(t, err.Error(), "mcMemcpyAsync: invalid argument")
	done, err := p.StreamQuery(s)
	require.NoError(t, err)
	require.True(t, done)

	e0, err := p.EventCreate(0)
	require.NoError(t, err)
	e1, err := p.EventCreate(0)
	require.NoError(t, err)
	require.NoError(t, p.EventRecord(e0, s))
	require.NoError(t, p.EventRecord(e1, s))
	require.NoError(t, p.EventSynchronize(e1))
	el, err := p.EventElapsed(e0, e1)
	require.NoError(t, err)
	require.GreaterOrEqual(t, el, time.Duration(0))
	require.NoError(t, p.StreamWaitEvent(s, e1))

	id, err := p.UniqueID()
	require.NoError(t, err)
	c, err := p.CommInitRank(0, 1, id, 0)
	require.NoError(t, err)
	in := mxEncode(sdk.Float32, []float64{1, 2, 3, 4, 5, 6, 7, 8})
	require.NoError(t, p.CopyToDevice(a, in))
	require.NoError(t, c.AllReduce(a, b, 8, sdk.Float32, sdk.Avg, s))
	require.NoError(t, c.Gather(a, b, 8, sdk.Float32, 0, s))
	require.NoError(t, c.AlltoAllv(a, []int{3}, []int{5}, b, []int{3}, []int{0}, sdk.Float32, s))
	got := make([]byte, 12)
	require.NoError(t, p.StreamSynchronize(s)) // a copy on no stream does not wait for s
	require.NoError(t, p.CopyFromDevice(got, b))
	require.Equal(t, in[20:32], got)

	host := make([]float32, 8)
	err = c.AllReduce(uintptr(unsafe.Pointer(&host[0])), b, 8, sdk.Float32, sdk.Sum, s)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "pageable host memory is refused by the emulated MCCL")
	require.Contains(t, err.Error(), "plugin metax: allReduce: invalid argument: mcclAllReduce")
	require.NoError(t, c.AsyncError())
	require.NoError(t, c.Destroy())

	for _, f := range []func() error{
		func() error { return p.EventDestroy(e0) }, func() error { return p.EventDestroy(e1) },
		func() error { return p.DeviceFree(a) }, func() error { return p.DeviceFree(b) },
		func() error { return p.HostFree(h) }, func() error { return p.StreamDestroy(s) },
	} {
		require.NoError(t, f())
	}
	err = p.StreamDestroy(s)
	require.ErrorIs(t, err, sdk.ErrUnhandledDeviceError)
	require.Contains(t, err.Error(), "mcStreamDestroy: invalid resource handle")
}

// ---- Ranks in processes ---------------------------------------------------

// mxEnvPrefix is rankEnv's prefix for TestMetaxEmulatedRankWorker.
const mxEnvPrefix = "FLAGCX_METAX_TEST"

type mxWorkerOut struct {
	Checks int      `json:"checks"`
	Errors []string `json:"errors"`
}

// TestMetaxEmulatedRanks runs the metax plugin on the emulators with 2 and
// 3 ranks, one process each, through every collective of the ABI, and
// checks every result exactly.
func TestMetaxEmulatedRanks(t *testing.T) {
	p := metaxEmulated(t)
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n)+"ranks", func(t *testing.T) {
			id, err := p.UniqueID()
			require.NoError(t, err)
			outs, errs := runRankWorkers[mxWorkerOut](t, mxEnvPrefix, n, id,
				[]string{"-test.run=^TestMetaxEmulatedRankWorker$", "-test.count=1"},
				"FLAGCX_VENDORSIM_SLOT_BYTES=256", "FLAGCX_VENDORSIM_TIMEOUT=30")
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
				o := outs[r]
				require.Empty(t, o.Errors, "rank %d", r)
				require.Greater(t, o.Checks, 100, "rank %d checked too little", r)
				t.Logf("rank %d: %d exact checks", r, o.Checks)
			}
		})
	}
}

// TestMetaxEmulatedRankWorker is one rank of TestMetaxEmulatedRanks; it
// only runs in the processes that test starts.
func TestMetaxEmulatedRankWorker(t *testing.T) {
	w := &mxWorker{}
	var id []byte
	var out string
	var err error
	w.rank, w.n, id, out, err = workerRank(mxEnvPrefix)
	if out == "" {
		t.Skip("a rank process of TestMetaxEmulatedRanks")
	}
	require.NoError(t, err)
	func() {
		defer func() {
			if r := recover(); r != nil {
				if a, ok := r.(mxAbort); ok {
					w.errs = append(w.errs, string(a))
					return
				}
				panic(r)
			}
		}()
		w.run(metaxEmulated(t), id)
	}()
	data, err := json.Marshal(mxWorkerOut{Checks: w.checks, Errors: w.errs})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(out, data, 0o600))
}

type mxAbort string

type mxWorker struct {
	p       *Plugin
	c       *Comm
	s       Stream
	rank, n int
	checks  int
	errs    []string
	bufs    []uintptr
}

// must aborts the rank on an unexpected failure.
func (w *mxWorker) must(what string, err error) {
	if err != nil {
		panic(mxAbort(fmt.Sprintf("rank %d: %s: %v", w.rank, what, err)))
	}
}

func (w *mxWorker) upload(b []byte, size int) uintptr {
	d, err := w.p.DeviceMalloc(w.c.Device(), max(size, len(b), 1))
	w.must("deviceMalloc", err)
	w.bufs = append(w.bufs, d)
	w.must("memSet", w.p.Memset(d, 0x5A, max(size, len(b)), w.s))
	// The copy below runs on no stream and would not wait for w.s.
	w.must("streamSynchronize", w.p.StreamSynchronize(w.s))
	if len(b) > 0 {
		w.must("copy to device", w.p.CopyToDevice(d, b))
	}
	return d
}

func (w *mxWorker) expect(name string, d uintptr, want []byte) {
	w.must("streamSynchronize", w.p.StreamSynchronize(w.s))
	got := make([]byte, len(want))
	w.must("copy from device", w.p.CopyFromDevice(got, d))
	w.checks++
	if string(got) != string(want) {
		w.errs = append(w.errs, fmt.Sprintf("rank %d: %s:\n got %x\nwant %x", w.rank, name, got, want))
	}
}

func (w *mxWorker) run(p *Plugin, id []byte) {
	w.p = p
	if !p.Emulated() {
		panic(mxAbort("the plugin is not on the emulators"))
	}
	ndev, err := p.DeviceCount()
	w.must("deviceCount", err)
	dev := w.rank % ndev
	w.c, err = p.CommInitRank(dev, w.n, id, w.rank)
	w.must("commInitRank", err)
	w.s, err = p.StreamCreate(dev)
	w.must("streamCreate", err)
	defer func() {
		for _, b := range w.bufs {
			p.DeviceFree(b)
		}
		p.StreamDestroy(w.s)
		w.must("commDestroy", w.c.Destroy())
	}()
	n, me, c, s := w.n, w.rank, w.c, w.s
	const C = 29
	fold := func(dt sdk.DataType, op sdk.RedOp, i int) float64 {
		vals := make([]float64, n)
		for r := range vals {
			vals[r] = mxInput(dt, op, r, n, i)
		}
		return mxReduce(op, vals)
	}
	series := func(count int, f func(i int) float64) []float64 {
		v := make([]float64, count)
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	e0, err := p.EventCreate(dev)
	w.must("eventCreate", err)
	e1, err := p.EventCreate(dev)
	w.must("eventCreate", err)
	w.must("eventRecord", p.EventRecord(e0, s))

	// AllReduce: every data type and op, out of place and in place.
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			in := mxEncode(dt, series(C, func(i int) float64 { return mxInput(dt, op, me, n, i) }))
			want := mxEncode(dt, series(C, func(i int) float64 { return fold(dt, op, i) }))
			a, b := w.upload(in, 0), w.upload(nil, len(in))
			w.must("allReduce", c.AllReduce(a, b, C, dt, op, s))
			w.expect(fmt.Sprintf("allReduce %s %s", dt, op), b, want)
			w.must("allReduce in place", c.AllReduce(a, a, C, dt, op, s))
			w.expect(fmt.Sprintf("allReduce in place %s %s", dt, op), a, want)
		}
	}
	// Reduce and Broadcast from every root; non-roots' recv stays untouched.
	untouched := func(k int) []byte { return []byte(strings.Repeat("\x5a", k)) }
	for root := range n {
		for _, dt := range []sdk.DataType{sdk.Float32, sdk.Bfloat16, sdk.Int64} {
			for _, op := range sdk.AllRedOps() {
				in := mxEncode(dt, series(C, func(i int) float64 { return mxInput(dt, op, me, n, i) }))
				a, b := w.upload(in, 0), w.upload(nil, len(in))
				w.must("reduce", c.Reduce(a, b, C, dt, op, root, s))
				want := untouched(len(in))
				if me == root {
					want = mxEncode(dt, series(C, func(i int) float64 { return fold(dt, op, i) }))
				}
				w.expect(fmt.Sprintf("reduce root %d %s %s", root, dt, op), b, want)
			}
		}
		for _, dt := range []sdk.DataType{sdk.Int8, sdk.Float64} {
			bc := mxEncode(dt, series(C, func(i int) float64 { return mxA2A(root, 0, i) }))
			var a uintptr
			if me == root {
				a = w.upload(bc, 0)
			} else {
				a = w.upload(nil, len(bc))
			}
			b := w.upload(nil, len(bc))
			w.must("broadcast", c.Broadcast(a, b, C, dt, root, s))
			w.expect(fmt.Sprintf("broadcast root %d %s", root, dt), b, bc)
		}
	}
	// AllGather, ReduceScatter, AlltoAll.
	for _, dt := range []sdk.DataType{sdk.Uint8, sdk.Float16} {
		in := mxEncode(dt, series(C, func(i int) float64 { return mxA2A(me, 0, i) }))
		a, b := w.upload(in, 0), w.upload(nil, n*len(in))
		w.must("allGather", c.AllGather(a, b, C, dt, s))
		w.expect("allGather "+dt.String(), b, mxEncode(dt, series(n*C, func(i int) float64 { return mxA2A(i/C, 0, i%C) })))
	}
	for _, dt := range []sdk.DataType{sdk.Int32, sdk.Float32} {
		for _, op := range sdk.AllRedOps() {
			in := mxEncode(dt, series(n*C, func(i int) float64 { return mxInput(dt, op, me, n, i) }))
			a, b := w.upload(in, 0), w.upload(nil, len(in)/n)
			w.must("reduceScatter", c.ReduceScatter(a, b, C, dt, op, s))
			w.expect(fmt.Sprintf("reduceScatter %s %s", dt, op), b, mxEncode(dt, series(C, func(j int) float64 { return fold(dt, op, me*C+j) })))
		}
	}
	for _, dt := range []sdk.DataType{sdk.Int32, sdk.Bfloat16} {
		in := mxEncode(dt, series(n*C, func(i int) float64 { return mxA2A(me, i/C, i%C) }))
		a, b := w.upload(in, 0), w.upload(nil, len(in))
		w.must("alltoAll", c.AlltoAll(a, b, C, dt, s))
		w.expect("alltoAll "+dt.String(), b, mxEncode(dt, series(n*C, func(i int) float64 { return mxA2A(i/C, me, i%C) })))
	}
	// AlltoAllv: rank r sends (r+p)%3+1 elements to p, with gaps between
	// the blocks on both sides (the gaps must stay untouched).
	{
		dt, es := sdk.Float32, 4
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		soff, roff := 0, 0
		for q := range n {
			sc[q], rc[q] = (me+q)%3+1, (q+me)%3+1
			sd[q], rd[q] = soff, roff
			soff += sc[q] + 1
			roff += rc[q] + 2
		}
		send := make([]float64, soff)
		for q := range n {
			for j := range sc[q] {
				send[sd[q]+j] = mxA2A(me, q, j)
			}
		}
		a, b := w.upload(mxEncode(dt, send), 0), w.upload(nil, roff*es)
		w.must("alltoAllv", c.AlltoAllv(a, sc, sd, b, rc, rd, dt, s))
		want := untouched(roff * es)
		for q := range n {
			copy(want[rd[q]*es:], mxEncode(dt, series(rc[q], func(j int) float64 { return mxA2A(q, me, j) })))
		}
		w.expect("alltoAllv", b, want)
	}
	// Gather and Scatter from every root.
	for root := range n {
		dt := sdk.Uint64
		in := mxEncode(dt, series(C, func(i int) float64 { return mxA2A(me, root, i) }))
		a, b := w.upload(in, 0), w.upload(nil, n*len(in))
		w.must("gather", c.Gather(a, b, C, dt, root, s))
		want := untouched(n * len(in))
		if me == root {
			want = mxEncode(dt, series(n*C, func(i int) float64 { return mxA2A(i/C, root, i%C) }))
		}
		w.expect(fmt.Sprintf("gather root %d", root), b, want)

		dt = sdk.Int8
		var full []byte
		if me == root {
			full = mxEncode(dt, series(n*C, func(i int) float64 { return mxA2A(root, i/C, i%C) }))
		}
		a, b = w.upload(full, n*C), w.upload(nil, C)
		w.must("scatter", c.Scatter(a, b, C, dt, root, s))
		w.expect(fmt.Sprintf("scatter root %d", root), b, mxEncode(dt, series(C, func(i int) float64 { return mxA2A(root, me, i) })))
	}
	// Send/Recv around a ring, in a group.
	{
		next, prev := (me+1)%n, (me+n-1)%n
		dt := sdk.Float64
		a := w.upload(mxEncode(dt, series(C, func(i int) float64 { return mxA2A(me, next, i) })), 0)
		b := w.upload(nil, C*8)
		w.must("groupStart", p.GroupStart())
		errSend := c.Send(a, C, dt, next, s)
		errRecv := c.Recv(b, C, dt, prev, s)
		w.must("groupEnd", p.GroupEnd())
		w.must("send", errSend)
		w.must("recv", errRecv)
		w.expect("ring", b, mxEncode(dt, series(C, func(i int) float64 { return mxA2A(prev, me, i) })))
	}
	w.must("eventRecord", p.EventRecord(e1, s))
	w.must("eventSynchronize", p.EventSynchronize(e1))
	el, err := p.EventElapsed(e0, e1)
	w.must("eventElapsed", err)
	if el < 0 {
		w.errs = append(w.errs, fmt.Sprintf("rank %d: negative elapsed time %v", w.rank, el))
	}
	w.must("asyncError", c.AsyncError())
	p.EventDestroy(e0)
	p.EventDestroy(e1)
}

// ---- Exact values -----------------------------------------------------------

// mxInput is rank r's element i for op over n ranks: small integers, so
// every result is exact in every type. For avg they are base*n + d_r with
// the d_r summing to 0, so the mean is an integer.
func mxInput(dt sdk.DataType, op sdk.RedOp, r, n, i int) float64 {
	if op == sdk.Avg {
		d := 0
		if r < n-n%2 {
			d = 1 - 2*(r%2)
		}
		return float64((i%5+1)*n + d)
	}
	v := float64((i+2*r)%3 + 1)
	if mxSigned(dt) && (i+r)%4 == 0 {
		v = -v
	}
	return v
}

func mxSigned(dt sdk.DataType) bool {
	switch dt {
	case sdk.Uint8, sdk.Uint32, sdk.Uint64:
		return false
	}
	return true
}

func mxReduce(op sdk.RedOp, vals []float64) float64 {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case sdk.Sum, sdk.Avg:
			acc += v
		case sdk.Prod:
			acc *= v
		case sdk.Max:
			acc = math.Max(acc, v)
		case sdk.Min:
			acc = math.Min(acc, v)
		}
	}
	if op == sdk.Avg {
		acc /= float64(len(vals))
	}
	return acc
}

// mxA2A is what rank src sends to rank dst at element j (below 128).
func mxA2A(src, dst, j int) float64 { return float64(src*40 + dst*12 + j%12) }

// mxEncode encodes exactly representable values as data type dt.
func mxEncode(dt sdk.DataType, vals []float64) []byte {
	out := make([]byte, 0, len(vals)*dt.Size())
	le := func(v uint64, n int) {
		for k := range n {
			out = append(out, byte(v>>(8*k)))
		}
	}
	for _, v := range vals {
		switch dt {
		case sdk.Int8, sdk.Uint8:
			le(uint64(int64(v)), 1)
		case sdk.Int32, sdk.Uint32:
			le(uint64(int64(v)), 4)
		case sdk.Int64, sdk.Uint64:
			le(uint64(int64(v)), 8)
		case sdk.Float32:
			le(uint64(math.Float32bits(float32(v))), 4)
		case sdk.Float64:
			le(math.Float64bits(v), 8)
		case sdk.Bfloat16:
			le(uint64(math.Float32bits(float32(v))>>16), 2)
		case sdk.Float16:
			le(uint64(mxHalf(v)), 2)
		}
	}
	return out
}

// mxHalf encodes an integer-valued float (|v| < 2048) as IEEE binary16.
func mxHalf(v float64) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	return sign | uint16(exp-1+15)<<10 | uint16((frac*2-1)*1024)
}
