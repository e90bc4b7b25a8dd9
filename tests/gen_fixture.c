/* gen_fixture: synthetic targets with the real tensor layout of a
 * Qwen3-Next MTP layer (per-expert experts) or a Qwen3.5-MoE one (fused
 * experts under the multimodal prefix), at any size: small for tests, and
 * Qwen3-Next-80B-A3B's shapes (the defaults: hidden 2048, 512 experts of
 * 512, 16 heads x 256, 2 KV heads, vocab 151936; about 3.3 GB of MTP weights
 * plus embedding and head) for the benchmark.
 *
 *   gen_fixture OUT [--layout next|qwen35moe] [--hidden H] [--experts E]
 *               [--inter I] [--heads N] [--kv N] [--head-dim D] [--vocab V]
 *               [--nvfp4-target] [--seed S] [--bad nan|nomtp]
 *
 * Weights are seeded pseudo-Gaussian BF16 (sigma 0.02); --nvfp4-target adds
 * expert input_scale tensors to the last trunk layer, as an NVFP4
 * checkpoint has them. Written with mtpq's own safetensors writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors.h"
#include "quant/numerics.h"

static uint64_t rs = 12345;
static uint64_t rnd(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return rs;
}
static float gauss(void) { /* Irwin-Hall(4): cheap, bell-shaped */
  float s = 0;
  for (int i = 0; i < 4; i++) s += (float)(rnd() >> 40) / 16777216.0f;
  return (s - 2.0f) * 1.732f;
}

struct spec {
  char name[256];
  enum mtpq_dtype dt;
  int rank;
  int64_t shape[3];
  int kind; /* 0 gaussian weight, 1 norm (near zero), 2 input_scale scalar */
};

static struct spec *specs;
static size_t nspec, capspec;

static void add(const char *name, enum mtpq_dtype dt, int rank, int64_t a, int64_t b, int64_t c, int kind) {
  if (nspec == capspec) {
    capspec = capspec ? 2 * capspec : 1024;
    specs = realloc(specs, capspec * sizeof *specs);
  }
  struct spec *s = &specs[nspec++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->dt = dt, s->rank = rank, s->shape[0] = a, s->shape[1] = b, s->shape[2] = c, s->kind = kind;
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') { /* OUT first: "--help" is not a directory to write 4.5 GB into */
    fprintf(stderr, "usage: gen_fixture OUT [options] (see the source)\n");
    return 2;
  }
  const char *out = argv[1], *layout = "next", *bad = "";
  int64_t H = 2048, E = 512, I = 512, NQ = 16, NKV = 2, D = 256, V = 151936;
  int nvfp4 = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--layout")) layout = v, i++;
    else if (!strcmp(a, "--hidden")) H = atoll(v), i++;
    else if (!strcmp(a, "--experts")) E = atoll(v), i++;
    else if (!strcmp(a, "--inter")) I = atoll(v), i++;
    else if (!strcmp(a, "--heads")) NQ = atoll(v), i++;
    else if (!strcmp(a, "--kv")) NKV = atoll(v), i++;
    else if (!strcmp(a, "--head-dim")) D = atoll(v), i++;
    else if (!strcmp(a, "--vocab")) V = atoll(v), i++;
    else if (!strcmp(a, "--seed")) rs = (uint64_t)atoll(v) * 2654435761u + 1, i++;
    else if (!strcmp(a, "--nvfp4-target")) nvfp4 = 1;
    else if (!strcmp(a, "--bad")) bad = v, i++;
    else {
      fprintf(stderr, "gen_fixture: unknown option %s\n", a);
      return 2;
    }
  }
  int fused = !strcmp(layout, "qwen35moe");
  const char *P = fused ? "model.language_model." : "model.";
  char n[256];
  snprintf(n, sizeof n, "%sembed_tokens.weight", P);
  add(n, MTPQ_DTYPE_BF16, 2, V, H, 0, 0);
  add("lm_head.weight", MTPQ_DTYPE_BF16, 2, V, H, 0, 0);
  snprintf(n, sizeof n, "%snorm.weight", P);
  add(n, MTPQ_DTYPE_BF16, 1, H, 0, 0, 1);
  snprintf(n, sizeof n, "%slayers.0.input_layernorm.weight", P);
  add(n, MTPQ_DTYPE_BF16, 1, H, 0, 0, 1);
  if (nvfp4)
    for (int64_t e = 0; e < E; e++)
      for (int k = 0; k < 3; k++) {
        static const char *pj[] = {"gate_proj", "up_proj", "down_proj"};
        snprintf(n, sizeof n, "%slayers.0.mlp.experts.%lld.%s.input_scale", P, (long long)e, pj[k]);
        add(n, MTPQ_DTYPE_F32, 0, 0, 0, 0, 2);
      }
  if (strcmp(bad, "nomtp") != 0) {
    add("mtp.fc.weight", MTPQ_DTYPE_BF16, 2, H, 2 * H, 0, 0);
    add("mtp.pre_fc_norm_embedding.weight", MTPQ_DTYPE_BF16, 1, H, 0, 0, 1);
    add("mtp.pre_fc_norm_hidden.weight", MTPQ_DTYPE_BF16, 1, H, 0, 0, 1);
    add("mtp.norm.weight", MTPQ_DTYPE_BF16, 1, H, 0, 0, 1);
    const char *L = "mtp.layers.0";
#define T2(suffix, a, b) snprintf(n, sizeof n, "%s." suffix, L), add(n, MTPQ_DTYPE_BF16, 2, a, b, 0, 0)
#define T1(suffix, a) snprintf(n, sizeof n, "%s." suffix, L), add(n, MTPQ_DTYPE_BF16, 1, a, 0, 0, 1)
    T1("input_layernorm.weight", H);
    T1("post_attention_layernorm.weight", H);
    T2("self_attn.q_proj.weight", 2 * NQ * D, H);
    T2("self_attn.k_proj.weight", NKV * D, H);
    T2("self_attn.v_proj.weight", NKV * D, H);
    T2("self_attn.o_proj.weight", H, NQ * D);
    T1("self_attn.q_norm.weight", D);
    T1("self_attn.k_norm.weight", D);
    T2("mlp.gate.weight", E, H);
    T2("mlp.shared_expert.gate_proj.weight", I, H);
    T2("mlp.shared_expert.up_proj.weight", I, H);
    T2("mlp.shared_expert.down_proj.weight", H, I);
    T2("mlp.shared_expert_gate.weight", 1, H);
    if (fused) {
      snprintf(n, sizeof n, "%s.mlp.experts.gate_up_proj", L);
      add(n, MTPQ_DTYPE_BF16, 3, E, 2 * I, H, 0);
      snprintf(n, sizeof n, "%s.mlp.experts.down_proj", L);
      add(n, MTPQ_DTYPE_BF16, 3, E, H, I, 0);
    } else {
      for (int64_t e = 0; e < E; e++) {
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.gate_proj.weight", L, (long long)e);
        add(n, MTPQ_DTYPE_BF16, 2, I, H, 0, 0);
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.up_proj.weight", L, (long long)e);
        add(n, MTPQ_DTYPE_BF16, 2, I, H, 0, 0);
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.down_proj.weight", L, (long long)e);
        add(n, MTPQ_DTYPE_BF16, 2, H, I, 0, 0);
      }
    }
  }
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s", out);
  for (char *q = dirs + 1; *q; q++) /* mkdir -p */
    if (*q == '/') {
      *q = '\0';
      mkdir(dirs, 0755);
      *q = '/';
    }
  mkdir(dirs, 0755);
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", out);
  struct mtpq_st_writer *w = NULL;
  struct mtpq_err err = {0};
  if (mtpq_stw_init(path, &w, &err) || mtpq_stw_metadata(w, "format", "pt", &err)) goto fail;
  for (size_t i = 0; i < nspec; i++)
    if (mtpq_stw_add(w, specs[i].name, specs[i].dt, specs[i].rank, specs[i].shape, &err)) goto fail;
  if (mtpq_stw_begin(w, &err)) goto fail;
  enum { CHUNK = 1 << 20 };
  uint16_t *buf = malloc(CHUNK * 2);
  for (size_t i = 0; i < nspec; i++) {
    struct spec *s = &specs[i];
    if (s->kind == 2) {
      float v = 0.01f + 0.04f * (float)(rnd() >> 40) / 16777216.0f;
      if (mtpq_stw_write_all(w, s->name, &v, 4, &err)) goto fail;
      continue;
    }
    uint64_t numel = 1;
    for (int k = 0; k < s->rank; k++) numel *= (uint64_t)s->shape[k];
    for (uint64_t at = 0; at < numel; at += CHUNK) {
      size_t m = numel - at < CHUNK ? (size_t)(numel - at) : CHUNK;
      for (size_t k = 0; k < m; k++)
        buf[k] = mtpq_f32_to_bf16(s->kind == 1 ? 0.01f * gauss() : 0.02f * gauss());
      if (!strcmp(bad, "nan") && at == 0 && strstr(s->name, "experts") && strstr(s->name, "mtp."))
        buf[3] = 0x7FC0, bad = "done";
      if (mtpq_stw_write(w, s->name, at * 2, buf, m * 2, &err)) goto fail;
    }
  }
  free(buf);
  if (mtpq_stw_commit(w, &err)) goto fail;
  mtpq_stw_free(w);
  snprintf(path, sizeof path, "%s/config.json", out);
  FILE *f = fopen(path, "w");
  if (!f) return 3;
  const char *mt = fused ? "qwen3_5_moe" : "qwen3_next";
  const char *arch = fused ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3NextForCausalLM";
  if (fused)
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"tie_word_embeddings\": false,\n"
               "  \"text_config\": {\n    \"model_type\": \"qwen3_5_moe_text\", \"hidden_size\": %lld, "
               "\"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, \"head_dim\": %lld, "
               "\"num_hidden_layers\": 1, \"vocab_size\": %lld, \"num_experts\": %lld, \"num_experts_per_tok\": 8, "
               "\"moe_intermediate_size\": %lld, \"shared_expert_intermediate_size\": %lld, \"rms_norm_eps\": 1e-06, "
               "\"mtp_num_hidden_layers\": 1, \"rope_parameters\": {\"rope_theta\": 10000000.0, "
               "\"partial_rotary_factor\": 0.25}\n  }\n}\n",
            arch, mt, (long long)H, (long long)NQ, (long long)NKV, (long long)D, (long long)V, (long long)E,
            (long long)I, (long long)I);
  else
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"hidden_size\": %lld,\n"
               "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n"
               "  \"num_hidden_layers\": 1,\n  \"vocab_size\": %lld,\n  \"num_experts\": %lld,\n"
               "  \"num_experts_per_tok\": 10,\n  \"moe_intermediate_size\": %lld,\n"
               "  \"shared_expert_intermediate_size\": %lld,\n  \"norm_topk_prob\": true,\n"
               "  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 10000000.0,\n  \"partial_rotary_factor\": 0.25,\n"
               "  \"tie_word_embeddings\": false\n}\n",
            arch, mt, (long long)H, (long long)NQ, (long long)NKV, (long long)D, (long long)V, (long long)E,
            (long long)I, (long long)I);
  fclose(f);
  return 0;
fail:
  fprintf(stderr, "gen_fixture: %s\n", err.msg);
  return 1;
}
