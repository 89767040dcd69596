package suite

import "fmt"

// Kind names what a case executes. The worker runs most kinds with the
// function registered for them in workerKinds; the runner answers the
// others itself (runnerKinds). Run checks every case of the matrix
// against both before it starts a worker, so a case naming a kind that
// nothing executes is an error of the run, never a failing case.
type Kind string

// The kinds a worker executes.
const (
	KindColl             Kind = "coll"              // one collective (Spec.Coll, Type, Op, Root, Count, InPlace, Shift)
	KindGroupCollectives Kind = "group.collectives" // three collectives in one group
	KindStreamAllReduce  Kind = "stream.allreduce"  // an allReduce ordered by copies on the caller's stream

	KindP2PRing     Kind = "p2p.ring"     // grouped send to rank+1, recv from rank-1
	KindP2PExchange Kind = "p2p.exchange" // a send and a recv with every other rank, one group
	KindP2PSelf     Kind = "p2p.self"     // a send to oneself and its recv
	KindP2PPair     Kind = "p2p.pair"     // rank 0 to rank n-1, outside any group
	KindGroupNested Kind = "group.nested" // the ring inside two nested groups

	KindCommUniqueID    Kind = "comm.uniqueid"
	KindCommErrorString Kind = "comm.errorstring"
	KindCommSingle      Kind = "comm.single" // a one-rank communicator
	KindCommLoop        Kind = "comm.loop"   // Spec.Iters rounds of init, allReduce, destroy
	KindCommMulti       Kind = "comm.multi"  // Spec.Iters communicators at once
	KindCommAsyncError  Kind = "comm.asyncerror"
	KindCommAbort       Kind = "comm.abort"
	KindCommLeak        Kind = "comm.leak"
	KindCommDestroy     Kind = "comm.destroy"

	KindDeviceCount           Kind = "device.count"
	KindDeviceInfo            Kind = "device.info"
	KindDevicePCIBusID        Kind = "device.info.pcibusid"
	KindDeviceLinkSelf        Kind = "device.link.self"
	KindDeviceMalloc          Kind = "device.malloc"
	KindDeviceHostMalloc      Kind = "device.hostmalloc"
	KindDeviceMemcpySync      Kind = "device.memcpy.sync"
	KindDeviceMemcpyD2D       Kind = "device.memcpy.d2d"
	KindDeviceMemcpyAsync     Kind = "device.memcpy.async"
	KindDeviceMemset          Kind = "device.memset"
	KindDeviceMemsetAsync     Kind = "device.memset.async"
	KindDeviceStreams         Kind = "device.stream"
	KindDeviceStreamQuery     Kind = "device.stream.query"
	KindDeviceEvent           Kind = "device.event"
	KindDeviceEventQuery      Kind = "device.event.query"
	KindDeviceStreamWaitEvent Kind = "device.stream.waitevent"
	KindDeviceEventElapsed    Kind = "device.event.elapsed"
	KindDevicePointerKind     Kind = "device.pointerkind"
	KindDeviceAll             Kind = "device.all"
	KindDeviceError           Kind = "device.error"
	KindDeviceReduceLocal     Kind = "device.reducelocal"        // ABI v4's reduceLocal against the reference
	KindDeviceReduceStream    Kind = "device.reducelocal.stream" // reduceLocal in its stream's order
	KindDeviceRelayReduce     Kind = "device.relayreduce"        // ABI v5's relayReduce against the reference, in stream order
)

// The kinds the runner answers without running anything on a worker.
const (
	KindPluginLoad Kind = "plugin.load"   // the workers' Open
	KindDataType   Kind = "info.datatype" // dataTypeMask, as Open reported it
	KindRedOp      Kind = "info.redop"    // redOpMask, as Open reported it
	KindCommInit   Kind = "comm.init"     // the workers' Join
)

// caseFunc runs one case on a worker: nil, a wrong result (wrongf) or
// the error of a plugin entry.
type caseFunc func(w *worker, s Spec) error

// workerKinds is the registry of what a worker can execute.
var workerKinds map[Kind]caseFunc

// runnerKinds are answered by the runner (see their constants).
var runnerKinds = map[Kind]bool{KindPluginLoad: true, KindDataType: true, KindRedOp: true, KindCommInit: true}

// The registry is filled in init because its functions reach exec, which
// reads it (a package-level initializer would be a cycle).
func init() {
	workerKinds = map[Kind]caseFunc{
		KindColl:             (*worker).collCase,
		KindGroupCollectives: (*worker).groupCollectives,
		KindStreamAllReduce:  (*worker).streamOrdered,

		KindP2PRing:     p2pCase((*worker).prepRing),
		KindGroupNested: p2pCase((*worker).prepRing),
		KindP2PExchange: p2pCase((*worker).prepExchange),
		KindP2PSelf:     p2pCase((*worker).prepSelf),
		KindP2PPair:     p2pCase((*worker).prepPair),

		KindCommUniqueID:    (*worker).commUniqueID,
		KindCommErrorString: (*worker).commErrorString,
		KindCommSingle:      (*worker).commSingle,
		KindCommLoop:        (*worker).commLoop,
		KindCommMulti:       (*worker).commMulti,
		KindCommAsyncError:  (*worker).commAsyncError,
		KindCommAbort:       (*worker).commAbort,
		KindCommLeak:        (*worker).leakCheck,
		KindCommDestroy:     (*worker).commDestroy,

		KindDeviceCount:           deviceCase((*devCtx).count),
		KindDeviceInfo:            deviceCase((*devCtx).info),
		KindDevicePCIBusID:        deviceCase((*devCtx).info),
		KindDeviceLinkSelf:        deviceCase((*devCtx).linkSelf),
		KindDeviceMalloc:          deviceCase((*devCtx).malloc),
		KindDeviceHostMalloc:      deviceCase((*devCtx).hostMalloc),
		KindDeviceMemcpySync:      deviceCase((*devCtx).memcpySync),
		KindDeviceMemcpyD2D:       deviceCase((*devCtx).memcpyD2D),
		KindDeviceMemcpyAsync:     deviceCase((*devCtx).memcpyAsync),
		KindDeviceMemset:          deviceCase((*devCtx).memset),
		KindDeviceMemsetAsync:     deviceCase((*devCtx).memset),
		KindDeviceStreams:         deviceCase((*devCtx).streams),
		KindDeviceStreamQuery:     deviceCase((*devCtx).streamQuery),
		KindDeviceEvent:           deviceCase((*devCtx).event),
		KindDeviceEventQuery:      deviceCase((*devCtx).event),
		KindDeviceEventElapsed:    deviceCase((*devCtx).event),
		KindDeviceStreamWaitEvent: deviceCase((*devCtx).streamWaitEvent),
		KindDevicePointerKind:     deviceCase((*devCtx).pointerKind),
		KindDeviceAll:             deviceCase((*devCtx).everyDevice),
		KindDeviceError:           deviceCase((*devCtx).badDevice),
		KindDeviceReduceLocal:     deviceCase((*devCtx).reduceLocal),
		KindDeviceReduceStream:    deviceCase((*devCtx).reduceLocalStream),
		KindDeviceRelayReduce:     deviceCase((*devCtx).relayReduce),
	}
}

// checkKinds reports the first case whose kind nothing executes.
func checkKinds(cases []Case) error {
	for _, c := range cases {
		if _, ok := workerKinds[c.Spec.Kind]; !ok && !runnerKinds[c.Spec.Kind] {
			return fmt.Errorf("conformance: case %s names kind %q, which no worker or runner executes (a bug in the suite)", c.ID, c.Spec.Kind)
		}
	}
	return nil
}

// exec runs a case's spec on this worker.
func (w *worker) exec(s Spec) error {
	fn, ok := workerKinds[s.Kind]
	if !ok {
		return fmt.Errorf("unknown case kind %q", s.Kind)
	}
	return fn(w, s)
}
