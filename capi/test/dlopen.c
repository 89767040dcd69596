// dlopen.c: libflagcx.so loaded with dlopen, as Python loads FlagCX's
// torch plugin (and this library with it), then FLAGCX_BACKEND set by the
// program itself (as Python's os.environ does) before its first call.
//
//   dlopen <path of libflagcx.so> <backend to set>
//
// Prints "vendor <getVendor>" and, after a one-rank AllReduce checked
// exactly, "PASS dlopen"; or "ERROR <code>: <flagcxGetLastError(NULL)>" when
// the device handle cannot be made (exit 1).

#include <flagcx.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// sym finds name in the library or ends the program.
static void *sym(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (f == NULL) {
    printf("FAIL: %s not exported: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <libflagcx.so> <backend>\n", argv[0]);
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  setenv("FLAGCX_BACKEND", argv[2], 1);
  flagcxResult_t (*handleInit)(flagcxDeviceHandle_t *) = sym(h, "flagcxDeviceHandleInit");
  const char *(*lastError)(flagcxComm_t) = sym(h, "flagcxGetLastError");
  flagcxDeviceHandle_t dh;
  flagcxResult_t r = handleInit(&dh);
  if (r != flagcxSuccess) {
    printf("ERROR %d: %s\n", r, lastError(NULL));
    return 1;
  }
  char vendor[64];
  dh->getVendor(vendor);
  printf("vendor %s\n", vendor);

  flagcxResult_t (*getID)(flagcxUniqueId_t) = sym(h, "flagcxGetUniqueId");
  flagcxResult_t (*initRank)(flagcxComm_t *, int, flagcxUniqueId_t, int) = sym(h, "flagcxCommInitRank");
  flagcxResult_t (*allReduce)(const void *, void *, size_t, flagcxDataType_t, flagcxRedOp_t,
                              flagcxComm_t, flagcxStream_t) = sym(h, "flagcxAllReduce");
  flagcxResult_t (*destroy)(flagcxComm_t) = sym(h, "flagcxCommDestroy");
  flagcxUniqueId id;
  flagcxComm_t comm;
  int in[3] = {7, 8, 9}, out[3] = {0, 0, 0};
  void *dev;
  if (getID(&id) != flagcxSuccess || initRank(&comm, 1, &id, 0) != flagcxSuccess ||
      dh->deviceMalloc(&dev, sizeof in, flagcxMemDevice, NULL) != flagcxSuccess ||
      dh->deviceMemcpy(dev, in, sizeof in, flagcxMemcpyHostToDevice, NULL) != flagcxSuccess ||
      allReduce(dev, dev, 3, flagcxInt32, flagcxSum, comm, NULL) != flagcxSuccess ||
      dh->deviceMemcpy(out, dev, sizeof out, flagcxMemcpyDeviceToHost, NULL) != flagcxSuccess ||
      dh->deviceFree(dev, flagcxMemDevice, NULL) != flagcxSuccess || destroy(comm) != flagcxSuccess) {
    printf("FAIL: %s\n", lastError(NULL));
    return 1;
  }
  if (out[0] != 7 || out[1] != 8 || out[2] != 9) {
    printf("FAIL: a one-rank AllReduce gave %d %d %d, want 7 8 9\n", out[0], out[1], out[2]);
    return 1;
  }
  printf("PASS dlopen\n");
  return 0;
}
