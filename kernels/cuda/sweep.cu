// One grid-stride read of a device buffer, run two ways: the HBM read
// bandwidth bench-step's floor uses (16-byte evict-first loads, as the
// runtime streams its weights, so "% of HBM" is against what this device
// delivers) and the L2 flush before bench-step's timed calls (ordinary
// loads, which replace what L2 holds).
#include "kernels/cuda/backend.cuh"

// n 16-byte words at p. EF: evict-first (__ldcs), as the runtime streams its
// weights; else ordinary loads, which replace what L2 holds. The store into
// sink never happens in practice; it keeps the loads.
template <bool EF> static __global__ void k_sweep(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = EF ? __ldcs(p + i) : p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

extern "C" enum mtpq_status mtpq_gpu_read_gbps(double *gbps, struct mtpq_err *err) {
  *gbps = 0;
  const size_t bytes = (size_t)4 << 30, n = bytes / 16;
  void *buf = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaMalloc(&buf, bytes + 64) != cudaSuccess)
    return mtpq_err_set(err, MTPQ_E_GPU, "cannot allocate 4 GiB to measure the read bandwidth");
  cudaMemset(buf, 1, bytes + 64);
  cudaEventCreate(&a), cudaEventCreate(&b);
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float best = 1e30f;
  for (int i = 0; i < 6; i++) { // the first pass warms up
    cudaEventRecord(a);
    k_sweep<true><<<sms * 8, 256>>>(static_cast<const uint4 *>(buf), n,
                                    reinterpret_cast<unsigned *>((char *)buf + bytes));
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i > 0 && ms < best) best = ms;
  }
  cudaError_t e = cudaGetLastError();
  cudaEventDestroy(a), cudaEventDestroy(b);
  cudaFree(buf);
  if (e != cudaSuccess) return mtpq_err_set(err, MTPQ_E_GPU, "read-bandwidth kernel: %s", cudaGetErrorString(e));
  *gbps = (double)bytes / (best * 1e-3) / 1e9;
  return MTPQ_OK;
}

// Ordinary loads (k_sweep<false>) over a buffer four times the L2's size:
// what the draft calls before left in L2 is gone, as after the target's
// verify step between two calls in a real decode
enum mtpq_status sweep_flush_l2(gpu_session *g, struct mtpq_err *err) {
  const size_t bytes = (size_t)(g->l2 > 0 ? g->l2 : 64 << 20) * 4;
  if (!g->flush_buf) {
    void *b = nullptr;
    if (cudaMalloc(&b, bytes + 64) != cudaSuccess || cudaMemset(b, 0, bytes + 64) != cudaSuccess) {
      cudaGetLastError();
      if (b) cudaFree(b);
      return mtpq_err_set(err, MTPQ_E_GPU, "cannot allocate %zu MB to flush the L2", bytes >> 20);
    }
    g->flush_buf = static_cast<uint4 *>(b);
  }
  k_sweep<false><<<g->sms * 4, 256, 0, g->st>>>(g->flush_buf, bytes / 16,
                                                reinterpret_cast<unsigned *>(g->flush_buf + bytes / 16));
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaStreamSynchronize(g->st);
  if (e != cudaSuccess) return mtpq_err_set(err, MTPQ_E_GPU, "L2 flush: %s", cudaGetErrorString(e));
  return MTPQ_OK;
}

