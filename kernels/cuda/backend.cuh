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
//   experts gate/up launch_mv, routed row pairs with SwiGLU                   k_mv.cu, k_mvs.cu
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
// The backend runs the model of kernels/runtime.h on the device for 1..8
// tokens per launch, in float32 like the CPU reference. One draft step is
// captured as a CUDA graph per token count; a draft chain replays step +
// head + feedback k times and synchronises once. Consecutive kernels
// overlap by programmatic dependent launch (each waits in rt_wait for its
// predecessor's results), and the shared expert runs on a second stream
// beside the routed experts.
//
// Why a chain of kernels and not one persistent kernel: every
// synchronisation through memory (grid barrier, flag counter) costs at
// least a kernel boundary under programmatic dependent launch, and more
// while weights stream, since its polls queue behind the SM's weight
// traffic (ledger 1).
//
// cuBLASLt takes one product, the stock drafter's BF16 head at 5..8 tokens
// (k_lt.cu). Its FP8 GEMMs would round the float32 activations to FP8 (the
// numerics contract keeps them float32) and it has no NVFP4-weight product
// on Hopper, so the quantized drafter stays on the kernels here (ledger 2).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
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

// cuBLASLt's workspace (the stock BF16 head at tune lt.. 8 tokens: k_lt.cu)
#define LT_WS ((size_t)32 << 20)

// byte offsets in the staging block: token ids, sequences, positions (RT_NMAX
// each), the draft step counter, then the hidden states (g->x.out)
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
  bool unif = false;          // every task one term, of task 0's rows and cols: k_mvs may take it
  std::vector<int64_t> trows; // rows of each task
};

struct plan {
  bool built = false;
  mv_launch fc, qkv, o, rs, gu, gus, down, downs, head, head_logits; // gus/downs: the shared expert
  lt_head lt;                                                         // the head through cuBLASLt, where on
  cudaGraphExec_t step = nullptr, chain = nullptr;
};

struct gpu_session {
  // the model and the shapes the session was opened for
  const struct mtpq_rt_model *d;
  int64_t max_pos;            // cached positions a sequence holds
  int window, nseq, cur;      // sliding window (0: none), sequences, the selected one
  int nsplit, K, sms, l2;     // attention splits of RT_CS positions, routed experts a token, SMs, L2 bytes
  int64_t IM;                 // expert / shared / dense intermediate slot width
  struct {                    // settings, fixed at open
    mtpq_cuda_tune tune;      // the kill switches and MTPQ_CUDA_TUNE (kernels/cuda/tune.h)
    int pdl;                  // programmatic dependent launch now (tune.pdl; off for one launch after a memset)
    int fast;                 // every matrix fits the vectorised kernels (rows of whole 16-element chunks, 32-bit offsets)
    int glu;                  // routed experts' gate/up as row-pair matrices, SwiGLU in their product
    int lt_min;               // the BF16 head through cuBLASLt from this many tokens a step (0: never)
    bool comb4;               // k_attn_combine<4> (more than 256 partials a head)
    int attn_x;               // k_attn's ring blocks per (KV head, token); 0: a block per split
    int attn_per;             // ring blocks an SM
    int64_t kv_ef_pos;        // k_attn copies the cached K/V evict-first past this many positions a launch
  } set;
  struct {                    // weights, as the model stores them
    std::vector<dlin> host;   // the table (L_* then the experts' gate, up, down), host copy
    dlin *lins;               // the same on the device
    float *nrm[7];
    const uint8_t *embed;
    int64_t *ids;             // a reduced head's target ids, or NULL
  } w;
  struct {                    // activations and the step's scratch, float32 unless noted
    float *out, *c, *x0, *a, *qg, *kk, *vv, *att, *y, *y2, *m, *m2, *pr, *z, *gb, *ub, *act, *po, *pm, *pl, *logits;
    int *sel;                 // routed experts a token (RT_KST stride)
    float *wsel;              // their weights, then sigmoid(shared_expert_gate)
    float2 *rcs;              // RoPE cos, sin per position and rotated pair (computed on the host, as the CPU backend does)
    unsigned long long *best; // argmax keys a token
    unsigned *hq;             // k_head_dyn's counters (tickets, blocks done), 0 between launches
  } x;
  struct {                    // the K/V caches, BF16 bits, [nseq, max_pos, Nkv * D]
    uint16_t *kc, *vc;
  } kv;
  struct {                    // a call's inputs: one block (ST_* layout) on the device and pinned on the host
    uint8_t *dev = nullptr, *host = nullptr;
    int *tok, *seq, *stepc;   // device views
    int64_t *pos;
    int *rec;                 // the drafted ids, on the device
    int *h_tok, *h_seq, *h_rec; // host views (h_rec: pinned, with h_best after it)
    int64_t *h_pos;
    float *h_hid;
    unsigned long long *h_best;
    cudaEvent_t staged = nullptr; // the last copy out of the pinned block: the host writes it again after that
  } io;
  struct {                    // the stock BF16 head through cuBLASLt (k_lt.cu)
    cublasLtHandle_t h = nullptr;
    void *ws = nullptr;           // workspace (LT_WS bytes)
    __nv_bfloat16 *b = nullptr;   // x's pieces, cols x 3 RT_NMAX
    float *d = nullptr;           // the GEMM's output, head rows x 3 RT_NMAX
  } lt;
  cudaStream_t st = nullptr, st2 = nullptr; // st2: the shared expert, beside the routed ones
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaStream_t on = nullptr;  // the stream go() launches on: st, or st2 for the shared expert
  plan plans[RT_NMAX + 1];
  std::vector<void *> allocs; // freed at close
  uint4 *flush_buf = nullptr; // mtpq__cuda_flush_l2's buffer (4 x L2), allocated at its first call
  struct {                    // timing and profiling
    cudaEvent_t t0 = nullptr, t1 = nullptr; // around a draft call's steps (mtpq__cuda_draft_device_us)
    double draft_us = -1;
    bool on = false;          // mtpq__cuda_profile: an event after every kernel of a step
    std::vector<cudaEvent_t> ev;
    std::vector<const char *> names;
    int nlaunch = 0;          // go_cl's launches so far (the timeline's marks count them)
    std::vector<std::pair<const char *, int>> *tl = nullptr; // timeline builds: mark() appends (name, nlaunch)
  } prof;
};

static inline void mark(gpu_session *g, const char *name) {
  if (g->prof.tl) g->prof.tl->emplace_back(name, g->prof.nlaunch);
  if (!g->prof.on || g->prof.names.size() >= g->prof.ev.size()) return;
  cudaEventRecord(g->prof.ev[g->prof.names.size()], g->st);
  g->prof.names.push_back(name);
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
  if (pdl && g->set.pdl && !g->prof.on) {
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
  g->prof.nlaunch++;
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
// only as these leave; leaving room for them was slower (ledger 3).
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

// the token slots a launch is compiled for (the NB of k_mv and k_head_mma): 1, 2, 4 or 8
static inline int nb_slots(int nbmax) { return nbmax <= 1 ? 1 : nbmax <= 2 ? 2 : nbmax <= 4 ? 4 : 8; }

// the pieces x takes in an MMA product of format f (1 FP8, 0 BF16) at NB
// token slots: two f16 pieces for FP8 at 8 (16 MMA columns, not 24: one
// n-tile fewer; rt_split_p), else three (ledger 4)
static inline int mma_pieces(int f, int NB) { return f == 1 && NB == 8 ? 2 : 3; }


// ---- the families' launchers ----

// session.cu
enum mtpq_status upload(gpu_session *g, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err);
// plan.cu: the plans of n tokens; a product launch (head, dense, routed) on the kernel that takes it
enum mtpq_status build_plan(gpu_session *g, int n, struct mtpq_err *err);
// plan.cu: a one-term unrouted task (token j: x + j xs into y + j ys); a task list uploaded as one launch
// rows of a and b (rb bytes each) alternating: a gate/up pair matrix (ledger 23)
inline std::vector<uint8_t> interleave_rows(const uint8_t *a, const uint8_t *b, int64_t rows, size_t rb) {
  std::vector<uint8_t> buf((size_t)(2 * rows) * rb);
  for (int64_t i = 0; i < rows; i++) {
    memcpy(&buf[(size_t)(2 * i) * rb], a + (size_t)i * rb, rb);
    memcpy(&buf[(size_t)(2 * i + 1) * rb], b + (size_t)i * rb, rb);
  }
  return buf;
}
mv_task dense_task(int lin, const float *x, int64_t xs, float *y, int64_t ys, int nb);
enum mtpq_status put_tasks(gpu_session *g, const std::vector<mv_task> &v, mv_launch *m, struct mtpq_err *err);
// k_dmv.cu: a plain dense FP8/BF16 launch of few rows at 2..8 tokens, a warp a row (tune dmv=1); false where it
// does not apply
bool dmv_launch(gpu_session *g, const mv_launch &m);
void launch_mv(gpu_session *g, const mv_launch &m);
// k_mv.cu: any product on the FFMA kernels
void mv_ffma_launch(gpu_session *g, const mv_launch &m);
// k_mvs.cu: a one-token NVFP4 launch on the streamed kernel; false where it does not apply or is not chosen
// (big: k_mv would take more than one wave)
bool mvs_launch(gpu_session *g, const mv_launch &m, bool big);
// whether k_mvs can take one-term NVFP4 tasks of rows x cols under g's settings (it takes them where k_mv
// would need more than a wave, or wherever they fit under mvs=1)
bool mvs_fits(const gpu_session *g, int fmt, int64_t rows, int64_t cols);
// k_head.cu, k_dmma.cu: false where the launch does not fit them
bool head_mma_launch(gpu_session *g, const mv_launch &m);
bool dmma_launch(gpu_session *g, const mv_launch &m);
// the blocks k_dmma's grid would have for m (its clusters' slices times its row blocks)
int64_t dmma_blocks(const mv_launch &m);
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
// softmax + top-K of n rows of E router logits (row t at logits + t E) into sel and wsel (RT_KST a row; wsel[K]:
// sigmoid(z[t]), 1 without z): k_route, the drafter's routing, which the target's forward and prefill take too
// (E <= 32 RT_RPT x 8 warps: the load checks)
void ops_route_rows(gpu_session *g, bool pdl, int n, const float *logits, const float *z, int E, int K, int norm,
                    int *sel, float *wsel);
void ops_final(gpu_session *g, int n, bool pdl, __nv_bfloat16 *pieces);
void ops_next(gpu_session *g, int n);
// sweep.cu
enum mtpq_status sweep_flush_l2(gpu_session *g, struct mtpq_err *err);
#ifdef MTPQ_TIMELINE
// session.cu: the timeline's count zeroed before a call, its records written after, to the file
// MTPQ_CUDA_TL_FILE names with suffix appended (NULL: none); with marks, FILE.names lists them
enum mtpq_status tl_open(gpu_session *g, struct mtpq_err *err);
void tl_reset(gpu_session *g);
void tl_write(const char *suffix, const std::vector<std::pair<const char *, int>> *marks);
#endif
