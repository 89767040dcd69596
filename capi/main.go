// Command capi is libflagcx.so: FlagCX's C API (include/flagcx.h, the
// names, values, layouts and meanings of flagos-ai/FlagCX's flagcx.h)
// served by flagcx-go, so that programs written for FlagCX (its torch
// plugin, its perf tests) run on flagcx-go unchanged. It is built with
// -buildmode=c-shared (make capi: build/lib/libflagcx.so and
// build/include/flagcx.h); docs/c-api.md says what is supported.
//
// What it holds, by concern:
//   - the C entries, with FlagCX's exact prototypes: shim.c (the structs C
//     keeps: communicator, stream, event, the device handle's table, each
//     thread's current device), shim_comm.c (communicators, collectives,
//     point-to-point, groups, and what flagcx-go does not serve),
//     shim_onesided.c (one-sided entries), shim_ext.c (the flagcx-go
//     extensions of flagcx.h that the NCCL drop-in needs), shim.h;
//   - their cgo side, the functions the shims call: exports.go,
//     exports_comm.go, exports_onesided.go, exports_ext.go;
//   - the Go behind them: backend.go (the one adapter onto package core),
//     choose.go (the process's backend: FLAGCX_BACKEND, else the first
//     plugin with a device, else the host), registry.go (communicators by
//     number, last errors, the calling threads' groups, live streams),
//     onesided.go (registrations by MR index, windows, signals, staging),
//     premul.go (flagcxRedOpCreatePreMulSum's ops), hostspan.go (a host
//     buffer too short for its count, found in the process's mappings);
//   - include/flagcx.h and include/flagcx_kernel.h, the headers make
//     installs, and capi.mk;
//   - nccl/: libnccl.so.2, NCCL's C API in plain C on top of this library
//     (docs/nccl.md), with its test programs;
//   - test/: the C programs that capi_test.go, onesided_test.go and
//     nccl_test.go build against the built library, and FlagCX's one-sided
//     perf tests (test/flagcx-perf, FlagCX's files).
//
// This is the one package of the module that uses cgo. Its files without
// cgo (all but exports*.go) also build without it, and their tests run so.
package main

// main is never run: a c-shared library's entry points are its exports.
func main() {}
