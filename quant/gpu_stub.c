/* CPU-only build of the GPU quantizer: the entry points of quant/gpu_quant.h
 * exist and say why they cannot run. */
#ifndef MTPQ_HAVE_CUDA
#include "quant/gpu_quant.h"

int mtpq_gpu_available(struct mtpq_err *err) {
  mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA (MTPQ_CUDA=OFF or no nvcc)");
  return 0;
}

const char *mtpq_gpu_name(void) { return ""; }

enum mtpq_status mtpq_gpu_quantize(enum mtpq_format fmt, const void *bf16, int64_t rows,
                                   int64_t cols, const struct mtpq_quant_opts *o,
                                   struct mtpq_qtensor *out, struct mtpq_err *err) {
  (void)fmt, (void)bf16, (void)rows, (void)cols, (void)o, (void)out;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}

enum mtpq_status mtpq_gpu_quant_bench(enum mtpq_format fmt, const void *bf16, int64_t rows,
                                      int64_t cols, const struct mtpq_quant_opts *o, int iters,
                                      struct mtpq_gpu_bench *t, struct mtpq_err *err) {
  (void)fmt, (void)bf16, (void)rows, (void)cols, (void)o, (void)iters, (void)t;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
#else
typedef int mtpq_gpu_stub_unused; /* ISO C forbids an empty translation unit */
#endif
