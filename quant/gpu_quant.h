/* CUDA quantization kernels behind a pure C interface (no CUDA types), so
 * cli/ and the tests compile without nvcc. Without a CUDA build every call
 * returns MTPQ_E_NO_GPU.
 *
 * The kernels run the arithmetic of quant/numerics.h, the same inline
 * functions as the C reference, compiled without FMA contraction; their
 * bytes equal the reference's (tests/check_gpu.c proves it on the device).
 */
#ifndef MTPQ_QUANT_GPU_QUANT_H
#define MTPQ_QUANT_GPU_QUANT_H

#include "quant/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if mtpq was built with CUDA and a device is usable; else 0 and, when
 * err is given, the reason. */
int mtpq_gpu_available(struct mtpq_err *err);
/* Name of device 0 ("NVIDIA H200"), or "" without a device. */
const char *mtpq_gpu_name(void);

/* Same contract as mtpq_quantize() for formats with has_gpu set: copies the
 * host input to the device, runs the kernels, copies the result back. */
enum mtpq_status mtpq_gpu_quantize(enum mtpq_format fmt, const void *bf16, int64_t rows,
                                   int64_t cols, const struct mtpq_quant_opts *o,
                                   struct mtpq_qtensor *out, struct mtpq_err *err);

/* Benchmark times in seconds (median of `iters` runs after warm-up, CUDA
 * events), input resident on the device:
 *   full:  amax pass + quantization (what mtpq_gpu_quantize runs)
 *   amax:  the amax pass alone
 *   quant: quantization with the amax given (group amax)
 *   copy:  a device-to-device copy of the input (bandwidth reference) */
struct mtpq_gpu_bench {
  double full, amax, quant, copy;
};
enum mtpq_status mtpq_gpu_quant_bench(enum mtpq_format fmt, const void *bf16, int64_t rows,
                                      int64_t cols, const struct mtpq_quant_opts *o, int iters,
                                      struct mtpq_gpu_bench *t, struct mtpq_err *err);

#ifdef __cplusplus
}
#endif
#endif
