package loader

// The tests every vendor plugin passes, one table-driven test each over
// testkit.Vendors: init failures that name the library and its variable
// (with the vendor's recording fake), a machine without the vendor's
// software (in a fresh process), the emulated selection (with the fake
// marked as an emulator), the plugin on the make-built emulators, and
// every collective checked exactly on 2 and 3 ranks, one process each.
// What is genuinely one vendor's stays in <vendor>_test.go.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/testkit"
	"github.com/flagcx/flagcx-go/sdk"
)

// vendorFake is a vendor's recording fake (<vendor>_test.go): one library
// that serves as all of the vendor's required libraries.
type vendorFake struct {
	file      string // the name it is built as
	src       string // its C source
	rtVersion string // the version init reports for its runtime
}

var vendorFakes = map[string]vendorFake{
	"nvidia":    {"libfakecuda.so", fakeNvidiaC, "13.0"},
	"kunlunxin": {"libfakexpu.so", fakeKunlunxinC, ""},
	"cambricon": {"libfakecambricon.so", fakeCambriconC, "6.14.1"},
	"metax":     {"libfakemaca.so", fakeMetaxC, ""},
}

// openFake builds the vendor's fake (with variant flags), points every
// required library's variable at it and every optional one at nothing,
// and opens a fresh copy of the built plugin.
func openFake(t *testing.T, name string, flags ...string) (*Plugin, string) {
	t.Helper()
	v, f := testkit.Lookup(t, name), vendorFakes[name]
	var vars []string
	for _, l := range v.Libraries {
		if l.Optional {
			t.Setenv(l.EnvVar, filepath.Join(t.TempDir(), "no-"+l.Soname()))
		} else {
			vars = append(vars, l.EnvVar)
		}
	}
	return openWithFake(t, name, f.file, f.src, vars, flags...)
}

// TestVendorInitFailsCleanly: a missing or broken vendor library fails
// init with an error naming the plugin, the library and its variable, and
// discovery skips the plugin and goes on.
func TestVendorInitFailsCleanly(t *testing.T) {
	for _, v := range testkit.Vendors {
		rt, ccl := v.Libraries[0], v.Libraries[1]
		t.Run(v.Name, func(t *testing.T) {
			t.Run("ccl path does not exist", func(t *testing.T) {
				p, fake := openFake(t, v.Name)
				t.Setenv(ccl.EnvVar, "/nonexistent/"+ccl.Soname())
				err := p.Init(InitOptions{})
				require.ErrorIs(t, err, sdk.ErrSystemError)
				require.Contains(t, err.Error(), "plugin "+v.Name+": init")
				require.Contains(t, err.Error(), "cannot load "+ccl.Soname()+" from "+ccl.EnvVar+"=/nonexistent/"+ccl.Soname())
				require.Contains(t, err.Error(), "fix or unset "+ccl.EnvVar)
				require.False(t, p.Initialized())
				libs := p.Info().Libraries
				require.True(t, libs[0].Loaded, "the runtime loaded before the CCL failed")
				require.Equal(t, fake, libs[0].Path)
				require.Equal(t, vendorFakes[v.Name].rtVersion, libs[0].Version)
				require.False(t, libs[1].Loaded)
				require.Contains(t, libs[1].Error, ccl.EnvVar)
				_, err = p.DeviceCount()
				require.ErrorIs(t, err, sdk.ErrInvalidUsage, "no entry runs before a successful init")

				require.Contains(t, p.Init(InitOptions{}).Error(), "plugin "+v.Name+": init: ", "init may be called again")
				// a later init with a good path succeeds (the failed one closed everything)
				t.Setenv(ccl.EnvVar, fake)
				require.NoError(t, p.Init(InitOptions{}))
			})
			t.Run("runtime is not a shared object", func(t *testing.T) {
				p, _ := openFake(t, v.Name)
				junk := filepath.Join(t.TempDir(), filepath.Base(rt.Soname()))
				require.NoError(t, os.WriteFile(junk, []byte("not an ELF file\n"), 0o644))
				t.Setenv(rt.EnvVar, junk)
				err := p.Init(InitOptions{})
				require.ErrorIs(t, err, sdk.ErrSystemError)
				require.Contains(t, err.Error(), "cannot load "+rt.Soname()+" from "+rt.EnvVar+"="+junk)
			})
			t.Run("loader skips it and goes on", func(t *testing.T) {
				// a directory with the built plugin and the acme mock, the
				// runtime at a good fake and the CCL at a missing file
				dir := t.TempDir()
				b, err := os.ReadFile(builtPlugin(t, v.Name))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "libflagcx-"+v.Name+".so"), b, 0o755))
				mockPlugin(t, dir, "acme")
				t.Setenv(rt.EnvVar, compileFake(t, vendorFakes[v.Name].file, vendorFakes[v.Name].src))
				t.Setenv(ccl.EnvVar, "/nonexistent/"+ccl.Soname())
				plugins, skipped := Load(Options{Dir: dir})
				require.Len(t, plugins, 1)
				require.Equal(t, "acme", plugins[0].Name)
				require.Len(t, skipped, 1)
				require.Contains(t, skipped[0].Error(), "libflagcx-"+v.Name+".so: vendor runtime does not load")
				require.Contains(t, skipped[0].Error(), ccl.EnvVar)
			})
		})
	}
}

// TestVendorWithoutSoftware: on a machine without the vendor's software
// the plugin still opens, and init fails naming the library and its
// variable. It runs in a fresh process: dlopen of a bare soname finds a
// library of that soname this process loaded already (the emulators, in
// other tests), which would hide the failure.
func TestVendorWithoutSoftware(t *testing.T) {
	for _, v := range testkit.Vendors {
		t.Run(v.Name, func(t *testing.T) {
			testkit.InFreshProcess(t, func(t *testing.T) {
				plugin := builtPlugin(t, v.Name)
				for _, l := range v.Libraries {
					t.Setenv(l.EnvVar, "")
				}
				if v.HomeEnv != "" {
					t.Setenv(v.HomeEnv, t.TempDir())
				}
				p, err := Open(plugin)
				require.NoError(t, err, "the plugin opens without any vendor library")
				require.Equal(t, v.Vendor, p.Vendor)
				err = p.Init(InitOptions{})
				if err == nil {
					var paths []string
					for _, l := range p.Info().Libraries {
						paths = append(paths, l.Path)
					}
					testkit.Skip(t, testkit.NoVendorSoftware, "%s's libraries load here (%s)", v.Vendor, strings.Join(paths, ", "))
				}
				rt := v.Libraries[0]
				require.ErrorIs(t, err, sdk.ErrSystemError)
				require.Contains(t, err.Error(), "plugin "+v.Name+": init: ")
				require.Contains(t, err.Error(), "cannot load "+rt.Soname()+" (tried ")
				require.Contains(t, err.Error(), rt.EnvVar)
				require.Regexp(t, v.NoSoftware, err.Error())
				require.False(t, p.Initialized())
				info := p.Info().Libraries
				require.False(t, info[0].Loaded)
				require.Contains(t, err.Error(), info[0].Error, "the library's status says the same")
			})
		})
	}
}

// shouldBeOverridden is what the emulated-selection test sets the
// collective library variable to: Init with Emulated must not use it, and
// must restore it afterwards.
const shouldBeOverridden = "/nonexistent/should-be-overridden"

// fakeVendorsim makes a vendorsim root whose <vendor>/ holds the fake built
// (with flags) as rtLib, and cclLib as a symlink to it (one object loaded).
// It returns the root and the runtime library's path.
func fakeVendorsim(t *testing.T, vendor, src, rtLib, cclLib string, flags ...string) (sim, rt string) {
	t.Helper()
	sim = t.TempDir()
	dir := filepath.Join(sim, vendor)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	rt = compileC(t, filepath.Join(dir, rtLib), src, flags...)
	require.NoError(t, os.Symlink(rtLib, filepath.Join(dir, cclLib)))
	return sim, rt
}

// TestVendorEmulatedSelection: with Emulated the loader points each
// library variable at <vendorsim>/<vendor>/ (here the vendor's fake, built
// with the emulator marker) and the plugin reports the marker back; a
// missing directory, or a library there without the marker, is invalid
// usage.
func TestVendorEmulatedSelection(t *testing.T) {
	for _, v := range testkit.Vendors {
		rt, ccl, f := v.Libraries[0], v.Libraries[1], vendorFakes[v.Name]
		t.Run(v.Name, func(t *testing.T) {
			plugin := builtPlugin(t, v.Name)
			sim, rtPath := fakeVendorsim(t, v.Name, f.src, rt.Emulator.File, ccl.Emulator.File, "-DEMULATED")
			t.Setenv(ccl.EnvVar, shouldBeOverridden)

			t.Run("missing vendorsim dir", func(t *testing.T) {
				p, err := Open(plugin)
				require.NoError(t, err)
				err = p.Init(InitOptions{Emulated: true, VendorsimDir: filepath.Join(sim, "nope")})
				require.ErrorIs(t, err, sdk.ErrInvalidUsage)
				require.Contains(t, err.Error(), "emulated vendor runtimes for "+v.Name+" not found")
				require.Contains(t, err.Error(), "run make")
			})

			p, err := Open(plugin)
			require.NoError(t, err)
			require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
			require.True(t, p.Emulated())
			libs := p.Info().Libraries
			require.True(t, libs[0].Emulated)
			require.True(t, libs[1].Emulated)
			require.Equal(t, rtPath, libs[0].Path)
			for i := 2; i < len(v.Libraries); i++ {
				require.False(t, libs[i].Loaded, "no %s emulator here, and the real one must not be mixed in", v.Libraries[i].Soname())
			}
			require.Equal(t, shouldBeOverridden, os.Getenv(ccl.EnvVar), "variables are restored after init")
			n, err := p.DeviceCount()
			require.NoError(t, err)
			require.Equal(t, 2, n, "the fake's devices")

			t.Run("a library without the marker is refused", func(t *testing.T) {
				plain, _ := fakeVendorsim(t, v.Name, f.src, rt.Emulator.File, ccl.Emulator.File)
				p, err := Open(builtPlugin(t, v.Name))
				require.NoError(t, err)
				err = p.Init(InitOptions{Emulated: true, VendorsimDir: plain})
				require.ErrorIs(t, err, sdk.ErrInvalidUsage)
				require.Contains(t, err.Error(), "is not a vendorsim build")
			})
		})
	}
}

// TestVendorEmulated: the plugin on the make-built emulators agrees with
// the vendor table (libraries, variables, sonames, what the CCL does),
// marks every library emulated, lists devices and links, and runs a small
// AllReduce and AlltoAll on two ranks (goroutines) exactly.
func TestVendorEmulated(t *testing.T) {
	for _, v := range testkit.Vendors {
		t.Run(v.Name, func(t *testing.T) {
			sim := builtVendorsim(t, v.Name)
			p, err := Open(builtPlugin(t, v.Name))
			require.NoError(t, err)
			require.Equal(t, v.Vendor, p.Vendor)
			require.Len(t, p.Libraries, len(v.Libraries))
			for i, l := range v.Libraries {
				require.Equal(t, LibrarySpec{Role: l.Role, EnvVar: l.EnvVar, Sonames: l.Sonames, Optional: l.Optional}, p.Libraries[i])
			}
			require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
			require.True(t, p.Emulated())
			info := p.Info()
			require.True(t, info.Emulated)
			for i, l := range info.Libraries {
				require.True(t, l.Loaded && l.Emulated, "%s: %s", l.Path, l.Error)
				require.Equal(t, filepath.Join(sim, v.Name, v.Libraries[i].Emulator.File), l.Path)
			}
			require.Equal(t, v.DataTypes, info.DataTypes)
			require.Equal(t, v.RedOps, info.RedOps)
			require.Equal(t, v.Timing, p.HasEventTiming())

			n, err := p.DeviceCount()
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, 2)
			di, err := p.DeviceInfo(1)
			require.NoError(t, err)
			require.NotEmpty(t, di.Name)
			require.Equal(t, "0000:11:00.0", di.PCIBusID, "the emulators' device 1")
			if l, err := p.Link(0, 1); provided(p, "getLinkInfo") {
				require.NoError(t, err)
				require.NotEqual(t, LinkSelf, l.Type)
			} else {
				require.ErrorIs(t, err, sdk.ErrNotSupported, "no getLinkInfo in the table")
			}

			id, err := p.UniqueID()
			require.NoError(t, err)
			require.Len(t, id, v.IDBytes)
			const nranks = 2
			results := make([][]float32, nranks)
			errs := make(chan error, nranks)
			for r := range nranks {
				go func() {
					errs <- func() error {
						c, err := p.CommInitRank(r, nranks, id, r)
						if err != nil {
							return err
						}
						defer c.Destroy()
						s, err := p.StreamCreate(r)
						if err != nil {
							return err
						}
						defer p.StreamDestroy(s)
						a, _ := p.DeviceMalloc(r, 64)
						b, err := p.DeviceMalloc(r, 64)
						if err != nil {
							return err
						}
						in := []float32{float32(r + 1), float32(10 * (r + 1)), 0, 0}
						if err := p.CopyToDevice(a, f32bytes(in)); err != nil {
							return err
						}
						if err := c.AllReduce(a, b, 2, sdk.Float32, sdk.Sum, s); err != nil {
							return err
						}
						if err := c.AlltoAll(a, b+8, 1, sdk.Float32, s); err != nil {
							return err
						}
						if err := p.StreamSynchronize(s); err != nil {
							return err
						}
						out := make([]float32, 4)
						if err := p.CopyFromDevice(f32bytes(out), b); err != nil {
							return err
						}
						results[r] = out
						return nil
					}()
				}()
			}
			for range nranks {
				require.NoError(t, <-errs)
			}
			// allreduce: {1+2, 10+20}; alltoall: rank r gets element r of each peer
			require.Equal(t, []float32{3, 30, 1, 2}, results[0])
			require.Equal(t, []float32{3, 30, 10, 20}, results[1])
		})
	}
}

func f32bytes(v []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }

// Rank workers of TestVendorEmulatedRanks: the plugin in envRankPlugin on
// the emulators under envRankSim.
const (
	rankWorker    = "loader-vendor-rank"
	envRankPlugin = "FLAGCX_LOADER_TEST_PLUGIN"
	envRankSim    = "FLAGCX_LOADER_TEST_SIM"
)

func init() {
	testkit.Worker(rankWorker, func(r testkit.Rank) (any, error) {
		p, err := Open(os.Getenv(envRankPlugin))
		if err != nil {
			return nil, err
		}
		if err := p.Init(InitOptions{Emulated: true, VendorsimDir: os.Getenv(envRankSim)}); err != nil {
			return nil, err
		}
		rep, err := runRank(p, r.Rank, r.N, r.ID, rankOptions{})
		rep.Emulated = p.Emulated()
		return rep, err
	})
}

// TestVendorEmulatedRanks: 2 and 3 ranks, one process each as with the
// vendors' real libraries, run every collective of the ABI for every data
// type and op through the loader on the emulators, and every result is
// exact; what the vendor's CCL cannot do is refused as not supported.
func TestVendorEmulatedRanks(t *testing.T) {
	for _, v := range testkit.Vendors {
		t.Run(v.Name, func(t *testing.T) {
			sim := builtVendorsim(t, v.Name)
			plugin := builtPlugin(t, v.Name)
			p, err := Open(plugin)
			require.NoError(t, err)
			require.NoError(t, p.Init(InitOptions{Emulated: true, VendorsimDir: sim}))
			require.True(t, p.Emulated())
			// what is refused, and how
			refused := map[string]string{}
			for _, dt := range sdk.AllDataTypes() {
				msg := fmt.Sprintf("data type %s is not supported by %s's collective library", dt, v.Name)
				if !contains(v.DataTypes, dt) {
					refused["ag/"+dt.String()], refused["ar/"+dt.String()+"/sum"] = msg, msg
					continue
				}
				for _, op := range sdk.AllRedOps() {
					if !contains(v.RedOps, op) {
						refused[fmt.Sprintf("ar/%s/%s", dt, op)] = fmt.Sprintf("reduction op %s is not supported by %s's collective library", op, v.Name)
					}
				}
			}
			for _, n := range []int{2, 3} {
				t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
					id, err := p.UniqueID()
					require.NoError(t, err)
					res := testkit.Run[rankReport](t, testkit.Spec{Worker: rankWorker, N: n, ID: id,
						Env: []string{envRankPlugin + "=" + plugin, envRankSim + "=" + sim,
							"FLAGCX_VENDORSIM_SLOT_BYTES=256", // many chunk rounds
							"FLAGCX_VENDORSIM_MAILBOX_BYTES=4096",
							"FLAGCX_VENDORSIM_TIMEOUT=30"}})
					for r, res := range res {
						rep := res.Report
						require.True(t, rep.Emulated, "rank %d must say it ran on emulators", r)
						require.Empty(t, rep.Failures, "rank %d: wrong results", r)
						require.Greater(t, rep.Checks, 150, "rank %d checked too little", r)
						require.Len(t, rep.Refused, len(refused), "rank %d: refused %v", r, rep.Refused)
						for key, msg := range refused {
							require.Contains(t, rep.Refused[key], msg, "rank %d %s", r, key)
						}
						require.Equal(t, v.Timing, rep.Timing, "rank %d: event timing", r)
						require.Equal(t, v.AsyncErr, rep.AsyncErr, "rank %d: commGetAsyncError", r)
						t.Logf("rank %d: %d exact checks on emulated %s", r, rep.Checks, v.Vendor)
					}
				})
			}
		})
	}
}

// provided reports whether p's table has the entry.
func provided(p *Plugin, entry string) bool {
	for _, e := range p.Entries() {
		if e.Name == entry {
			return e.Provided
		}
	}
	return false
}

func contains[T comparable](s []T, x T) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// ---- One rank's exact checks ------------------------------------------------

// rankCount is the elements per rank (odd: nothing divides evenly).
const rankCount = 29

// rankOptions choose what runRank checks.
type rankOptions struct {
	types []sdk.DataType // nil: every type
	short bool           // the runtime checks and AllReduce only
}

// rankReport is what a rank found.
type rankReport struct {
	Emulated bool              `json:"emulated"`
	Checks   int               `json:"checks"`
	Failures []string          `json:"failures"` // "rank R KEY: got ..., want ..."
	Refused  map[string]string `json:"refused"`  // KEY: the error of an operation refused as not supported
	Timing   bool              `json:"timing"`   // eventElapsedTime worked
	AsyncErr bool              `json:"asyncErr"` // commGetAsyncError worked
}

type vendorRank struct {
	p            *Plugin
	c            *Comm
	s            Stream
	rank, n, dev int
	rep          rankReport
	bufs         []uintptr
}

type rankAbort struct{ err error }

// must ends the rank on an unexpected failure.
func (r *vendorRank) must(what string, err error) {
	if err != nil {
		panic(rankAbort{fmt.Errorf("rank %d: %s: %w", r.rank, what, err)})
	}
}

// alloc is device memory of n bytes filled with 0x5A (on the stream).
func (r *vendorRank) alloc(n int) uintptr {
	d, err := r.p.DeviceMalloc(r.dev, max(n, 1))
	r.must("deviceMalloc", err)
	r.bufs = append(r.bufs, d)
	r.must("memSet", r.p.Memset(d, 0x5A, max(n, 1), r.s))
	return d
}

// upload is device memory holding data (room for size bytes, the rest 0x5A).
func (r *vendorRank) upload(data []byte, size int) uintptr {
	d := r.alloc(max(size, len(data)))
	// the copy below runs on no stream: it does not wait for r.s
	r.must("streamSynchronize", r.p.StreamSynchronize(r.s))
	if len(data) > 0 {
		r.must("copy to device", r.p.CopyToDevice(d, data))
	}
	return d
}

// release frees what alloc made.
func (r *vendorRank) release() {
	r.must("streamSynchronize", r.p.StreamSynchronize(r.s))
	for _, d := range r.bufs {
		r.must("deviceFree", r.p.DeviceFree(d))
	}
	r.bufs = r.bufs[:0]
}

// check compares device memory at d with want, after the stream.
func (r *vendorRank) check(key string, d uintptr, want []byte) {
	r.must("streamSynchronize", r.p.StreamSynchronize(r.s))
	got := make([]byte, len(want))
	r.must("copy from device", r.p.CopyFromDevice(got, d))
	r.same(key, got, want)
}

func (r *vendorRank) same(key string, got, want []byte) {
	r.rep.Checks++
	if string(got) != string(want) {
		r.rep.Failures = append(r.rep.Failures, fmt.Sprintf("rank %d %s: got %x, want %x", r.rank, key, got, want))
	}
}

// refused records an operation that must be refused as not supported.
func (r *vendorRank) refused(key string, err error) {
	r.rep.Checks++
	switch {
	case err == nil:
		r.rep.Failures = append(r.rep.Failures, fmt.Sprintf("rank %d %s: accepted, want not supported", r.rank, key))
	case errors.Is(err, sdk.ErrNotSupported):
		r.rep.Refused[key] = err.Error()
	default:
		r.must(key, err)
	}
}

// series is f(0..count-1) as dt.
func series(dt sdk.DataType, count int, f func(i int) float64) []byte {
	return testkit.Encode(dt, count, f)
}

// runRank is one rank of n: the device runtime (copies in every direction,
// sync and on the stream through pinned memory, memset, events), then the
// communicator and, for every data type, every collective of the ABI,
// each result compared with testkit's exact values.
func runRank(p *Plugin, rank, n int, id []byte, o rankOptions) (rep rankReport, err error) {
	r := &vendorRank{p: p, rank: rank, n: n, rep: rankReport{Refused: map[string]string{}}}
	defer func() {
		if x := recover(); x != nil {
			a, ok := x.(rankAbort)
			if !ok {
				panic(x)
			}
			rep, err = r.rep, a.err
		}
	}()
	ndev, err := p.DeviceCount()
	r.must("deviceCount", err)
	r.dev = rank % ndev
	r.s, err = p.StreamCreate(r.dev)
	r.must("streamCreate", err)
	defer p.StreamDestroy(r.s)
	defer func() {
		for _, d := range r.bufs {
			p.DeviceFree(d)
		}
	}()
	r.runtime()
	r.c, err = p.CommInitRank(r.dev, n, id, rank)
	r.must("commInitRank", err)
	defer r.c.Destroy()
	types := o.types
	if types == nil {
		types = sdk.AllDataTypes()
	}
	if o.short {
		types = []sdk.DataType{sdk.Int8, sdk.Float32}
	}
	for _, dt := range types {
		r.collectives(dt, o.short)
		r.release()
	}
	e, err := p.EventCreate(r.dev)
	r.must("eventCreate", err)
	r.must("eventRecord", p.EventRecord(e, r.s))
	r.must("eventSynchronize", p.EventSynchronize(e))
	r.must("eventDestroy", p.EventDestroy(e))
	switch err := r.c.AsyncError(); {
	case err == nil:
		r.rep.AsyncErr = true
	case !errors.Is(err, sdk.ErrNotSupported):
		r.must("asyncError", err)
	}
	return r.rep, nil
}

// runtime checks copies in every direction (synchronous, and on the stream
// through pinned memory), memset and events.
func (r *vendorRank) runtime() {
	p, me := r.p, r.rank
	data := []byte(fmt.Sprintf("rank %d says hello through the device runtime", me))
	n := len(data)
	a := r.upload(data, n)
	b := r.alloc(n)
	h, err := p.HostMalloc(n)
	r.must("hostMalloc", err)
	defer p.HostFree(h)
	e0, err := p.EventCreate(r.dev)
	r.must("eventCreate", err)
	defer p.EventDestroy(e0)
	e1, err := p.EventCreate(r.dev)
	r.must("eventCreate", err)
	defer p.EventDestroy(e1)
	r.must("eventRecord", p.EventRecord(e0, r.s))
	r.must("memCopy D2D", p.Memcpy(b, a, n, DeviceToDevice, r.s))
	r.must("memCopy D2H", p.Memcpy(h, b, n, DeviceToHost, r.s))
	r.must("eventRecord", p.EventRecord(e1, r.s))
	r.must("streamWaitEvent", p.StreamWaitEvent(r.s, e1))
	r.must("eventSynchronize", p.EventSynchronize(e1))
	d, err := p.EventElapsed(e0, e1)
	switch {
	case err == nil:
		r.rep.Timing = true
		r.rep.Checks++
		if d < 0 {
			r.rep.Failures = append(r.rep.Failures, fmt.Sprintf("rank %d event timing: %v", me, d))
		}
	case !errors.Is(err, sdk.ErrNotSupported):
		r.must("eventElapsed", err)
	}
	r.same("D2D+D2H on the stream", HostSlice(h, n), data)
	copy(HostSlice(h, n), make([]byte, n))
	r.must("memCopy H2D", p.Memcpy(b, h, n, HostToDevice, r.s))
	r.must("memSet", p.Memset(a, 0x5a, 4, 0))
	r.check("H2D on the stream", b, make([]byte, n))
	r.check("memset", a, append([]byte{0x5a, 0x5a, 0x5a, 0x5a}, data[4:]...))
	r.release()
}

// collectives runs every collective for dt (AllReduce only when short).
func (r *vendorRank) collectives(dt sdk.DataType, short bool) {
	p, c, s, me, n, C, es := r.p, r.c, r.s, r.rank, r.n, rankCount, dt.Size()
	if !p.SupportsDataType(dt) { // the host's business: bytes, or another path
		b := r.alloc(n * C * es)
		r.refused("ag/"+dt.String(), c.AllGather(b, b, C, dt, s))
		r.refused("ar/"+dt.String()+"/sum", c.AllReduce(b, b, C, dt, sdk.Sum, s))
		return
	}
	untouched := func(k int) []byte { return []byte(strings.Repeat("\x5a", k)) }
	for _, op := range sdk.AllRedOps() {
		key := fmt.Sprintf("%s/%s", dt, op)
		if !p.SupportsRedOp(op) {
			b := r.alloc(C * es)
			r.refused("ar/"+key, c.AllReduce(b, b, C, dt, op, s))
			continue
		}
		in := series(dt, C, func(i int) float64 { return testkit.Input(dt, op, me, n, i) })
		want := series(dt, C, func(i int) float64 { return testkit.Reduced(dt, op, n, i) })
		a, b := r.upload(in, 0), r.alloc(len(in))
		r.must("allReduce "+key, c.AllReduce(a, b, C, dt, op, s))
		r.check("ar/"+key, b, want)
		r.must("allReduce in place "+key, c.AllReduce(a, a, C, dt, op, s))
		r.check("ar-ip/"+key, a, want)
		if short {
			continue
		}
		rin := series(dt, n*C, func(i int) float64 { return testkit.Input(dt, op, me, n, i) })
		a, b = r.upload(rin, 0), r.alloc(C*es)
		r.must("reduceScatter "+key, c.ReduceScatter(a, b, C, dt, op, s))
		r.check("rs/"+key, b, series(dt, C, func(j int) float64 { return testkit.Reduced(dt, op, n, me*C+j) }))
		// reduce from every root; the others' receive buffers stay untouched
		for root := range n {
			a, b := r.upload(in, 0), r.alloc(len(in))
			r.must("reduce "+key, c.Reduce(a, b, C, dt, op, root, s))
			w := untouched(len(in))
			if me == root {
				w = want
			}
			r.check(fmt.Sprintf("red/%s/%d", key, root), b, w)
		}
	}
	if short {
		return
	}
	for root := range n {
		key := fmt.Sprintf("%s/%d", dt, root)
		// broadcast: non-roots pass no send buffer, or one that is not read
		bc := series(dt, C, func(j int) float64 { return testkit.Move(root, 0, j) })
		var a uintptr
		if me == root {
			a = r.upload(bc, 0)
		}
		b := r.alloc(len(bc))
		r.must("broadcast "+key, c.Broadcast(a, b, C, dt, root, s))
		r.check("bc/"+key, b, bc)
		if me == root {
			a = r.upload(bc, 0)
		} else {
			a = r.alloc(len(bc))
		}
		b = r.alloc(len(bc))
		r.must("broadcast "+key, c.Broadcast(a, b, C, dt, root, s))
		r.check("bc-any/"+key, b, bc)

		// gather: non-roots pass no receive buffer, or one left untouched
		mine := series(dt, C, func(j int) float64 { return testkit.Move(me, root, j) })
		gathered := series(dt, n*C, func(i int) float64 { return testkit.Move(i/C, root, i%C) })
		a, b = r.upload(mine, 0), 0
		if me == root {
			b = r.alloc(n * C * es)
		}
		r.must("gather "+key, c.Gather(a, b, C, dt, root, s))
		if me == root {
			r.check("ga/"+key, b, gathered)
		}
		a, b = r.upload(mine, 0), r.alloc(n*C*es)
		r.must("gather "+key, c.Gather(a, b, C, dt, root, s))
		w := untouched(n * C * es)
		if me == root {
			w = gathered
		}
		r.check("ga-keep/"+key, b, w)

		// scatter: non-roots pass no send buffer, or one that is not read
		full := series(dt, n*C, func(i int) float64 { return testkit.Move(root, i/C, i%C) })
		part := series(dt, C, func(j int) float64 { return testkit.Move(root, me, j) })
		a = 0
		if me == root {
			a = r.upload(full, 0)
		}
		b = r.alloc(C * es)
		r.must("scatter "+key, c.Scatter(a, b, C, dt, root, s))
		r.check("sc/"+key, b, part)
		if me == root {
			a = r.upload(full, 0)
		} else {
			a = r.alloc(n * C * es)
		}
		b = r.alloc(C * es)
		r.must("scatter "+key, c.Scatter(a, b, C, dt, root, s))
		r.check("sc-any/"+key, b, part)
	}
	key := dt.String()

	// allgather
	a, b := r.upload(series(dt, C, func(j int) float64 { return testkit.Move(me, 0, j) }), 0), r.alloc(n*C*es)
	r.must("allGather "+key, c.AllGather(a, b, C, dt, s))
	r.check("ag/"+key, b, series(dt, n*C, func(i int) float64 { return testkit.Move(i/C, 0, i%C) }))

	// alltoall, then a device-to-device copy on the stream
	a, b = r.upload(series(dt, n*C, func(i int) float64 { return testkit.Move(me, i/C, i%C) }), 0), r.alloc(n*C*es)
	r.must("alltoAll "+key, c.AlltoAll(a, b, C, dt, s))
	cp := r.alloc(n * C * es)
	r.must("memCopy D2D", p.Memcpy(cp, b, n*C*es, DeviceToDevice, s))
	r.check("a2a/"+key, cp, series(dt, n*C, func(i int) float64 { return testkit.Move(i/C, me, i%C) }))

	// alltoallv: (src+2*dst)%4 elements from src to dst (some none), with
	// gaps between the blocks on both sides (the receive gaps stay untouched)
	cnt := func(src, dst int) int { return (src + 2*dst) % 4 }
	sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	soff, roff := 0, 0
	for q := range n {
		sc[q], rc[q], sd[q], rd[q] = cnt(me, q), cnt(q, me), soff, roff
		soff += sc[q] + 1
		roff += rc[q] + 2
	}
	send := make([]float64, soff)
	for q := range n {
		for j := range sc[q] {
			send[sd[q]+j] = testkit.Move(me, q, j)
		}
	}
	a, b = r.upload(series(dt, soff, func(i int) float64 { return send[i] }), 0), r.alloc(roff*es)
	r.must("alltoAllv "+key, c.AlltoAllv(a, sc, sd, b, rc, rd, dt, s))
	want := untouched(roff * es)
	for q := range n {
		copy(want[rd[q]*es:], series(dt, rc[q], func(j int) float64 { return testkit.Move(q, me, j) }))
	}
	r.check("a2av/"+key, b, want)

	// send/recv around a ring, in a group
	next, prev := (me+1)%n, (me+n-1)%n
	a, b = r.upload(series(dt, C, func(j int) float64 { return testkit.Move(me, next, j) }), 0), r.alloc(C*es)
	r.must("groupStart", p.GroupStart())
	errSend := c.Send(a, C, dt, next, s)
	errRecv := c.Recv(b, C, dt, prev, s)
	r.must("groupEnd", p.GroupEnd())
	r.must("send/recv "+key, errors.Join(errSend, errRecv))
	r.check("ring/"+key, b, series(dt, C, func(j int) float64 { return testkit.Move(prev, me, j) }))
}

// inProcessRanks runs n ranks of runRank on goroutines of this process
// (the emulators serve several ranks per process too).
func inProcessRanks(p *Plugin, n int, o rankOptions) ([]rankReport, error) {
	id, err := p.UniqueID()
	if err != nil {
		return nil, err
	}
	reps := make([]rankReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A vendor runtime keeps per-thread state (the current device,
			// an open group): like a rank of bench, each rank stays on one
			// OS thread, or Go could move it and it would issue its work
			// with another rank's device current.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			reps[r], errs[r] = runRank(p, r, n, id, o)
		}()
	}
	wg.Wait()
	return reps, errors.Join(errs...)
}

// failures are the wrong results of all ranks.
func failures(reps []rankReport) []string {
	var out []string
	for _, r := range reps {
		out = append(out, r.Failures...)
	}
	return out
}
