/*
 * nvrtc.c: emulated NVRTC (libnvrtc.so.13), the run-time CUDA compiler the
 * nvidia plugin compiles its reduceLocal kernels with.
 *
 * The emulated device cannot run machine code, so "compiling" records the
 * names of the program's extern "C" __global__ functions in a small image
 * (VSIM_CUBIN_MAGIC, then the names, one per line). The emulated runtime's
 * cudaLibraryLoadData reads that image, and its cudaLaunchKernel runs the
 * kernels it implements itself under those names (cudart.c, "kernels"):
 * what the emulator checks is the plugin's plumbing (loading, launching,
 * stream order), not the kernels' CUDA source, which only a real GPU runs.
 *
 * The entry points are NVRTC's, with its names, argument orders and result
 * numbers (nvrtcResult: NVRTC_SUCCESS 0, OUT_OF_MEMORY 1,
 * INVALID_INPUT 3, INVALID_PROGRAM 4, COMPILATION 6).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsim_cubin.h"

#define EXPORT __attribute__((visibility("default")))

typedef enum {
  NVRTC_SUCCESS = 0,
  NVRTC_ERROR_OUT_OF_MEMORY = 1,
  NVRTC_ERROR_INVALID_INPUT = 3,
  NVRTC_ERROR_INVALID_PROGRAM = 4,
  NVRTC_ERROR_COMPILATION = 6
} nvrtcResult;

EXPORT int flagcxVendorsimEmulated = 1;
EXPORT const char flagcxVendorsimDescription[] = "flagcx vendorsim: emulated NVRTC 13 (records kernel names, no GPU code)";

#define PROGRAM_MAGIC 0x7672746eu /* "nrtv" */
typedef struct {
  unsigned magic;
  char* source;
  char* image; /* after a successful compile */
  size_t imageBytes;
  char log[256];
} program;

static program* lookup(void* p) { return p != NULL && ((program*)p)->magic == PROGRAM_MAGIC ? (program*)p : NULL; }

EXPORT const char* nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR unknown";
  }
}

EXPORT nvrtcResult nvrtcVersion(int* major, int* minor) {
  if (major == NULL || minor == NULL) return NVRTC_ERROR_INVALID_INPUT;
  *major = 13;
  *minor = 0;
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCreateProgram(void** prog, const char* src, const char* name, int numHeaders,
                                      const char* const* headers, const char* const* includeNames) {
  (void)name, (void)headers, (void)includeNames;
  if (prog == NULL || src == NULL || numHeaders < 0) return NVRTC_ERROR_INVALID_INPUT;
  program* p = calloc(1, sizeof *p);
  if (p == NULL || (p->source = strdup(src)) == NULL) {
    free(p);
    return NVRTC_ERROR_OUT_OF_MEMORY;
  }
  p->magic = PROGRAM_MAGIC;
  *prog = p;
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(void** prog) {
  program* p = prog != NULL ? lookup(*prog) : NULL;
  if (p == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  p->magic = 0;
  free(p->source);
  free(p->image);
  free(p);
  *prog = NULL;
  return NVRTC_SUCCESS;
}

/* The image: the magic line, then every extern "C" __global__ function's
 * name on a line of its own. */
EXPORT nvrtcResult nvrtcCompileProgram(void* prog, int numOptions, const char* const* options) {
  static const char marker[] = "extern \"C\" __global__ void ";
  program* p = lookup(prog);
  if (p == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  if (numOptions < 0 || (numOptions > 0 && options == NULL)) return NVRTC_ERROR_INVALID_INPUT;
  size_t cap = strlen(VSIM_CUBIN_MAGIC) + strlen(p->source) + 2, n = 0;
  char* img = malloc(cap);
  if (img == NULL) return NVRTC_ERROR_OUT_OF_MEMORY;
  n = (size_t)sprintf(img, "%s\n", VSIM_CUBIN_MAGIC);
  int kernels = 0;
  for (const char* at = strstr(p->source, marker); at != NULL; at = strstr(at, marker)) {
    at += sizeof marker - 1;
    size_t len = strcspn(at, "( \n");
    memcpy(img + n, at, len);
    n += len;
    img[n++] = '\n';
    kernels++;
  }
  img[n] = '\0';
  if (kernels == 0) {
    free(img);
    snprintf(p->log, sizeof p->log, "emulated NVRTC: no extern \"C\" __global__ function in the program");
    return NVRTC_ERROR_COMPILATION;
  }
  free(p->image);
  p->image = img;
  p->imageBytes = n + 1;
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(void* prog, size_t* bytes) {
  program* p = lookup(prog);
  if (p == NULL || p->image == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  if (bytes == NULL) return NVRTC_ERROR_INVALID_INPUT;
  *bytes = p->imageBytes;
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBIN(void* prog, char* cubin) {
  program* p = lookup(prog);
  if (p == NULL || p->image == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  if (cubin == NULL) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(cubin, p->image, p->imageBytes);
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(void* prog, size_t* bytes) {
  program* p = lookup(prog);
  if (p == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  if (bytes == NULL) return NVRTC_ERROR_INVALID_INPUT;
  *bytes = strlen(p->log) + 1;
  return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(void* prog, char* log) {
  program* p = lookup(prog);
  if (p == NULL) return NVRTC_ERROR_INVALID_PROGRAM;
  if (log == NULL) return NVRTC_ERROR_INVALID_INPUT;
  strcpy(log, p->log);
  return NVRTC_SUCCESS;
}
