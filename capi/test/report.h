// report.h: how the C API's test programs (capi/test/*.c and
// capi/nccl/test/ranks.c) report, as the Go tests that run them read it
// (capi/capi_test.go): "FAIL rank R: what" on stdout and exit status 1 at
// the first failure; checks counts what passed, for the closing
// "PASS rank R: ..." line each program prints.
#ifndef CAPI_TEST_REPORT_H
#define CAPI_TEST_REPORT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, nranks, checks;

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "FAIL rank %d: ", rank);
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

// CHECK_RESULT is each program's OK(call) for its library: the call
// (text, as written) must return ok, else the failure names it with its
// code, the library's string for the code and its last error.
#define CHECK_RESULT(text, type, ok, errString, lastError, call)               \
  do {                                                                         \
    type r_ = (call);                                                          \
    if (r_ != (ok))                                                            \
      fail("%s returned %d (%s): %s", text, r_, errString(r_), lastError);     \
    checks++;                                                                  \
  } while (0)

#endif
