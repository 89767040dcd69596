/*
 * plugins/nvidia/reduce_kernels.h: the CUDA source of the nvidia plugin's
 * reduceLocal entry (ABI v4) and relayReduce entry (ABI v5), one program
 * compiled at run time with NVRTC (nvidia.c), so the plugin still builds
 * with gcc alone.
 *
 * reduceLocal: one kernel per data type, named flagcx_reduce_<type>; every
 * kernel takes one nvReduceArgs by value (its layout is the host struct's in
 * nvidia.c: both sides follow the x86-64 C layout). relayReduce: one kernel
 * per data type, named flagcx_relay_<type>, taking one flagcxRelay_v5_t by
 * value (Relay below, checked at 144 bytes; see the relay section). The
 * rules are those of the reduceLocal
 * entry in sdk/include/flagcx_plugin.h, which are the host engine's
 * (core/internal/host/reduce): folds left to right, rounding to the type at
 * every step; half and bfloat16 computed in float32 and rounded to nearest
 * even with the same bit-level conversions the host uses (half.go), so a
 * device reduction yields the host's bits; max/min let a NaN operand lose
 * and order -0 below +0; avg divides the sum once (integers truncate toward
 * zero). Compiled with --fmad=false and IEEE division (NVRTC's default), so
 * no operation is fused or approximated.
 */
#ifndef FLAGCX_NVIDIA_REDUCE_KERNELS_H
#define FLAGCX_NVIDIA_REDUCE_KERNELS_H

static const char nvReduceSource[] =
    "typedef signed char i8; typedef unsigned char u8; typedef int i32; typedef unsigned int u32;\n"
    "typedef long long i64; typedef unsigned long long u64; typedef unsigned short u16;\n"
    "struct Args { void* dst; const void* src[8]; u64 count; int nsrcs; int op; int div; };\n"
    "enum { SUM = 0, PROD = 1, MAX = 2, MIN = 3, AVG = 4 };\n"
    "\n"
    /* Integers: sums and products wrap (unsigned arithmetic), avg divides in 64 bits. */
    "template <typename T, typename U, typename W> struct Int {\n"
    "  static __device__ __forceinline__ T op(T x, T y, int o) {\n"
    "    switch (o) {\n"
    "    case PROD: return (T)(U)((U)x * (U)y);\n"
    "    case MAX: return x > y ? x : y;\n"
    "    case MIN: return x < y ? x : y;\n"
    "    default: return (T)(U)((U)x + (U)y);\n"
    "    }\n"
    "  }\n"
    "  static __device__ __forceinline__ T avg(T x, int d) { return (T)((W)x / (W)d); }\n"
    "};\n"
    "\n"
    /* float and double: max/min as the host engine (NaN loses, +0 above -0). */
    "__device__ __forceinline__ u32 bits(float x) { return __float_as_uint(x); }\n"
    "__device__ __forceinline__ u64 bits(double x) { return (u64)__double_as_longlong(x); }\n"
    "__device__ __forceinline__ float val(u32 b) { return __uint_as_float(b); }\n"
    "__device__ __forceinline__ double val(u64 b) { return __longlong_as_double((i64)b); }\n"
    "template <typename T> struct Flt {\n"
    "  static __device__ __forceinline__ T op(T x, T y, int o) {\n"
    "    switch (o) {\n"
    "    case PROD: return x * y;\n"
    "    case MAX: if (y > x || x != x) return y; return x == y ? val(bits(x) & bits(y)) : x;\n"
    "    case MIN: if (y < x || x != x) return y; return x == y ? val(bits(x) | bits(y)) : x;\n"
    "    default: return x + y;\n"
    "    }\n"
    "  }\n"
    "  static __device__ __forceinline__ T avg(T x, int d) { return x / (T)d; }\n"
    "};\n"
    "\n"
    /* float16 <-> float32, bit for bit as core/internal/host/reduce/half.go. */
    "__device__ __forceinline__ float f16in(u16 h) {\n"
    "  u32 sign = (u32)(h & 0x8000u) << 16, o = (u32)(h & 0x7fffu) << 13, e = o & (0x7c00u << 13);\n"
    "  if (e == (0x7c00u << 13)) o += (255u - 31u) << 23;\n"
    "  else if (e == 0) { o += 1u << 23; o = __float_as_uint(__fsub_rn(__uint_as_float(o + ((127u - 15u) << 23)), __uint_as_float(113u << 23))); }\n"
    "  else o += (127u - 15u) << 23;\n"
    "  return __uint_as_float(o | sign);\n"
    "}\n"
    "__device__ __forceinline__ u16 f16out(float f) {\n"
    "  u32 u = __float_as_uint(f), a = u & 0x7fffffffu;\n"
    "  if (a - 0x38800000u < 0x47800000u - 0x38800000u) {\n"
    "    a += 0xfffu + ((a >> 13) & 1u) - ((127u - 15u) << 23);\n"
    "    return (u16)(((u >> 16) & 0x8000u) | (a >> 13));\n"
    "  }\n"
    "  u16 sign = (u16)((u >> 16) & 0x8000u);\n"
    "  if (a >= 0x47800000u) return a > 0x7f800000u ? (u16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)) : (u16)(sign | 0x7c00u);\n"
    "  const u32 magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;\n"
    "  return (u16)(sign | (u16)(__float_as_uint(__fadd_rn(__uint_as_float(a), __uint_as_float(magic))) - magic));\n"
    "}\n"
    "__device__ __forceinline__ float bf16in(u16 h) { return __uint_as_float((u32)h << 16); }\n"
    "__device__ __forceinline__ u16 bf16out(float f) {\n"
    "  u32 u = __float_as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);\n"
    "  u += 0x7fffu + ((u >> 16) & 1u);\n"
    "  return (u16)(u >> 16);\n"
    "}\n"
    /* The narrow formats: arithmetic in float32, one rounding; max/min on
     * order keys (-0 below +0), a NaN (magnitude above inf) loses. */
    "__device__ __forceinline__ u16 key16(u16 h) { return h ^ ((u16)((short)h >> 15) | 0x8000u); }\n"
    "template <int F16> struct Narrow {\n"
    "  static __device__ __forceinline__ float in(u16 h) { return F16 ? f16in(h) : bf16in(h); }\n"
    "  static __device__ __forceinline__ u16 out(float f) { return F16 ? f16out(f) : bf16out(f); }\n"
    "  static __device__ __forceinline__ u16 op(u16 x, u16 y, int o) {\n"
    "    const u16 inf = F16 ? 0x7c00u : 0x7f80u;\n"
    "    switch (o) {\n"
    "    case PROD: return out(__fmul_rn(in(x), in(y)));\n"
    "    case MAX: return ((x & 0x7fffu) > inf || ((y & 0x7fffu) <= inf && key16(y) > key16(x))) ? y : x;\n"
    "    case MIN: return ((x & 0x7fffu) > inf || ((y & 0x7fffu) <= inf && key16(y) < key16(x))) ? y : x;\n"
    "    default: return out(__fadd_rn(in(x), in(y)));\n"
    "    }\n"
    "  }\n"
    "  static __device__ __forceinline__ u16 avg(u16 x, int d) { return out(__fdiv_rn(in(x), (float)d)); }\n"
    "};\n"
    "\n"
    "template <typename T, typename O> __device__ __forceinline__ void fold(const Args& a) {\n"
    "  const u64 stride = (u64)blockDim.x * gridDim.x;\n"
    "  const int op = a.op == AVG ? SUM : a.op;\n"
    "  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride) {\n"
    "    T acc = ((const T*)a.src[0])[i];\n"
    "    for (int k = 1; k < a.nsrcs; k++) acc = O::op(acc, ((const T*)a.src[k])[i], op);\n"
    "    if (a.op == AVG) acc = O::avg(acc, a.div);\n"
    "    ((T*)a.dst)[i] = acc;\n"
    "  }\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void flagcx_reduce_i8(Args a) { fold<i8, Int<i8, u8, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_u8(Args a) { fold<u8, Int<u8, u8, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_i32(Args a) { fold<i32, Int<i32, u32, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_u32(Args a) { fold<u32, Int<u32, u32, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_i64(Args a) { fold<i64, Int<i64, u64, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_u64(Args a) { fold<u64, Int<u64, u64, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_f16(Args a) { fold<u16, Narrow<1> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_f32(Args a) { fold<float, Flt<float> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_f64(Args a) { fold<double, Flt<double> >(a); }\n"
    "extern \"C\" __global__ void flagcx_reduce_bf16(Args a) { fold<u16, Narrow<0> >(a); }\n"
    "\n"
    /* relayReduce (ABI v5): flagcxRelay_v5_t of sdk/include/flagcx_plugin.h,
     * field for field in the x86-64 layout (src 0, window 8, bytes 16,
     * landed 24, go 32, value 40, srcs 48, nsrcs 112, dtype 116, op 120,
     * avgDivisor 124, count 128, dst 136: 144 bytes). One block of
     * NV_RELAY_THREADS (512) threads runs the three parts of the entry:
     *  1. the copy of src to window, in 8-byte words where src and window
     *     allow it (the last bytes one by one); every thread fences (system
     *     scope) so that its stores reach host memory before thread 0's
     *     store to *landed, which follows the barrier and one more fence;
     *  2. thread 0 polls *go with volatile loads (they reach memory every
     *     time) until it holds value or value | abort, fences so that the
     *     loads after it see what the host wrote before the go, and shares
     *     the verdict through shared memory;
     *  3. unless aborted, the fold of fold<> above (the same op templates,
     *     so the same bits), every source read with volatile loads: other
     *     processes wrote host sources just before the go, and a line cached
     *     by an earlier call on the same window would be stale. A thread
     *     loads all its sources before it folds: each load of host memory
     *     is a trip across the bus, and loads issued together take one
     *     trip's time rather than one trip per source;
     *  4. after a barrier (every read done), thread 0 fences and stores
     *     value | done to *landed: the host may let the windows be written. */
    "struct Relay {\n"
    "  const void* src; void* window; u64 bytes; u64* landed; const u64* go; u64 value;\n"
    "  const void* srcs[8]; int nsrcs; int dtype; int op; int div; u64 count; void* dst;\n"
    "};\n"
    "static_assert(sizeof(Relay) == 144, \"Relay mirrors flagcxRelay_v5_t\");\n"
    "#define RELAY_ABORT (1ull << 63)\n"
    "#define RELAY_DONE (1ull << 62)\n"
    "__device__ __forceinline__ void relayPause() {\n"
    "#if __CUDA_ARCH__ >= 700\n"
    "  __nanosleep(64);\n"
    "#endif\n"
    "}\n"
    "template <typename T> __device__ __forceinline__ T fresh(const void* p, u64 i) { return ((volatile const T*)p)[i]; }\n"
    "template <typename T, typename O> __device__ __forceinline__ void relay(const Relay& a) {\n"
    "  __shared__ int proceed;\n"
    "  const u64 t = threadIdx.x, n = blockDim.x;\n"
    "  u64 words = (((u64)a.src | (u64)a.window) & 7) == 0 ? a.bytes / 8 : 0;\n"
    "  for (u64 i = t; i < words; i += n) ((u64*)a.window)[i] = ((const u64*)a.src)[i];\n"
    "  for (u64 i = 8 * words + t; i < a.bytes; i += n) ((u8*)a.window)[i] = ((const u8*)a.src)[i];\n"
    "  __threadfence_system();\n"
    "  __syncthreads();\n"
    "  if (t == 0) {\n"
    "    __threadfence_system();\n"
    "    *(volatile u64*)a.landed = a.value;\n"
    "    u64 g;\n"
    "    while ((g = *(volatile const u64*)a.go) != a.value && !((g & RELAY_ABORT) && (g & ~RELAY_ABORT) >= a.value)) relayPause();\n"
    "    __threadfence_system();\n"
    "    proceed = g == a.value;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  const int op = a.op == AVG ? SUM : a.op;\n"
    "  for (u64 i = t; proceed && i < a.count; i += n) {\n"
    "    T v[8];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < 8; k++) if (k < a.nsrcs) v[k] = fresh<T>(a.srcs[k], i);\n"
    "    T acc = v[0];\n"
    "#pragma unroll\n"
    "    for (int k = 1; k < 8; k++) if (k < a.nsrcs) acc = O::op(acc, v[k], op);\n"
    "    if (a.op == AVG) acc = O::avg(acc, a.div);\n"
    "    ((T*)a.dst)[i] = acc;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  if (t == 0) {\n"
    "    __threadfence_system();\n"
    "    *(volatile u64*)a.landed = a.value | RELAY_DONE;\n"
    "  }\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void flagcx_relay_i8(Relay a) { relay<i8, Int<i8, u8, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_u8(Relay a) { relay<u8, Int<u8, u8, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_i32(Relay a) { relay<i32, Int<i32, u32, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_u32(Relay a) { relay<u32, Int<u32, u32, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_i64(Relay a) { relay<i64, Int<i64, u64, i64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_u64(Relay a) { relay<u64, Int<u64, u64, u64> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_f16(Relay a) { relay<u16, Narrow<1> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_f32(Relay a) { relay<float, Flt<float> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_f64(Relay a) { relay<double, Flt<double> >(a); }\n"
    "extern \"C\" __global__ void flagcx_relay_bf16(Relay a) { relay<u16, Narrow<0> >(a); }\n";

/* The relay kernels run as one block of this many threads (the ABI's
 * relays are a few KiB). */
#define NV_RELAY_THREADS 512

/* Kernel names, indexed by flagcxDataType_t. */
static const char* const nvReduceKernelNames[flagcxNumTypes] = {
    "flagcx_reduce_i8",  "flagcx_reduce_u8",  "flagcx_reduce_i32", "flagcx_reduce_u32", "flagcx_reduce_i64",
    "flagcx_reduce_u64", "flagcx_reduce_f16", "flagcx_reduce_f32", "flagcx_reduce_f64", "flagcx_reduce_bf16"};
static const char* const nvRelayKernelNames[flagcxNumTypes] = {
    "flagcx_relay_i8",  "flagcx_relay_u8",  "flagcx_relay_i32", "flagcx_relay_u32", "flagcx_relay_i64",
    "flagcx_relay_u64", "flagcx_relay_f16", "flagcx_relay_f32", "flagcx_relay_f64", "flagcx_relay_bf16"};

#endif /* FLAGCX_NVIDIA_REDUCE_KERNELS_H */
