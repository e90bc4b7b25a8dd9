// Where would cuBLASLt win in the draft step? (issue 7 asks for "cuBLASLt
// where it wins (say where and why)".) Stand-alone (no mtpq code): for each
// dense product of the 80B-shaped drafters (rows x cols; the routed experts
// are NVFP4, which cuBLASLt has no kernel for on Hopper) and 1, 2, 4 and 8
// tokens, it times cublasLtMatmul (the best of up to 8 heuristic
// algorithms) with the weights cold in L2, and a kernel that only streams
// the same bytes (the product's own floor as one kernel), and prints a table.
// Modes:
//   bf16x3  BF16 weights, x as three BF16 pieces (3N columns: every product
//           exact, float32 sums), the only cuBLASLt form that keeps the
//           runtime's numerics contract (float32 activations)
//   bf16    BF16 weights, x rounded to BF16 (N columns): breaks the contract,
//           speed reference
//   fp8     E4M3 weights, x rounded to E4M3 (FP8 needs both operands FP8;
//           N columns, padded to 16 where cuBLASLt asks): breaks the
//           contract, speed reference
// Built and run on the GPU machine:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/lt_bench tests/bench/lt_bench.cu -lcublasLt
//   /tmp/lt_bench            the table (us a product: CUDA events around a
//                            graph of reps launches cycling weight copies of
//                            >= 160 MB, so cold in L2)
//   LT_MARK=1 under ncu --profile-from-start off: the best algorithm of each
//   row again, twice, between marker kernels whose grid size is the row's
//   number (tests/bench/device_lt.sh parses the kernels' own durations).
#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_stream.cuh"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

static __global__ void k_fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = (uint8_t)(h & 0x3F) | (uint8_t)(h >> 24 & 0x80); // |v| <= 4 in BF16, <= 1.875 in E4M3: no NaN, no Inf
  }
}

// the bytes alone (bench_stream.cuh)
static __global__ void k_stream(const uint4 *p, int64_t n, unsigned *sink) {
  if (stream(p, n) == 0x9E3779B9u) *sink = 0x9E3779B9u;
}

static __global__ void k_mark() {} // its grid size names the row (LT_MARK)

struct product {
  const char *drafter, *name;
  int64_t rows, cols;
  bool fp8; // mtpq's FP8 weights; else BF16
};

// the 80B shape (tests/gen_fixture's defaults): hidden 2,048; q/k/v of 16
// query heads (with their gates) and 2 KV heads of 256; the shared expert's
// 512; mtpq's head of 98,304 rows, stock's of 151,936; the router stays BF16
static const product kProducts[] = {
    {"stock", "fc", 2048, 4096, false},          {"stock", "q/k/v", 9216, 2048, false},
    {"stock", "o", 2048, 4096, false},           {"both", "router", 512, 2048, false},
    {"stock", "shared gate/up", 1024, 2048, false}, {"stock", "shared down", 2048, 512, false},
    {"stock", "head", 151936, 2048, false},      {"mtpq", "fc", 2048, 4096, true},
    {"mtpq", "q/k/v", 9216, 2048, true},         {"mtpq", "o", 2048, 4096, true},
    {"mtpq", "shared gate/up", 1024, 2048, true}, {"mtpq", "shared down", 2048, 512, true},
    {"mtpq", "head", 98304, 2048, true},
};

struct lt_case {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  void destroy() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
  }
};

// D (rows x n, column-major: token j's outputs contiguous) = W x X, W
// row-major rows x cols (= column-major cols x rows, transposed: the "TN"
// form FP8 requires), X column-major cols x n
static bool lt_setup(cublasLtHandle_t lt, const product &p, cudaDataType_t ab, cudaDataType_t cd, int64_t n,
                     size_t ws, lt_case &c) {
  if (cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn);
  if (cublasLtMatrixLayoutCreate(&c.la, ab, p.cols, p.rows, p.cols) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&c.lb, ab, p.cols, n, p.cols) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&c.lc, cd, p.rows, n, p.rows) != CUBLAS_STATUS_SUCCESS)
    return false;
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t r[8];
  int got = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, c.op, c.la, c.lb, c.lc, c.lc, pref, 8, r, &got);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || got == 0) return false;
  c.algos.assign(r, r + got);
  return true;
}

int main() {
  const bool mark = getenv("LT_MARK") && atoi(getenv("LT_MARK"));
  int sms = 132;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return fprintf(stderr, "cublasLtCreate failed\n"), 1;
  printf("# %s, %d SMs, cuBLASLt %zu; us a product, weights cold in L2\n", prop.name, sms, cublasLtGetVersion());
  const size_t ws_bytes = (size_t)32 << 20, cold = (size_t)160 << 20;
  void *ws, *xb, *db;
  unsigned *sink;
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMalloc(&xb, (size_t)4 << 20)); // x: up to 2,048 x 48 columns of BF16
  CK(cudaMalloc(&db, (size_t)64 << 20)); // D: up to 151,936 x 48 float32
  CK(cudaMalloc(&sink, 16));
  k_fill<<<sms * 4, 256>>>((uint8_t *)xb, (size_t)4 << 20, 7u);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // us per launch of reps launches captured as one CUDA graph (so the host's
  // launch cost of a cublasLtMatmul call is not in the time), the graph run
  // once before; 1e30 where a launch failed
  auto time_graph = [&](auto launch, int reps) -> double {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    bool ok = true;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < reps; r++) ok &= launch(r);
    CK(cudaStreamEndCapture(s, &g));
    if (!ok || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
      cudaGetLastError();
      cudaGraphDestroy(g);
      return 1e30;
    }
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms * 1e3 / reps;
  };
  printf("%-6s %-15s %7s %6s %-7s %3s %4s %8s %9s %9s %7s %s\n", "row", "product", "rows", "cols", "mode", "N", "n",
         "MB", "stream us", "lt us", "lt/str", "algo");
  int row = 0;
  for (const product &p : kProducts) {
    const size_t wb = (size_t)(p.rows * p.cols * (p.fp8 ? 1 : 2));
    const int copies = (int)std::max<size_t>(1, (cold + wb - 1) / wb);
    uint8_t *w;
    CK(cudaMalloc(&w, wb * copies));
    k_fill<<<sms * 8, 256>>>(w, wb * copies, 1234u + row);
    CK(cudaDeviceSynchronize());
    // the stream reference: same bytes, same copies cycled
    auto time_stream = [&](int reps) {
      return time_graph([&](int r) {
        k_stream<<<sms * 4, 256, 0, s>>>(reinterpret_cast<const uint4 *>(w + (size_t)(r % copies) * wb),
                                         (int64_t)(wb / 16), sink);
        return true;
      }, reps);
    };
    const int reps = std::max(8, copies * 2);
    const double st_us = time_stream(reps);
    const char *modes[] = {"bf16x3", "bf16", "fp8"};
    for (const char *mode : modes) {
      const bool m8 = !strcmp(mode, "fp8");
      if (m8 != p.fp8) continue; // BF16 weights take the BF16 modes, FP8 weights fp8
      for (int N : {1, 2, 4, 8}) {
        int64_t n = !strcmp(mode, "bf16x3") ? 3 * N : N;
        lt_case c;
        const cudaDataType_t ab = m8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
        cudaDataType_t cd = CUDA_R_32F;
        bool ok = lt_setup(lt, p, ab, cd, n, ws_bytes, c);
        if (!ok && m8) { // FP8 with BF16 output, then N padded to 16
          c.destroy(), c = lt_case();
          cd = CUDA_R_16BF;
          ok = lt_setup(lt, p, ab, cd, n, ws_bytes, c);
          if (!ok) c.destroy(), c = lt_case(), n = 16, ok = lt_setup(lt, p, ab, cd, n, ws_bytes, c);
        }
        ++row;
        if (!ok) {
          printf("%-6d %-15s %7lld %6lld %-7s %3d %4lld   (no cuBLASLt algorithm)\n", row, p.name,
                 (long long)p.rows, (long long)p.cols, mode, N, (long long)n);
          c.destroy();
          continue;
        }
        const float one = 1.0f, zero = 0.0f;
        auto run = [&](const cublasLtMatmulAlgo_t *a, int r) {
          return cublasLtMatmul(lt, c.op, &one, w + (size_t)(r % copies) * wb, c.la, xb, c.lb, &zero, db, c.lc, db,
                                c.lc, a, ws, ws_bytes, s);
        };
        double best = 1e30;
        int best_i = -1;
        for (size_t i = 0; i < c.algos.size(); i++) {
          if (run(&c.algos[i].algo, 0) != CUBLAS_STATUS_SUCCESS) continue;
          CK(cudaStreamSynchronize(s));
          const double us = time_graph([&](int r) { return run(&c.algos[i].algo, r) == CUBLAS_STATUS_SUCCESS; }, reps);
          if (us < best) best = us, best_i = (int)i;
        }
        CK(cudaGetLastError());
        if (best_i < 0) {
          printf("%-6d %-15s %7lld %6lld %-7s %3d %4lld   (every algorithm failed)\n", row, p.name,
                 (long long)p.rows, (long long)p.cols, mode, N, (long long)n);
          c.destroy();
          continue;
        }
        int algo_id = 0;
        size_t sz = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&c.algos[best_i].algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &sz);
        printf("%-6d %-15s %7lld %6lld %-7s %3d %4lld %8.2f %9.1f %9.1f %7.2f %d%s (%s)\n", row, p.name,
               (long long)p.rows, (long long)p.cols, mode, N, (long long)n, wb / 1e6, st_us, best, best / st_us,
               algo_id, cd == CUDA_R_16BF ? " bf16 out" : "", p.drafter);
        fflush(stdout);
        if (mark) { // the kernels' own durations under ncu: marker (grid = 2 * row), product twice, marker (+1), stream twice
          cudaProfilerStart();
          k_mark<<<2 * row, 32, 0, s>>>();
          run(&c.algos[best_i].algo, 1), run(&c.algos[best_i].algo, 2);
          k_mark<<<2 * row + 1, 32, 0, s>>>();
          for (int r = 1; r <= 2; r++)
            k_stream<<<sms * 4, 256, 0, s>>>(reinterpret_cast<const uint4 *>(w + (size_t)(r % copies) * wb),
                                             (int64_t)(wb / 16), sink);
          CK(cudaStreamSynchronize(s));
          cudaProfilerStop();
        }
        c.destroy();
      }
    }
    CK(cudaFree(w));
  }
  cublasLtDestroy(lt);
  return 0;
}
