package testkit

import (
	"path/filepath"
	"testing"

	"github.com/flagcx/flagcx-go/sdk"
)

// One table per vendor: what the common vendor tests of sdk/loader
// (vendors_test.go) and conformance/vendorsim (vendors_test.go) iterate
// over. Each fact here is checked against the plugin or the emulators by
// those tests, so the table cannot drift from them; vendor-specific checks
// that do not fit a column stay in the vendor's own test files.

// Emulator is one library of conformance/vendorsim for a vendor.
type Emulator struct {
	File        string   // its path under build/vendorsim/<vendor>/
	Soname      string   // its DT_SONAME: the vendor's
	Description string   // in its flagcxVendorsimDescription, after "flagcx vendorsim: "
	Exports     []string // exactly the functions it exports, sorted (the flagcxVendorsim* markers aside)
}

// Library is one vendor library a plugin loads (its flagcxPluginLibrary_v1_t).
type Library struct {
	Role     string   // runtime, ccl, management
	EnvVar   string   // the FLAGCX_* variable that points at it
	Sonames  []string // the plugin's candidates, in order; errors name the first
	Optional bool
	Emulator Emulator // its emulated build
}

// Soname is the name the plugin's messages use for the library.
func (l Library) Soname() string { return l.Sonames[0] }

// Vendor is one vendor: its plugin, libraries, emulators and what differs.
type Vendor struct {
	Name      string    // the plugin's name: libflagcx-<Name>.so, build/vendorsim/<Name>/
	Vendor    string    // the plugin's vendor string
	Libraries []Library // in the plugin's order
	// MoreEmulators are further builds in the emulator directory that no
	// plugin picks by default (another version, another symbol flavour).
	MoreEmulators []Emulator
	// HomeEnv is the variable of the vendor's install root that the plugin
	// searches first ("" when none).
	HomeEnv string
	// NoSoftware is a regexp for init's error on a machine without the
	// vendor's software (HomeEnv set to an empty directory), beyond what
	// every vendor's says: "cannot load <first soname>" and its variable.
	NoSoftware string
	// What the collective library does on the emulators.
	DataTypes []sdk.DataType
	RedOps    []sdk.RedOp
	IDBytes   int  // the unique id the plugin exchanges
	Timing    bool // event timing (eventElapsedTime)
	AsyncErr  bool // commGetAsyncError
}

// EmulatorDir is build/vendorsim/<Name> under the repository root.
func (v Vendor) EmulatorDir(root string) string {
	return filepath.Join(root, "build", "vendorsim", v.Name)
}

// Emulators are all emulator files of the vendor: its libraries' and
// MoreEmulators.
func (v Vendor) Emulators() []Emulator {
	var out []Emulator
	for _, l := range v.Libraries {
		if l.Emulator.File != "" {
			out = append(out, l.Emulator)
		}
	}
	return append(out, v.MoreEmulators...)
}

// Lookup is the vendor named name; the test fails when there is none.
func Lookup(t testing.TB, name string) Vendor {
	t.Helper()
	for _, v := range Vendors {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("testkit: no vendor %q", name)
	return Vendor{}
}

// cudartExports are the plugin's subset, plus cudaEventCreate and
// cudaStreamCreate, which NCCL programs on the drop-in call (capi/nccl/test).
var cudartExports = []string{"cudaDeviceGetAttribute", "cudaDeviceGetPCIBusId", "cudaDeviceSynchronize", "cudaDriverGetVersion",
	"cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventElapsedTime", "cudaEventQuery", "cudaEventRecord",
	"cudaEventSynchronize", "cudaFree", "cudaFreeHost", "cudaGetDevice", "cudaGetDeviceCount", "cudaGetErrorString",
	"cudaGetLastError", "cudaHostAlloc", "cudaHostGetDevicePointer", "cudaHostRegister", "cudaHostUnregister", "cudaLaunchKernel", "cudaLibraryGetKernel",
	"cudaLibraryLoadData", "cudaLibraryUnload", "cudaMalloc", "cudaMallocHost", "cudaMemGetInfo",
	"cudaMemcpy", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaPointerGetAttributes", "cudaRuntimeGetVersion",
	"cudaSetDevice", "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaStreamQuery", "cudaStreamSynchronize",
	"cudaStreamWaitEvent"}

// Vendors are the four vendors with plugins and emulators.
var Vendors = []Vendor{
	{
		Name: "nvidia", Vendor: "NVIDIA",
		Libraries: []Library{
			{Role: "runtime", EnvVar: "FLAGCX_NVIDIA_CUDART",
				Sonames:  []string{"libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12"},
				Emulator: Emulator{File: "libcudart.so.13", Soname: "libcudart.so.13", Description: "emulated CUDA runtime 13", Exports: cudartExports}},
			{Role: "ccl", EnvVar: "FLAGCX_NVIDIA_NCCL",
				// NCCL's usual homes after the name: flagcx-go's own
				// libnccl.so.2, found first by name, is passed over.
				Sonames: []string{"libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2",
					"/usr/lib64/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/nccl/lib/libnccl.so.2"},
				Emulator: Emulator{File: "libnccl.so.2", Soname: "libnccl.so.2", Description: "emulated NCCL 2.28.9",
					Exports: []string{"ncclAllGather", "ncclAllReduce", "ncclAlltoAll", "ncclBroadcast", "ncclCommAbort",
						"ncclCommCount", "ncclCommCuDevice", "ncclCommDestroy", "ncclCommFinalize", "ncclCommGetAsyncError",
						"ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommUserRank", "ncclGetErrorString",
						"ncclGetLastError", "ncclGetUniqueId", "ncclGetVersion", "ncclGroupEnd", "ncclGroupStart",
						"ncclRecv", "ncclReduce", "ncclReduceScatter", "ncclSend"}}},
			{Role: "management", EnvVar: "FLAGCX_NVIDIA_NVML", Sonames: []string{"libnvidia-ml.so.1"}, Optional: true,
				Emulator: Emulator{File: "libnvidia-ml.so.1", Soname: "libnvidia-ml.so.1", Description: "emulated NVML",
					Exports: []string{"nvmlDeviceGetCount", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex",
						"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByPciBusId_v2",
						"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetP2PStatus",
						"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetUUID",
						"nvmlErrorString", "nvmlInit", "nvmlInit_v2", "nvmlShutdown"}}},
			{Role: "compiler", EnvVar: "FLAGCX_NVIDIA_NVRTC",
				Sonames:  []string{"libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12"},
				Optional: true,
				Emulator: Emulator{File: "libnvrtc.so.13", Soname: "libnvrtc.so.13", Description: "emulated NVRTC 13",
					Exports: []string{"nvrtcCompileProgram", "nvrtcCreateProgram", "nvrtcDestroyProgram", "nvrtcGetCUBIN",
						"nvrtcGetCUBINSize", "nvrtcGetErrorString", "nvrtcGetProgramLog", "nvrtcGetProgramLogSize", "nvrtcVersion"}}},
		},
		MoreEmulators: []Emulator{{File: "libcudart.so.12", Soname: "libcudart.so.12", Description: "emulated CUDA runtime 12", Exports: cudartExports}},
		NoSoftware:    `install it or set FLAGCX_NVIDIA_CUDART to its path`,
		DataTypes:     sdk.AllDataTypes(), RedOps: sdk.AllRedOps(),
		IDBytes: 128, Timing: true, AsyncErr: true,
	},
	{
		Name: "kunlunxin", Vendor: "Kunlunxin",
		Libraries: []Library{
			{Role: "runtime", EnvVar: "FLAGCX_KUNLUNXIN_XPURT",
				Sonames: []string{"libxpurt.so", "libxpurt.so.2", "libxpurt.so.1", "/usr/local/xpu/so/libxpurt.so",
					"/usr/local/xpu/so/libxpurt.so.2", "/usr/local/xpu/so/libxpurt.so.1"},
				Emulator: Emulator{File: "libxpurt.so.1", Soname: "libxpurt.so.1", Description: "emulated Kunlunxin XPU runtime",
					Exports: []string{"xpu_current_device", "xpu_device_count", "xpu_device_get_attr", "xpu_event_create",
						"xpu_event_destroy", "xpu_event_record", "xpu_event_wait", "xpu_free", "xpu_host_alloc", "xpu_host_free",
						"xpu_host_register", "xpu_host_unregister", "xpu_malloc", "xpu_memcpy", "xpu_memcpy_async",
						"xpu_set_device", "xpu_stream_create", "xpu_stream_destroy", "xpu_stream_wait_event", "xpu_wait"}}},
			{Role: "ccl", EnvVar: "FLAGCX_KUNLUNXIN_BKCL", Sonames: []string{"libbkcl.so", "/usr/local/xccl/so/libbkcl.so"},
				Emulator: Emulator{File: "libbkcl.so", Soname: "libbkcl.so", Description: "emulated Kunlunxin BKCL/XCCL",
					Exports: []string{"bkcl_all_gather", "bkcl_all_reduce", "bkcl_all_to_all", "bkcl_all_to_all_v",
						"bkcl_broadcast", "bkcl_comm_abort", "bkcl_comm_count", "bkcl_comm_user_rank", "bkcl_destroy_context",
						"bkcl_get_unique_id", "bkcl_group_end", "bkcl_group_start", "bkcl_init_rank", "bkcl_recv",
						"bkcl_reduce", "bkcl_reduce_scatter", "bkcl_send"}}},
		},
		// Some libbkcl.so builds export only C++ names.
		MoreEmulators: []Emulator{{File: "cxx/libbkcl.so", Soname: "libbkcl.so", Description: "emulated Kunlunxin BKCL/XCCL",
			Exports: []string{"_Z11bkcl_reduceP11BKCLContextPKvPvm12BKCLDataType6BKCLOpiS3_",
				"_Z14bkcl_broadcastP11BKCLContextPKvPvm12BKCLDataTypeiS3_", "_Z14bkcl_group_endv",
				"_Z14bkcl_init_rankPP11BKCLContextiiP12BKCLUniqueId", "_Z15bkcl_all_gatherP11BKCLContextPKvmPv12BKCLDataTypeS3_",
				"_Z15bkcl_all_reduceP11BKCLContextPKvPvm12BKCLDataType6BKCLOpS3_",
				"_Z15bkcl_all_to_allP11BKCLContextPKvmPv12BKCLDataTypeS3_", "_Z15bkcl_comm_abortP11BKCLContext",
				"_Z15bkcl_comm_countP11BKCLContextPi", "_Z16bkcl_group_startv",
				"_Z17bkcl_all_to_all_vP11BKCLContextPKvPKmS4_12BKCLDataTypePvS4_S4_S5_S6_",
				"_Z18bkcl_get_unique_idP12BKCLUniqueId", "_Z19bkcl_comm_user_rankP11BKCLContextPi",
				"_Z19bkcl_reduce_scatterP11BKCLContextPKvPvm12BKCLDataType6BKCLOpS3_",
				"_Z20bkcl_destroy_contextP11BKCLContext", "_Z9bkcl_recvP11BKCLContextPvmi12BKCLDataTypeS1_",
				"_Z9bkcl_sendP11BKCLContextPKvmi12BKCLDataTypePv"}}},
		NoSoftware: `install it or set FLAGCX_KUNLUNXIN_XPURT to its path`,
		// BKCL has no int8, uint32, uint64 and (unverified) no avg.
		DataTypes: []sdk.DataType{sdk.Uint8, sdk.Int32, sdk.Int64, sdk.Float16, sdk.Float32, sdk.Float64, sdk.Bfloat16},
		RedOps:    []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min},
		IDBytes:   4096, // BKCL's id size is unverified: the plugin exchanges the ABI's largest
	},
	{
		Name: "cambricon", Vendor: "Cambricon",
		Libraries: []Library{
			{Role: "runtime", EnvVar: "FLAGCX_CAMBRICON_CNRT", Sonames: []string{"libcnrt.so", "/usr/local/neuware/lib64/libcnrt.so"},
				Emulator: Emulator{File: "libcnrt.so", Soname: "libcnrt.so", Description: "emulated Cambricon CNRT 6.14.1",
					Exports: []string{"cnrtDeviceGetPCIBusId", "cnrtFree", "cnrtFreeHost", "cnrtGetDevice", "cnrtGetDeviceCount",
						"cnrtGetErrorStr", "cnrtGetLibVersion", "cnrtHostMalloc", "cnrtHostRegister", "cnrtHostUnregister",
						"cnrtMalloc", "cnrtMemcpy", "cnrtMemcpyAsync", "cnrtMemcpyAsync_V2", "cnrtMemset", "cnrtMemsetAsync",
						"cnrtNotifierCreate", "cnrtNotifierCreateWithFlags", "cnrtNotifierDestroy", "cnrtNotifierElapsedTime",
						"cnrtPlaceNotifier", "cnrtQueryNotifier", "cnrtQueueCreate", "cnrtQueueDestroy", "cnrtQueueQuery",
						"cnrtQueueSync", "cnrtQueueWaitNotifier", "cnrtSetDevice", "cnrtSyncDevice", "cnrtWaitNotifier"}}},
			{Role: "ccl", EnvVar: "FLAGCX_CAMBRICON_CNCL", Sonames: []string{"libcncl.so", "/usr/local/neuware/lib64/libcncl.so"},
				Emulator: Emulator{File: "libcncl.so", Soname: "libcncl.so", Description: "emulated Cambricon CNCL 1.25.0",
					Exports: []string{"cnclAbortComm", "cnclAllGather", "cnclAllReduce", "cnclAlltoAll", "cnclBroadcast",
						"cnclDestroyComms", "cnclFreeComm", "cnclGetCliqueId", "cnclGetCommAsyncError", "cnclGetCommCount",
						"cnclGetCommDevice", "cnclGetCommRank", "cnclGetErrorStr", "cnclGetLibVersion", "cnclGroupEnd",
						"cnclGroupStart", "cnclInitComms", "cnclRecv", "cnclReduce", "cnclReduceScatter", "cnclSend"}}},
		},
		HomeEnv:    "NEUWARE_HOME",
		NoSoftware: `cannot load libcnrt.so \(tried \$NEUWARE_HOME/lib64, libcnrt.so:.*set NEUWARE_HOME, or set FLAGCX_CAMBRICON_CNRT`,
		// CNCL has no float64 and no avg.
		DataTypes: []sdk.DataType{sdk.Int8, sdk.Uint8, sdk.Int32, sdk.Uint32, sdk.Int64, sdk.Uint64, sdk.Float16, sdk.Float32, sdk.Bfloat16},
		RedOps:    []sdk.RedOp{sdk.Sum, sdk.Prod, sdk.Max, sdk.Min},
		IDBytes:   136, // struct cnclCliqueId: data[128] and a uint64_t hash
		Timing:    true, AsyncErr: true,
	},
	{
		Name: "metax", Vendor: "MetaX",
		Libraries: []Library{
			{Role: "runtime", EnvVar: "FLAGCX_METAX_MCRUNTIME",
				Sonames: []string{"libmcruntime.so", "/opt/maca/lib/libmcruntime.so", "/opt/maca/lib64/libmcruntime.so"},
				Emulator: Emulator{File: "libmcruntime.so", Soname: "libmcruntime.so", Description: "emulated MetaX MACA runtime",
					Exports: []string{"mcDeviceGetPCIBusId", "mcDeviceSynchronize", "mcEventCreateWithFlags", "mcEventDestroy",
						"mcEventElapsedTime", "mcEventQuery", "mcEventRecord", "mcEventSynchronize", "mcFree", "mcFreeHost",
						"mcGetDevice", "mcGetDeviceCount", "mcGetErrorString", "mcGetLastError", "mcHostRegister",
						"mcHostUnregister", "mcMalloc", "mcMallocHost", "mcMemGetInfo", "mcMemcpy", "mcMemcpyAsync", "mcMemset",
						"mcMemsetAsync", "mcSetDevice", "mcStreamCreateWithFlags", "mcStreamDestroy", "mcStreamQuery",
						"mcStreamSynchronize", "mcStreamWaitEvent"}}},
			{Role: "ccl", EnvVar: "FLAGCX_METAX_MCCL", Sonames: []string{"libmccl.so", "/opt/maca/lib/libmccl.so", "/opt/maca/lib64/libmccl.so"},
				Emulator: Emulator{File: "libmccl.so", Soname: "libmccl.so", Description: "emulated MetaX MCCL 2.16.5",
					Exports: []string{"mcclAllGather", "mcclAllReduce", "mcclAllToAll", "mcclBroadcast", "mcclCommAbort",
						"mcclCommCount", "mcclCommDestroy", "mcclCommFinalize", "mcclCommGetAsyncError", "mcclCommInitRank",
						"mcclCommInitRankConfig", "mcclCommMcDevice", "mcclCommUserRank", "mcclGather", "mcclGetErrorString",
						"mcclGetLastError", "mcclGetUniqueId", "mcclGetVersion", "mcclGroupEnd", "mcclGroupStart", "mcclRecv",
						"mcclReduce", "mcclReduceScatter", "mcclScatter", "mcclSend"}}},
		},
		HomeEnv:    "MACA_PATH",
		NoSoftware: `cannot load libmcruntime\.so \(tried [^;]*/lib/libmcruntime\.so:libmcruntime\.so:.*install MetaX MACA or set FLAGCX_METAX_MCRUNTIME`,
		DataTypes:  sdk.AllDataTypes(), RedOps: sdk.AllRedOps(),
		IDBytes: 128, Timing: true, AsyncErr: true,
	},
}
