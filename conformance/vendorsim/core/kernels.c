/*
 * kernels.c: element-wise reductions for the ten NCCL data types and five
 * reduction ops.
 *
 * Integer arithmetic wraps (it is done on the unsigned type, where C defines
 * wrapping). float16 and bfloat16 are widened to float32 for every step and
 * rounded back to nearest-even after it, as a GPU kernel reducing pairwise in
 * half precision would; the conversions are written out bit by bit so the
 * result does not depend on compiler support for _Float16.
 *
 * avg is a sum here; vsim_avg_finish divides by nranks once at the end
 * (integers truncate toward zero, floating types divide).
 */
#include <math.h>
#include <string.h>

#include "vsim_core.h"

static const size_t dtype_sizes[VSIM_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char* const dtype_names[VSIM_NUM_DTYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", "bfloat16"};
static const char* const op_names[VSIM_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

size_t vsim_dtype_size(int dtype) {
  return (dtype >= 0 && dtype < VSIM_NUM_DTYPES) ? dtype_sizes[dtype] : 0;
}
const char* vsim_dtype_name(int dtype) {
  return (dtype >= 0 && dtype < VSIM_NUM_DTYPES) ? dtype_names[dtype] : "invalid-dtype";
}
const char* vsim_op_name(int op) {
  return (op >= 0 && op < VSIM_NUM_OPS) ? op_names[op] : "invalid-op";
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float vsim_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    /* Zero or subnormal: mant * 2^-24 is exact in float32. */
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  if (exp == 31) return u2f(sign | 0x7f800000u | (mant << 13)); /* inf/NaN */
  return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t vsim_float_to_half(float f) {
  uint32_t x = f2u(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (ax >= 0x47800000u) return sign | 0x7c00u; /* >= 65536: overflow */
  if (ax < 0x38800000u) {
    /* Below the smallest normal half (2^-14): the result is a subnormal
     * count of 2^-24 units. Scaling by 2^24 is exact; nearbyintf rounds to
     * nearest even in the default rounding mode. 1024 units carry into the
     * smallest normal, which has the same bit pattern. */
    float units = nearbyintf(u2f(ax) * 16777216.0f);
    return sign | (uint16_t)units;
  }
  uint32_t exp = (ax >> 23) - 112u; /* 1..30 */
  uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  /* Round to nearest, ties to even; a carry may roll into the exponent and,
   * from 65504 up, into infinity, which is the right answer. */
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return sign | (uint16_t)h;
}

float vsim_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t vsim_float_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* One loop per (type, op). The unsigned "wrap" type W makes sum and prod
 * well-defined for signed types. */
#define INT_LOOPS(T, W)                                                        \
  {                                                                            \
    T* a = (T*)acc;                                                            \
    const T* b = (const T*)in;                                                 \
    switch (op) {                                                              \
      case VSIM_SUM:                                                           \
      case VSIM_AVG:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = (T)((W)a[i] + (W)b[i]);          \
        break;                                                                 \
      case VSIM_PROD:                                                          \
        for (size_t i = 0; i < n; i++) a[i] = (T)((W)a[i] * (W)b[i]);          \
        break;                                                                 \
      case VSIM_MAX:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = b[i] > a[i] ? b[i] : a[i];       \
        break;                                                                 \
      case VSIM_MIN:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = b[i] < a[i] ? b[i] : a[i];       \
        break;                                                                 \
    }                                                                          \
    return;                                                                    \
  }

#define FLOAT_LOOPS(T)                                                         \
  {                                                                            \
    T* a = (T*)acc;                                                            \
    const T* b = (const T*)in;                                                 \
    switch (op) {                                                              \
      case VSIM_SUM:                                                           \
      case VSIM_AVG:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = a[i] + b[i];                     \
        break;                                                                 \
      case VSIM_PROD:                                                          \
        for (size_t i = 0; i < n; i++) a[i] = a[i] * b[i];                     \
        break;                                                                 \
      case VSIM_MAX:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = b[i] > a[i] ? b[i] : a[i];       \
        break;                                                                 \
      case VSIM_MIN:                                                           \
        for (size_t i = 0; i < n; i++) a[i] = b[i] < a[i] ? b[i] : a[i];       \
        break;                                                                 \
    }                                                                          \
    return;                                                                    \
  }

/* 16-bit floats: widen, apply, round back, for every element and step. */
#define HALF_LOOPS(TOF, FROMF)                                                 \
  {                                                                            \
    uint16_t* a = (uint16_t*)acc;                                              \
    const uint16_t* b = (const uint16_t*)in;                                   \
    for (size_t i = 0; i < n; i++) {                                           \
      float x = TOF(a[i]), y = TOF(b[i]), r;                                   \
      switch (op) {                                                            \
        case VSIM_PROD: r = x * y; break;                                      \
        case VSIM_MAX: r = y > x ? y : x; break;                               \
        case VSIM_MIN: r = y < x ? y : x; break;                               \
        default: r = x + y; break; /* sum, avg */                              \
      }                                                                        \
      a[i] = FROMF(r);                                                         \
    }                                                                          \
    return;                                                                    \
  }

void vsim_reduce(void* acc, const void* in, size_t n, int dtype, int op) {
  switch (dtype) {
    case VSIM_INT8: INT_LOOPS(int8_t, uint8_t)
    case VSIM_UINT8: INT_LOOPS(uint8_t, uint8_t)
    case VSIM_INT32: INT_LOOPS(int32_t, uint32_t)
    case VSIM_UINT32: INT_LOOPS(uint32_t, uint32_t)
    case VSIM_INT64: INT_LOOPS(int64_t, uint64_t)
    case VSIM_UINT64: INT_LOOPS(uint64_t, uint64_t)
    case VSIM_FLOAT16: HALF_LOOPS(vsim_half_to_float, vsim_float_to_half)
    case VSIM_FLOAT32: FLOAT_LOOPS(float)
    case VSIM_FLOAT64: FLOAT_LOOPS(double)
    case VSIM_BFLOAT16: HALF_LOOPS(vsim_bf16_to_float, vsim_float_to_bf16)
  }
}

#define DIV_LOOP(T)                                                            \
  {                                                                            \
    T* a = (T*)buf;                                                            \
    for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] / (T)nranks);               \
    return;                                                                    \
  }

void vsim_avg_finish(void* buf, size_t n, int dtype, int nranks) {
  switch (dtype) {
    case VSIM_INT8: DIV_LOOP(int8_t)
    case VSIM_UINT8: DIV_LOOP(uint8_t)
    case VSIM_INT32: DIV_LOOP(int32_t)
    case VSIM_UINT32: DIV_LOOP(uint32_t)
    case VSIM_INT64: DIV_LOOP(int64_t)
    case VSIM_UINT64: DIV_LOOP(uint64_t)
    case VSIM_FLOAT32: DIV_LOOP(float)
    case VSIM_FLOAT64: DIV_LOOP(double)
    case VSIM_FLOAT16: {
      uint16_t* a = buf;
      for (size_t i = 0; i < n; i++) a[i] = vsim_float_to_half(vsim_half_to_float(a[i]) / (float)nranks);
      return;
    }
    case VSIM_BFLOAT16: {
      uint16_t* a = buf;
      for (size_t i = 0; i < n; i++) a[i] = vsim_float_to_bf16(vsim_bf16_to_float(a[i]) / (float)nranks);
      return;
    }
  }
}
