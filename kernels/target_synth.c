/* Synthetic targets (kernels/target.h, mtpq_target_synth): the shape from
 * config.json text, random weights in the formats asked for, no files.
 *
 * Every product's weights are a window into one random pool per format, at
 * an offset of its own, so no two products (and no two experts) share
 * their values while the host holds only the pools (an 80B shape would
 * otherwise need its 50 GB on the host as well as on the device). Values
 * keep a forward finite and O(1) after each norm: BF16 weights uniform in
 * +-0.03, FP8 and NVFP4 codes of moderate exponents with per-tensor scales
 * giving the same range, norm weights (1 + w) near 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "kernels/rt_cpu.h"
#include "kernels/target.h"
#include "kernels/target_model.h"
#include "quant/numerics.h"

#define POOL_SLACK ((size_t)4 << 20) /* offsets spread over 4 MiB past the largest product */

struct synth {
  unsigned char *bf16, *fp8, *fp4, *sc, *embed;
  size_t n_bf16, n_fp8, n_fp4, n_sc;
  uint64_t rng, k; /* k: products made so far (each its own offset) */
};

void mtpq__target_synth_free(void *p) {
  struct synth *s = p;
  if (!s) return;
  free(s->bf16), free(s->fp8), free(s->fp4), free(s->sc), free(s->embed);
  free(s);
}

static uint64_t rnd(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

static float unif(uint64_t *s, float a) { return a * (2.0f * (float)(rnd(s) >> 40) / (float)(1 << 24) - 1.0f); }

static void fill_bf16(unsigned char *p, size_t n, uint64_t *s, float a) {
  for (size_t i = 0; i < n; i++) {
    uint16_t b = mtpq_f32_to_bf16(unif(s, a));
    memcpy(p + 2 * i, &b, 2);
  }
}

/* a product of rows x cols in format f: a window of its pool */
static struct lin mk(struct synth *s, enum lin_fmt f, int64_t rows, int64_t cols) {
  struct lin L = {f, rows, cols, NULL, NULL, 1.0f};
  const size_t off = (size_t)((s->k++ * 2654435761u) % (POOL_SLACK / 256)) * 256;
  if (f == LIN_BF16)
    L.w = s->bf16 + off;
  else if (f == LIN_FP8)
    L.w = s->fp8 + off, L.s = 0.03f / 4.0f; /* codes within 2^-3 .. 2^2 */
  else
    L.w = s->fp4 + off, L.scales = s->sc + off, L.s = 0.03f / 6.0f; /* E2M1 up to 6, block scales near 1 */
  return L;
}

static float *vec(struct synth *s, int64_t n, float base, float a) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * 4);
  for (int64_t i = 0; v && i < n; i++) v[i] = base + unif(&s->rng, a);
  return v;
}

const char *mtpq_target_synth_config(const char *name) {
  if (name && !strcmp(name, "qwen3-next-80b"))
    return "{\"model_type\": \"qwen3_next\", \"architectures\": [\"Qwen3NextForCausalLM\"], \"hidden_size\": 2048, "
           "\"num_hidden_layers\": 48, \"num_attention_heads\": 16, \"num_key_value_heads\": 2, \"head_dim\": 256, "
           "\"vocab_size\": 151936, \"intermediate_size\": 5120, \"moe_intermediate_size\": 512, "
           "\"shared_expert_intermediate_size\": 512, \"num_experts\": 512, \"num_experts_per_tok\": 10, "
           "\"norm_topk_prob\": true, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000000, \"partial_rotary_factor\": "
           "0.25, \"full_attention_interval\": 4, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32, "
           "\"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, "
           "\"tie_word_embeddings\": false}";
  return NULL;
}

enum mtpq_status mtpq_target_synth(const char *config_json, enum mtpq_synth_formats formats, uint64_t seed,
                                   struct mtpq_target **out, struct mtpq_err *err) {
  *out = NULL;
  rt_cpu_init(); /* (the CPU backend's E4M3 table, as mtpq_target_open) */
  struct mtpq_target *t = calloc(1, sizeof *t);
  struct synth *s = calloc(1, sizeof *s);
  if (!t || !s) {
    free(t), free(s);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  t->synth = s;
  s->rng = seed * 0x9E3779B97F4A7C15ULL + 1;
  enum mtpq_status st = mtpq_config_parse(config_json, strlen(config_json), "synthetic config", &t->cfg, err);
  if (!st) st = mtpq__target_setup(t, "synthetic target", err);
  if (st) goto fail;
  const struct mtpq_model_config *c = &t->cfg;
  const int64_t H = t->H, V = c->vocab_size, kd = t->HK * t->dk, vd = t->HV * t->dv, E = c->num_experts;
  const int64_t I = c->moe_intermediate_size > 0 ? c->moe_intermediate_size : c->intermediate_size;
  const int64_t SI = c->shared_expert_intermediate_size, DI = c->intermediate_size;
  const enum lin_fmt fb = LIN_BF16, f8 = formats == MTPQ_SYNTH_FP8 ? LIN_FP8 : LIN_BF16;
  const enum lin_fmt fexp = formats == MTPQ_SYNTH_BF16 ? LIN_BF16 : LIN_NVFP4;
  const enum lin_fmt fo = formats == MTPQ_SYNTH_NVIDIA ? LIN_NVFP4 : f8;
  const enum lin_fmt fsh = formats == MTPQ_SYNTH_NVIDIA ? LIN_NVFP4 : f8;
  if (V < 1 || H % 16 || (E && I % 16) || (SI && SI % 16)) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD,
                      "synthetic target: vocab %lld, hidden %lld, intermediate %lld: "
                      "widths must be multiples of 16",
                      (long long)V, (long long)H, (long long)I);
    goto fail;
  }
  /* the pools: the largest product of any format plus the offsets' spread */
  const int64_t elems[] = {
      (2 * kd + 2 * vd + 2 * t->HV) * H, vd * H, 2 * t->Nq * t->D * H, E * H, I * H, SI * H, DI * H};
  int64_t most = 0;
  for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++) most = elems[i] > most ? elems[i] : most;
  const size_t big = (size_t)most;
  s->n_bf16 = 2 * big + POOL_SLACK, s->n_fp8 = big + POOL_SLACK, s->n_fp4 = big / 2 + POOL_SLACK;
  s->n_sc = big / 16 + POOL_SLACK;
  if (!(s->bf16 = malloc(s->n_bf16)) || !(s->fp8 = malloc(s->n_fp8)) || !(s->fp4 = malloc(s->n_fp4)) ||
      !(s->sc = malloc(s->n_sc)) || !(s->embed = malloc((size_t)((V + 1) * H) * 2))) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for a synthetic target's weight pools");
    goto fail;
  }
  fill_bf16(s->bf16, s->n_bf16 / 2, &s->rng, 0.03f);
  fill_bf16(s->embed, (size_t)((V + 1) * H), &s->rng, 0.05f);
  for (size_t i = 0; i < s->n_fp8; i++) /* E4M3 sign | exponent 4..9 | mantissa: 2^-3 .. 2^2 */
    s->fp8[i] = (unsigned char)((rnd(&s->rng) >> 63) << 7 | (4 + rnd(&s->rng) % 6) << 3 | (rnd(&s->rng) & 7));
  for (size_t i = 0; i < s->n_fp4; i++) s->fp4[i] = (unsigned char)(rnd(&s->rng) >> 56);
  for (size_t i = 0; i < s->n_sc; i++) s->sc[i] = (unsigned char)(0x30 + rnd(&s->rng) % 16); /* 0.5 .. 1.875 */
  t->embed = s->embed, t->embed_rows = V;
  t->head = (struct lin){LIN_BF16, V, H, s->embed + 2 * H, NULL, 1.0f}; /* untied: a window of its own */
  if (c->tie_word_embeddings == 1) t->head.w = s->embed;
  t->V = V;
  t->final_norm = vec(s, H, 0.0f, 0.1f);
  if (!(t->layers = calloc((size_t)t->L, sizeof *t->layers))) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int64_t i = 0; i < t->L && !st; i++) {
    struct tlayer *l = &t->layers[i];
    l->kind = c->layer_types[i];
    l->in_norm = vec(s, H, 0.0f, 0.1f), l->post_norm = vec(s, H, 0.0f, 0.1f);
    if (l->kind == 'A') {
      struct rt_attn *w = &l->attn;
      w->Nq = t->Nq, w->Nkv = t->Nkv, w->D = t->D, w->rot = t->rot, w->theta = t->theta, w->eps = t->eps;
      w->q = mk(s, f8, 2 * t->Nq * t->D, H), w->k = mk(s, f8, t->Nkv * t->D, H), w->v = mk(s, f8, t->Nkv * t->D, H);
      w->o = mk(s, fo, H, t->Nq * t->D);
      w->qn = vec(s, t->D, 0.0f, 0.1f), w->kn = vec(s, t->D, 0.0f, 0.1f);
    } else {
      if (!strcmp(c->model_type, "qwen3_next")) {
        l->qkvz = mk(s, f8, 2 * kd + 2 * vd, H), l->ba = mk(s, fb, 2 * t->HV, H);
      } else {
        l->qkv = mk(s, f8, 2 * kd + vd, H), l->z = mk(s, f8, vd, H);
        l->b = mk(s, fb, t->HV, H), l->a = mk(s, fb, t->HV, H);
      }
      l->out = mk(s, f8, H, vd);
      l->conv_w = vec(s, t->conv_dim * t->Kc, 0.0f, 0.4f);
      l->dt_bias = vec(s, t->HV, 0.0f, 0.5f), l->A_log = vec(s, t->HV, 0.5f, 0.5f),
      l->gnorm = vec(s, t->dv, 1.0f, 0.1f);
    }
    struct rt_mlp *w = &l->mlp;
    if (E > 0) {
      w->moe = 1, w->E = E, w->topk = c->num_experts_per_tok, w->norm_topk = c->norm_topk_prob;
      w->router = mk(s, fb, E, H);
      if (SI > 0) {
        w->sg = mk(s, fsh, SI, H), w->su = mk(s, fsh, SI, H), w->sd = mk(s, fsh, H, SI);
        w->seg = mk(s, fb, 1, H);
      }
      if (!(l->experts = calloc((size_t)(3 * E), sizeof *l->experts))) {
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        break;
      }
      w->eg = l->experts, w->eu = l->experts + E, w->ed = l->experts + 2 * E;
      for (int64_t e = 0; e < E; e++)
        l->experts[e] = mk(s, fexp, I, H), l->experts[E + e] = mk(s, fexp, I, H),
        l->experts[2 * E + e] = mk(s, fexp, H, I);
      t->inter = I > t->inter ? I : t->inter;
      t->inter = SI > t->inter ? SI : t->inter;
    } else {
      w->sg = mk(s, fb, DI, H), w->su = mk(s, fb, DI, H), w->sd = mk(s, fb, H, DI);
      t->inter = DI > t->inter ? DI : t->inter;
    }
    if (!l->in_norm || !l->post_norm || (l->kind == 'L' && (!l->conv_w || !l->dt_bias || !l->A_log || !l->gnorm)))
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  if (st) goto fail;
  *out = t;
  return MTPQ_OK;
fail:
  mtpq_target_close(t);
  return st;
}
