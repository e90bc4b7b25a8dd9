// CUDA backend of the drafter runtime (issue 7): the model of
// kernels/runtime.h on the device for 1..8 tokens per launch (slots of one
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
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "kernels/cuda/tune.h"
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"
}
#include "kernels/rt_ops.cuh"
#include "kernels/rt_head.cuh"
#include "kernels/rt_dmma.cuh"
#include "kernels/rt_lt.cuh"
#include "kernels/rt_sweep.cuh"

#define CK(stmt)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (stmt);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return mtpq_err_set(err, MTPQ_E_GPU, "%s:%d: %s: %s", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
  } while (0)

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

static void mark(gpu_session *g, const char *name) {
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

static enum mtpq_status upload(gpu_session *g, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err) {
  uint8_t *p = nullptr;
  enum mtpq_status st = dalloc(g, &p, n, err);
  if (st) return st;
  CK(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice));
  *dst = p;
  return MTPQ_OK;
}

#ifdef MTPQ_TIMELINE
// kernels/rt_tl.cuh's records: a buffer for TL_CAP blocks, its count zeroed
// before each draft call and, after it, the call's records written to the
// file MTPQ_CUDA_TL_FILE names (CSV; tests/bench/timeline.py reads it)
#define TL_CAP (1u << 16)
static enum mtpq_status tl_open(gpu_session *g, struct mtpq_err *err) {
  rt_tl_rec *buf = nullptr;
  enum mtpq_status st = dalloc(g, &buf, TL_CAP * sizeof(rt_tl_rec), err);
  const unsigned cap = TL_CAP;
  if (!st && (cudaMemcpyToSymbol(rt_tl_buf, &buf, sizeof buf) != cudaSuccess ||
              cudaMemcpyToSymbol(rt_tl_cap, &cap, sizeof cap) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "timeline: cannot set its buffer");
  return st;
}

static void tl_reset(gpu_session *g) {
  void *n = nullptr;
  if (cudaGetSymbolAddress(&n, rt_tl_n) == cudaSuccess) cudaMemsetAsync(n, 0, sizeof(unsigned), g->st);
}

static void tl_write(void) { // after the call's synchronisation
  const char *path = getenv("MTPQ_CUDA_TL_FILE");
  unsigned n = 0;
  rt_tl_rec *buf = nullptr;
  if (!path || cudaMemcpyFromSymbol(&n, rt_tl_n, sizeof n) != cudaSuccess ||
      cudaMemcpyFromSymbol(&buf, rt_tl_buf, sizeof buf) != cudaSuccess)
    return;
  if (n > TL_CAP) n = TL_CAP;
  std::vector<rt_tl_rec> r(n);
  if (n && cudaMemcpy(r.data(), buf, n * sizeof(rt_tl_rec), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "grid,block,sm,start,waited,end,mid1,mid2\n");
  for (const rt_tl_rec &x : r)
    fprintf(f, "%llu,%u,%u,%llu,%llu,%llu,%llu,%llu\n", x.grid, x.block, x.sm, x.t[0], x.t[1], x.t[2], x.t[3], x.t[4]);
  fclose(f);
}
#endif

static enum mtpq_status upload_lin(gpu_session *g, const struct lin *L, dlin *out, struct mtpq_err *err) {
  out->f = L->f, out->rows = L->rows, out->cols = L->cols, out->s = out->s2 = L->s, out->sc = nullptr;
  size_t wb = (size_t)rt_lin_bytes(*out);
  enum mtpq_status st = upload(g, L->w, wb, &out->w, err);
  if (!st && L->f == LIN_NVFP4) st = upload(g, L->scales, (size_t)(L->rows * L->cols / 16), &out->sc, err);
  return st;
}

// A routed expert's gate and up projections as one matrix of row pairs
// (row 2i: gate row i, 2i + 1: up row i; NVFP4 block scales likewise), so
// that the warp holding a pair writes silu(gate) * up itself (no SwiGLU
// kernel); s: the gate's scale, s2: the up's.
static std::vector<uint8_t> interleave_rows(const uint8_t *a, const uint8_t *b, int64_t rows, size_t rb) {
  std::vector<uint8_t> buf((size_t)(2 * rows) * rb);
  for (int64_t i = 0; i < rows; i++) {
    memcpy(&buf[(size_t)(2 * i) * rb], a + (size_t)i * rb, rb);
    memcpy(&buf[(size_t)(2 * i + 1) * rb], b + (size_t)i * rb, rb);
  }
  return buf;
}

static enum mtpq_status upload_pairs(gpu_session *g, const struct lin *G, const struct lin *U, dlin *out,
                                     struct mtpq_err *err) {
  out->f = G->f, out->rows = 2 * G->rows, out->cols = G->cols, out->s = G->s, out->s2 = U->s, out->sc = nullptr;
  std::vector<uint8_t> buf = interleave_rows(G->w, U->w, G->rows, (size_t)(rt_lin_bytes(*out) / out->rows));
  enum mtpq_status st = upload(g, buf.data(), buf.size(), &out->w, err);
  if (!st && G->f == LIN_NVFP4) {
    buf = interleave_rows(G->scales, U->scales, G->rows, (size_t)(G->cols / 16));
    st = upload(g, buf.data(), buf.size(), &out->sc, err);
  }
  return st;
}

extern "C" void mtpq__cuda_session_close(void *p) {
  gpu_session *g = static_cast<gpu_session *>(p);
  if (!g) return;
  for (plan &pl : g->plans) {
    if (pl.step) cudaGraphExecDestroy(pl.step);
    if (pl.chain) cudaGraphExecDestroy(pl.chain);
    lt_head_destroy(pl.lt);
  }
  if (g->lt) cublasLtDestroy(g->lt);
  for (void *a : g->allocs) cudaFree(a);
  if (g->h_rec) cudaFreeHost(g->h_rec);
  if (g->stage_h) cudaFreeHost(g->stage_h);
  if (g->flush_buf) cudaFree(g->flush_buf);
  if (g->t0) cudaEventDestroy(g->t0);
  if (g->t1) cudaEventDestroy(g->t1);
  if (g->st) cudaStreamDestroy(g->st);
  if (g->st2) cudaStreamDestroy(g->st2);
  if (g->fork) cudaEventDestroy(g->fork);
  if (g->join) cudaEventDestroy(g->join);
  delete g;
}

// k_attn's instance for a launch at RING 0 or 2: the 80B shape's own (G =
// 8, D = 256; at RING 2 on tensor cores) or the generic one; attn_ring_grid
// sizes the grid for the one the step launches
static decltype(&k_attn<0, 0, 0, 0>) attn_kernel(const gpu_session *g, int ring) {
  const bool a8 = g->d->Nq / g->d->Nkv == 8 && g->d->D == 256;
  if (ring) return a8 ? k_attn<8, 256, 2, 1> : k_attn<0, 0, 2, 0>;
  return a8 ? k_attn<8, 256, 0, 0> : k_attn<0, 0, 0, 0>;
}

// k_attn's blocks (RING 2) where their shared memory fits: attn_x
// blocks per (KV head, token), so that one token's blocks fill the SMs once
// (a launch of n tokens runs n of those); else RING 0
static void attn_ring_grid(gpu_session *g, int dev) {
  const struct mtpq_rt_model *d = g->d;
  const int G = (int)(d->Nq / d->Nkv), D = (int)d->D, smem = (int)(rt_attn_smem(G, D, 2) * 4);
  auto *k = attn_kernel(g, 2);
  int room = 0, per = 0;
  if (cudaDeviceGetAttribute(&room, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || smem > room ||
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, 256, smem) != cudaSuccess || per < 1) {
    cudaGetLastError(); // (no room: the kernel of a block per split)
    return;
  }
  const int force = g->tune.attn_x; // (tests: a few blocks, each over many splits)
  const int64_t x = force > 0 ? force : ((int64_t)g->sms * per + d->Nkv - 1) / d->Nkv;
  g->attn_x = (int)(x < g->nsplit ? x : g->nsplit);
  g->attn_per = per;
}

// RING 2's blocks per (KV head, token) at a launch of n tokens: attn_x (a
// wave per token), and at 2..8 tokens one wave for the launch, each block
// over several splits (a wave per token made a launch of n tokens n waves;
// ledger 12)
static int attn_blocks(const gpu_session *g, int n) {
  if (n < 2 || !g->attn_x) return g->attn_x;
  const int64_t x = (int64_t)g->sms * g->attn_per / ((int64_t)g->d->Nkv * n);
  return (int)(x < 1 ? 1 : x < g->attn_x ? x : g->attn_x);
}

extern "C" enum mtpq_status mtpq__cuda_session_open(const struct mtpq_rt_model *d, int64_t max_pos, int window,
                                                    int nseq, void **out, struct mtpq_err *err) {
  *out = nullptr;
  mtpq_cuda_tune tune;
  if (mtpq_cuda_tune_get(&tune, err)) return MTPQ_E_INVAL;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return mtpq_err_set(err, MTPQ_E_NO_GPU, "no CUDA device");
  if (nseq < 1 || nseq > RT_NMAX)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences: the CUDA backend batches 1..%d", nseq, RT_NMAX);
  if (d->Nq % d->Nkv || d->Nq / d->Nkv > 16)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%lld query heads over %lld KV heads: the CUDA backend takes up to 16 "
                        "query heads per KV head", (long long)d->Nq, (long long)d->Nkv);
  if (d->moe && (d->topk > RT_TMAX - 1 || d->E > 4096))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "top-%lld of %lld experts: the CUDA backend takes top-k <= %d",
                        (long long)d->topk, (long long)d->E, RT_TMAX - 1);
  if (rt_attn_smem((int)(d->Nq / d->Nkv), (int)d->D, 0) * 4 > 200 * 1024 || d->D > 512) /* attention's shared memory */
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "head_dim %lld x %lld query heads per KV head is too large",
                        (long long)d->D, (long long)(d->Nq / d->Nkv));
  const int attn_smem = (int)(rt_attn_smem((int)(d->Nq / d->Nkv), (int)d->D, 0) * 4);
  if (cudaFuncSetAttribute(k_attn<0, 0, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem) != cudaSuccess ||
      cudaFuncSetAttribute(k_attn<8, 256, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem) != cudaSuccess)
    return mtpq_err_set(err, MTPQ_E_GPU, "cannot give the attention kernel its shared memory");
  if (d->H > 256 * RT_NQ)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "hidden size %lld: the CUDA backend takes up to %d", (long long)d->H,
                        256 * RT_NQ);
  if (d->D % 8) /* 16-byte copies of cached BF16 keys */
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "head_dim %lld: the CUDA backend takes multiples of 8", (long long)d->D);
  gpu_session *g = new gpu_session();
  g->d = d, g->max_pos = max_pos, g->window = window, g->nseq = nseq, g->cur = 0;
  g->nsplit = (int)((max_pos + RT_CS - 1) / RT_CS);
  if ((8 * d->D + g->nsplit) * 4 > 48 * 1024) {
    const int64_t most = (48 * 1024 / 4 - 8 * d->D) * RT_CS;
    delete g;
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%lld cached positions: the CUDA backend takes up to %lld at head_dim "
                        "%lld", (long long)max_pos, (long long)most, (long long)d->D);
  }
  g->K = d->moe ? (int)d->topk : 0;
  g->tune = tune;
  g->pdl = tune.pdl;
  g->lt_min = tune.lt;
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || g->sms < 1) g->sms = 1;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess) cudaGetLastError(), l2 = 0;
  g->attn_x = 0;
  if (tune.attn_ring) attn_ring_grid(g, dev); // (0: a block per split)
  // the ring merges a block's splits into one partial: at most attn_x a head
  g->comb4 = (g->attn_x ? g->attn_x : g->nsplit) > 256;
  const int64_t kv_per = 2 * d->Nkv * d->D * 2; // a position's BF16 K and V rows
  const int ef = tune.kv_ef;
  g->kv_ef_pos = ef == 0 ? INT64_MAX : ef == 1 ? 0 : (int64_t)l2 / 2 / kv_per;
  g->l2 = l2;
  enum mtpq_status st = MTPQ_OK;
  if (cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&g->st2, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "cannot create CUDA streams and events");
  g->on = g->st;
  int64_t E = d->moe ? d->E : 0;
  std::vector<dlin> &h = g->host_lins;
  h.assign(L_EXPERTS + 3 * E, dlin{});
  const struct lin *base[L_EXPERTS] = {&d->fc, &d->q, &d->k, &d->v, &d->o, &d->router, &d->seg,
                                       &d->sg, &d->su, &d->sd, &d->head};
  for (int i = 0; i < L_EXPERTS && !st; i++)
    if (base[i]->w) st = upload_lin(g, base[i], &h[i], err);
  // gate/up pair matrices (tune glu=0: separate, with a SwiGLU kernel) where every expert's gate
  // and up share a format and a shape
  g->glu = E > 0 && tune.glu;
  for (int64_t e = 0; e < E; e++)
    if (d->eg[e].f != d->eu[e].f || d->eg[e].rows != d->eu[e].rows || d->eg[e].cols != d->eu[e].cols) g->glu = 0;
  for (int64_t e = 0; e < E && !st; e++) {
    if (g->glu) { // the up slot stays empty (rows 0: nothing to prefetch)
      st = upload_pairs(g, &d->eg[e], &d->eu[e], &h[L_EXPERTS + e], err);
      h[L_EXPERTS + E + e] = dlin{d->eu[e].f, 0, d->eu[e].cols, nullptr, nullptr, 1.0f, 1.0f};
    } else {
      st = upload_lin(g, &d->eg[e], &h[L_EXPERTS + e], err);
      if (!st) st = upload_lin(g, &d->eu[e], &h[L_EXPERTS + E + e], err);
    }
    if (!st) st = upload_lin(g, &d->ed[e], &h[L_EXPERTS + 2 * E + e], err);
  }
  g->fast = 1; // the vectorised kernels need every row to be a whole number of 16-element chunks, and
               // offsets within a matrix (weights, block scales) that fit 32 bits
  for (const dlin &L : h)
    if (L.w && (L.cols % 16 || rt_lin_bytes(L) >= ((int64_t)1 << 32) || L.rows * L.cols / 16 >= ((int64_t)1 << 32)))
      g->fast = 0;
  if (!st) st = dalloc(g, &g->lins, h.size() * sizeof(dlin), err);
  if (!st && cudaMemcpy(g->lins, h.data(), h.size() * sizeof(dlin), cudaMemcpyHostToDevice) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the weight table failed");
  for (int i = 0; i < 7 && !st; i++) {
    int64_t nn = (i == 4 || i == 5) ? d->D : d->H;
    const uint8_t *p = nullptr;
    st = upload(g, d->nrm[i], (size_t)nn * 4, &p, err);
    g->nrm[i] = (float *)p;
  }
  if (!st) st = upload(g, d->embed, (size_t)(d->embed_rows * d->H * 2), &g->embed, err);
  g->ids = nullptr;
  if (!st && d->reduced) {
    const uint8_t *p = nullptr;
    st = upload(g, d->ids, (size_t)d->head.rows * 8, &p, err);
    g->ids = (int64_t *)p;
  }
  const int64_t H = d->H, KV = d->Nkv * d->D, QG = 2 * d->Nq * d->D, NM = RT_NMAX;
  g->IM = d->sg.w ? d->sg.rows : 1;
  if (E && d->eg[0].rows > g->IM) g->IM = d->eg[0].rows;
  g->IM = (g->IM + 15) / 16 * 16;
  const int64_t slots = NM * (g->K + 1) * g->IM, ps = NM * d->Nq * (int64_t)g->nsplit;
  float **bufs[] = {&g->c, &g->x0, &g->a, &g->qg, &g->kk, &g->vv, &g->att, &g->y,
                    &g->y2, &g->m, &g->m2, &g->pr, &g->z, &g->gb, &g->ub, &g->act, &g->po, &g->pm, &g->pl,
                    &g->logits, &g->wsel};
  size_t sizes[] = {(size_t)(NM * 2 * H), (size_t)(NM * H), (size_t)(NM * H),
                    (size_t)(NM * QG), (size_t)(NM * KV), (size_t)(NM * KV), (size_t)(NM * d->Nq * d->D),
                    (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * (E ? E : 1)),
                    (size_t)NM,
                    (size_t)slots, (size_t)slots, (size_t)slots, (size_t)(ps * d->D), (size_t)ps, (size_t)ps,
                    (size_t)d->head.rows, (size_t)(NM * RT_KST)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !st; i++) st = dzalloc(g, bufs[i], sizes[i] * 4, err);
  if (!st) st = dzalloc(g, &g->kc, (size_t)(nseq * max_pos * KV) * 2, err); // (BF16)
  if (!st) st = dzalloc(g, &g->vc, (size_t)(nseq * max_pos * KV) * 2, err);
  if (!st) {
    const int64_t hp = d->rot / 2;
    std::vector<float2> t((size_t)(max_pos * hp));
    for (int64_t q = 0; q < max_pos; q++)
      for (int64_t j = 0; j < hp; j++) mtpq_rope_cs(j, d->rot, q, d->theta, &t[(size_t)(q * hp + j)].x, &t[(size_t)(q * hp + j)].y);
    st = dalloc(g, &g->rcs, t.size() * sizeof(float2), err);
    if (!st && !t.empty() && cudaMemcpy(g->rcs, t.data(), t.size() * sizeof(float2), cudaMemcpyHostToDevice) != cudaSuccess)
      st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the RoPE table failed");
  }
  if (!st) st = dalloc(g, &g->sel, NM * RT_KST * sizeof(int), err);
  if (!st) st = dalloc(g, &g->rec, NM * RT_MAXSTEPS * sizeof(int), err);
  if (!st) st = dalloc(g, &g->best, NM * sizeof(unsigned long long), err);
  if (!st) st = dzalloc(g, &g->hq, 2 * sizeof(unsigned), err);
  static_assert(ST_SEQ >= ST_TOK + RT_NMAX * 4 && ST_POS >= ST_SEQ + RT_NMAX * 4 &&
                    ST_STEP >= ST_POS + RT_NMAX * 8 && ST_HID >= ST_STEP + 4 && ST_HID % 16 == 0,
                "staging layout");
  const size_t sb = ST_HID + (size_t)(NM * H) * 4;
  if (!st) st = dzalloc(g, &g->stage_d, sb, err);
  if (!st && (cudaMallocHost((void **)&g->stage_h, sb) != cudaSuccess ||
              cudaMallocHost((void **)&g->h_rec, NM * RT_MAXSTEPS * 4 + NM * 8) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "cudaMallocHost failed");
  if (!st) {
    memset(g->stage_h, 0, sb); // the step counter stays 0: each draft call's copy resets it
    g->tok = (int *)(g->stage_d + ST_TOK), g->seqa = (int *)(g->stage_d + ST_SEQ);
    g->pos = (int64_t *)(g->stage_d + ST_POS), g->stepc = (int *)(g->stage_d + ST_STEP);
    g->out = (float *)(g->stage_d + ST_HID);
    g->h_tok = (int *)(g->stage_h + ST_TOK), g->h_seq = (int *)(g->stage_h + ST_SEQ);
    g->h_pos = (int64_t *)(g->stage_h + ST_POS), g->h_hid = (float *)(g->stage_h + ST_HID);
    g->h_best = (unsigned long long *)(g->h_rec + NM * RT_MAXSTEPS);
  }
  if (!st && (cudaEventCreate(&g->t0) != cudaSuccess || cudaEventCreate(&g->t1) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "cannot create CUDA events");
#ifdef MTPQ_TIMELINE
  if (!st) st = tl_open(g, err);
#endif
  if (st) {
    mtpq__cuda_session_close(g);
    return st;
  }
  *out = g;
  return MTPQ_OK;
}

extern "C" void mtpq__cuda_select(void *p, int seq) { static_cast<gpu_session *>(p)->cur = seq; }

// ---- plans: the task lists of one token count ------------------------------------

static mv_task dense_task(int lin, const float *x, int64_t xs, float *y, int64_t ys, int nb) {
  mv_task t;
  memset(&t, 0, sizeof t);
  t.nterm = 1, t.nb = nb, t.tok = 0, t.xs = xs, t.ys = ys, t.y = y;
  t.t[0] = mv_term{lin, -1, x, nullptr};
  return t;
}

static enum mtpq_status put_tasks(gpu_session *g, const std::vector<mv_task> &v, mv_launch *m, struct mtpq_err *err) {
  m->ntask = (int)v.size();
  if (v.empty()) return MTPQ_OK;
  enum mtpq_status st = dalloc(g, &m->dev, v.size() * sizeof(mv_task), err);
  if (st) return st;
  CK(cudaMemcpy(m->dev, v.data(), v.size() * sizeof(mv_task), cudaMemcpyHostToDevice));
  m->nbmax = 0, m->rows = 0, m->glu = v[0].glu != 0, m->best = v[0].best != nullptr, m->groups = 0;
  m->plain = true; // (each task below, v[0] included)
  const int64_t cols0 = g->host_lins[v[0].t[0].lin].cols;
  m->cols = cols0; // (task 0's)
  for (const mv_task &t : v) {
    const dlin &L0 = g->host_lins[t.t[0].lin];
    m->plain = m->plain && t.nterm == 1 && t.t[0].sel_k < 0 && !t.t[0].w && !t.glu && !t.best && t.y &&
               L0.cols == cols0;
    m->nbmax = t.nb > m->nbmax ? t.nb : m->nbmax;
    const int gr = t.nterm * (int)((L0.cols + 511) / 512);
    m->groups = !m->groups || gr < m->groups ? gr : m->groups;
    for (int k = 0; k < t.nterm; k++) { // sel-chosen experts all share the shape of expert 0
      const dlin &L = g->host_lins[t.t[k].lin];
      if (L.rows != L0.rows || L.cols != L0.cols)
        return mtpq_err_set(err, MTPQ_E_INTERNAL, "a task's terms differ in shape");
      m->fmt = m->fmt < 0 || m->fmt == L.f ? L.f : 3;
    }
    m->rows = L0.rows > m->rows ? L0.rows : m->rows;
    m->trows.push_back(L0.rows);
  }
  return MTPQ_OK;
}

// p.lt for n tokens where it applies: the handle and buffers on first use,
// then lt_head_build. cuBLASLt declining the shape leaves the head on
// k_head_mma (not an error); a failed allocation is one.
static enum mtpq_status lt_plan(gpu_session *g, int n, plan &p, struct mtpq_err *err) {
  const dlin &L = g->host_lins[L_HEAD];
  if (!g->lt_min || n < g->lt_min || L.f != LIN_BF16 || !L.w || !g->tune.head_mma) return MTPQ_OK; // (head_mma=0: all on k_mv)
  enum mtpq_status st = MTPQ_OK;
  if (!g->lt && cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS) {
    g->lt = nullptr, g->lt_min = 0; // no cuBLASLt: the head stays on k_head_mma
    return MTPQ_OK;
  }
  if (!g->lt_ws) st = dalloc(g, &g->lt_ws, LT_WS, err);
  if (!st && !g->lt_b) st = dzalloc(g, &g->lt_b, (size_t)(L.cols * 3 * RT_NMAX) * 2, err);
  if (!st && !g->lt_d) st = dalloc(g, &g->lt_d, (size_t)(L.rows * 3 * RT_NMAX) * 4, err);
  if (!st) lt_head_build(g->lt, p.lt, L.w, L.rows, L.cols, n, g->lt_b, g->lt_d, g->lt_ws, LT_WS, g->st);
  if (!st) CK(cudaStreamSynchronize(g->st));
  return st;
}

// the head of a chain step through cuBLASLt: the GEMM of x's pieces (from
// k_final), the argmax into g->best (as k_head_mma leaves it)
static void lt_run(gpu_session *g, int n) {
  const dlin &L = g->host_lins[L_HEAD];
  lt_head_matmul(g->lt, g->plans[n].lt, g->plans[n].lt.algo, L.w, g->lt_b, g->lt_d, g->lt_ws, LT_WS, g->on);
  go(g, true, k_lt_argmax, dim3((unsigned)((L.rows + 256 * RT_LT_ROWS - 1) / (256 * RT_LT_ROWS)), n), dim3(256), 0,
     (const float *)g->lt_d, L.rows, g->best);
}

static enum mtpq_status build_plan(gpu_session *g, int n, struct mtpq_err *err) {
  plan &p = g->plans[n];
  const struct mtpq_rt_model *d = g->d;
  const int64_t H = d->H, KV = d->Nkv * d->D, QG = 2 * d->Nq * d->D, E = d->moe ? d->E : 0, IM = g->IM;
  const int K = g->K, S = K + 1;
  enum mtpq_status st = put_tasks(g, {dense_task(L_FC, g->c, 2 * H, g->x0, H, n)}, &p.fc, err);
  if (!st)
    st = put_tasks(g, {dense_task(L_Q, g->a, H, g->qg, QG, n), dense_task(L_K, g->a, H, g->kk, KV, n),
                       dense_task(L_V, g->a, H, g->vv, KV, n)}, &p.qkv, err);
  if (!st) st = put_tasks(g, {dense_task(L_O, g->att, d->Nq * d->D, g->y, H, n)}, &p.o, err);
  // the routed experts (one format) and the shared expert (often another)
  // run as separate launches so that each kernel is single-format; the
  // shared expert's down projection goes to m2, and k_final adds the two,
  // m2 weighted by sigmoid(shared_expert_gate) from k_route
  std::vector<mv_task> rs, gu, gus, down, downs;
  const bool shared = d->sg.w != nullptr;
  if (E) {
    rs.push_back(dense_task(L_ROUTER, g->y2, H, g->pr, E, n));
    if (d->seg.w) rs.push_back(dense_task(L_SEG, g->y2, H, g->z, 1, n));
    for (int t = 0; t < n; t++)
      for (int k = 0; k < K; k++)
        for (int w = 0; w < (g->glu ? 1 : 2); w++) {
          float *y = g->glu ? g->act : w ? g->ub : g->gb; // pairs: silu(gate) * up straight into act
          mv_task x = dense_task(L_EXPERTS + (int)(w * E), g->y2 + t * H, H, y + (t * S + k) * IM, 0, 1);
          x.tok = t, x.t[0].sel_k = k, x.glu = g->glu;
          gu.push_back(x);
        }
    for (int t = 0; t < n; t++) {
      mv_task x = dense_task(L_EXPERTS + (int)(2 * E), nullptr, 0, g->m + t * H, 0, 1);
      x.tok = t, x.nterm = 0;
      for (int k = 0; k < K; k++)
        x.t[x.nterm++] = mv_term{(int)(L_EXPERTS + 2 * E), k, g->act + (t * S + k) * IM, g->wsel + t * RT_KST + k};
      down.push_back(x);
    }
  }
  if (shared) // unweighted: k_final applies sigmoid(shared_expert_gate), which the routing computes
    downs.push_back(dense_task(L_SD, g->act + K * IM, S * IM, g->m2, H, n));
  if (shared) {
    gus.push_back(dense_task(L_SG, g->y2, H, g->gb + K * IM, S * IM, n));
    gus.push_back(dense_task(L_SU, g->y2, H, g->ub + K * IM, S * IM, n));
  }
  if (!st) st = put_tasks(g, rs, &p.rs, err);
  if (!st) st = put_tasks(g, gu, &p.gu, err);
  if (!st) st = put_tasks(g, gus, &p.gus, err);
  if (!st) st = put_tasks(g, down, &p.down, err);
  if (!st) st = put_tasks(g, downs, &p.downs, err);
  // the routed gate/up let the down launch start only once the routing is
  // done, so the down reads the choice and requests its first weights before
  // it waits (k_mv's flags)
  p.gu.fl = RT_MV_LATE_TRIGGER;
  p.down.fl = RT_MV_SEL_EARLY;
  mv_task hd = dense_task(L_HEAD, g->out, H, nullptr, d->head.rows, n);
  hd.best = g->best;
  if (!st) st = put_tasks(g, {hd}, &p.head, err);
  hd.logits = g->logits;
  if (!st) st = put_tasks(g, {hd}, &p.head_logits, err);
  if (!st) st = lt_plan(g, n, p, err);
  p.built = !st;
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
template <typename K> static int resident(K kernel) {
  int dev = 0, sms = 0, per = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, 256, 0);
  return (sms > 0 ? sms : 132) * (per > 0 ? per : 1);
}

// A flat grid of the launch's tasks (m.ntask <= RT_FLAT) at rb rows a block:
// task t's blocks from off[t], n = m.ntask
static mv_flat flat_grid(const mv_launch &m, int64_t rb) {
  mv_flat fg = {};
  int64_t tot = 0;
  for (int t = 0; t < m.ntask; t++) fg.off[t] = (int)tot, tot += (m.trows[t] + rb - 1) / rb;
  fg.off[m.ntask] = (int)tot, fg.n = m.ntask;
  return fg;
}

// Tasks of unequal rows that fit one wave at their own block counts run as a
// flat grid (mv_flat: q/k/v, the router with the shared expert's gate), the
// rest as (row blocks of the largest task, tasks). MTPQ_CUDA_FLAT=0: never flat.
template <int NB, int R, int U, int F, int S = 1> static void mv_run(gpu_session *g, const mv_launch &m) {
  static int cap = 0; // per instantiation
  if (!cap) cap = resident(k_mv<NB, R, U, F, S>);
  const int64_t rb = 8 / S * R, bx = (m.rows + rb - 1) / rb;
  mv_flat fg = {};
  if (RT_MV_FLAT(F) && m.ntask > 1 && m.ntask <= RT_FLAT) {
    fg = flat_grid(m, rb);
    const int64_t tot = fg.off[m.ntask];
    fg.n = tot < bx * m.ntask && tot <= cap ? m.ntask : 0;
  }
  const dim3 grid = fg.n ? dim3((unsigned)fg.off[fg.n]) : dim3((unsigned)(bx < cap ? bx : cap), (unsigned)m.ntask);
  go(g, true, k_mv<NB, R, U, F, S>, grid, dim3(256), 0, (const dlin *)g->lins, (const mv_task *)m.dev,
     (const int *)g->sel, m.fl, fg);
}

// One token, one row per warp by the wave rule, plain y (fc, o, the routed
// experts' down, the router, the shared expert's gate/up): instead, sets of
// S rows, each shared by S warps (k_mv's S = R): the same blocks and the
// same weight loads per warp, but each band of x a warp loads serves S rows.
// S: the most of 8, 4, 2 up to MTPQ_CUDA_SPLITK (default 4; 0 or 1 none)
// that leaves no warp without a (term, band) group; false where this does
// not apply.
// 4K batch 1 on the H200: 150.5 -> 144.6 us, fc and o 9.7 -> 7.5 us, the
// experts' down 12.1 -> 10.0 under ncu (tests/bench/RESULTS.md)
template <int NB, int R, int S> static void mv_split_run(gpu_session *g, const mv_launch &m) {
  if constexpr (NB == 1) {
    switch (m.fmt) {
    case 0: mv_run<1, R, 8, 0, S>(g, m); break;
    case 1: mv_run<1, R, 8, 1, S>(g, m); break;
    default: mv_run<1, R, 8, 2, S>(g, m); break;
    }
  } else { // dense FP8/BF16 only (routed tasks are one token each); U: a multiple of R
    constexpr int U = NB >= 4 ? (R > 4 ? R : 4) : 8;
    m.fmt == 1 ? mv_run<NB, R, U, 1, S>(g, m) : mv_run<NB, R, U, 0, S>(g, m);
  }
}

// r: the rows per warp the wave rule chose (1, or 2 at 2..8 tokens); the
// launch runs as sets of R = r x S rows, each shared by S warps (the same
// blocks); instances: those ptxas fits without spills. At 2..8 tokens on the
// H200 (4K): batch 2 218.8 -> 204.9 us a step, batch 4 and 8 0.7 and 6 us
// less (tests/bench/RESULTS.md, ninth round)
template <int NB> static bool mv_split(gpu_session *g, const mv_launch &m, int r) {
  if (m.best || m.glu || m.fmt < 0 || m.fmt > (NB == 1 ? 2 : 1)) return false;
  for (int S : {4, 2}) {
    if (m.groups < S) continue;
    if constexpr (NB == 1) {
      if (r != 1) return false;
      return S == 4 ? mv_split_run<1, 4, 4>(g, m) : mv_split_run<1, 2, 2>(g, m), true;
    } else {
      if (r == 1) return S == 4 ? mv_split_run<NB, 4, 4>(g, m) : mv_split_run<NB, 2, 2>(g, m), true;
      if (r == 2 && S == 2) return mv_split_run<NB, 4, 2>(g, m), true;
    }
  }
  return false;
}

// U: loads in flight per lane: 128 bytes of weights at one token (NVFP4
// chunks are 8 bytes, FP8 16, BF16 32 in two loads), less from 2 tokens on
// (their registers go to the activations; more spills)
template <int NB, int R> static void mv_go(gpu_session *g, const mv_launch &m) {
  constexpr int U = R == 5 ? 10 : R == 6 ? 12 : NB >= 4 ? 4 : 8; // (5, 6 rows: two bands a batch)
  switch (m.fmt) {
  case 0: mv_run<NB, R, U, 0>(g, m); break;
  case 1: mv_run<NB, R, U, 1>(g, m); break;
  case 2:
    if constexpr (NB == 1 && (R == 5 || R == 6)) mv_run<1, R, U, 2>(g, m);
    else if constexpr (NB == 1)
      R < 8 ? mv_run<1, R, 8, 2>(g, m) : mv_run<1, R, 16, 2>(g, m);
    else mv_run<NB, R, 8, 2>(g, m);
    break;
  default: mv_run<NB, R, U, 3>(g, m); break;
  }
}

// Blocks a launch needs with R rows per warp
static int64_t mv_blocks(const mv_launch &m, int R) {
  int64_t b = 0;
  for (int64_t r : m.trows) b += (r + 8 * R - 1) / (8 * R);
  return b;
}

// A dense FP8/BF16 launch at 2..8 tokens too large for one wave even at 8
// rows per warp (the head): 8 rows per warp, so each band of x loaded
// serves 8 rows. At 2 rows per warp (the wave rule's choice) the 2-token
// head loaded 4 bytes of x through L1 per byte of FP8 weights, and took
// 144.7 us against 57.5 at one token (ncu, tests/bench/RESULTS.md).
template <int NB> static void mv_big(gpu_session *g, const mv_launch &m) {
  // rows per warp, FP8 and BF16: the most ptxas fits without spilling (BF16 at 8 tokens: 40 bytes)
  constexpr int R1 = NB <= 4 ? 8 : 4, R0 = NB == 4 ? 8 : 4;
  m.fmt == 1 ? mv_run<NB, R1, 8, 1>(g, m) : mv_run<NB, R0, 8, 0>(g, m);
}

// 2..8 tokens in one wave: 1 or 2 rows per warp, as row sets shared by
// warps where mv_split applies
template <int NB> static void mv_nb(gpu_session *g, const mv_launch &m, int64_t wave) {
  const int r = mv_blocks(m, 1) <= wave ? 1 : 2;
  if (!mv_split<NB>(g, m, r)) r == 1 ? mv_go<NB, 1>(g, m) : mv_go<NB, 2>(g, m);
}

// The FP8 or BF16 head on tensor cores where it applies (k_head_mma: one
// task, cols % 64 == 0, its x pieces within RT_HEAD_SMEM bytes of shared
// memory). H200, 4K batch 1: mtpq 144.8 -> 139.1 us a step (ncu: the head
// 57.9 -> 55.5 us); the stock drafter's BF16 head did not move
// (tests/bench/RESULTS.md, ninth round). At 2..8 tokens the FFMA head's
// instructions grow with the tokens (k_mv: a conversion per weight, an FMA
// per weight and token, x per band and token from L1), the MMA's do not
// until 3 tokens fill its 8 columns. MTPQ_CUDA_HEAD_MMA: 0 none, 1 one token
// only, 2 (the default) 1..8 tokens (H200, 4K: mtpq batch 2/4/8 201.3 /
// 725.5 at 1 -> 180.0 / 397.3 us a step, stock 298.5 / 989.9 -> 286.4 /
// 545.6; tests/bench/RESULTS.md, twelfth round). Streaming the one-token
// head's weights through the bulk copy engine instead (16-row tiles in
// shared memory, ~200 KB in flight per SM, all of the first requested before
// the wait) measured no faster: 55.2 us under ncu against 55.5-57.5, the
// step 136.9-137.7 vs 136.0 (twelfth round). At one token the tiles now go
// to the blocks on request (k_head_dyn, kernels/rt_head.cuh), which did move
// the stock head: 147.6 -> 136 us (nineteenth round).
#define RT_HEAD_SMEM (110 * 1024)

// the token slots a launch is compiled for (the NB of k_mv and k_head_mma): 1, 2, 4 or 8
static int nb_slots(int nbmax) { return nbmax <= 1 ? 1 : nbmax <= 2 ? 2 : nbmax <= 4 ? 4 : 8; }

// the pieces x takes in an MMA product of format f (1 FP8, 0 BF16) at NB
// token slots: two f16 pieces for FP8 at 8 (16 MMA columns, not 24: one
// n-tile fewer; rt_split_p), else three. H200, 4K batch 8: mtpq 265.1 ->
// 243.4 / 243.6 us a step; at 4 (12 -> 8 columns) 177.7 -> 177.1, no
// gain, so three stay there (tests/bench/RESULTS.md, twenty-ninth round)
static int mma_pieces(const gpu_session *g, int f, int NB) { return f == 1 && NB == 8 ? 2 : 3; }

// k_head_mma's dynamic shared memory: NB tokens' P pieces of cols (+ 16 padding) halves
static size_t head_mma_smem(int NB, int P, int64_t cols) { return (size_t)P * NB * (size_t)(cols + 16) * 2; }

// A head kernel's blocks a launch: as many as its tiles take, at most one
// wave at the occupancy of its shared memory smem. The attribute goes before
// the kernel's first launch of any size (a first launch under 48 KB and a
// later one above it failed at its launch when it was set only for the
// first); the occupancy is kept per size (without graphs every step
// launches). One hs per kernel instance.
struct head_state {
  bool attr = false;
  size_t smem = 0;
  int per = 0;
};
template <typename... A>
static unsigned head_blocks(gpu_session *g, head_state &hs, void (*k)(A...), size_t smem, int64_t blocks) {
  if (!hs.attr)
    hs.attr = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)RT_HEAD_SMEM) == cudaSuccess;
  if (!hs.per || hs.smem != smem) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&hs.per, k, 256, smem) != cudaSuccess || hs.per < 1) hs.per = 1;
    hs.smem = smem;
  }
  const int64_t cap = (int64_t)g->sms * hs.per;
  return (unsigned)(blocks < cap ? blocks : cap);
}

// k_head_dyn: a block a tile of 16 MT rows at a time (there: why, and what it gained)
template <int F, int MT> static void head_dyn_run(gpu_session *g, const mv_launch &m, size_t smem) {
  static head_state hs;
  const int64_t tiles = (m.rows + 16 * MT - 1) / (16 * MT);
  go(g, true, k_head_dyn<F, MT>, dim3(head_blocks(g, hs, k_head_dyn<F, MT>, smem, tiles)), dim3(256), smem,
     (const dlin *)g->lins, (const mv_task *)m.dev, g->hq);
}

template <int F, int NB, int P = 3> static void head_mma_run(gpu_session *g, const mv_launch &m, size_t smem) {
  if constexpr (NB == 1) {
    // (FP8: two m-tiles, so that a warp has two batches a tile, as at BF16)
    F == 1 ? head_dyn_run<F, 2>(g, m, smem) : head_dyn_run<F, 1>(g, m, smem);
    return;
  }
  static head_state hs;
  const int64_t tiles = (m.rows + 15) / 16;
  const unsigned nblk = head_blocks(g, hs, k_head_mma<F, NB, P>, smem, (tiles + 7) / 8);
  go(g, true, k_head_mma<F, NB, P>, dim3(nblk), dim3(256), smem, (const dlin *)g->lins, (const mv_task *)m.dev,
     (const int *)g->sel);
}

template <int NB> static void head_mma_nb(gpu_session *g, const mv_launch &m) {
  const int P = mma_pieces(g, m.fmt, NB);
  const size_t smem = head_mma_smem(NB, P, m.cols);
  if (m.fmt != 1)
    head_mma_run<0, NB>(g, m, smem);
  else if constexpr (NB == 8)
    P == 2 ? head_mma_run<1, NB, 2>(g, m, smem) : head_mma_run<1, NB>(g, m, smem);
  else
    head_mma_run<1, NB>(g, m, smem);
}

static bool launch_head_mma(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax);
  if (!g->tune.head_mma || !g->fast || !m.best || (m.fmt != 0 && m.fmt != 1) || m.ntask != 1 || m.cols % 64 ||
      head_mma_smem(NB, mma_pieces(g, m.fmt, NB), m.cols) > RT_HEAD_SMEM)
    return false;
  switch (NB) {
  case 1: head_mma_nb<1>(g, m); break;
  case 2: head_mma_nb<2>(g, m); break;
  case 4: head_mma_nb<4>(g, m); break;
  default: head_mma_nb<8>(g, m); break;
  }
  return true;
}

// k_dmma (kernels/rt_dmma.cuh) for a plain dense FP8/BF16 launch at 2..8
// tokens: a cluster of ceil(cols / 512) blocks per 128 rows of each task.
// H200, 4K batch 8: mtpq 363.4 -> 308.5 us a step (fc 19.6 -> 13.2 us in the
// timeline, q/k/v 56.4 -> 26.8, o 19.0 -> 14.7, router 22.9 -> 11.7;
// tests/bench/RESULTS.md, twenty-sixth round). Also tried there and not
// kept: the routed experts' NVFP4 products on tensor cores the same way
// (k_emma, commit c9435ed: a pair of weights one HMUL2 into an f16 MMA, x as
// pieces per block): slower, 115.5 -> 132.8 us at batch 1 (gate/up 11.3 ->
// 18.9, down 6.4 -> 16.0) and 308.5 -> 336.6 at batch 8; their weights can
// be requested only after the routing, and the pieces add two L2 round
// trips and barriers before the first product
template <int F, int NB, int P = 3> static void dmma_run(gpu_session *g, const mv_launch &m, int ks) {
  const mv_flat fg = flat_grid(m, RT_DM_ROWS);
  go_cl(g, true, (unsigned)ks, k_dmma<F, NB, P>, dim3((unsigned)ks, (unsigned)fg.off[m.ntask]), dim3(256), 0,
        (const dlin *)g->lins, (const mv_task *)m.dev, fg);
}

static bool launch_dmma(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax);
  const int64_t ks = (m.cols + RT_DM_SLICE - 1) / RT_DM_SLICE;
  if (!g->tune.dmma || !g->fast || NB < 2 || !m.plain || (m.fmt != 0 && m.fmt != 1) || m.ntask > RT_FLAT || m.cols % 64 ||
      ks > RT_DM_KS)
    return false;
  const int k = (int)ks, f = m.fmt;
  switch (NB) {
  case 2: f ? dmma_run<1, 2>(g, m, k) : dmma_run<0, 2>(g, m, k); break;
  case 4: f ? dmma_run<1, 4>(g, m, k) : dmma_run<0, 4>(g, m, k); break;
  default:
    if (!f)
      dmma_run<0, 8>(g, m, k);
    else
      mma_pieces(g, f, 8) == 2 ? dmma_run<1, 8, 2>(g, m, k) : dmma_run<1, 8>(g, m, k);
    break;
  }
  return true;
}

// The plain dense products at one token (fc, q/k/v, o, router, shared
// expert) with all of their weights requested before the wait, through the
// bulk copy engine into shared memory (at most 110 KB a block, so that the
// next launch's blocks fit beside it), and products on tensor cores: under
// ncu fc 7.6 -> 6.9 us, q/k/v 11.7 -> 10.4, o 7.4 -> 6.8, but the step no
// faster (139.6 vs 138.1-138.6 us; tests/bench/RESULTS.md, twelfth round):
// what these kernels cost the chain is not the time their weights take to
// arrive. Also tried and not kept: the plain products at 2..8 tokens on
// k_head_mma's tensor-core layout (S = 1, 2 or 8 warps a 16-row tile; code
// in commit 7b88be6): correct, but under ncu at 4K batch 8 fc 23.0 -> 35.3
// us, o 22.6 -> 33.8, q/k/v 57.9 -> 57.8, and the step slower at batch 2
// and 8 (179.0 -> 185.9, 397.5 -> 406.2 us): every block turns all of x
// into pieces in shared memory after its wait (8 tokens x 4,096 columns for
// fc), which a product of few rows cannot amortise as the head does
// (tests/bench/RESULTS.md, thirteenth round). k_dmma now takes those
// products: a block converts only its 512-column slice (launch_dmma).
static void launch_mv(gpu_session *g, const mv_launch &m) {
  if (!m.ntask) return;
  if (launch_head_mma(g, m) || launch_dmma(g, m)) return;
  const int NB = nb_slots(m.nbmax);
  if (!g->fast) {
    int64_t bx = (m.rows + 7) / 8;
    go(g, true, k_mv_any, dim3((unsigned)(bx < 4096 ? bx : 4096), (unsigned)m.ntask), dim3(256), 0,
       (const dlin *)g->lins, (const mv_task *)m.dev, (const int *)g->sel);
    return;
  }
  // the fewest rows per warp (a warp's loads all in flight at once) that
  // still fit the launch in one wave of resident blocks; beyond that the
  // grid is persistent and each warp loops over row sets. Allowing a
  // quarter over the wave left q/k/v a short second wave (3.7 us slower a
  // step at 4K batch 1); at one token 5 rows per warp put the 80B shape's
  // q/k/v (9,216 rows) and routed gate/up (20 x 512) in one wave where 4
  // left a second (under ncu, with rt_terms' addressing: 12.0 -> 11.5 and
  // 17.4 -> 11.5 us, though the step as a graph did not move;
  // tests/bench/RESULTS.md)
  const int64_t wave = (int64_t)g->sms * (NB <= 2 && m.fmt != 3 ? 2 : 1);
  if (NB > 1 && (m.fmt == 0 || m.fmt == 1) && mv_blocks(m, 8) > wave) {
    NB == 2 ? mv_big<2>(g, m) : NB == 4 ? mv_big<4>(g, m) : mv_big<8>(g, m);
    return;
  }
  if (m.glu && NB == 1) { // row pairs (routed gate/up, one token a task): the fewest even rows per warp in one wave
    const int r = mv_blocks(m, 2) <= wave ? 2 : mv_blocks(m, 4) <= wave ? 4 : mv_blocks(m, 6) <= wave ? 6 : 8;
    r == 2 ? mv_go<1, 2>(g, m) : r == 4 ? mv_go<1, 4>(g, m) : r == 6 ? mv_go<1, 6>(g, m) : mv_go<1, 8>(g, m);
    return;
  }
  switch (NB) {
  case 1: {
    const int r = mv_blocks(m, 1) <= wave ? 1 : mv_blocks(m, 4) <= wave ? 4 : mv_blocks(m, 5) <= wave ? 5 : 8;
    if (r == 1 && mv_split<1>(g, m, 1)) break;
    r == 1 ? mv_go<1, 1>(g, m) : r == 4 ? mv_go<1, 4>(g, m) : r == 5 ? mv_go<1, 5>(g, m) : mv_go<1, 8>(g, m);
    break;
  }
  case 2: mv_nb<2>(g, m, wave); break;
  case 4: mv_nb<4>(g, m, wave); break;
  default: mv_nb<8>(g, m, wave); break;
  }
}

// the kernels of one step for n tokens (inputs in g->tok/pos/seqa, hidden in
// g->out). k_prep starts a step without programmatic dependence: the kernels
// after it read positions and cached rows before they wait, which is safe
// only once the previous step has finished. chain: a head follows (where it
// goes through cuBLASLt, k_final also writes its x pieces)
static void enqueue_step(gpu_session *g, int n, bool chain) {
  const struct mtpq_rt_model *d = g->d;
  const plan &p = g->plans[n];
  const int H = (int)d->H, Nq = (int)d->Nq, Nkv = (int)d->Nkv, D = (int)d->D, G = Nq / Nkv;
  mark(g, "start");
  g->on = g->st;
  const bool nx = H == 2048; // the norm kernels' instance for exactly 2,048 values (rt_ops.cuh, RT_NQX)
  go(g, false, nx ? k_prep<2048> : k_prep<0>, dim3(n, 2), dim3(256), 0,
     (const uint8_t *)g->embed, (const int *)g->tok, (const float *)g->out, H, (const float *)g->nrm[0],
     (const float *)g->nrm[1], d->eps, g->c, g->best, n);
  mark(g, "embed+norms");
  launch_mv(g, p.fc);
  mark(g, "fc");
  go(g, true, nx ? k_norm<2048> : k_norm<0>, dim3(n), dim3(256), 0, (const float *)g->x0, (const float *)g->nrm[2], H,
     d->eps, g->a);
  mark(g, "input norm");
  launch_mv(g, p.qkv);
  mark(g, "q,k,v");
  const int ring = g->attn_x ? 2 : 0, X = attn_blocks(g, n);
  go(g, true, attn_kernel(g, ring), dim3(ring ? X : g->nsplit, Nkv, n), dim3(256),
     (size_t)rt_attn_smem(G, D, ring) * 4, (const float *)g->qg, Nq, Nkv, D, (int)d->rot, (const float2 *)g->rcs,
     (const int64_t *)g->pos, (const int *)g->seqa, n, g->max_pos, g->window, (const float *)g->nrm[4],
     (const float *)g->nrm[5], d->eps, (const float *)g->kk, (const float *)g->vv, g->kc, g->vc, g->nsplit, g->po,
     g->pm, g->pl, ring, g->kv_ef_pos);
  mark(g, "q, k norm+rope, KV write, attention (splits)");
  go(g, true, g->comb4 ? k_attn_combine<4> : k_attn_combine<1>, dim3(Nq, n, (D + 31) / 32), dim3(256),
     (size_t)g->nsplit * 4, (const float *)g->qg,
     (const float *)g->po, (const float *)g->pm, (const float *)g->pl, Nq, D, (const int64_t *)g->pos, g->window,
     g->nsplit, ring ? X : g->nsplit, g->att);
  mark(g, "attention combine+gate");
  launch_mv(g, p.o);
  mark(g, "o_proj");
  go(g, true, nx ? k_add_norm<2048> : k_add_norm<0>, dim3(n), dim3(256), 0, g->y, (const float *)g->x0,
     (const float *)g->nrm[3], H, d->eps, g->y2);
  mark(g, "residual+norm");
  const int S = g->K + 1;
  // the shared expert (gate/up, SwiGLU, down into m2) on a second stream
  // beside the router, routing and routed experts: it needs y2 only
  const bool side = d->moe && d->sg.w && !g->prof;
  if (side) {
    cudaEventRecord(g->fork, g->st);
    cudaStreamWaitEvent(g->st2, g->fork, 0);
    g->on = g->st2;
  }
  launch_mv(g, p.gus);
  mark(g, "shared expert gate/up");
  if (d->sg.w)
    go(g, true, k_swiglu, dim3(16), dim3(256), 0, (const float *)g->gb, (const float *)g->ub, g->act, n, g->K, 1, S,
       (int)g->IM, g->IM);
  mark(g, "shared expert swiglu");
  launch_mv(g, p.downs);
  mark(g, "shared expert down");
  if (side) {
    cudaEventRecord(g->join, g->st2);
    g->on = g->st;
  }
  if (d->moe) {
    launch_mv(g, p.rs);
    mark(g, "router+shared gate");
    go(g, true, k_route, dim3(1, n), dim3(32 * (unsigned)((d->E + 32 * RT_RPT - 1) / (32 * RT_RPT))), 0,
       (const float *)g->pr, (const float *)g->z,
       (int)d->E, g->K, d->norm_topk, d->seg.w != nullptr ? 1 : 0, g->sel, g->wsel);
    mark(g, "softmax+top-k");
    launch_mv(g, p.gu);
    mark(g, "experts gate/up");
    if (!g->glu) {
      go(g, true, k_swiglu, dim3(64), dim3(256), 0, (const float *)g->gb, (const float *)g->ub, g->act, n, 0, g->K, S,
         (int)g->IM, g->IM);
      mark(g, "experts swiglu");
    }
    launch_mv(g, p.down);
    mark(g, "experts down (weighted sum)");
  }
  if (side) cudaStreamWaitEvent(g->st, g->join, 0);
  go(g, !side, nx ? k_final<2048> : k_final<0>, dim3(n), dim3(256), 0, g->m, (const float *)g->m2, (const float *)g->y,
     (const float *)(d->moe ? g->wsel + g->K : nullptr), (const float *)g->nrm[6], H, d->eps, g->out,
     chain && p.lt.on ? g->lt_b : nullptr);
  mark(g, "final norm");
}

static void enqueue_chain_step(gpu_session *g, int n) {
  enqueue_step(g, n, true);
  if (g->plans[n].lt.on) lt_run(g, n);
  else launch_mv(g, g->plans[n].head);
  mark(g, "head+argmax");
  go(g, true, k_next, dim3(1), dim3(32), 0, (const unsigned long long *)g->best, (const int64_t *)g->ids, g->tok,
     g->pos, g->rec, g->stepc, n);
  mark(g, "feedback");
}

static enum mtpq_status ensure(gpu_session *g, int n, bool chain, struct mtpq_err *err) {
  plan &p = g->plans[n];
  if (!p.built) {
    enum mtpq_status st = build_plan(g, n, err);
    if (st) return st;
  }
  cudaGraphExec_t &ex = chain ? p.chain : p.step;
  if (!g->tune.graphs || ex) return MTPQ_OK;
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal));
  if (chain) enqueue_chain_step(g, n);
  else enqueue_step(g, n, false);
  CK(cudaStreamEndCapture(g->st, &gr));
  cudaError_t e = cudaGraphInstantiate(&ex, gr, 0);
  cudaGraphDestroy(gr);
  CK(e);
  return MTPQ_OK;
}

static enum mtpq_status run(gpu_session *g, int n, bool chain, struct mtpq_err *err) {
  cudaGraphExec_t ex = chain ? g->plans[n].chain : g->plans[n].step;
  if (g->tune.graphs) CK(cudaGraphLaunch(ex, g->st));
  else if (chain) enqueue_chain_step(g, n);
  else enqueue_step(g, n, false);
  CK(cudaGetLastError());
  return MTPQ_OK;
}

// token ids, sequences, positions, the step counter (0) and hidden states
// of n slots to the device: one copy of the staging block's first bytes
static enum mtpq_status stage(gpu_session *g, int n, struct mtpq_err *err) {
  CK(cudaMemcpyAsync(g->stage_d, g->stage_h, ST_HID + (size_t)(n * g->d->H) * 4, cudaMemcpyHostToDevice, g->st));
  return MTPQ_OK;
}

static enum mtpq_status check_slot(const gpu_session *g, int32_t tok, int64_t pos, struct mtpq_err *err) {
  if (pos < 0 || pos >= g->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld outside the %lld-position cache", (long long)pos,
                        (long long)g->max_pos);
  if (tok < 0 || tok >= g->d->embed_rows)
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tok,
                        (long long)g->d->embed_rows);
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__cuda_step(void *p, int n, const int32_t *tokens, const void *hidden,
                                            int hidden_bf16, const int64_t *positions, float *out_hidden,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  for (int i = 0; i < n;) {
    int c = 1; // a chunk: up to 8 slots at strictly increasing positions (each sees the earlier ones)
    while (i + c < n && c < RT_NMAX && positions[i + c] > positions[i + c - 1]) c++;
    for (int j = 0; j < c; j++) {
      enum mtpq_status st = check_slot(g, tokens[i + j], positions[i + j], err);
      if (st) return st;
      g->h_tok[j] = tokens[i + j], g->h_pos[j] = positions[i + j], g->h_seq[j] = g->cur;
      if (hidden_bf16)
        for (int64_t k = 0; k < H; k++) {
          uint16_t b;
          memcpy(&b, (const unsigned char *)hidden + ((size_t)(i + j) * H + k) * 2, 2);
          g->h_hid[j * H + k] = mtpq_bf16_to_f32(b);
        }
      else
        memcpy(g->h_hid + j * H, (const float *)hidden + (size_t)(i + j) * H, (size_t)H * 4);
    }
    enum mtpq_status st = ensure(g, c, false, err);
    if (!st) st = stage(g, c, err);
    if (!st) st = run(g, c, false, err);
    if (st) return st;
    CK(cudaMemcpyAsync(g->h_hid, g->out, (size_t)(c * H) * 4, cudaMemcpyDeviceToHost, g->st));
    CK(cudaStreamSynchronize(g->st));
    memcpy(out_hidden + (size_t)i * H, g->h_hid, (size_t)(c * H) * 4);
    i += c;
  }
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__cuda_head(void *p, const float *hidden, int32_t *tok, float *logits,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const struct mtpq_rt_model *d = g->d;
  if (!g->plans[1].built) {
    enum mtpq_status st = build_plan(g, 1, err);
    if (st) return st;
  }
  memcpy(g->h_hid, hidden, (size_t)d->H * 4);
  CK(cudaMemcpyAsync(g->out, g->h_hid, (size_t)d->H * 4, cudaMemcpyHostToDevice, g->st));
  CK(cudaMemsetAsync(g->best, 0, sizeof(unsigned long long), g->st));
  const int pdl = g->pdl; // after a memset: nothing to overlap
  g->pdl = 0;
  launch_mv(g, logits ? g->plans[1].head_logits : g->plans[1].head);
  g->pdl = pdl;
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(g->h_best, g->best, sizeof(unsigned long long), cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
  int64_t row = (int64_t)(0xFFFFFFFFu - (uint32_t)(g->h_best[0] & 0xFFFFFFFFu));
  *tok = (int32_t)(d->reduced ? d->ids[row] : row);
  if (logits) {
    std::vector<float> small((size_t)d->head.rows);
    CK(cudaMemcpy(small.data(), g->logits, small.size() * 4, cudaMemcpyDeviceToHost));
    if (d->reduced) {
      for (int64_t v = 0; v < d->full_vocab; v++) logits[v] = -INFINITY;
      for (int64_t k = 0; k < d->head.rows; k++) logits[d->ids[k]] = small[(size_t)k];
    } else {
      memcpy(logits, small.data(), small.size() * 4);
    }
  }
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__cuda_draft(void *p, int n, const int32_t *tokens, const float *hidden,
                                             const int64_t *positions, int steps, int32_t *out_tokens,
                                             struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  if (n < 1 || n > g->nseq)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences in a session of %d", n, g->nseq);
  if (steps < 1 || steps > RT_MAXSTEPS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d draft steps: 1..%d", steps, RT_MAXSTEPS);
  for (int j = 0; j < n; j++) {
    enum mtpq_status st = check_slot(g, tokens[j], positions[j] + steps - 1, err);
    if (!st) st = check_slot(g, tokens[j], positions[j], err);
    if (st) return st;
    g->h_tok[j] = tokens[j], g->h_pos[j] = positions[j], g->h_seq[j] = j;
  }
  memcpy(g->h_hid, hidden, (size_t)(n * H) * 4);
  enum mtpq_status st = ensure(g, n, true, err);
  if (!st) st = stage(g, n, err);
  if (st) return st;
#ifdef MTPQ_TIMELINE
  tl_reset(g);
#endif
  CK(cudaEventRecord(g->t0, g->st));
  for (int s = 0; s < steps && !st; s++) st = run(g, n, true, err);
  CK(cudaEventRecord(g->t1, g->st));
  if (st) return st;
  CK(cudaMemcpyAsync(g->h_rec, g->rec, (size_t)(steps * n) * sizeof(int), cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
  memcpy(out_tokens, g->h_rec, (size_t)(steps * n) * sizeof(int32_t));
  float ms = 0;
  g->draft_us = cudaEventElapsedTime(&ms, g->t0, g->t1) == cudaSuccess ? ms * 1e3 : -1;
#ifdef MTPQ_TIMELINE
  tl_write();
#endif
  return MTPQ_OK;
}

// Ordinary loads (k_sweep<false>) over a buffer four times the L2's size:
// what the draft calls before left in L2 is gone, as after the target's
// verify step between two calls in a real decode
extern "C" enum mtpq_status mtpq__cuda_flush_l2(void *p, struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
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

extern "C" double mtpq__cuda_draft_device_us(void *p) { return static_cast<gpu_session *>(p)->draft_us; }

extern "C" int mtpq__cuda_profile(void *p, int n, const char **names, double *us, int max, struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  if (n < 1 || n > RT_NMAX || !g->plans[n].built) {
    mtpq_err_set(err, MTPQ_E_INVAL, "profile: run a %d-sequence draft first", n);
    return -1;
  }
  g->ev.assign(64, nullptr); // created before the step: creating them between launches would stall it
  for (cudaEvent_t &e : g->ev) cudaEventCreate(&e);
  g->prof = true;
  enqueue_chain_step(g, n); // the positions move on by one, as in a draft step
  g->prof = false;
  int k = 0;
  if (cudaStreamSynchronize(g->st) == cudaSuccess)
    for (size_t i = 1; i < g->evname.size() && k < max; i++, k++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, g->ev[i - 1], g->ev[i]);
      names[k] = g->evname[i], us[k] = ms * 1e3;
    }
  for (cudaEvent_t e : g->ev) cudaEventDestroy(e);
  g->ev.clear(), g->evname.clear();
  return k;
}
