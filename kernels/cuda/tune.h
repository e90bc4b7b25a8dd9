/* The CUDA backend's settings (plain C: parsed and unit-tested on CPU-only
 * machines too). Two kill switches, each its own environment variable, and
 * one tuning string, read once per process:
 *
 *   MTPQ_CUDA_GRAPHS=0   launch the step's kernels one by one (no CUDA graphs)
 *   MTPQ_CUDA_PDL=0      no programmatic dependent launch (each kernel starts
 *                        after the one before it has finished)
 *   MTPQ_CUDA_TUNE=key=value[,key=value...]
 *
 * The keys select among the backend's own paths: each one is a fallback the
 * backend takes by itself for some shapes, and the key lets the gpu tests
 * (tests/check_gpu_runtime.c, its table runs every key) and a person
 * diagnosing a wrong result force it on any shape. Defaults are the
 * measured choices (tests/bench/LEDGER.md has the numbers: graphs and PDL
 * 25, head_mma 14, dmma 13, glu 23, lt 2, attn_ring and attn_x 12, kv_ef 18, mvs 62, tattn 70, dmv 71).
 *
 *   head_mma=0|1     1: the FP8/BF16 head on tensor cores where the shape
 *                    allows (k_head_dyn, k_head_mma); 0: the FFMA head (k_mv)
 *   dmma=0|1         1: plain dense products at 2..8 tokens on tensor cores
 *                    (k_dmma); 0: k_mv
 *   glu=0|1          1: the routed experts' gate/up (and, in the target, the
 *                    shared expert's) as row-pair matrices with SwiGLU in the
 *                    product; 0: separate, then k_swiglu (k_t_swiglu)
 *   lt=0..8          the stock BF16 head through cuBLASLt from this many
 *                    tokens a step (default 5; 0: never)
 *   attn_ring=0|2    2: the attention's ring blocks, several splits each
 *                    (where their shared memory fits); 0: a block a split
 *   attn_x=0..65536  ring blocks per (KV head, token); 0 (default): a wave
 *   kv_ef=-1|0|1     cached K/V copied evict-first: -1 (default) past half
 *                    of L2, 0 never, 1 always
 *   mvs=-1|0|1       one-token NVFP4 products (the experts' gate/up, and the
 *                    target's down from two tokens on) on the streamed
 *                    kernel (k_mvs): -1 (default) where k_mv would take more
 *                    than one wave, 0 never, 1 wherever it applies
 *   dmv=0|1          1: plain dense products at 2..8 tokens whose k_dmma
 *                    clusters would cover under half the SMs (the router)
 *                    a warp a row (k_dmv, ledger 71: not yet measured); 0
 *                    (default): k_dmma
 *   tattn=0|1        1: the target's attention splits on the tensor cores,
 *                    a block a group of tokens (k_t_attn_mma, ledger 70:
 *                    not yet measured); 0 (default): a block a token
 *   tattn_slots=0..65536  with tattn=1, the block slots its splits fill
 *                    once: 0 (default) the GPU's; a few make long splits,
 *                    each a block's walk of many steps (tests: its ring of
 *                    stages refilled)
 *
 * An unknown key, a missing '=', or a value that is not an integer in its
 * range is refused with a message naming it; the description of what is in
 * force is printed by bench-step and bench-acceptance under -v.
 */
#ifndef MTPQ_KERNELS_CUDA_TUNE_H
#define MTPQ_KERNELS_CUDA_TUNE_H

#include <stddef.h>

#include "io/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mtpq_cuda_tune {
  int graphs, pdl;                        /* kill switches: 1 on (default), 0 off */
  int head_mma, dmma, glu, lt;            /* tuning keys, see above */
  int attn_ring, attn_x, kv_ef;
  int mvs;
  int tattn, tattn_slots;
  int dmv;
};

/* The defaults. */
struct mtpq_cuda_tune mtpq_cuda_tune_default(void);
/* Parse the three values (NULL: unset) into t. */
enum mtpq_status mtpq_cuda_tune_parse(const char *graphs, const char *pdl, const char *tune,
                                      struct mtpq_cuda_tune *t, struct mtpq_err *err);
/* The process's settings: the environment parsed once; the same status and
 * message on every call. */
enum mtpq_status mtpq_cuda_tune_get(struct mtpq_cuda_tune *t, struct mtpq_err *err);
/* Replace the process's settings with these values (NULL: unset) for the
 * sessions opened after it; not thread-safe: for tests, which run every
 * setting in one process (tests/check_gpu_runtime.c). */
enum mtpq_status mtpq_cuda_tune_override(const char *graphs, const char *pdl, const char *tune,
                                         struct mtpq_err *err);
/* "graphs on, pdl on, tune: head_mma=1 dmma=1 ..." (what differs from the
 * defaults marked with '*') */
void mtpq_cuda_tune_describe(const struct mtpq_cuda_tune *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
