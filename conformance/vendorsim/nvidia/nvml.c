/*
 * nvml.c: emulated NVML (libnvidia-ml.so.1).
 *
 * The NVML entry points of docs/vendor-facts.md#nvidia-nvml (plus the unversioned
 * aliases nvmlInit / nvmlDeviceGetCount / nvmlDeviceGetHandleByIndex /
 * nvmlDeviceGetHandleByPciBusId that real NVML also exports and NCCL looks
 * up, and nvmlDeviceGetPciInfo_v3), over the core's emulated devices:
 * FLAGCX_VENDORSIM_DEVICES devices named "vendorsim emulated NVIDIA device N",
 * UUIDs "GPU-vendorsim-...", the PCI ids that cudaDeviceGetPCIBusId reports,
 * 80 GiB of memory each, and a topology chosen by FLAGCX_VENDORSIM_TOPOLOGY:
 *   nvlink (default)  every pair P2P OK, NVLink included; 18 links enabled
 *   pcie              P2P OK over PCIe, NVLink not supported
 *   none              no P2P at all
 * The PCIe tree is the core's: pairs of devices share a switch
 * (NVML_TOPOLOGY_SINGLE), halves share a CPU socket (NODE), else SYSTEM.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../core/vsim_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- NVML types and values (nvml.h) ---- */
typedef enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PROP = 4,
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum {
  NVML_TOPOLOGY_INTERNAL = 0,
  NVML_TOPOLOGY_SINGLE = 10,
  NVML_TOPOLOGY_MULTIPLE = 20,
  NVML_TOPOLOGY_HOSTBRIDGE = 30,
  NVML_TOPOLOGY_NODE = 40,
  NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

#define NVML_NVLINK_MAX_LINKS 18

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

#define MAX_DEVICES 1024
struct nvmlDevice_st {
  int index;
};
typedef struct nvmlDevice_st* nvmlDevice_t;

/* ---- emulator marker ---- */
EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] = "flagcx vendorsim: emulated NVML (no GPU)";

static struct nvmlDevice_st devices[MAX_DEVICES];
static _Atomic int init_count = 0;

static int ndev(void) {
  int n = vsim_device_count();
  return n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* A handle is valid when it points at one of our device records. */
static int dev_index(nvmlDevice_t d) {
  if (d < &devices[0] || d >= &devices[ndev()]) return -1;
  return (int)(d - devices);
}

#define REQUIRE_INIT()                                           \
  do {                                                           \
    if (atomic_load(&init_count) <= 0) return NVML_ERROR_UNINITIALIZED; \
  } while (0)

#define REQUIRE_DEV(d, i)                                        \
  int i = dev_index(d);                                          \
  if (i < 0) return NVML_ERROR_INVALID_ARGUMENT

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  int n = ndev();
  for (int i = 0; i < n; i++) devices[i].index = i;
  atomic_fetch_add(&init_count, 1);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
  /* Init and shutdown are reference counted, as in NVML. */
  int cur = atomic_load(&init_count);
  do {
    if (cur <= 0) return NVML_ERROR_UNINITIALIZED;
  } while (!atomic_compare_exchange_weak(&init_count, &cur, cur - 1));
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  REQUIRE_INIT();
  if (deviceCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = (unsigned)ndev();
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  REQUIRE_INIT();
  if (device == NULL || index >= (unsigned)ndev()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  REQUIRE_INIT();
  if (pciBusId == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  int i = vsim_device_by_pci_string(pciBusId);
  if (i < 0 || i >= ndev()) return NVML_ERROR_NOT_FOUND;
  *device = &devices[i];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

static nvmlReturn_t put_string(char* out, unsigned int length, const char* s) {
  if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(out, s, strlen(s) + 1);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  REQUIRE_INIT();
  REQUIRE_DEV(device, i);
  char s[64];
  snprintf(s, sizeof s, "vendorsim emulated NVIDIA device %d", i);
  return put_string(name, length, s);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  REQUIRE_INIT();
  REQUIRE_DEV(device, i);
  char s[80];
  /* Stable across processes: every process sees the same emulated boards. */
  snprintf(s, sizeof s, "GPU-vendorsim-0000-0000-0000-%012x", (unsigned)i);
  return put_string(uuid, length, s);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  REQUIRE_INIT();
  REQUIRE_DEV(device, i);
  if (pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned dom, bus, slot, fn;
  vsim_device_pci(i, &dom, &bus, &slot, &fn);
  memset(pci, 0, sizeof *pci);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", dom, bus, slot, fn);
  snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", dom, bus, slot, fn);
  pci->domain = dom;
  pci->bus = bus;
  pci->device = slot;
  pci->pciDeviceId = 0x000010DEu; /* NVIDIA's vendor id, no real device id */
  pci->pciSubSystemId = 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  REQUIRE_INIT();
  REQUIRE_DEV(device, i);
  if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  /* "used" is this process's emulated allocations on the device: the
   * emulator cannot see other processes' device memory. */
  memory->total = vsim_device_memory_total();
  memory->used = vsim_mem_used(i);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus) {
  REQUIRE_INIT();
  REQUIRE_DEV(device1, a);
  REQUIRE_DEV(device2, b);
  if (p2pStatus == NULL || p2pIndex < NVML_P2P_CAPS_INDEX_READ || p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  vsim_topology topo = vsim_env_topology();
  nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_OK;
  if (topo == VSIM_TOPO_NONE) st = NVML_P2P_STATUS_NOT_SUPPORTED;
  /* A device has no NVLink to itself, and none at all without NVLink. */
  if (p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK && (topo != VSIM_TOPO_NVLINK || a == b)) {
    st = NVML_P2P_STATUS_NOT_SUPPORTED;
  }
  *p2pStatus = st;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t* pathInfo) {
  REQUIRE_INIT();
  REQUIRE_DEV(device1, a);
  REQUIRE_DEV(device2, b);
  if (pathInfo == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  static const nvmlGpuTopologyLevel_t levels[] = {NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SINGLE,
                                                  NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM};
  *pathInfo = levels[vsim_device_distance(a, b)];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
  REQUIRE_INIT();
  REQUIRE_DEV(device, i);
  (void)i;
  if (isActive == NULL || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (vsim_env_topology() != VSIM_TOPO_NVLINK) return NVML_ERROR_NOT_SUPPORTED;
  *isActive = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
  }
}
