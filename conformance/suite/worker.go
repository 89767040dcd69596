package suite

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// worker is one rank: the plugin it loaded, its device, stream and
// communicator. Its methods run in the worker process.
type worker struct {
	p      *loader.Plugin
	info   PluginInfo
	rank   int
	nranks int
	dev    int
	stream loader.Stream
	comm   *loader.Comm
	note   string // what the running case measured, for its report whatever the verdict (comm.leak)
}

// WorkerRPC is the net/rpc face of a worker (methods "Plugin.<Name>").
type WorkerRPC struct{ w *worker }

// Open loads and initializes the plugin.
func (r *WorkerRPC) Open(a OpenArgs, reply *OpenReply) error {
	*reply = r.w.open(a)
	return nil
}

// UniqueIDs makes n vendor unique ids (rank 0 does this for everyone).
func (r *WorkerRPC) UniqueIDs(n int, reply *[][]byte) error {
	if r.w.p == nil {
		return errors.New("Open first")
	}
	ids := make([][]byte, n)
	for i := range ids {
		id, err := r.w.p.UniqueID()
		if err != nil {
			return err
		}
		ids[i] = id
	}
	*reply = ids
	return nil
}

// Join creates the rank's stream and its communicator.
func (r *WorkerRPC) Join(a JoinArgs, reply *RankResult) error {
	*reply = r.w.join(a)
	return nil
}

// Run runs one case.
func (r *WorkerRPC) Run(a RunArgs, reply *RankResult) error {
	*reply = r.w.run(a)
	return nil
}

// Leave destroys the communicator and the stream.
func (r *WorkerRPC) Leave(_ bool, reply *RankResult) error {
	w := r.w
	var errs []error
	if w.comm != nil {
		errs = append(errs, w.comm.Destroy())
		w.comm = nil
	}
	if w.stream != 0 {
		errs = append(errs, w.p.StreamDestroy(w.stream))
		w.stream = 0
	}
	*reply = outcome(errors.Join(errs...))
	return nil
}

// openProblems classify why a plugin file cannot be used.
var openProblems = []struct {
	err  error
	kind string
}{
	{loader.ErrUnknownABI, "unknown ABI version"},
	{loader.ErrNoTable, "no plugin table"},
	{loader.ErrBadTable, "bad plugin table"},
	{loader.ErrNotSharedObject, "not a shared object"},
	{loader.ErrLoadFailed, "dlopen failed"},
}

func (w *worker) open(a OpenArgs) OpenReply {
	p, err := loader.Open(a.Path)
	if err != nil {
		kind := "open failed"
		for _, op := range openProblems {
			if errors.Is(err, op.err) {
				kind = op.kind
				break
			}
		}
		return OpenReply{Info: PluginInfo{Path: a.Path}, Kind: kind, Problem: err.Error()}
	}
	w.p = p
	info := PluginInfo{Name: p.Name, Vendor: p.Vendor, Version: p.Version, Path: p.Path, ABI: p.ABIVersion,
		Caps: p.Caps.String(), HasDevice: p.Caps&loader.CapDevice != 0, HasCCL: p.Caps&loader.CapCCL != 0}
	info.Entries = map[string]bool{}
	for _, e := range p.Entries() {
		info.Entries[e.Name] = e.Provided
		if e.Optional && !e.Provided {
			info.NullOpt = append(info.NullOpt, e.Name)
		}
	}
	if a.Emulated {
		// Stream-ordering mistakes must show as wrong data every time, not
		// now and then: the emulated runtimes hold back work nobody waits
		// for (conformance/vendorsim/README.md, "Streams and events").
		if !env.VendorsimStreamDelay.IsSet(nil) {
			_ = os.Setenv(env.VendorsimStreamDelay.Name, "5000")
		}
	}
	err = p.Init(loader.InitOptions{Emulated: a.Emulated, VendorsimDir: a.VendorsimDir})
	pi := p.Info()
	info.Emulated = pi.Emulated
	for _, t := range pi.DataTypes {
		info.DataTypes = append(info.DataTypes, t.String())
	}
	for _, o := range pi.RedOps {
		info.RedOps = append(info.RedOps, o.String())
	}
	for _, l := range pi.Libraries {
		info.Libraries = append(info.Libraries, LibraryInfo{Role: l.Role, Path: l.Path, Version: l.Version,
			Loaded: l.Loaded, Emulated: l.Emulated, Error: l.Error})
	}
	if err != nil {
		return OpenReply{Info: info, Kind: "init failed", Problem: err.Error()}
	}
	if info.HasDevice {
		n, err := p.DeviceCount()
		if err != nil {
			return OpenReply{Info: info, Kind: "getDeviceCount failed", Problem: err.Error()}
		}
		info.Devices = n
	}
	w.info = info
	return OpenReply{Info: info}
}

func (w *worker) join(a JoinArgs) RankResult {
	if w.p == nil {
		return RankResult{Status: rankError, Detail: "Open first"}
	}
	w.rank, w.nranks, w.dev = a.Rank, a.NRanks, a.Dev
	if w.stream == 0 {
		s, err := w.p.StreamCreate(w.dev)
		if err != nil {
			return outcome(err)
		}
		w.stream = s
	}
	if a.ID == nil { // a device-only session
		return RankResult{Status: rankOK}
	}
	c, err := w.p.CommInitRank(w.dev, a.NRanks, a.ID, a.Rank)
	if err != nil {
		return outcome(err)
	}
	w.comm = c
	return RankResult{Status: rankOK}
}

// run executes a case; a Go panic in the suite's own code is reported as
// an error of that case, not as a crash of the plugin.
func (w *worker) run(a RunArgs) (res RankResult) {
	defer func() {
		if v := recover(); v != nil {
			res = RankResult{Status: rankError, Detail: fmt.Sprintf("conformance worker panic (a bug in the suite): %v\n%s", v, debug.Stack())}
		}
	}()
	if w.p == nil || w.stream == 0 {
		return RankResult{Status: rankError, Detail: "worker not joined"}
	}
	w.note = ""
	res = outcome(w.exec(a.Spec))
	res.Note = w.note
	return res
}

// wrongResult is a result that differs from the reference.
type wrongResult struct{ msg string }

func (e *wrongResult) Error() string { return e.msg }

func wrongf(format string, args ...any) error { return &wrongResult{fmt.Sprintf(format, args...)} }

// outcome classifies an error of a case.
func outcome(err error) RankResult {
	var wr *wrongResult
	switch {
	case err == nil:
		return RankResult{Status: rankOK}
	case errors.As(err, &wr):
		return RankResult{Status: rankWrong, Detail: wr.msg}
	case errors.Is(err, sdk.ErrNotSupported):
		return RankResult{Status: rankUnsupported, Detail: oneLine(err.Error())}
	}
	return RankResult{Status: rankError, Detail: oneLine(err.Error())}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
