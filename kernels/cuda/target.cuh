// The target model on the device (kernels/target_cuda.h): what the host side
// (target_gpu.cu) and the target's own kernels (k_target.cu) share.
//
// One forward of T tokens (1..8): Tn tokens each of n sequences (n Tn = T;
// products read each weight once for all of them; the mixers run each
// sequence's tokens on its own state), kernel by kernel:
//   k_t_embed       embedding rows, argmax keys cleared, input norm of layer 0
//   per layer:
//     'L' (Gated DeltaNet):
//       proj        launch_mv: in_proj_qkvz + in_proj_ba, or in_proj_qkv/z/b/a, into one row per token
//       k_t_gdn     per value head: the depthwise causal conv1d + SiLU of the channels it reads, l2norm(q, k),
//                   gates, the delta rule, the gated RMSNorm (plain w) x silu(z) (the head's last column block);
//                   the conv and recurrent state of every token into its slot
//       out         launch_mv: out_proj
//     'A' (gated attention):
//       q, k, v     launch_mv (one launch, three tasks)
//       k_t_kv      K: (1 + w) norm + RoPE, K and V to the BF16 cache (tattn=1: q's norm + RoPE in place too)
//       k_t_attn    q norm + RoPE, causal attention over a split of TA_C positions (with MTPQ_CUDA_TUNE=tattn=1:
//                   k_t_attn_mma, a group of tokens over a split on the tensor cores, k_tattn.cu, q normed and
//                   roped by k_t_kv)
//       k_t_comb    the splits merged, x sigmoid(gate)
//       o           launch_mv: o_proj
//     k_t_addnorm   residual + post-attention norm
//     MoE: router (+ shared_expert_gate) launch_mv, k_route (the drafter's: softmax, top-k, weights),
//          gate/up of each (token, expert) + the shared expert's launch_mv (row pairs, SwiGLU in the
//          product; separate matrices + k_t_swiglu with MTPQ_CUDA_TUNE=glu=0 or unmatched shapes; from two
//          tokens on, NVFP4, streamed through k_mvs),
//          down launch_mv (routed experts and the shared expert summed with their weights; from two tokens
//          on, where k_mvs takes it, a task a (token, expert) streamed through k_mvs, each leaving its own
//          partial, and the next k_t_addnorm sums them)
//     dense: gate/up launch_mv, k_t_swiglu, down launch_mv
//     k_t_addnorm   residual (+ the down's partials) + the next layer's input norm (the final norm after the
//                   last)
//   head            launch_mv with the argmax keys (and the logits when asked)
// Products go through the drafter backend's kernels (kernels/cuda/k_mv.cu and
// the ones launch_mv picks), with a gpu_session as their context: the weight
// table, the routing array, the stream and the settings. Every kernel here
// reads the call's positions, slots and state pointers from the device call
// blocks (tcall, one per sequence of the call), so one CUDA graph per
// (sequences, Tn, head) replays any call of any sequences.
#pragma once
#include "kernels/cuda/backend.cuh"

extern "C" {
#include "kernels/target_cuda.h"
#include "kernels/target_model.h"
}

// Attention splits: a forward of T tokens (all its sequences') at pos0
// splits each sequence's cached positions [0, pos0 + Tn) into runs of
// ta_run(pos0 + Tn, runs) positions (64 .. TA_C, a multiple of 64), about
// runs = ta_runs(...) of them: short contexts in runs of 64 or more so that
// the forward's blocks (one a KV head, token and run) fill the SMs' block
// slots once, not in two waves at T = 4 (ledger 60), at most TA_SPLITS a
// token; long ones in runs of TA_C (the scores' shared
// memory). The grid holds ta_grid(max_pos) splits (at most a token's);
// those past a call's positions return at once.
#define TA_C 256
#define TA_SPLITS 128
#define TA_NSMAX 4096 // splits a sequence may need (max_pos <= TA_NSMAX x TA_C)
#define TA_KR 4 // k_t_attn: key rows a warp loads before their scores (rows i, i + 8, ..., i + 8 (TA_KR - 1))
#define TA_VR 16 // k_t_attn: value rows, k_t_comb: splits, whose loads are in flight before their sums
#define TC_R 64 // k_t_comb: the first splits, whose loads are issued before its reductions
// the runs a token's positions split into: the k_t_attn block slots of the GPU (slots) over the forward's
// (KV head, token) pairs, 1 .. TA_SPLITS
__host__ __device__ inline int64_t ta_runs(int64_t slots, int64_t Nkv, int64_t T) {
  const int64_t r = slots / (Nkv * T);
  return r < 1 ? 1 : r > TA_SPLITS ? TA_SPLITS : r;
}
__host__ __device__ inline int64_t ta_run(int64_t n, int64_t runs) {
  const int64_t c = ((n + runs - 1) / runs + 63) / 64 * 64;
  return c < 64 ? 64 : c > TA_C ? TA_C : c;
}
__host__ __device__ inline int64_t ta_grid(int64_t max_pos) {
  const int64_t a = (max_pos + TA_C - 1) / TA_C, b = (max_pos + 63) / 64;
  return a > (b < TA_SPLITS ? b : TA_SPLITS) ? a : (b < TA_SPLITS ? b : TA_SPLITS);
}

// k_t_attn's tensor-core form (MTPQ_CUDA_TUNE=tattn=1; kernels/cuda/k_tattn.cu): a block a (KV head,
// sequence, group of up to ta_tb(G) tokens, run) walks its run TQ_CH positions at a time, so a run is not
// bounded by TA_C: about tq_runs(slots, bps) runs a sequence (bps: the forward's blocks a run), at most
// TA_SPLITS, each tq_run(pos0 + Tn, runs) positions (a multiple of TQ_CH); ta_grid covers them.
#define TQ_CH 64 // cached positions a step (a stage of keys or of values)
__host__ __device__ inline int64_t tq_runs(int64_t slots, int64_t bps) {
  const int64_t r = slots / bps;
  return r < 1 ? 1 : r > TA_SPLITS ? TA_SPLITS : r;
}
__host__ __device__ inline int64_t tq_run(int64_t n, int64_t runs) {
  const int64_t c = ((n + runs - 1) / runs + TQ_CH - 1) / TQ_CH * TQ_CH;
  return c < TQ_CH ? TQ_CH : c;
}
// tokens a block of the tensor-core form: up to 32 query rows, a tile of 8 a token's 8 heads (G <= 16)
__host__ __device__ inline int ta_tb(int G) { return G > 8 ? 2 : 4; }

// the device helpers of the target's kernels (k_target.cu) and the prefill's (k_prefill.cu)
// sum over the block (blockDim a multiple of 32, at most 1024); sh: 32 floats; every thread gets it
__device__ __forceinline__ float tk_block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = rt_warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < nw; i++) s += sh[i];
  return s;
}

__device__ __forceinline__ float tk_block_max(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < nw; i++) m = fmaxf(m, sh[i]);
  return m;
}

__device__ __forceinline__ float tk_sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float tk_silu(float x) { return x * tk_sigm(x); }
__device__ __forceinline__ float tk_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// (1 + w) RMSNorm of row x [n] into y (block-wide; y may be x)
__device__ __forceinline__ void tk_zcnorm(const float *x, const float *w, int n, float eps, float *y, float *sh) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  const float r = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r * (1.0f + w[i]);
}

// (1 + w) RMSNorm of one head of D values at q into dst, by one warp (lane-strided sums, then the warp's
// butterfly): k_t_attn's queries, and k_t_kv's for k_t_attn_mma
__device__ __forceinline__ void tk_head_norm(const float *q, const float *w, int D, float eps, float *dst) {
  const int lane = threadIdx.x & 31;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) ss += q[d] * q[d];
  const float r = 1.0f / sqrtf(rt_warp_sum(ss) / (float)D + eps);
  for (int d = lane; d < D; d += 32) dst[d] = q[d] * r * (1.0f + w[d]);
}

#define TK_HMAX 8192 // hidden size (k_t_addnorm's registers: 32 values a thread)
#define TK_DVMAX 256 // GDN value head dim (k_t_gdn's shared tables)

// a sequence's part of a call, on the device (tgpu::calls, copied in before each graph launch)
struct tcall {
  int64_t pos0; // position of token 0
  int cur;      // GDN state slot read
  int nbuf;     // slots
  int tok[MTPQ_TCUDA_MAX_T];
  uint16_t *const *kc, *const *vc; // the sequence's state, device arrays a layer (NULL where the layer has none)
  float *const *conv, *const *rec; // (nbuf slots each)
};

#define TK_SMAX MTPQ_TCUDA_MAX_T // sequences a forward may hold

// a forward's call blocks as a kernel sees them: the call's token t is token t % Tn of sequence t / Tn (c[t / Tn]);
// layer: the layer a kernel works on
struct tk_calls {
  const tcall *c;
  int Tn, layer;
};

// the attention's arguments (k_t_kv, k_t_attn, k_t_comb): qg holds each token's query heads (q | gate
// interleaved a head; with mma, k_t_kv norms and ropes q in place), kk and vv the projected keys and values;
// pm, pl, pacc the splits' partials [token][query head][split] (pacc: D values each), att the gated outputs;
// slots: k_t_attn's block slots on the GPU; mma: its tensor-core form (k_tattn.cu), bps that form's blocks a
// split (tq_runs)
struct tk_attn_args {
  tk_calls c;
  float *qg;
  const float *kk, *vv, *qn, *kn;
  float *pm, *pl, *pacc, *att;
  int Nq, Nkv, D, rot, NS;
  int slots, bps, mma;
  int64_t QGS, KVS, ATS;
  float theta, eps;
};

// the forward's split length for sequence call cl (T: the forward's tokens): k_t_attn splits by it and k_t_comb
// merges by it, so both take it from here
__device__ __forceinline__ int64_t tk_split_len(const tk_attn_args &A, const tcall &cl, int T) {
  return A.mma ? tq_run(cl.pos0 + A.c.Tn, tq_runs(A.slots, A.bps)) : ta_run(cl.pos0 + A.c.Tn, ta_runs(A.slots, A.Nkv, T));
}

// a layer on the device: norms and vectors as float32, products as indices into the weight table
struct tlayer_dev {
  char kind;
  float *in_norm, *post_norm, *qn, *kn, *conv_w, *dt_bias, *A_log, *gnorm;
  int q, k, v, o;              // 'A'
  int p0, p1, p2, p3, out;     // 'L': qkvz, ba (p2, p3 -1) or qkv, z, b, a
  int router, seg, sg, su, sd; // MLP (-1: none); dense: sg, su, sd
  int ex;                      // expert gate lins ex .. ex + E - 1, up + E, down + 2E
  bool shared_term;            // the shared expert is the down launch's last term (same shape and format)
  bool glu;                    // MoE: every gate/up (routed and shared) a row-pair matrix at the gate's index,
                               // SwiGLU in its product (the up entries empty); else k_t_swiglu
};

struct tplan {
  bool built = false;
  std::vector<mv_launch> proj, out, rs, gu, down; // per layer
  std::vector<int> dnp; // per layer: the partials the down leaves a token in ydp (1: its sum, in y)
  mv_launch head, head_logits;
};

struct tpre; // the prefill's workspace (kernels/cuda/prefill.cuh)
void tpre_free(tpre *p);

struct tgpu {
  struct mtpq_target *t = nullptr;
  gpu_session ctx;          // the products' context (weight table, routing, stream, settings)
  uint8_t *arena = nullptr; // every weight, one allocation
  size_t arena_n = 0, arena_used = 0;
  std::vector<tlayer_dev> L;
  int head = -1;
  float *final_norm = nullptr;
  const uint8_t *embed = nullptr;
  int64_t H, HS, P, PS, VS, QGS, KVS, ATS, IM, S, E, K, NSMAX;
  int *chan_src = nullptr, *z_src = nullptr, *b_src = nullptr, *a_src = nullptr; // GDN: where each input is in the projections' row
  // activations, [MTPQ_TCUDA_MAX_T] rows each
  float *h, *a, *y, *y2, *proj, *o2, *qg, *kk, *vv, *att, *pm, *pl, *pacc, *pr, *sz, *wsel, *gb, *ub, *act,
      *hid, *logits;
  float *ydp; // the experts' down partials [MTPQ_TCUDA_MAX_T][S][HS] (tplan::dnp)
  tplan plans[MTPQ_TCUDA_MAX_T + 1];
  tcall *calls = nullptr, *h_calls = nullptr; // the call's blocks [TK_SMAX]: device, pinned host
  cudaGraphExec_t graph[TK_SMAX + 1][MTPQ_TCUDA_MAX_T + 1][3] = {}; // per (sequences, Tn, head)
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  tpre *pre = nullptr; // made at the first prefill
  // timeline builds (kernels/cuda/timeline.cuh): each graph's marks, (name, launches before it)
  std::vector<std::pair<const char *, int>> tl_marks[TK_SMAX + 1][MTPQ_TCUDA_MAX_T + 1][3];
};

struct tseq {
  tgpu *m;
  int64_t max_pos;
  int nbuf;
  std::vector<uint16_t *> kc, vc; // per layer (NULL: none)
  std::vector<float *> conv, rec; // per layer: nbuf slots each
  void **dptr = nullptr;          // the four per-layer arrays on the device (tcall's kc, vc, conv, rec)
  double last_us = -1;
  std::vector<void *> allocs;
};

// k_target.cu: one forward's kernels in order, on m->ctx's stream: Tn tokens of each of the n sequences whose
// blocks are in m->calls
void t_enqueue(tgpu *m, int n, int Tn, int head);

// k_tattn.cu: the tensor-core form of the attention's split kernel (k_t_attn_mma) for a forward of n sequences
// of Tn tokens (aa.slots and aa.bps from t_attn_slots and t_attn_bps), and its block slots on this GPU
void t_attn_run(gpu_session *g, const tk_attn_args &aa, int n, int Tn);
int t_attn_slots(gpu_session *g, int D);
inline int t_attn_bps(int Nkv, int G, int n, int Tn) { return Nkv * n * ((Tn + ta_tb(G) - 1) / ta_tb(G)); }
