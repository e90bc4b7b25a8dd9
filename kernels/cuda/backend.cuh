// The CUDA backend's host side, shared by its files (kernels/cuda/*.cu): the
// session (weights, activations, caches, staging, settings, profiling),
// the launch plans of each token count, the launch helpers, and the
// launchers each kernel family defines.
//
// One draft step for n tokens (1..8: slots of one sequence, or a token of
// each of up to 8 sequences), kernel by kernel, as enqueue_step launches it
// (step.cu) and the file that defines it:
//   k_prep          embedding row + the two pre-fc norms, argmax key cleared  k_ops.cu
//   fc              launch_mv: k_mv / k_dmma                                  k_mv.cu, k_dmma.cu
//   k_norm          input norm                                                k_ops.cu
//   q, k, v         launch_mv (one launch, three tasks)                       k_mv.cu, k_dmma.cu
//   k_attn          q/k norm + RoPE, K/V to the cache, split attention        k_attn.cu
//   k_attn_combine  the splits merged, the output gate                        k_attn.cu
//   o               launch_mv                                                 k_mv.cu, k_dmma.cu
//   k_add_norm      residual + post-attention norm                            k_ops.cu
//   shared expert   gate/up, k_swiglu, down on a second stream                k_mv.cu, k_ops.cu
//   router          launch_mv (router + shared expert gate)                   k_mv.cu, k_dmma.cu
//   k_route         softmax + top-k + weights                                 k_ops.cu
//   experts gate/up launch_mv, routed row pairs with SwiGLU                   k_mv.cu
//   experts down    launch_mv, the routed experts' weighted sum               k_mv.cu
//   k_final         residual + final norm (+ the cuBLASLt head's x pieces)    k_ops.cu
// and in a draft chain after each step:
//   head            k_head_dyn / k_head_mma / k_mv fused with the argmax, or
//                   cuBLASLt + k_lt_argmax (stock BF16 head at 5..8 tokens)  k_head.cu, k_mv.cu, k_lt.cu
//   k_next          argmax -> next token ids, positions + 1, drafts recorded  k_ops.cu
// Sessions (open, upload, close) are in session.cu, the plans (task lists,
// the product dispatch launch_mv) in plan.cu, the step, its CUDA graphs and
// the backend's entry points in step.cu, the HBM read and the L2 flush in
// sweep.cu, the settings in tune.c.
//
// The backend runs the model of kernels/runtime.h on the device for 1..8 tokens per launch (slots of one
// sequence, or one token of each of up to 8 sequences), in float32 like the
// CPU reference. Kernels: kernels/rt_mv.cuh (matrix-vector products that
// dequantize BF16/FP8/NVFP4 on the fly, experts chosen on the device, the
// head fused with the argmax) and kernels/rt_ops.cuh (norms, RoPE,
// split-context attention, routing, SwiGLU). One draft step is captured as
// a CUDA graph per token count (MTPQ_CUDA_GRAPHS=0 launches the kernels one
// by one instead); a draft chain replays step + head + feedback k times and
// synchronises once. Consecutive kernels overlap by programmatic dependent
// launch (each waits in rt_wait for its predecessor's results), and the
// shared expert runs on a second stream beside the routed experts. Measured
// effect of each: tests/bench/RESULTS.md.
//
// Why a chain of kernels and not one persistent kernel: on the H200 every
// synchronisation through memory (grid barrier, flag counter) cost at
// least what a kernel boundary under programmatic dependent launch does
// (~1.5 us), and 3-6 us while weights stream, since its polls and the input
// read after it queue behind the SM's weight traffic; persistent forms of
// the step's bytes and dependencies (register prefetch, a shared-memory
// ring fed by the copy engine, L2 prefetch) all measured slower than the
// same chain of kernels (tests/bench/chain_floor.cu; RESULTS.md, fourteenth
// round).
//
// cuBLASLt takes one product: the stock drafter's BF16 head at 5..8 tokens
// (kernels/rt_lt.cuh), where it beat k_head_mma in the step. Its FP8 path
// would round the float32 activations to FP8 (the numerics contract keeps
// them float32) and it has no NVFP4-weight product on Hopper, so mtpq's
// drafter stays on the kernels here; for the shorter BF16 products see
// LT_MIN_DEFAULT. Measured, kernel against kernel, by tests/bench/lt_bench.cu
// (RESULTS.md, thirtieth round).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "io/cuda_status.h"
#include "kernels/cuda/tune.h"
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"
}
#include "kernels/cuda/dev.cuh"

// CK(stmt): the project's CUDA error check (io/cuda_status.h) in a function
// with a struct mtpq_err *err in scope
#define CK(stmt) MTPQ_CUDA_TRY(stmt, err)

#define RT_MAXSTEPS 64

// The stock drafter's BF16 head through cuBLASLt (kernels/rt_lt.cuh: why)
// at LT_MIN_DEFAULT tokens a step and more, where cuBLASLt's kernels beat
// k_head_mma in the step (H200, 4K: tests/bench/RESULTS.md, thirtieth
// round). The FP8 and NVFP4 products have no cuBLASLt form that keeps x in
// float32 (FP8 GEMMs take FP8 activations only). The BF16 dense products
// before the head (stock's fc, q/k/v, o, shared expert; both drafters'
// router) were faster through cuBLASLt in isolation at 8 tokens too
// (lt_bench), but each would need its pieces before and a pass adding its
// piece columns after, on the step's critical path: not done.
#define LT_MIN_DEFAULT 5
#define LT_WS ((size_t)32 << 20)

// byte offsets in the staging block: token ids, sequences, positions (RT_NMAX
// each), the draft step counter, then the hidden states (g->out)
enum { ST_TOK = 0, ST_SEQ = 32, ST_POS = 64, ST_STEP = 128, ST_HID = 256 };

enum { L_FC, L_Q, L_K, L_V, L_O, L_ROUTER, L_SEG, L_SG, L_SU, L_SD, L_HEAD, L_EXPERTS };

// The stock drafter's BF16 head through cuBLASLt (k_lt.cu): one GEMM per
// token count n, built outside graph capture, then captured like the kernels.
struct lt_head {
  bool on = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo;
};

struct mv_launch {
  mv_task *dev = nullptr;
  int ntask = 0, nbmax = 0, fmt = -1; // fmt: the terms' format, 3 when mixed
  bool glu = false;                   // gate/up row pairs: the launch needs an even number of rows per warp
  bool best = false;                  // the head: argmax keys
  int groups = 0;                     // the fewest (term, 512-column band) groups of a task's row
  int64_t rows = 0, cols = 0; // the most rows of any task: the grid covers them; cols: task 0's
  int fl = 0;                 // k_mv's RT_MV_* flags
  bool plain = false;         // every task one unrouted term, plain y, all of one cols: k_dmma may take it
  std::vector<int64_t> trows; // rows of each task
};

struct plan {
  bool built = false;
  mv_launch fc, qkv, o, rs, gu, gus, down, downs, head, head_logits; // gus/downs: the shared expert
  lt_head lt;                                                         // the head through cuBLASLt, where on
  cudaGraphExec_t step = nullptr, chain = nullptr;
};

struct gpu_session {
  const struct mtpq_rt_model *d;
  int64_t max_pos;
  int window, nseq, cur, nsplit, K, fast, sms;
  mtpq_cuda_tune tune;    // the kill switches and MTPQ_CUDA_TUNE (kernels/cuda/tune.h)
  int pdl;                // programmatic dependent launch now (tune.pdl, off for one launch after a memset)
  int glu;                // routed experts' gate/up as row-pair matrices, SwiGLU in their product
  int lt_min;             // a BF16 head through cuBLASLt from this many tokens a step (0: never)
  cublasLtHandle_t lt = nullptr;
  void *lt_ws = nullptr;               // its workspace (LT_WS bytes)
  __nv_bfloat16 *lt_b = nullptr;       // x's pieces, cols x 3 RT_NMAX
  float *lt_d = nullptr;               // the GEMM's output, head rows x 3 RT_NMAX
  unsigned *hq = nullptr; // k_head_dyn's counters (tickets, blocks done), 0 between launches
  bool comb4;             // k_attn_combine<4> (more than 256 partials a head)
  int attn_x;             // k_attn's ring where its shared memory fits: its blocks per (KV head, token); 0: a
                          // block per split
  int attn_per;           // ring blocks an SM
  int64_t kv_ef_pos;      // k_attn copies the cached K/V evict-first past this many positions a launch
  int64_t IM; // expert / shared / dense intermediate slot width
  cudaStream_t st = nullptr, st2 = nullptr; // st2: the shared expert, beside the routed ones
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaStream_t on = nullptr; // the stream go() launches on: st, or st2 for the shared expert
  std::vector<void *> allocs;
  std::vector<dlin> host_lins;
  dlin *lins;
  float *nrm[7];
  const uint8_t *embed;
  int64_t *ids;
  uint16_t *kc, *vc; // the K/V caches, BF16 bits
  float *out, *c, *x0, *a, *qg, *kk, *vv, *att, *y, *y2, *m, *m2, *pr, *z, *gb, *ub, *act, *po, *pm, *pl, *logits;
  int *sel, *tok, *seqa, *rec, *stepc;
  float2 *rcs; // RoPE cos, sin per position and rotated pair (computed on the host, as the CPU backend does)
  float *wsel;
  int64_t *pos;
  unsigned long long *best;
  // pinned staging
  int *h_tok, *h_seq, *h_rec;
  int64_t *h_pos;
  float *h_hid;
  unsigned long long *h_best;
  // One block holds a call's inputs (ST_* layout), on the device and pinned on
  // the host, so staging them is one copy
  uint8_t *stage_d = nullptr, *stage_h = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr; // around a draft call's steps (mtpq__cuda_draft_device_us)
  double draft_us = -1;
  int l2 = 0;                 // the device's L2 bytes
  uint4 *flush_buf = nullptr; // mtpq__cuda_flush_l2's buffer (4 x L2), allocated at its first call
  plan plans[RT_NMAX + 1];
  // profiling (mtpq__cuda_profile): an event after every kernel of a step
  bool prof = false;
  std::vector<cudaEvent_t> ev;
  std::vector<const char *> evname;
};

static inline void mark(gpu_session *g, const char *name) {
  if (!g->prof || g->evname.size() >= g->ev.size()) return;
  cudaEventRecord(g->ev[g->evname.size()], g->st);
  g->evname.push_back(name);
}

// Launch on the session's stream; with pdl (and the session's switch on) the
// kernel may start while the one before it finishes (it waits in rt_wait).
// go_cl launches with thread-block clusters of cl blocks along x (cl > 1,
// k_dmma's slices); go is go_cl without clusters.
template <typename... KA, typename... A>
static void go_cl(gpu_session *g, bool pdl, unsigned cl, void (*k)(KA...), dim3 grid, dim3 block, size_t smem,
                  A... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[2];
  unsigned na = 0;
  if (pdl && g->pdl && !g->prof) {
    at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[na++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cl > 1) {
    at[na].id = cudaLaunchAttributeClusterDimension;
    at[na].val.clusterDim.x = cl, at[na].val.clusterDim.y = 1, at[na++].val.clusterDim.z = 1;
  }
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = g->on;
  cfg.attrs = at, cfg.numAttrs = na;
  cudaLaunchKernelEx(&cfg, k, static_cast<KA>(args)...);
}

template <typename... KA, typename... A>
static void go(gpu_session *g, bool pdl, void (*k)(KA...), dim3 grid, dim3 block, size_t smem, A... args) {
  go_cl(g, pdl, 1, k, grid, block, smem, args...);
}

template <typename T>
static enum mtpq_status dalloc(gpu_session *g, T **p, size_t n, struct mtpq_err *err) {
  void *v = nullptr;
  CK(cudaMalloc(&v, n ? n : 16));
  g->allocs.push_back(v);
  *p = static_cast<T *>(v);
  return MTPQ_OK;
}

// dalloc, zeroed
template <typename T>
static enum mtpq_status dzalloc(gpu_session *g, T **p, size_t n, struct mtpq_err *err) {
  enum mtpq_status st = dalloc(g, p, n, err);
  if (!st && cudaMemset(*p, 0, n) != cudaSuccess) st = mtpq_err_set(err, MTPQ_E_GPU, "cudaMemset failed");
  return st;
}

// Blocks of one k_mv variant that fit on the device at once: the grid is
// capped there and the blocks loop over rows (a persistent grid), so the
// per-block set-up (task, weight table, routed expert) is paid once per
// block rather than once per 32 rows. A wave fills the SM's registers
// (~120 a thread, 2 blocks), so the next launch's blocks become resident
// only as these leave; leaving room measured slower both ways tried on the
// H200 (4K batch 1, mtpq 137.5 us): at most 1 block per SM, the rest
// looping, 145.4; the one- and two-token instances held to 80 registers
// (3 a SM), spilling, 155.0 (tests/bench/RESULTS.md, thirteenth round).
template <typename K> static inline int resident(K kernel) {
  int dev = 0, sms = 0, per = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, 256, 0);
  return (sms > 0 ? sms : 132) * (per > 0 ? per : 1);
}

// A flat grid of the launch's tasks (m.ntask <= RT_FLAT) at rb rows a block:
// task t's blocks from off[t], n = m.ntask
static inline mv_flat flat_grid(const mv_launch &m, int64_t rb) {
  mv_flat fg = {};
  int64_t tot = 0;
  for (int t = 0; t < m.ntask; t++) fg.off[t] = (int)tot, tot += (m.trows[t] + rb - 1) / rb;
  fg.off[m.ntask] = (int)tot, fg.n = m.ntask;
  return fg;
}

// Tasks of unequal rows that fit one wave at their own block counts run as a
// flat grid (mv_flat: q/k/v, the router with the shared expert's gate), the
// rest as (row blocks of the largest task, tasks). MTPQ_CUDA_FLAT=0: never flat.

// the token slots a launch is compiled for (the NB of k_mv and k_head_mma): 1, 2, 4 or 8
static inline int nb_slots(int nbmax) { return nbmax <= 1 ? 1 : nbmax <= 2 ? 2 : nbmax <= 4 ? 4 : 8; }

// the pieces x takes in an MMA product of format f (1 FP8, 0 BF16) at NB
// token slots: two f16 pieces for FP8 at 8 (16 MMA columns, not 24: one
// n-tile fewer; rt_split_p), else three. H200, 4K batch 8: mtpq 265.1 ->
// 243.4 / 243.6 us a step; at 4 (12 -> 8 columns) 177.7 -> 177.1, no
// gain, so three stay there (tests/bench/RESULTS.md, twenty-ninth round)
static inline int mma_pieces(const gpu_session *g, int f, int NB) { return f == 1 && NB == 8 ? 2 : 3; }


// ---- the families' launchers ----

// session.cu
enum mtpq_status upload(gpu_session *g, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err);
// plan.cu: the plans of n tokens; a product launch (head, dense, routed) on the kernel that takes it
enum mtpq_status build_plan(gpu_session *g, int n, struct mtpq_err *err);
void launch_mv(gpu_session *g, const mv_launch &m);
// k_mv.cu: any product on the FFMA kernels
void mv_ffma_launch(gpu_session *g, const mv_launch &m);
// k_head.cu, k_dmma.cu: false where the launch does not fit them
bool head_mma_launch(gpu_session *g, const mv_launch &m);
bool dmma_launch(gpu_session *g, const mv_launch &m);
// k_lt.cu
enum mtpq_status lt_plan(gpu_session *g, int n, plan &p, struct mtpq_err *err);
void lt_run(gpu_session *g, int n);
void lt_head_destroy(lt_head &h);
// k_attn.cu: shared memory and the ring's grid (session open); the attention of a step
enum mtpq_status attn_setup(gpu_session *g, int dev, struct mtpq_err *err);
void attn_launch(gpu_session *g, int n);
// k_ops.cu
void ops_prep(gpu_session *g, int n);
void ops_norm(gpu_session *g, int n);
void ops_add_norm(gpu_session *g, int n);
void ops_swiglu(gpu_session *g, int n, int slot0, int nslot, int blocks);
void ops_route(gpu_session *g, int n);
void ops_final(gpu_session *g, int n, bool pdl, __nv_bfloat16 *pieces);
void ops_next(gpu_session *g, int n);
// sweep.cu
enum mtpq_status sweep_flush_l2(gpu_session *g, struct mtpq_err *err);
#ifdef MTPQ_TIMELINE
// session.cu: the timeline's count zeroed before a draft call, its records written after
void tl_reset(gpu_session *g);
void tl_write(void);
#endif
