// CUDA NVFP4 / FP8 quantization kernels (see quant/gpu_quant.h).
//
// Byte equality with the C reference comes from calling the same inline
// arithmetic (quant/numerics.h) and compiling with --fmad=false and IEEE
// division (no fast math). The element loops use the division-free forms
// (mtpq_nvfp4_block_fast, mtpq_fp8_element_fast), which fall back to the
// exact division near rounding decision points and so give the same bytes. The amax pass is exact: it takes the max of the
// bf16 magnitude bits, which order like the values for finite inputs.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" {
#include "io/cuda_status.h"
#include "quant/gpu_quant.h"
}


// ---- amax -------------------------------------------------------------------

static __global__ void amax_kernel(const uint16_t *__restrict__ x, size_t n,
                                   unsigned int *__restrict__ result) {
  unsigned int best = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  // Vector part: 8 bf16 per 16-byte load.
  size_t n8 = n / 8;
  const uint4 *x8 = reinterpret_cast<const uint4 *>(x);
  for (size_t k = i; k < n8; k += stride) {
    uint4 v = __ldg(&x8[k]);
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      best = max(best, w[j] & 0x7FFFu);
      best = max(best, (w[j] >> 16) & 0x7FFFu);
    }
  }
  for (size_t k = n8 * 8 + i; k < n; k += stride) best = max(best, (unsigned int)(x[k] & 0x7FFFu));
  for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xFFFFFFFFu, best, off));
  // One atomic per block: same-address atomics serialize at L2.
  __shared__ unsigned int warp_best[32];
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < (blockDim.x + 31) / 32 ? warp_best[threadIdx.x] : 0u;
    for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xFFFFFFFFu, best, off));
    if (threadIdx.x == 0) atomicMax(result, best);
  }
}

// ---- NVFP4 --------------------------------------------------------------------

// Contiguous blocks (cols % 16 == 0): block b covers elements [16b, 16b+16).
// One thread per block. (Splitting a block over two lanes with a shuffle for
// the amax measured slower on the H200: 805 vs 976 GB/s.)
static __global__ void nvfp4_kernel(const uint4 *__restrict__ x, size_t nblocks,
                                    const unsigned int *__restrict__ amax_bits, float group_amax,
                                    int arith, uint2 *__restrict__ packed,
                                    uint8_t *__restrict__ scales, float *__restrict__ s2_out) {
  float amax = group_amax >= 0.0f ? group_amax : mtpq_bf16_to_f32((uint16_t)*amax_bits);
  float S2 = mtpq_nvfp4_global_scale(amax, (enum mtpq_arith)arith);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    uint4 v[2];
    v[0] = __ldg(&x[2 * b]);
    v[1] = __ldg(&x[2 * b + 1]);
    uint2 out;
    scales[b] = mtpq_nvfp4_block_fast(reinterpret_cast<const uint16_t *>(v), S2,
                                      reinterpret_cast<uint8_t *>(&out));
    packed[b] = out;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *s2_out = S2;
}

// Rows whose width is not a multiple of 16: the last block is zero-padded.
static __global__ void nvfp4_padded_kernel(const uint16_t *__restrict__ x, int64_t rows,
                                           int64_t cols, const unsigned int *__restrict__ amax_bits,
                                           float group_amax, int arith, uint8_t *__restrict__ packed,
                                           uint8_t *__restrict__ scales, float *__restrict__ s2_out) {
  float amax = group_amax >= 0.0f ? group_amax : mtpq_bf16_to_f32((uint16_t)*amax_bits);
  float S2 = mtpq_nvfp4_global_scale(amax, (enum mtpq_arith)arith);
  int64_t cols16 = (cols + 15) / 16 * 16, nb = cols16 / 16;
  int64_t total = rows * nb;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = t / nb, b = t % nb;
    uint16_t blk[16];
    for (int i = 0; i < 16; i++) {
      int64_t c = b * 16 + i;
      blk[i] = c < cols ? x[r * cols + c] : (uint16_t)0;
    }
    scales[t] = mtpq_nvfp4_block_fast(blk, S2, packed + r * (cols16 / 2) + b * 8);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *s2_out = S2;
}

// ---- FP8 ------------------------------------------------------------------------

// Two FP8 codes with the hardware converter (cvt.rn.satfinite.e4m3x2.f32).
// It rounds to nearest even with subnormals like torch's c10 routine; the
// only difference is saturation: c10 gives NaN (0x7F) above 464, which the
// f32 recipe never sees (it clamps to 448 first) and the ModelOpt recipes fix
// up below. Exactness near rounding decision points still comes from
// mtpq_fp8_element_fast's exact fallback.
static __device__ __forceinline__ uint16_t fp8_pair(uint16_t xa, uint16_t xb, float div,
                                                    float rdiv, enum mtpq_fp8_recipe r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t h[2] = {xa, xb};
  float y[2];
  bool hw[2];
  uint8_t sw[2];
  for (int k = 0; k < 2; k++) {
    float x = mtpq_bf16_to_f32(h[k]);
    float q = x * rdiv;
    uint32_t u = mtpq_f32_bits(q) & 0x7FFFFFFFu;
    bool exact = !(div >= 7.8886091e-31f && div <= 1.2676506e30f);
    if (r == MTPQ_FP8_F32) {
      uint32_t lo = u & 0xFFFFFu, dlo = lo > 0x80000u ? lo - 0x80000u : 0x80000u - lo;
      exact |= u < 0x3C820000u || (u < 0x43F00000u && dlo <= 8u);
      y[k] = fminf(fmaxf(q, -MTPQ_E4M3_MAX), MTPQ_E4M3_MAX);
    } else {
      uint32_t lo = u & 0xFFFFu, dlo = lo > 0x8000u ? lo - 0x8000u : 0x8000u - lo;
      exact |= (u != 0 && u < 0x0C800000u) || dlo <= 8u;
      y[k] = mtpq_round_bf16(q);
    }
    hw[k] = !exact && div != 0.0f;
    sw[k] = hw[k] ? 0 : mtpq_fp8_element(h[k], div, r);
  }
  __nv_fp8x2_storage_t c = __nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_SATFINITE, __NV_E4M3);
  uint8_t out[2] = {(uint8_t)(c & 0xFF), (uint8_t)(c >> 8)};
  for (int k = 0; k < 2; k++) {
    if (r != MTPQ_FP8_F32 && fabsf(y[k]) > 464.0f) out[k] = (uint8_t)(0x7F | (y[k] < 0 ? 0x80 : 0));
    if (!hw[k]) out[k] = sw[k];
  }
  return (uint16_t)(out[0] | (out[1] << 8));
#else
  return (uint16_t)(mtpq_fp8_element_fast(xa, div, rdiv, r) |
                    (mtpq_fp8_element_fast(xb, div, rdiv, r) << 8));
#endif
}

static __global__ void fp8_kernel(const uint4 *__restrict__ x, size_t n8, const uint16_t *xs,
                                  size_t n, const unsigned int *__restrict__ amax_bits,
                                  float group_amax, int recipe, int arith, uint2 *__restrict__ out,
                                  uint8_t *out_bytes, float *__restrict__ scale_out) {
  float amax = group_amax >= 0.0f ? group_amax : mtpq_bf16_to_f32((uint16_t)*amax_bits);
  enum mtpq_fp8_recipe r = (enum mtpq_fp8_recipe)recipe;
  enum mtpq_arith a = (enum mtpq_arith)arith;
  float scale = mtpq_fp8_scale(amax, r, a);
  float div = mtpq_fp8_divisor(scale, r, a);
  float rdiv = div != 0.0f ? 1.0f / div : 0.0f;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t k = i0; k < n8; k += stride) {
    uint4 v = __ldg(&x[k]);
    const uint16_t *h = reinterpret_cast<const uint16_t *>(&v);
    uint2 o;
    uint16_t *ob = reinterpret_cast<uint16_t *>(&o);
#pragma unroll
    for (int j = 0; j < 4; j++) ob[j] = fp8_pair(h[2 * j], h[2 * j + 1], div, rdiv, r);
    out[k] = o;
  }
  for (size_t k = n8 * 8 + i0; k < n; k += stride)
    out_bytes[k] = mtpq_fp8_element_fast(xs[k], div, rdiv, r);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
}

// ---- host side -------------------------------------------------------------------

static int fp8_recipe_of(enum mtpq_format f) {
  switch (f) {
  case MTPQ_FMT_FP8_MODELOPT_QTENSOR: return MTPQ_FP8_MODELOPT_QTENSOR;
  case MTPQ_FMT_FP8_MODELOPT_EXPORT: return MTPQ_FP8_MODELOPT_EXPORT;
  default: return MTPQ_FP8_F32;
  }
}

static int grid_for(size_t work, int threads) {
  static int sms = 0; /* queried once: launches stay free of host API calls */
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
  }
  size_t want = (work + threads - 1) / threads;
  size_t cap = (size_t)sms * 16;
  return (int)std::max<size_t>(1, std::min(want, cap));
}

// Device buffers for one quantization; freed by release().
struct job {
  enum mtpq_format fmt;
  int64_t rows, cols, cols16;
  size_t n;
  uint16_t *x = nullptr;
  unsigned int *amax = nullptr;
  unsigned int *bad = nullptr;
  uint8_t *data = nullptr, *scales = nullptr;
  float *scale = nullptr;
  size_t data_bytes = 0, scale_bytes = 0;
  void release() {
    cudaFree(x);
    cudaFree(amax);
    cudaFree(data);
    cudaFree(scales);
    cudaFree(scale);
    x = nullptr, amax = nullptr, data = nullptr, scales = nullptr, scale = nullptr;
  }
};

static enum mtpq_status job_alloc(struct job *j, const void *bf16, struct mtpq_err *err) {
  j->n = (size_t)(j->rows * j->cols);
  j->cols16 = j->fmt == MTPQ_FMT_NVFP4 ? (j->cols + 15) / 16 * 16 : j->cols;
  j->data_bytes = j->fmt == MTPQ_FMT_NVFP4 ? (size_t)(j->rows * j->cols16 / 2) : j->n;
  j->scale_bytes = j->fmt == MTPQ_FMT_NVFP4 ? (size_t)(j->rows * j->cols16 / 16) : 0;
  MTPQ_CUDA_TRY(cudaMalloc(&j->x, std::max<size_t>(j->n * 2, 16)), err);
  MTPQ_CUDA_TRY(cudaMalloc(&j->amax, sizeof(unsigned int)), err);
  MTPQ_CUDA_TRY(cudaMalloc(&j->data, std::max<size_t>(j->data_bytes, 16)), err);
  MTPQ_CUDA_TRY(cudaMalloc(&j->scales, std::max<size_t>(j->scale_bytes, 16)), err);
  MTPQ_CUDA_TRY(cudaMalloc(&j->scale, sizeof(float)), err);
  MTPQ_CUDA_TRY(cudaMemcpy(j->x, bf16, j->n * 2, cudaMemcpyHostToDevice), err);
  return MTPQ_OK;
}

// Launch amax (when needed) and the quantization kernel on the default stream.
static enum mtpq_status job_launch(struct job *j, const struct mtpq_quant_opts *o,
                                   struct mtpq_err *err) {
  const int T = 256;
  float group = o->group_amax;
  if (group < 0) {
    MTPQ_CUDA_TRY(cudaMemsetAsync(j->amax, 0, sizeof(unsigned int)), err);
    amax_kernel<<<grid_for(j->n / 8 + 1, T), T>>>(j->x, j->n, j->amax);
  }
  if (j->fmt == MTPQ_FMT_NVFP4) {
    if (j->cols % 16 == 0) {
      size_t nb = j->n / 16;
      nvfp4_kernel<<<grid_for(nb, T), T>>>(reinterpret_cast<const uint4 *>(j->x), nb, j->amax,
                                           group, (int)o->arith, reinterpret_cast<uint2 *>(j->data),
                                           j->scales, j->scale);
    } else {
      size_t nb = (size_t)(j->rows * (j->cols16 / 16));
      nvfp4_padded_kernel<<<grid_for(nb, T), T>>>(j->x, j->rows, j->cols, j->amax, group,
                                                  (int)o->arith, j->data, j->scales, j->scale);
    }
  } else {
    size_t n8 = j->n / 8;
    fp8_kernel<<<grid_for(n8 + 1, T), T>>>(reinterpret_cast<const uint4 *>(j->x), n8, j->x, j->n,
                                           j->amax, group, fp8_recipe_of(j->fmt), (int)o->arith,
                                           reinterpret_cast<uint2 *>(j->data), j->data, j->scale);
  }
  MTPQ_CUDA_TRY(cudaGetLastError(), err);
  return MTPQ_OK;
}

extern "C" int mtpq_gpu_available(struct mtpq_err *err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    mtpq_err_set(err, MTPQ_E_NO_GPU, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    return 0;
  }
  return 1;
}

extern "C" const char *mtpq_gpu_name(void) {
  static char name[256];
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "";
  snprintf(name, sizeof name, "%s", p.name);
  return name;
}

static enum mtpq_status check_format(enum mtpq_format fmt, int64_t rows, int64_t cols,
                                     struct mtpq_err *err) {
  const struct mtpq_format_info *fi = mtpq_format_get(fmt);
  if (!fi || !fi->has_gpu)
    return mtpq_err_set(err, MTPQ_E_INVAL, "format %s has no GPU kernel", fi ? fi->name : "?");
  if (rows < 0 || cols < 0) return mtpq_err_set(err, MTPQ_E_INVAL, "negative shape");
  if (!mtpq_gpu_available(err)) return MTPQ_E_NO_GPU;
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq_gpu_quantize(enum mtpq_format fmt, const void *bf16,
                                              int64_t rows, int64_t cols,
                                              const struct mtpq_quant_opts *o,
                                              struct mtpq_qtensor *out, struct mtpq_err *err) {
  memset(out, 0, sizeof *out);
  struct mtpq_quant_opts d = mtpq_quant_default_opts();
  if (!o) o = &d;
  enum mtpq_status st = check_format(fmt, rows, cols, err);
  if (st) return st;
  // Non-finite values are refused exactly as the reference does (one cheap
  // host scan keeps the error message identical).
  if (o->group_amax < 0) {
    float a;
    st = mtpq_amax_bf16(bf16, (size_t)(rows * cols), NULL, &a, err);
    if (st) return st;
  }
  struct job j;
  j.fmt = fmt, j.rows = rows, j.cols = cols;
  st = job_alloc(&j, bf16, err);
  if (!st) st = job_launch(&j, o, err);
  if (!st) {
    out->fmt = fmt, out->rows = rows, out->cols = cols, out->cols_padded = j.cols16;
    out->data_bytes = j.data_bytes, out->scale_bytes = j.scale_bytes;
    out->data = (uint8_t *)malloc(std::max<size_t>(j.data_bytes, 1));
    out->scales = j.scale_bytes ? (uint8_t *)malloc(j.scale_bytes) : nullptr;
    if (!out->data || (j.scale_bytes && !out->scales)) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    } else {
      cudaError_t e = cudaMemcpy(out->data, j.data, j.data_bytes, cudaMemcpyDeviceToHost);
      if (e == cudaSuccess && j.scale_bytes)
        e = cudaMemcpy(out->scales, j.scales, j.scale_bytes, cudaMemcpyDeviceToHost);
      if (e == cudaSuccess) e = cudaMemcpy(&out->scale, j.scale, sizeof(float), cudaMemcpyDeviceToHost);
      if (e != cudaSuccess)
        st = mtpq_err_set(err, MTPQ_E_GPU, "copy back failed: %s", cudaGetErrorString(e));
    }
  }
  j.release();
  if (st) mtpq_qtensor_free(out);
  return st;
}

// Median time of `iters` runs of fn() between CUDA events.
template <typename F>
static enum mtpq_status time_median(F fn, int iters, double *out, struct mtpq_err *err) {
  cudaEvent_t e0, e1;
  MTPQ_CUDA_TRY(cudaEventCreate(&e0), err);
  MTPQ_CUDA_TRY(cudaEventCreate(&e1), err);
  std::vector<float> ms;
  enum mtpq_status st = MTPQ_OK;
  for (int w = 0; !st && w < 3; w++) st = fn();
  for (int i = 0; !st && i < iters; i++) {
    cudaEventRecord(e0);
    st = fn();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!st && cudaDeviceSynchronize() != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "kernel failed: %s", cudaGetErrorString(cudaGetLastError()));
  if (!st) {
    std::sort(ms.begin(), ms.end());
    *out = ms[ms.size() / 2] * 1e-3;
  }
  return st;
}

extern "C" enum mtpq_status mtpq_gpu_quant_bench(enum mtpq_format fmt, const void *bf16,
                                                 int64_t rows, int64_t cols,
                                                 const struct mtpq_quant_opts *o, int iters,
                                                 struct mtpq_gpu_bench *t, struct mtpq_err *err) {
  enum mtpq_status st = check_format(fmt, rows, cols, err);
  if (st) return st;
  struct job j;
  j.fmt = fmt, j.rows = rows, j.cols = cols;
  st = job_alloc(&j, bf16, err);
  void *copy = nullptr;
  if (!st && cudaMalloc(&copy, j.n * 2) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "cudaMalloc of %zu bytes failed", j.n * 2);
  struct mtpq_quant_opts own = *o, given = *o;
  own.group_amax = -1.0f;
  if (given.group_amax < 0) {
    float a;
    st = st ? st : mtpq_amax_bf16(bf16, j.n, NULL, &a, err);
    given.group_amax = a;
  }
  if (!st) st = time_median([&] { return job_launch(&j, &own, err); }, iters, &t->full, err);
  if (!st) st = time_median([&] { return job_launch(&j, &given, err); }, iters, &t->quant, err);
  if (!st)
    st = time_median([&]() -> enum mtpq_status {
          const int T = 256;
          cudaMemsetAsync(j.amax, 0, sizeof(unsigned int));
          amax_kernel<<<grid_for(j.n / 8 + 1, T), T>>>(j.x, j.n, j.amax);
          MTPQ_CUDA_TRY(cudaGetLastError(), err);
          return MTPQ_OK;
        }, iters, &t->amax, err);
  if (!st)
    st = time_median([&]() -> enum mtpq_status {
          MTPQ_CUDA_TRY(cudaMemcpyAsync(copy, j.x, j.n * 2, cudaMemcpyDeviceToDevice), err);
          return MTPQ_OK;
        }, iters, &t->copy, err);
  cudaFree(copy);
  j.release();
  return st;
}
