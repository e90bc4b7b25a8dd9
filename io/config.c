/* config.json reader; see io/config.h for the lookup rules. */
#include "io/json.h"
#include "io/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/util.h"

/* Look a key up in text_config first, then at the top level. */
static const cJSON *get(const cJSON *root, const char *key) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  const cJSON *v = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, key) : NULL;
  return v ? v : cJSON_GetObjectItemCaseSensitive(root, key);
}

static enum mtpq_status get_int(const cJSON *root, const char *key, int required,
                                int64_t dflt, int64_t *out, const char *label,
                                struct mtpq_err *err) {
  const cJSON *v = get(root, key);
  if (!v || cJSON_IsNull(v)) {
    if (required)
      return mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: required field %s is missing", label, key);
    *out = dflt;
    return MTPQ_OK;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
      v->valuedouble > 1e15)
    return mtpq_err_set(err, MTPQ_E_CONFIG_FIELD,
                        "%s: field %s must be a non-negative integer", label, key);
  *out = (int64_t)v->valuedouble;
  return MTPQ_OK;
}

/* RoPE value: flat key, then rope_parameters (top or text_config). */
static const cJSON *rope_value(const cJSON *root, const char *key) {
  const cJSON *v = get(root, key);
  if (v) return v;
  const cJSON *rp = get(root, "rope_parameters");
  if (cJSON_IsObject(rp)) return cJSON_GetObjectItemCaseSensitive(rp, key);
  return NULL;
}

static enum mtpq_status get_real(const cJSON *v, const char *key, double dflt, double *out,
                                 const char *label, struct mtpq_err *err) {
  if (!v || cJSON_IsNull(v)) {
    *out = dflt;
    return MTPQ_OK;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
    return mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: field %s must be a positive number",
                        label, key);
  *out = v->valuedouble;
  return MTPQ_OK;
}

enum mtpq_status mtpq_config_parse(const char *text, size_t len, const char *label,
                                   struct mtpq_model_config *cfg, struct mtpq_err *err) {
  memset(cfg, 0, sizeof *cfg);
  cJSON *root = mtpq__json_parse(text, len, label, MTPQ_E_CONFIG_JSON, err);
  if (!root) return MTPQ_E_CONFIG_JSON;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return mtpq_err_set(err, MTPQ_E_CONFIG_JSON, "%s: not a JSON object", label);
  }
  cfg->json = root;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  if (cJSON_IsString(mt)) snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);
  const cJSON *ar = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  if (cJSON_IsArray(ar) && cJSON_IsString(ar->child))
    snprintf(cfg->architecture, sizeof cfg->architecture, "%s", ar->child->valuestring);

  enum mtpq_status st;
#define INT_FIELD(key, req, dflt) \
  if ((st = get_int(root, #key, req, dflt, &cfg->key, label, err))) goto fail;
  INT_FIELD(hidden_size, 1, 0)
  INT_FIELD(num_attention_heads, 1, 0)
  INT_FIELD(num_key_value_heads, 0, cfg->num_attention_heads)
  INT_FIELD(num_hidden_layers, 0, 0)
  INT_FIELD(vocab_size, 1, 0)
  INT_FIELD(intermediate_size, 0, 0)
  INT_FIELD(moe_intermediate_size, 0, 0)
  INT_FIELD(shared_expert_intermediate_size, 0, 0)
  INT_FIELD(num_experts, 0, 0)
  INT_FIELD(num_experts_per_tok, 0, 0)
  INT_FIELD(mtp_num_hidden_layers, 0, 0)
  INT_FIELD(full_attention_interval, 0, 0)
  INT_FIELD(linear_num_key_heads, 0, 0)
  INT_FIELD(linear_num_value_heads, 0, 0)
  INT_FIELD(linear_key_head_dim, 0, 0)
  INT_FIELD(linear_value_head_dim, 0, 0)
  INT_FIELD(linear_conv_kernel_dim, 0, 0)
#undef INT_FIELD
  if (cfg->num_hidden_layers > MTPQ_MAX_LAYERS) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: %lld layers: at most %d are read", label,
                      (long long)cfg->num_hidden_layers, MTPQ_MAX_LAYERS);
    goto fail;
  }
  const cJSON *lt = get(root, "layer_types");
  for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
    char k = 'A';
    if (cJSON_IsArray(lt)) {
      const cJSON *e = cJSON_GetArrayItem(lt, (int)i);
      const char *v = cJSON_IsString(e) ? e->valuestring : NULL;
      if (v && !strcmp(v, "full_attention"))
        k = 'A';
      else if (v && !strcmp(v, "linear_attention"))
        k = 'L';
      else {
        st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD,
                          "%s: layer_types[%lld] is %s%s%s, not full_attention or "
                          "linear_attention",
                          label, (long long)i, v ? "\"" : "", v ? v : "missing", v ? "\"" : "");
        goto fail;
      }
    } else if (cfg->full_attention_interval > 0) {
      k = (i + 1) % cfg->full_attention_interval ? 'L' : 'A';
    }
    cfg->layer_types[i] = k;
  }
  if (cJSON_IsArray(lt) && cJSON_GetArraySize(lt) != (int)cfg->num_hidden_layers) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: layer_types has %d entries for %lld layers", label,
                      cJSON_GetArraySize(lt), (long long)cfg->num_hidden_layers);
    goto fail;
  }
  if (cfg->num_attention_heads == 0 || cfg->hidden_size == 0) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: hidden_size and num_attention_heads must be > 0",
                      label);
    goto fail;
  }
  if ((st = get_int(root, "head_dim", 0, cfg->hidden_size / cfg->num_attention_heads,
                    &cfg->head_dim, label, err)))
    goto fail;
  const cJSON *eps = get(root, "rms_norm_eps");
  if (!eps) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: required field rms_norm_eps is missing", label);
    goto fail;
  }
  if ((st = get_real(eps, "rms_norm_eps", 1e-6, &cfg->rms_norm_eps, label, err))) goto fail;
  if ((st = get_real(rope_value(root, "rope_theta"), "rope_theta", 10000.0, &cfg->rope_theta,
                     label, err)))
    goto fail;
  if ((st = get_real(rope_value(root, "partial_rotary_factor"), "partial_rotary_factor", 0.25,
                     &cfg->partial_rotary_factor, label, err)))
    goto fail;
  if (cfg->partial_rotary_factor > 1.0) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: partial_rotary_factor %g exceeds 1", label,
                      cfg->partial_rotary_factor);
    goto fail;
  }
  const cJSON *tie = get(root, "tie_word_embeddings");
  cfg->tie_word_embeddings = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : -1;
  const cJSON *ntp = get(root, "norm_topk_prob");
  cfg->norm_topk_prob = cJSON_IsBool(ntp) ? cJSON_IsTrue(ntp) : 1;
  return MTPQ_OK;
fail:
  mtpq_config_free(cfg);
  return st;
}

enum mtpq_status mtpq_config_load(const char *path, struct mtpq_model_config *cfg,
                                  struct mtpq_err *err) {
  char *buf = NULL;
  size_t len = 0;
  memset(cfg, 0, sizeof *cfg);
  enum mtpq_status st = mtpq__read_file(path, (size_t)16 << 20, &buf, &len, err);
  if (st) return st;
  st = mtpq_config_parse(buf, len, path, cfg, err);
  free(buf);
  return st;
}

void mtpq_config_free(struct mtpq_model_config *cfg) {
  if (!cfg) return;
  cJSON_Delete(cfg->json);
  cfg->json = NULL;
}

enum mtpq_status mtpq_config_load_dir(const char *dir, struct mtpq_model_config *cfg, int *found,
                                      struct mtpq_err *err) {
  *found = 0;
  char *p = mtpq__path_join(dir, "config.json");
  if (!p) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = MTPQ_OK;
  if (mtpq__is_file(p)) {
    st = mtpq_config_load(p, cfg, err);
    *found = !st;
  }
  free(p);
  return st;
}
