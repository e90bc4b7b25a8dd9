// The stock drafter's BF16 head through cuBLASLt: the GEMM (lt_head), the
// argmax kernel after it, and the plan of each token count (from tune lt
// tokens a step). Where and why cuBLASLt: the stock drafter's BF16 head at
// several tokens, where its Hopper kernels (wgmma, TMA) stream the head's
// weights faster than k_head_mma (ledger 2). It keeps the numerics contract the same way k_head_mma
// does: x (float32) goes in as three BF16 pieces hi + mid + lo (all 24 bits;
// k_final writes them beside its output), a GEMM column each, so every
// weight x piece product is exact and the sums are float32; the three
// columns of a token are then added in piece order (rt_piece_sum), as
// k_head_mma adds its MMA columns. The FP8 products have no such form
// (cuBLASLt multiplies FP8 weights only by FP8 activations), nor NVFP4 (no
// kernel for it on Hopper).
#include <cuda_bf16.h>

#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"

// Token j's largest logit as rt_argmax_key's 64-bit key (ties to the lower
// row), into best[j] by one atomicMax a block (rt_block_best, as the head
// kernels publish theirs): the logit of row r is d[r + rows (3j + p)] added
// over the pieces p in order. grid (blocks, n), blockDim 256, RT_LT_ROWS
// rows a thread
#define RT_LT_ROWS 4
__global__ void __launch_bounds__(256) k_lt_argmax(const float *d, int64_t rows, unsigned long long *best) {
  RT_TL_START();
  __shared__ unsigned long long wb[8][1];
  rt_trigger();
  rt_wait();
  const int j = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float *d0 = d + (size_t)(3 * j) * rows, *d1 = d0 + rows, *d2 = d1 + rows;
  unsigned long long k = 0;
  const int64_t r0 = (int64_t)blockIdx.x * 256 * RT_LT_ROWS + threadIdx.x;
  float s[RT_LT_ROWS][3];
#pragma unroll
  for (int i = 0; i < RT_LT_ROWS; i++) { // every load first, then the sums
    const int64_t r = r0 + (int64_t)i * 256;
    const bool ok = r < rows;
    s[i][0] = ok ? d0[r] : 0.0f, s[i][1] = ok ? d1[r] : 0.0f, s[i][2] = ok ? d2[r] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < RT_LT_ROWS; i++) {
    const int64_t r = r0 + (int64_t)i * 256;
    if (r >= rows) continue;
    const unsigned long long v = rt_argmax_key(rt_piece_sum<3>(s[i]), (uint32_t)r);
    k = v > k ? v : k;
  }
  k = rt_warp_max_key(k);
  if (lane == 0) wb[warp][0] = k;
  __syncthreads();
  rt_block_best(wb, 1, best + j);
  RT_TL_END();
}

// The GEMM itself: d (rows x 3n floats, a column after another) = W (rows x
// cols BF16, row-major: cuBLASLt's column-major cols x rows, transposed) x b
// (cols x 3n), float32 accumulation. One per token count n (the step
// graph's); built outside graph capture, then captured like the kernels.
void lt_head_destroy(lt_head &h) {
  if (h.op) cublasLtMatmulDescDestroy(h.op);
  if (h.la) cublasLtMatrixLayoutDestroy(h.la);
  if (h.lb) cublasLtMatrixLayoutDestroy(h.lb);
  if (h.lc) cublasLtMatrixLayoutDestroy(h.lc);
  h = lt_head();
}

static cublasStatus_t lt_head_matmul(cublasLtHandle_t lt, const lt_head &h, const cublasLtMatmulAlgo_t &algo,
                                     const void *w, const __nv_bfloat16 *b, float *d, void *ws, size_t wsz,
                                     cudaStream_t s) {
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(lt, h.op, &one, w, h.la, b, h.lb, &zero, d, h.lc, d, h.lc, &algo, ws, wsz, s);
}

// h for n tokens: the descriptors, then the fastest of cuBLASLt's (up to 8)
// heuristic algorithms, each timed on stream s over three runs (the
// heuristic's first was not always the fastest for these shapes:
// tests/bench/lt_bench.cu). false (h off, nothing left allocated) where
// cuBLASLt has no algorithm for the shape or every one fails.
static bool lt_head_build(cublasLtHandle_t lt, lt_head &h, const void *w, int64_t rows, int64_t cols, int n,
                          const __nv_bfloat16 *b, float *d, void *ws, size_t wsz, cudaStream_t s) {
  const cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  if (cublasLtMatmulDescCreate(&h.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&h.la, CUDA_R_16BF, cols, rows, cols) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&h.lb, CUDA_R_16BF, cols, 3 * n, cols) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&h.lc, CUDA_R_32F, rows, 3 * n, rows) != CUBLAS_STATUS_SUCCESS) {
    lt_head_destroy(h);
    return false;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t res[8];
  int got = 0;
  if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(lt, h.op, h.la, h.lb, h.lc, h.lc, pref, 8, res, &got) != CUBLAS_STATUS_SUCCESS)
    got = 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  float best = 1e30f;
  if (got > 0 && cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess)
    for (int i = 0; i < got; i++) {
      if (lt_head_matmul(lt, h, res[i].algo, w, b, d, ws, wsz, s) != CUBLAS_STATUS_SUCCESS) continue;
      bool ok = cudaEventRecord(e0, s) == cudaSuccess;
      for (int r = 0; r < 3 && ok; r++) ok = lt_head_matmul(lt, h, res[i].algo, w, b, d, ws, wsz, s) == CUBLAS_STATUS_SUCCESS;
      float ms = 0;
      if (ok && cudaEventRecord(e1, s) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
          cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best)
        best = ms, h.algo = res[i].algo, h.on = true;
    }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaGetLastError(); // (a failed algorithm's launch error is not the session's)
  if (!h.on) lt_head_destroy(h);
  return h.on;
}

// ---- the head's plan and launch ----

// p.lt for n tokens where it applies: the handle and buffers on first use,
// then lt_head_build. cuBLASLt declining the shape leaves the head on
// k_head_mma (not an error); a failed allocation is one.
enum mtpq_status lt_plan(gpu_session *g, int n, plan &p, struct mtpq_err *err) {
  const dlin &L = g->w.host[L_HEAD];
  if (!g->set.lt_min || n < g->set.lt_min || L.f != LIN_BF16 || !L.w || !g->set.tune.head_mma) return MTPQ_OK; // (head_mma=0: all on k_mv)
  enum mtpq_status st = MTPQ_OK;
  if (!g->lt.h && cublasLtCreate(&g->lt.h) != CUBLAS_STATUS_SUCCESS) {
    g->lt.h = nullptr, g->set.lt_min = 0; // no cuBLASLt: the head stays on k_head_mma
    return MTPQ_OK;
  }
  if (!g->lt.ws) st = dalloc(g, &g->lt.ws, LT_WS, err);
  if (!st && !g->lt.b) st = dzalloc(g, &g->lt.b, (size_t)(L.cols * 3 * RT_NMAX) * 2, err);
  if (!st && !g->lt.d) st = dalloc(g, &g->lt.d, (size_t)(L.rows * 3 * RT_NMAX) * 4, err);
  if (!st) lt_head_build(g->lt.h, p.lt, L.w, L.rows, L.cols, n, g->lt.b, g->lt.d, g->lt.ws, LT_WS, g->st);
  if (!st) CK(cudaStreamSynchronize(g->st));
  return st;
}

// the head of a chain step through cuBLASLt: the GEMM of x's pieces (from
// k_final), the argmax into g->x.best (as k_head_mma leaves it)
void lt_run(gpu_session *g, int n) {
  const dlin &L = g->w.host[L_HEAD];
  lt_head_matmul(g->lt.h, g->plans[n].lt, g->plans[n].lt.algo, L.w, g->lt.b, g->lt.d, g->lt.ws, LT_WS, g->on);
  go(g, true, k_lt_argmax, dim3((unsigned)((L.rows + 256 * RT_LT_ROWS - 1) / (256 * RT_LT_ROWS)), n), dim3(256), 0,
     (const float *)g->lt.d, L.rows, g->x.best);
}

