// HBM read bandwidth, measured the way the runtime's kernels read weights
// (16-byte streaming loads, evict-first), so bench-step's "% of HBM" is
// against what this device really delivers rather than a datasheet.
#include <cuda_runtime.h>

#include "kernels/rt_sweep.cuh"

extern "C" {
#include "kernels/runtime.h"
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
