// Command capi is libflagcx.so: FlagCX's C API (include/flagcx.h, the
// names, values, layouts and meanings of flagos-ai/FlagCX's flagcx.h)
// served by flagcx-go, so that programs written for FlagCX (its torch
// plugin, its perf tests) run on flagcx-go unchanged. It is built with
// -buildmode=c-shared (make capi: build/lib/libflagcx.so and
// build/include/flagcx.h); docs/c-api.md says what is supported.
//
// This is the one package of the module that uses cgo. Its pure-Go files
// (backend.go, the one adapter onto package core; choose.go, the backend
// choice; registry.go) also build without cgo, and their tests run so.
package main

// main is never run: a c-shared library's entry points are its exports.
func main() {}
