// The target's prefill on the device (kernels/target_cuda.h,
// mtpq__tcuda_prefill): a prompt chunk of up to TP_CHUNK tokens of one
// sequence through the trunk with its products as GEMMs, the host side in
// prefill.cu, the kernels in k_prefill.cu.
//
// Why a path of its own: a verify forward (t_enqueue) runs at most 8 tokens
// and every token reads its own experts, so a 4K prompt took 512 forwards
// that each read ~8 x top-k experts a layer (ledger 32; the figures are in
// ledger 39). Here every weight is read once a chunk: the dense products
// are cuBLAS GEMMs over the chunk; the routed experts are sorted by expert
// on the device and go through one grouped GEMM launch for every expert's
// gate/up and one for every down, reading the weights as stored
// (k_egemm.cu; ledger 42); the attention is two GEMMs a KV head with a
// causal softmax between them; the Gated DeltaNet recurrence runs in its
// chunked form, 64 tokens a step, on the tensor cores (k_gdnc.cu; ledger
// 47).
//
// Numerics: weights go to the tensor cores exactly as stored (BF16; FP8
// and E2M1 x E4M3 block scale, exact in BF16 and in FP16), their tensor
// scale as the GEMM's alpha or applied to the float32 sums; activations as
// two BF16 pieces hi + lo (each rounded to nearest, so x to about 2^-16 of
// itself) accumulated into one float32 sum, except into FP8 and NVFP4
// routed experts: one FP16 piece, each row scaled by a power of two, so x to
// 2^-11 of itself (k_egemm.cu; ledger 46). The attention's queries and
// probabilities go as two pieces too; the K/V cache is BF16 as in every
// forward. So the results agree with the CPU reference to float tolerance,
// not bit for bit; the GPU tests state it.
#pragma once
#include <cublas_v2.h>

#include "kernels/cuda/target.cuh"

#define TP_CHUNK MTPQ_TCUDA_PREFILL // prompt tokens a chunk (the GEMMs' columns: every weight is read once a chunk)
#define TP_QB 256     // query rows a block of the attention's scores (bounds the scores' memory)

typedef __nv_bfloat16 bf16;

// a prefill's workspace on the device, made at the first prefill and grown with the chunk and the context
struct tpre {
  cublasHandle_t cb = nullptr;
  int64_t C = 0, L = 0; // tokens the chunk buffers hold; key positions the scores hold
  int *tok = nullptr;
  float *h = nullptr, *y = nullptr, *proj = nullptr, *mix = nullptr, *beta = nullptr, *lg = nullptr;
  float *gw = nullptr; // the chunked GDN recurrence's intermediates (k_gdnc.cu, tg_work_floats)
  float *o = nullptr;
  float *qg = nullptr, *kk = nullptr, *vv = nullptr, *att = nullptr, *sc = nullptr;
  float *pr = nullptr, *sz = nullptr, *wsel = nullptr, *ygu = nullptr, *yd = nullptr, *ysh = nullptr, *hid = nullptr;
  // the routed experts' FP16 inputs (k_egemm.cu): xh and its rows' scales xs; yact, SwiGLU's output as float32
  __half *xh = nullptr;
  float *xs = nullptr, *yact = nullptr;
  // a layer's routing sorted by expert (k_egemm.cu): sel, the routing [C][RT_KST]; slot, each routed (token,
  // k)'s place in its expert; perm, sorted row -> token; inv, (token, k) -> sorted row; cnt, off, toff: each
  // expert's rows, first row and first tile (E + 1); bad: {layer, token, expert} of a routing outside the
  // experts, -1 if none
  int *sel = nullptr, *slot = nullptr, *perm = nullptr, *inv = nullptr, *cnt = nullptr, *off = nullptr;
  int *toff = nullptr, *bad = nullptr;
  bf16 *xa[2] = {}, *xo[2] = {}, *xact[2] = {}, *qb[2] = {}, *pp[2] = {};
  bf16 *wdq = nullptr; // one dense product's weights dequantized
  std::vector<void *> allocs, chunk; // the whole workspace; the part sized by C and L
};

void tpre_free(tpre *p);

// a weight's tensor scale as the CPU reference applies it to the sums (BF16 weights have none); odd: a gate/up
// pair matrix's up rows
__host__ __device__ inline float tp_scale(const dlin &d, bool odd) { return d.f == LIN_BF16 ? 1.0f : odd ? d.s2 : d.s; }

// v as hi + lo, each BF16 rounded to nearest (v - hi is exact in float)
__device__ __forceinline__ void tp_put(float v, bf16 *x0, bf16 *x1, int64_t i) {
  const bf16 hi = __float2bfloat16_rn(v);
  x0[i] = hi;
  x1[i] = __float2bfloat16_rn(v - __bfloat162float(hi));
}

// ---- k_prefill.cu: the kernels' launchers (on stream st) ----

// tokens' embedding rows into h [n][HS]
void tp_embed(cudaStream_t st, const int *tok, const uint8_t *emb, int f32, int64_t H, int64_t HS, float *h, int n);
// h += y (y may be NULL), then (1 + w) RMSNorm(h): as two BF16 pieces (x0, x1) or float32 (xf)
void tp_addnorm(cudaStream_t st, const float *y, int64_t ys, float *h, int64_t H, int64_t HS, const float *w,
                float eps, bf16 *x0, bf16 *x1, float *xf, int n);
// h += sum_k wsel[t][k] yd[inv[t K + k]] (rows < 0 skipped) (+ wsel[t][K] ysh[t]), then the norm as tp_addnorm
void tp_moe_addnorm(cudaStream_t st, const float *yd, const int *inv, const float *wsel, int K, const float *ysh,
                    float *h, int64_t H, int64_t HS, const float *w, float eps, bf16 *x0, bf16 *x1, float *xf, int n);
// a product's weights as BF16, unscaled (E2M1 x block scale, E4M3, BF16)
void tp_dequant(cudaStream_t st, const dlin *tab, int idx, int64_t rows, int64_t cols, bf16 *out);
// rows r: silu(g sg) (u su) as two BF16 pieces [rows][ldo]; g of feature i at y[r ldy + i gs], u at + uo
void tp_swiglu(cudaStream_t st, const float *y, int64_t ldy, int gs, int64_t uo, int64_t I, float sg, float su,
               bf16 *x0, bf16 *x1, int64_t ldo, int64_t rows);

// ---- k_egemm.cu: the routed experts ----

// the routing sel [n][RT_KST] (K a token) sorted by expert: cnt, slot, off, toff, perm, inv as tpre says;
// a routing outside [0, E) recorded in bad (with layer) and dropped
void tp_route_sort(cudaStream_t st, const int *sel, int n, int K, int E, int *cnt, int *slot, int *off, int *toff,
                   int *perm, int *inv, int *bad, int layer);

struct tp_eg_args {
  const dlin *tab;
  int w0, u0;                // expert e's gate/up pair (or gate) at w0 + e, its up at u0 + e (u0 < 0: pairs); down: w0
  int E;
  const int *off, *toff;     // tp_route_sort's
  const int *perm;           // the rows' inputs: x row perm[r] (gate/up) or r (perm NULL: down)
  const bf16 *x0, *x1;       // BF16 weights: the inputs' pieces [..][ldx]
  const __half *xh;          // FP8 and NVFP4 weights: the inputs in FP16 [..][ldx], row r times 1 / xs[r]
  const float *xs;
  int64_t ldx, kdim, mdim;   // k; features (gate/up) or output rows (down)
  bf16 *o0, *o1;             // gate/up: SwiGLU's pieces [rows][ldo] (y NULL)
  int64_t ldo;
  float *y;                  // down: y [rows][ldy], times the down's tensor scale; gate/up: SwiGLU's output
  int64_t ldy;
};
// every expert's gate/up (gu) or down over the rows sorted rows, weights of format f (every expert's, and
// the up's, the same; kdim a multiple of 16)
void tp_egemm(cudaStream_t st, int f, bool gu, const tp_eg_args &A, int rows);
// n rows of x (pieces x0 + x1, or xf when not NULL) [n][ldx], k < K, as FP16 xh [n][ldh] scaled by a power of
// two a row into [2^14, 2^15) at most, the factor back in xs[r]
void tp_tof16(cudaStream_t st, const bf16 *x0, const bf16 *x1, const float *xf, int64_t ldx, int64_t K, __half *xh,
              int64_t ldh, float *xs, int n);

struct tp_gdn_args {
  const float *proj, *conv_w, *A_log, *dt_bias, *gnorm, *conv_old, *rec_old;
  const int *chan_src, *z_src, *b_src, *a_src;
  float *mix, *beta, *lg, *o, *conv_new, *rec_new;
  float *cw, *cq, *ckt, *ca, *cu, *cgl; // k_gdnc.cu's per (value head, chunk) W, e^g Q, Kt^T, A, U, e^g_last
  bf16 *x0, *x1;
  int HK, HV, dk, dv, Kc, conv_dim;
  int64_t PS, VS;
  float eps;
};
// Gated DeltaNet over n tokens from the state (conv_old, rec_old) to (conv_new, rec_new); the gated norm's
// output as pieces x0, x1 [n][VS]
void tp_gdn(cudaStream_t st, const tp_gdn_args &A, int n);
// k_gdnc.cu: the recurrence of tp_gdn in its chunked form (mix, beta, lg to o and rec_new); its workspace
// in floats for C tokens (tg_work_floats), pointed into by tg_work_split
void tg_recurrence(cudaStream_t st, const tp_gdn_args &A, int n);
size_t tg_work_floats(int64_t C, int HV, int dk, int dv);
void tg_work_split(float *base, int64_t C, int HV, int dk, int dv, tp_gdn_args &A);

struct tp_attn_args {
  const float *qg, *qn;
  float *sc, *att;
  bf16 *q0, *q1, *p0, *p1, *x0, *x1;
  int Nq, D, rot;
  int64_t QGS, ATS, pos0, C;
  float theta, eps;
};
// keys (normed, rotated) and values of n tokens at pos0.. into a layer's BF16 cache
void tp_kv(cudaStream_t st, const float *kk, const float *vv, int64_t KVS, const float *kn, int Nkv, int D, int rot,
           int64_t pos0, float theta, float eps, uint16_t *kc, uint16_t *vc, int n);
// queries normed and rotated, as pieces q0, q1 [Nq][C][D]
void tp_queries(cudaStream_t st, const tp_attn_args &A, int n);
// scores sc [Nq][cb][L] of queries c0 .. c0 + cb softmaxed causally into the pieces p0, p1
void tp_softmax(cudaStream_t st, const tp_attn_args &A, int64_t c0, int cb, int64_t L);
// att x sigmoid(gate) as pieces x0, x1 [n][ATS]
void tp_gate(cudaStream_t st, const tp_attn_args &A, int n);
