/* The CPU reference backend's building blocks, shared by the drafter
 * (rt_session.c) and the target model (target.c): products with weights as
 * stored (BF16, FP8 per tensor, NVFP4), the (1 + w) RMSNorm, RoPE, the
 * threaded head with its argmax, gated full attention over a cache, and the
 * MLP (MoE with a gated shared expert, or dense). float32 throughout; every
 * function sums in a fixed order, so results are the same on every run. */
#ifndef MTPQ_KERNELS_RT_CPU_H
#define MTPQ_KERNELS_RT_CPU_H

#include <stdint.h>

#include "kernels/rt_model.h"

void rt_cpu_init(void); /* once per process before any product (thread-safe) */
float rt_bf16f(const unsigned char *p);
float rt_lin_dot(const struct lin *L, int64_t r, const float *x);
void rt_lin_apply(const struct lin *L, const float *x, float *y);
void rt_zcnorm(const float *x, const float *w, int64_t n, float eps, float *y);
float rt_sigm(float x);
float rt_silu(float x);
void rt_rope(float *x, int64_t rot, int64_t pos, float theta);
/* argmax over L's rows of L x (ties to the lower row); logits: all of them, or NULL; best: the chosen row's
 * logit (NaN if any row's logit is NaN), or NULL */
int64_t rt_head_argmax(const struct lin *L, const float *x, float *logits, float *best);

/* Gated full attention (mtp-architecture.md 2.3): q|gate interleaved per
 * head from q, (1 + w) q/k norms, partial NeoX RoPE, K and V written to the
 * cache at pos, causal GQA over [lo, pos], o = attn x sigmoid(gate), then o.
 * The cache is BF16 (kc16/vc16: as vLLM caches a BF16 model) or float32
 * (kc32/vc32); one pair is NULL. */
struct rt_attn {
  struct lin q, k, v, o;
  const float *qn, *kn;
  int64_t Nq, Nkv, D, rot;
  float theta, eps;
};
struct rt_attn_scratch {
  float *qg, *kk, *vv, *att, *sc; /* [2 Nq D], [Nkv D], [Nkv D], [Nq D], [max_pos] */
};
void rt_cpu_attention(const struct rt_attn *w, const float *a, int64_t pos, int64_t window, uint16_t *kc16,
                      uint16_t *vc16, float *kc32, float *vc32, const struct rt_attn_scratch *s, float *out);

/* The MLP: MoE (fp32 softmax over the router logits, top-k with ties to the
 * lower expert, renormalised with norm_topk, SiLU-gated experts, + the
 * shared expert weighted by sigmoid(shared_expert_gate)) or dense SiLU-GLU
 * (gate, up, down). out[j] += routed[j] is summed first, then
 * out[j] += shared[j] + res[j] (res: the residual, or NULL). */
struct rt_mlp {
  int moe;
  int64_t E, topk;
  int norm_topk;
  struct lin router, seg, sg, su, sd; /* seg: the shared expert's gate (w == NULL: none); dense: sg, su, sd */
  const struct lin *eg, *eu, *ed;
};
struct rt_mlp_scratch {
  float *pr, *g1, *u1, *t1; /* [E], [widest intermediate] x 2, [H] */
  float *margin;            /* NULL, or lowered to the routing's (p_k - p_k+1) / p_k where that is smaller */
  float *xr;                /* fp16_in: [widest of H and the intermediates] */
  int fp16_in;              /* FP8 and NVFP4 experts take their inputs as rt_round_f16_row makes them */
};
/* x's n values as FP16 the way the CUDA prefill gives them to FP8 and NVFP4
 * experts (kernels/cuda/k_egemm.cu, k_p_tof16): scaled by 2^-e, e the
 * exponent of the largest magnitude less 14 (within [-112, 113]; 0 for a
 * row of zeros), rounded to FP16, scaled back. x and out may be the same. */
void rt_round_f16_row(const float *x, int64_t n, float *out);
void rt_cpu_mlp(const struct rt_mlp *w, const float *x, int64_t H, const float *res, const struct rt_mlp_scratch *s,
                float *out);

#endif
