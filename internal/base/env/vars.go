package env

import "time"

// The registry: every FLAGCX_* variable flagcx-go reads, and those the C
// side reads that README.md documents. README.md's "Environment variables"
// table lists exactly these names (TestReadmeListsTheRegistry).

// Deadlines.
var (
	// Timeout bounds every wait without progress, and every plugin call
	// that can block.
	Timeout = Duration("FLAGCX_TIMEOUT", 30*time.Second,
		"deadline of every wait without progress and of every plugin call that can block")
)

// The host network (hostnet).
var (
	// SocketIfName is FLAGCX_SOCKET_IFNAME.
	SocketIfName = String("FLAGCX_SOCKET_IFNAME", "^lo,docker",
		"interfaces to use: prefixes (eth,ib), ^ to exclude, = for exact names")
	// SocketFamily is 4 or 6, 0 when unset (either family).
	SocketFamily = Choice("FLAGCX_SOCKET_FAMILY", 0, "either",
		map[string]int{"AF_INET": 4, "4": 4, "AF_INET6": 6, "6": 6},
		"allowed are AF_INET (or 4) and AF_INET6 (or 6); unset for either",
		"force an address family")
	// SocketNThreads is FLAGCX_SOCKET_NTHREADS.
	SocketNThreads = Int("FLAGCX_SOCKET_NTHREADS", 2, 1, 16,
		"socket threads per peer (sockets per peer = this x FLAGCX_NSOCKS_PERTHREAD, at most 64)")
	// NSocksPerThread is FLAGCX_NSOCKS_PERTHREAD.
	NSocksPerThread = Int("FLAGCX_NSOCKS_PERTHREAD", 2, 1, 16,
		"sockets per socket thread")
	// NetStripeMin is FLAGCX_NET_STRIPE_MIN.
	NetStripeMin = Bytes("FLAGCX_NET_STRIPE_MIN", 256<<10, 0, MaxBytes,
		"smallest message striped over a peer's sockets (2 from it, one more per half of it)")
	// SocketSpinUS is FLAGCX_SOCKET_SPIN_US.
	SocketSpinUS = Int("FLAGCX_SOCKET_SPIN_US", 200, 0, 100000,
		"microseconds a socket read polls before it sleeps, where this host's ranks leave a core free (0: never poll)")
)

// Shared memory between the ranks of one host (hostnet).
var (
	// ShmDisable is FLAGCX_SHM_DISABLE.
	ShmDisable = Bool("FLAGCX_SHM_DISABLE",
		"ranks of one host use TCP instead of shared memory")
	// ShmP2PSize is FLAGCX_SHM_P2P_SIZE.
	ShmP2PSize = Bytes("FLAGCX_SHM_P2P_SIZE", 8<<20, 64<<10, 1<<30,
		"a rank's inbound point-to-point rings, shared by its same-host peers")
	// ShmWindowSize is 0 when unset: the window is then sized from the
	// communicator's rank count.
	ShmWindowSize = Bytes("FLAGCX_SHM_WINDOW_SIZE", 0, 64<<10, 1<<30,
		"a rank's collective window").Documented("256M / ranks, within 4M..32M")
	// ShmCopyThreads is FLAGCX_SHM_COPY_THREADS.
	ShmCopyThreads = Int("FLAGCX_SHM_COPY_THREADS", 4, 1, 64,
		"goroutines copying a large point-to-point batch through shared memory")
	// DeviceReduce is FLAGCX_DEVICE_REDUCE.
	DeviceReduce = BoolOn("FLAGCX_DEVICE_REDUCE",
		"heterogeneous AllReduces, Reduces and ReduceScatters on one host, and device leaders' staged ReduceScatters, Reduces and AllReduces, reduce on the devices when every plugin can (ABI v4 reduceLocal); 0 on any rank: on the host")
	// ShmRegister is FLAGCX_SHM_REGISTER (read by bench).
	ShmRegister = BoolOn("FLAGCX_SHM_REGISTER",
		"bench allocates its host buffers with the communicator's MemAlloc (registered, zero-copy collectives); 0 for ordinary memory")
	// BenchCPUProfile is FLAGCX_BENCH_CPUPROFILE (read by bench).
	BenchCPUProfile = String("FLAGCX_BENCH_CPUPROFILE", "",
		"bench writes each rank's CPU profile (Go pprof) to this path with .rank<N> appended")
	// BenchTrace is FLAGCX_BENCH_TRACE (read by bench).
	BenchTrace = String("FLAGCX_BENCH_TRACE", "",
		"bench writes each rank's execution trace (Go runtime/trace, for go tool trace) to this path with .rank<N> appended")
	// ShmSlotSize is FLAGCX_SHM_SLOT_SIZE.
	ShmSlotSize = Gone("FLAGCX_SHM_SLOT_SIZE",
		"this variable no longer exists: each rank now has one segment; size its inbound rings with FLAGCX_SHM_P2P_SIZE and its collective window with FLAGCX_SHM_WINDOW_SIZE")
	// ShmSlots is FLAGCX_SHM_SLOTS.
	ShmSlots = Gone("FLAGCX_SHM_SLOTS",
		"this variable no longer exists: each rank now has one segment; size its inbound rings with FLAGCX_SHM_P2P_SIZE and its collective window with FLAGCX_SHM_WINDOW_SIZE")
)

// The network between hosts: sockets, or a network plugin (hostnet,
// sdk/netplugin, plugins/net-ib).
var (
	// Net is FLAGCX_NET: "IB", "Socket", or "" (automatic).
	Net = Choice("FLAGCX_NET", "", "automatic",
		map[string]string{"IB": "IB", "Socket": "Socket"},
		"allowed are IB and Socket; unset: IB between hosts that both have an RDMA device",
		"the network: IB (the net-ib plugin; an error without an RDMA device) or Socket")
	// ForceNetSocket is FLAGCX_FORCE_NET_SOCKET.
	ForceNetSocket = Bool("FLAGCX_FORCE_NET_SOCKET",
		"TCP sockets between hosts even where RDMA devices exist (as FLAGCX_NET=Socket)")
	// NetPlugin is FLAGCX_NET_PLUGIN.
	NetPlugin = String("FLAGCX_NET_PLUGIN", "",
		"the network plugin file").Documented("<plugin dir>/../net/libflagcx-net-ib.so")
	// IBHCA is FLAGCX_IB_HCA (read by plugins/net-ib).
	IBHCA = stringIn(C, "FLAGCX_IB_HCA", "",
		"RDMA devices to use: prefixes with optional :port (mlx5_0:1,mlx5_1), ^ to exclude, = for exact names")
	// IBGIDIndex is FLAGCX_IB_GID_INDEX (read by plugins/net-ib).
	IBGIDIndex = stringIn(C, "FLAGCX_IB_GID_INDEX", "",
		"GID index of the port (RoCE); unset: the first RoCE v2 GID, else 0")
	// IBPort is FLAGCX_IB_PORT (read by plugins/net-ib).
	IBPort = stringIn(C, "FLAGCX_IB_PORT", "",
		"the port number to use on every device (1-based); unset: every active port")
	// IBQPsPerConnection is FLAGCX_IB_QPS_PER_CONNECTION (read by plugins/net-ib).
	IBQPsPerConnection = stringIn(C, "FLAGCX_IB_QPS_PER_CONNECTION", "2",
		"RC queue pairs per connection, each carrying a part of every message (1..8)")
	// IBVerbs is FLAGCX_IBVERBS (read by plugins/net-ib).
	IBVerbs = stringIn(C, "FLAGCX_IBVERBS", "",
		"path of the libibverbs the net-ib plugin loads (set to the emulator by --emulated)").Documented("libibverbs.so.1")
)

// Ranks and the rendezvous (launch).
var (
	// CommID is FLAGCX_COMM_ID.
	CommID = String("FLAGCX_COMM_ID", "",
		"host:port of the rendezvous (rank 0 listens there)")
	// CommSecret is FLAGCX_COMM_SECRET.
	CommSecret = String("FLAGCX_COMM_SECRET", "",
		"the communicator's secret, 32 hex digits, the same on every rank")
	// RequireSecret is FLAGCX_REQUIRE_SECRET.
	RequireSecret = Bool("FLAGCX_REQUIRE_SECRET",
		"a rendezvous beyond loopback without FLAGCX_COMM_SECRET is an error instead of a warning")
	// UniqueID is FLAGCX_UNIQUE_ID.
	UniqueID = String("FLAGCX_UNIQUE_ID", "",
		"the communicator's unique id string (set by the local launcher, or by hand)")
	// Rank, NRanks, LocalRank and LocalSize are read with the other
	// launchers' variables (launch.FromEnv), which checks them together.
	Rank = Int("FLAGCX_RANK", 0, 0, 1<<30,
		"this process's rank")
	// NRanks is FLAGCX_NRANKS.
	NRanks = Int("FLAGCX_NRANKS", 1, 1, 1<<30,
		"the rank count")
	// LocalRank is FLAGCX_LOCAL_RANK.
	LocalRank = Int("FLAGCX_LOCAL_RANK", 0, 0, 1<<30,
		"this process's rank among the ranks of its host")
	// LocalSize is FLAGCX_LOCAL_SIZE.
	LocalSize = Int("FLAGCX_LOCAL_SIZE", 1, 1, 1<<30,
		"the ranks on this process's host")
	// ProgressTTY is FLAGCX_PROGRESS_TTY.
	ProgressTTY = boolIn(Internal, "FLAGCX_PROGRESS_TTY",
		"the local launcher's stderr is a terminal: rank 0 may draw a progress line")
	// FatalReport is FLAGCX_FATAL_REPORT.
	FatalReport = boolIn(Internal, "FLAGCX_FATAL_REPORT",
		"ranks of a local launch report an error that may keep them from exiting")
)

// Heterogeneous communicators (core).
var (
	// ClusterSplitList is FLAGCX_CLUSTER_SPLIT_LIST.
	ClusterSplitList = String("FLAGCX_CLUSTER_SPLIT_LIST", "",
		"cut the ranks into single-vendor clusters of these sizes, in rank order")
	// UseHostComm is FLAGCX_USE_HOST_COMM.
	UseHostComm = Bool("FLAGCX_USE_HOST_COMM",
		"heterogeneous collectives take the host path")
	// NetChunkSize is FLAGCX_NET_CHUNK_SIZE.
	NetChunkSize = Bytes("FLAGCX_NET_CHUNK_SIZE", 16<<20, 1, MaxBytes,
		"pipeline chunk of heterogeneous schedules")
)

// Plugins (sdk/loader).
var (
	// PluginDir is FLAGCX_PLUGIN_DIR.
	PluginDir = String("FLAGCX_PLUGIN_DIR", "",
		"where libflagcx-<name>.so plugins are (as --plugin-dir)")
	// PluginFile: FLAGCX_PLUGIN_<NAME>=path adds or replaces plugin
	// <name>, =none skips it.
	PluginFile = NewFamily("FLAGCX_PLUGIN_", "<NAME>",
		"a path to one plugin's file, or none to skip it")
	// Emulated is FLAGCX_EMULATED.
	Emulated = Bool("FLAGCX_EMULATED",
		"use the emulated vendor runtimes (as --emulated)")
	// Backend is FLAGCX_BACKEND (read by libflagcx.so, capi/).
	Backend = String("FLAGCX_BACKEND", "",
		"the backend of a process using libflagcx.so: a plugin's name or host").Documented("the first plugin whose runtime loads with a device, else host")
	// VendorsimDir is FLAGCX_VENDORSIM_DIR.
	VendorsimDir = String("FLAGCX_VENDORSIM_DIR", "",
		"where the emulated runtimes are").Documented("<plugin dir>/../vendorsim")
	// ProbeRequest is FLAGCX_PROBE_REQUEST.
	ProbeRequest = stringIn(Internal, "FLAGCX_PROBE_REQUEST", "",
		"the plugin a probe process of flagcx plugins or flagcx devices examines")
	// ConformanceWorker is FLAGCX_CONFORMANCE_WORKER.
	ConformanceWorker = stringIn(Internal, "FLAGCX_CONFORMANCE_WORKER", "",
		"go-plugin's handshake cookie of a conformance worker")
)

// Observability (core/internal/inspect; docs/observability.md).
var (
	// Inspect is FLAGCX_INSPECT.
	Inspect = String("FLAGCX_INSPECT", "",
		"directory where every rank writes a JSON line per call it runs (NCCL Inspector's fields and flagcx-go's: runner, path, wall-clock start and end)").Documented("none")
	// Metrics is FLAGCX_METRICS.
	Metrics = String("FLAGCX_METRICS", "",
		"where the process serves Prometheus metrics of its calls: host:port (HTTP, /metrics) or a path ending in .prom (a node exporter textfile)").Documented("none")
	// InspectMax is FLAGCX_INSPECT_MAX.
	InspectMax = Bytes("FLAGCX_INSPECT_MAX", 256<<20, 0, MaxBytes,
		"a rank's record file is kept as NAME.1 and started anew past this size (0: no cap)")
)

// Logging (internal/base/flog).
var (
	// Debug is FLAGCX_DEBUG's level, upper case; "" when unset.
	Debug = Choice("FLAGCX_DEBUG", "", "",
		map[string]string{"NONE": "NONE", "VERSION": "VERSION", "WARN": "WARN", "INFO": "INFO", "ABORT": "ABORT", "TRACE": "TRACE"},
		"allowed are NONE, VERSION, WARN, INFO, ABORT and TRACE",
		"log level of the debug lines")
	// DebugSubsys is FLAGCX_DEBUG_SUBSYS.
	DebugSubsys = String("FLAGCX_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV",
		"subsystems that log (INIT, COLL, P2P, NET, BOOTSTRAP, ENV, ..., ALL); ^ inverts")
	// DebugFile is FLAGCX_DEBUG_FILE.
	DebugFile = String("FLAGCX_DEBUG_FILE", "",
		"file the debug lines go to instead of stderr; %h is the host name, %p the pid").Documented("stderr")
)

// Variables of the C side: the plugins' vendor libraries and the emulated
// runtimes. Go code only sets them (loader.Plugin.Init, the emulators'
// tests and the conformance workers).
var (
	// NvidiaCudart is FLAGCX_NVIDIA_CUDART.
	NvidiaCudart = stringIn(C, "FLAGCX_NVIDIA_CUDART", "", "path of the CUDA runtime the nvidia plugin loads")
	// NvidiaNCCL is FLAGCX_NVIDIA_NCCL.
	NvidiaNCCL = stringIn(C, "FLAGCX_NVIDIA_NCCL", "", "path of the NCCL library the nvidia plugin loads")
	// NvidiaNVML is FLAGCX_NVIDIA_NVML.
	NvidiaNVML = stringIn(C, "FLAGCX_NVIDIA_NVML", "", "path of the NVML library the nvidia plugin loads")
	// NvidiaNVRTC is FLAGCX_NVIDIA_NVRTC.
	NvidiaNVRTC = stringIn(C, "FLAGCX_NVIDIA_NVRTC", "", "path of the NVRTC library the nvidia plugin compiles its reduceLocal kernels with")

	// KunlunxinXPURT is FLAGCX_KUNLUNXIN_XPURT.
	KunlunxinXPURT = stringIn(C, "FLAGCX_KUNLUNXIN_XPURT", "", "path of the XPU runtime the kunlunxin plugin loads")
	// KunlunxinBKCL is FLAGCX_KUNLUNXIN_BKCL.
	KunlunxinBKCL = stringIn(C, "FLAGCX_KUNLUNXIN_BKCL", "", "path of the BKCL library the kunlunxin plugin loads")
	// CambriconCNRT is FLAGCX_CAMBRICON_CNRT.
	CambriconCNRT = stringIn(C, "FLAGCX_CAMBRICON_CNRT", "", "path of the CNRT runtime the cambricon plugin loads")
	// CambriconCNCL is FLAGCX_CAMBRICON_CNCL.
	CambriconCNCL = stringIn(C, "FLAGCX_CAMBRICON_CNCL", "", "path of the CNCL library the cambricon plugin loads")
	// MetaxMCRuntime is FLAGCX_METAX_MCRUNTIME.
	MetaxMCRuntime = stringIn(C, "FLAGCX_METAX_MCRUNTIME", "", "path of the MACA runtime the metax plugin loads")
	// MetaxMCCL is FLAGCX_METAX_MCCL.
	MetaxMCCL = stringIn(C, "FLAGCX_METAX_MCCL", "", "path of the MCCL library the metax plugin loads")
	// VendorsimDevices is FLAGCX_VENDORSIM_DEVICES.
	VendorsimDevices = stringIn(C, "FLAGCX_VENDORSIM_DEVICES", "8", "emulated devices per process")
	// VendorsimTimeout is FLAGCX_VENDORSIM_TIMEOUT.
	VendorsimTimeout = stringIn(C, "FLAGCX_VENDORSIM_TIMEOUT", "60", "the emulators' deadline in seconds")
	// VendorsimStreamDelay is set by conformance workers (5000) unless
	// the user set it.
	VendorsimStreamDelay = stringIn(C, "FLAGCX_VENDORSIM_STREAM_DELAY_US", "0",
		"microseconds the emulators hold back stream work nobody waits for")
)
