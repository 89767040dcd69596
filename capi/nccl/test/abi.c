// abi.c: prints the sizes, offsets and values of nccl.h's types. The NCCL
// drop-in's test (capi/nccl_test.go) builds it once against NCCL's own
// header (capi/nccl/test/nccl-2.28.9) and once against flagcx-go's
// (build/include/nccl.h, without CUDA's headers), and requires the same
// output: a program built against either runs on either library.

#include <nccl.h>

#include <stddef.h>
#include <stdio.h>

#define SIZE(t) printf("sizeof(%s) %zu\n", #t, sizeof(t))
#define OFF(t, f) printf("offsetof(%s, %s) %zu\n", #t, #f, offsetof(t, f))
#define VAL(v) printf("%s %lld\n", #v, (long long)(v))

int main(void) {
  SIZE(ncclUniqueId), SIZE(ncclResult_t), SIZE(ncclDataType_t);
  SIZE(ncclRedOp_t), SIZE(ncclScalarResidence_t), SIZE(ncclComm_t);
  SIZE(ncclWindow_t), SIZE(ncclConfig_t), SIZE(ncclSimInfo_t);
  SIZE(cudaStream_t);
  OFF(ncclConfig_t, size), OFF(ncclConfig_t, magic), OFF(ncclConfig_t, version);
  OFF(ncclConfig_t, blocking), OFF(ncclConfig_t, cgaClusterSize);
  OFF(ncclConfig_t, minCTAs), OFF(ncclConfig_t, maxCTAs);
  OFF(ncclConfig_t, netName), OFF(ncclConfig_t, splitShare);
  OFF(ncclConfig_t, trafficClass), OFF(ncclConfig_t, commName);
  OFF(ncclConfig_t, collnetEnable), OFF(ncclConfig_t, CTAPolicy);
  OFF(ncclConfig_t, shrinkShare), OFF(ncclConfig_t, nvlsCTAs);
  OFF(ncclConfig_t, nChannelsPerNetPeer), OFF(ncclConfig_t, nvlinkCentricSched);
  OFF(ncclSimInfo_t, size), OFF(ncclSimInfo_t, magic);
  OFF(ncclSimInfo_t, version), OFF(ncclSimInfo_t, estimatedTime);
  VAL(NCCL_MAJOR), VAL(NCCL_MINOR), VAL(NCCL_PATCH), VAL(NCCL_VERSION_CODE);
  VAL(NCCL_VERSION(2, 28, 9)), VAL(NCCL_VERSION(2, 8, 4));
  VAL(NCCL_UNIQUE_ID_BYTES), VAL(NCCL_CONFIG_UNDEF_INT), VAL(NCCL_SPLIT_NOCOLOR);
  VAL(NCCL_WIN_DEFAULT), VAL(NCCL_WIN_COLL_SYMMETRIC), VAL(NCCL_WIN_REQUIRED_ALIGNMENT);
  VAL(NCCL_CTA_POLICY_DEFAULT), VAL(NCCL_CTA_POLICY_EFFICIENCY), VAL(NCCL_CTA_POLICY_ZERO);
  VAL(NCCL_SHRINK_DEFAULT), VAL(NCCL_SHRINK_ABORT), VAL(NCCL_REVOKE_DEFAULT);
  VAL(ncclSuccess), VAL(ncclUnhandledCudaError), VAL(ncclSystemError);
  VAL(ncclInternalError), VAL(ncclInvalidArgument), VAL(ncclInvalidUsage);
  VAL(ncclRemoteError), VAL(ncclInProgress), VAL(ncclNumResults);
  VAL(ncclSum), VAL(ncclProd), VAL(ncclMax), VAL(ncclMin), VAL(ncclAvg);
  VAL(ncclNumOps), VAL(ncclMaxRedOp);
  VAL(ncclInt8), VAL(ncclChar), VAL(ncclUint8), VAL(ncclInt32), VAL(ncclInt);
  VAL(ncclUint32), VAL(ncclInt64), VAL(ncclUint64), VAL(ncclFloat16);
  VAL(ncclHalf), VAL(ncclFloat32), VAL(ncclFloat), VAL(ncclFloat64);
  VAL(ncclDouble), VAL(ncclBfloat16), VAL(ncclFloat8e4m3), VAL(ncclFloat8e5m2);
  VAL(ncclNumTypes), VAL(ncclScalarDevice), VAL(ncclScalarHostImmediate);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  printf("config %zu %x %u %d %d %d %d %p %d %d %p %d %d %d %d %d %d\n", c.size,
         c.magic, c.version, c.blocking, c.cgaClusterSize, c.minCTAs, c.maxCTAs,
         (const void *)c.netName, c.splitShare, c.trafficClass, (const void *)c.commName,
         c.collnetEnable, c.CTAPolicy, c.shrinkShare, c.nvlsCTAs, c.nChannelsPerNetPeer,
         c.nvlinkCentricSched);
  printf("sim %zu %x %u %g\n", s.size, s.magic, s.version, s.estimatedTime);
  return 0;
}
