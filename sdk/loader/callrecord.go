package loader

// The call record tells a local launcher which plugin call a rank was in
// when a signal killed it. A fault in C code ends a Go process at once:
// the runtime prints its report (a goroutine dump that names no C entry)
// and exits with status 2, and no Go code of ours runs on the way. So what
// the launcher needs must already be where it can read it after the death:
// a file the launcher creates and hands over (CallRecordFD), which the rank
// maps shared. Before each plugin call the rank stores the C function's
// address in a slot of the mapping and clears it after (a compare-and-swap
// and a store in its own memory: no system call, no allocation on the
// latency path), and at Open it writes each plugin's path and entry
// addresses there once. The launcher then reads the slots left set and names them.
//
// Layout (recordSize bytes): recordMagic at 0; at recordNamesLen a uint32,
// the bytes of names text written; recordSlots uint64 slots at
// recordSlotsAt, each the address of a C function in flight or 0; from
// recordNamesAt the names text, a line `plugin "<path>"` followed by one
// line `<hex address> <entry>` per entry of that plugin's table.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

// CallRecordFD is the descriptor on which a local launch hands each rank
// its call record (the launcher's exec.Cmd.ExtraFiles[0]). A rank looks
// there only when FLAGCX_FATAL_REPORT says a local launcher started it,
// and only takes a regular file of the record's size and magic.
const CallRecordFD = 3

const (
	recordMagic    = "flagcx call record v1\n"
	recordSize     = 64 << 10
	recordNamesLen = 32
	recordSlotsAt  = 64
	recordSlotBits = 6
	recordSlots    = 1 << recordSlotBits
	recordNamesAt  = recordSlotsAt + 8*recordSlots
)

// NewCallRecord makes an empty call record for one rank: a temporary file,
// already unlinked, so that nothing is left behind however the launch
// ends (it lives while the launcher and the rank hold it).
func NewCallRecord() (*os.File, error) {
	f, err := os.CreateTemp("", "flagcx-calls-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	if err = f.Truncate(recordSize); err == nil {
		_, err = f.WriteAt([]byte(recordMagic), 0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// InFlight is a plugin call that a rank had started and not finished.
type InFlight struct {
	// Entry is the table entry, "allReduce"; when a plugin points several
	// entries at one C function, their names joined with " or ".
	Entry  string
	Plugin string  // the plugin file, an absolute path
	Addr   uintptr // the C function's address in the rank
}

// ReadCallRecord returns the plugin calls in flight in f's rank: read
// after the rank ended, the calls it died in. A marked address the rank
// wrote no names for (its record's name space ran out) is left out.
func ReadCallRecord(f *os.File) ([]InFlight, error) {
	mem := make([]byte, recordSize)
	if _, err := f.ReadAt(mem, 0); err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(mem, []byte(recordMagic)) {
		return nil, fmt.Errorf("not a call record")
	}
	n := int(binary.NativeEndian.Uint32(mem[recordNamesLen:]))
	names := parseRecordNames(mem[recordNamesAt:min(recordNamesAt+n, recordSize)])
	var out []InFlight
	for i := range recordSlots {
		addr := uintptr(binary.NativeEndian.Uint64(mem[recordSlotsAt+8*i:]))
		if c, ok := names[addr]; ok && addr != 0 {
			c.Addr = addr
			out = append(out, c)
		}
	}
	return out, nil
}

// parseRecordNames maps each address of the names text to its entry.
func parseRecordNames(text []byte) map[uintptr]InFlight {
	names := map[uintptr]InFlight{}
	plugin := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		a, b, _ := strings.Cut(sc.Text(), " ")
		if a == "plugin" {
			plugin, _ = strconv.Unquote(b)
			continue
		}
		addr, err := strconv.ParseUint(a, 16, 64)
		if err != nil || b == "" {
			continue
		}
		c := names[uintptr(addr)]
		switch {
		case c.Entry == "":
			c = InFlight{Entry: b, Plugin: plugin}
		case c.Plugin == plugin && !strings.Contains(" or "+c.Entry+" or ", " or "+b+" or "):
			c.Entry += " or " + b
		}
		names[uintptr(addr)] = c
	}
	return names
}

// record is this process's mapped call record.
type record struct {
	mem   []byte
	slots *[recordSlots]atomic.Uint64
	names *atomic.Uint32
	mu    sync.Mutex // one writer of names at a time
}

// callRecord is nil unless a local launcher handed this process a record:
// then marking a call costs one load and a branch.
var callRecord atomic.Pointer[record]

// init takes the record a local launcher handed over, before any plugin
// is opened (bind wraps the bound entries only in a recording process)
// and before this process starts any of its own: taking it closes the
// descriptor, which they would otherwise inherit.
func init() {
	if on, _ := env.FatalReport.Get(nil); !on {
		return
	}
	if mem := mapCallRecord(CallRecordFD); mem != nil {
		callRecord.Store(newRecord(mem))
	}
}

// newRecord is the record in mem, a shared mapping of a call record.
func newRecord(mem []byte) *record {
	return &record{
		mem:   mem,
		slots: (*[recordSlots]atomic.Uint64)(unsafe.Pointer(&mem[recordSlotsAt])),
		names: (*atomic.Uint32)(unsafe.Pointer(&mem[recordNamesLen])),
	}
}

// enterCall marks the C function fn in flight; it returns the slot to hand
// to leaveCall, nil when nothing was marked.
func enterCall(fn uintptr) *atomic.Uint64 {
	r := callRecord.Load()
	if r == nil {
		return nil
	}
	// Concurrent calls need slots of their own. The search starts at a
	// hash of the caller's stack address, which differs between
	// goroutines, so that they seldom contend for one slot's cache line.
	var anchor byte
	h := int(uint64(uintptr(unsafe.Pointer(&anchor))>>11) * 0x9E3779B97F4A7C15 >> (64 - recordSlotBits))
	for i := range recordSlots {
		s := &r.slots[(h+i)%recordSlots]
		if s.CompareAndSwap(0, uint64(fn)) {
			return s
		}
	}
	return nil // more calls in flight than slots: this one goes unmarked
}

// leaveCall clears what enterCall marked.
func leaveCall(slot *atomic.Uint64) {
	if slot != nil {
		slot.Store(0)
	}
}

// recordEntries writes p's path and entry addresses to the call record,
// so that the launcher can name a marked address. It runs at Open, after
// bind (which clears the entries of groups the plugin does not declare).
func (p *Plugin) recordEntries() {
	r := callRecord.Load()
	if r == nil {
		return
	}
	path, err := filepath.Abs(p.Path)
	if err != nil {
		path = p.Path
	}
	text := fmt.Appendf(nil, "plugin %q\n", path)
	for _, e := range p.entryAddrs() {
		text = fmt.Appendf(text, "%x %s\n", e.addr, e.name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := int(r.names.Load())
	if recordNamesAt+n+len(text) > len(r.mem) {
		return // full: this plugin's calls go unnamed
	}
	copy(r.mem[recordNamesAt+n:], text)
	r.names.Store(uint32(n + len(text)))
}

type entryAddr struct {
	name string
	addr uintptr
}

// entryAddrs lists the non-NULL entries of p's table.
func (p *Plugin) entryAddrs() []entryAddr {
	all := []entryAddr{{"init", p.t.Init}, {"fini", p.t.Fini}, {"getLastError", p.t.GetLastError}}
	for _, group := range []any{&p.t.Device, &p.t.CCL} {
		v := reflect.ValueOf(group).Elem()
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("c"), ",")
			all = append(all, entryAddr{name, uintptr(v.Field(i).Uint())})
		}
	}
	out := all[:0]
	for _, e := range all {
		if e.addr != 0 {
			out = append(out, e)
		}
	}
	return out
}

// bindN registers the C function cfn as the bound entry *fp (nothing when
// cfn is NULL: *fp stays nil) and, in a recording process, wraps it so
// that it marks cfn in flight while it runs. One per arity, typed: a
// reflect wrapper would double the cost of a bound call (setDevice runs
// on every operation of a device lane).
func bind0[R any](fp *func() R, cfn uintptr) {
	if register(fp, cfn) {
		inner := *fp
		*fp = func() R { s := enterCall(cfn); r := inner(); leaveCall(s); return r }
	}
}

func bind1[A, R any](fp *func(A) R, cfn uintptr) {
	if register(fp, cfn) {
		inner := *fp
		*fp = func(a A) R { s := enterCall(cfn); r := inner(a); leaveCall(s); return r }
	}
}

func bind2[A, B, R any](fp *func(A, B) R, cfn uintptr) {
	if register(fp, cfn) {
		inner := *fp
		*fp = func(a A, b B) R { s := enterCall(cfn); r := inner(a, b); leaveCall(s); return r }
	}
}

func bind3[A, B, C, R any](fp *func(A, B, C) R, cfn uintptr) {
	if register(fp, cfn) {
		inner := *fp
		*fp = func(a A, b B, c C) R { s := enterCall(cfn); r := inner(a, b, c); leaveCall(s); return r }
	}
}

func bind5[A, B, C, D, E, R any](fp *func(A, B, C, D, E) R, cfn uintptr) {
	if register(fp, cfn) {
		inner := *fp
		*fp = func(a A, b B, c C, d D, e E) R {
			s := enterCall(cfn)
			r := inner(a, b, c, d, e)
			leaveCall(s)
			return r
		}
	}
}

// register binds a non-NULL cfn to *fptr (a NULL pointer is never handed
// to purego.RegisterFunc, which would panic) and says whether to wrap it.
func register(fptr any, cfn uintptr) bool {
	if cfn == 0 {
		return false
	}
	purego.RegisterFunc(fptr, cfn)
	return callRecord.Load() != nil
}
