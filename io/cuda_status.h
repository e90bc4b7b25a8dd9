/* CUDA errors as mtpq statuses: the one check the project's CUDA code uses
 * (the GPU quantizer in quant/, the runtime's backend in kernels/cuda/).
 * Only .cu files include it (it needs cuda_runtime.h's types). */
#ifndef MTPQ_IO_CUDA_STATUS_H
#define MTPQ_IO_CUDA_STATUS_H

#include "io/status.h"

/* Evaluate stmt (a cudaError_t); on failure return MTPQ_E_GPU from the
 * enclosing function with err naming the file, line, statement and error. */
#define MTPQ_CUDA_TRY(stmt, err)                                                                                \
  do {                                                                                                         \
    cudaError_t e_ = (stmt);                                                                                   \
    if (e_ != cudaSuccess)                                                                                     \
      return mtpq_err_set(err, MTPQ_E_GPU, "%s:%d: %s: %s", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
  } while (0)

#endif
