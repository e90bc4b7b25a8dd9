/* The loaded target model (internal to kernels/): the layers' weights as
 * the checkpoint stores them, pointing into the mapped safetensors files,
 * shared by the CPU reference (target.c) and the CUDA backend
 * (kernels/cuda/target_gpu.cu), which uploads them. */
#ifndef MTPQ_KERNELS_TARGET_MODEL_H
#define MTPQ_KERNELS_TARGET_MODEL_H

#include "io/config.h"
#include "io/repo.h"
#include "kernels/rt_cpu.h"
#include "kernels/rt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tlayer {
  char kind;                  /* 'A' / 'L' */
  float *in_norm, *post_norm; /* (1 + w) norms, [H] */
  struct rt_attn attn;        /* 'A' */
  /* 'L': Qwen3-Next's interleaved projections (qkvz.w set), or Qwen3.5's */
  struct lin qkvz, ba, qkv, z, b, a, out;
  float *conv_w;                  /* [conv_dim][K] */
  float *dt_bias, *A_log, *gnorm; /* [HV], [HV], [dv] (the gated norm's w, used as is) */
  struct rt_mlp mlp;
  struct lin *experts; /* owned: eg, eu, ed of E experts, one array */
};

struct mtpq_target {
  struct mtpq_repo *repo;
  struct mtpq_model_config cfg;
  char pre[32]; /* "model." or "model.language_model." */
  int64_t H, V, L, Nq, Nkv, D, rot;
  float eps, theta;
  int64_t HK, HV, dk, dv, Kc, conv_dim, inter; /* GDN sizes; the widest MLP intermediate */
  const unsigned char *embed;                  /* BF16 (or F32: embed_f32) [V, H] */
  int embed_f32;
  int64_t embed_rows;
  struct lin head;
  float *final_norm;
  struct tlayer *layers;
  void *synth; /* a synthetic target's weight pools (kernels/target_synth.c), or NULL */
  void *gpu;   /* the CUDA backend's copy (kernels/target_cuda.h), made at the first CUDA sequence */
};

/* what names the target in messages: its directory, or "synthetic target" */
static inline const char *mtpq__target_name(const struct mtpq_target *t) {
  return t->repo ? mtpq_repo_dir(t->repo) : "synthetic target";
}

/* the error of a forward with a logit that is NaN or +inf (or whose logits are all -inf; v: that logit): NaN or
 * inf in the target's weights or state spread to its logits, and a token chosen from them would be garbage
 * (pos: the token's position). Both backends see every NaN, whatever its place and sign bit (rt_head_argmax,
 * rt_argmax_key) */
static inline enum mtpq_status mtpq__target_nonfinite(const struct mtpq_target *t, int64_t pos, float v,
                                                      struct mtpq_err *err) {
  return mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                      "%s: position %lld: a logit is %g: NaN or inf in the target's weights reached its output",
                      mtpq__target_name(t), (long long)pos, (double)v);
}

/* target.c: t->cfg's sizes into t, checked (dir names the model in errors) */
enum mtpq_status mtpq__target_setup(struct mtpq_target *t, const char *dir, struct mtpq_err *err);

/* kernels/target_synth.c: the synthetic target's pools, freed by mtpq_target_close */
void mtpq__target_synth_free(void *synth);

#ifdef __cplusplus
}
#endif
#endif
