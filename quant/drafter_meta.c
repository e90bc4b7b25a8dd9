/* Drafter repo metadata: config.json (flat ModelOpt MIXED_PRECISION block,
 * vllm-integration.md section 9), hf_quant_config.json, the model card,
 * copies of the target's generation/tokenizer files, and the manifest. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/util.h"
#include "quant/card.h"
#include "quant/drafter_priv.h"
#include "quant/embedded.h"

#include <sys/stat.h>

static enum mtpq_status write_json(const char *dir, const char *name, cJSON *j, struct mtpq_err *err) {
  char *path = mtpq__path_join(dir, name);
  enum mtpq_status st = path ? mtpq__json_write_file(path, j, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  free(path);
  return st;
}

static const char *algo_of(enum mtpq_item_kind k) { return k == MTPQ_ITEM_NVFP4 ? "NVFP4" : "FP8"; }

/* {"quant_algo": "FP8"} or {"quant_algo": "NVFP4", "group_size": 16} */
static cJSON *layer_entry(enum mtpq_item_kind k) {
  cJSON *e = mtpq__jb(cJSON_CreateObject());
  MTPQ_JB(cJSON_AddStringToObject(e, "quant_algo", algo_of(k)));
  if (k == MTPQ_ITEM_NVFP4) MTPQ_JB(cJSON_AddNumberToObject(e, "group_size", 16));
  return e;
}

static cJSON *quantized_layers(const struct mtpq_plan *pl) {
  cJSON *m = mtpq__jb(cJSON_CreateObject());
  for (size_t i = 0; i < pl->n; i++)
    if (pl->items[i].kind != MTPQ_ITEM_COPY) mtpq__jb_add(m, pl->items[i].name, layer_entry(pl->items[i].kind));
  return m;
}

static cJSON *activation_group(int bits) {
  cJSON *g = mtpq__jb(cJSON_CreateObject());
  MTPQ_JB(cJSON_AddBoolToObject(g, "dynamic", 0));
  MTPQ_JB(cJSON_AddNumberToObject(g, "num_bits", bits));
  MTPQ_JB(cJSON_AddStringToObject(g, "type", "float"));
  if (bits == 4) MTPQ_JB(cJSON_AddNumberToObject(g, "group_size", 16));
  return g;
}

static cJSON *quantization_config(const struct mtpq_plan *pl) {
  cJSON *q = mtpq__jb(cJSON_CreateObject());
  MTPQ_JB(cJSON_AddStringToObject(q, "quant_method", "modelopt"));
  MTPQ_JB(cJSON_AddStringToObject(q, "quant_algo", "MIXED_PRECISION"));
  mtpq__jb_add(q, "quantized_layers", quantized_layers(pl));
  mtpq__jb_add(q, "ignore", cJSON_CreateArray());
  cJSON *groups = mtpq__jb(cJSON_AddObjectToObject(q, "config_groups"));
  int gi = 0;
  for (int pass = 0; pass < 2; pass++) {
    enum mtpq_item_kind want = pass == 0 ? MTPQ_ITEM_FP8 : MTPQ_ITEM_NVFP4;
    cJSON *targets = mtpq__jb(cJSON_CreateArray());
    for (size_t i = 0; i < pl->n; i++) {
      enum mtpq_item_kind k = pl->items[i].kind == MTPQ_ITEM_HEAD ? MTPQ_ITEM_FP8 : pl->items[i].kind;
      if (k == want) mtpq__jb_add(targets, NULL, cJSON_CreateString(pl->items[i].name));
    }
    if (cJSON_GetArraySize(targets) == 0) {
      cJSON_Delete(targets);
      continue;
    }
    char key[24];
    snprintf(key, sizeof key, "group_%d", gi++);
    cJSON *g = mtpq__jb(cJSON_AddObjectToObject(groups, key));
    mtpq__jb_add(g, "input_activations", activation_group(pass == 0 ? 8 : 4));
    mtpq__jb_add(g, "weights", activation_group(pass == 0 ? 8 : 4));
    mtpq__jb_add(g, "targets", targets);
  }
  cJSON *prod = mtpq__jb(cJSON_AddObjectToObject(q, "producer"));
  MTPQ_JB(cJSON_AddStringToObject(prod, "name", "mtpq"));
  MTPQ_JB(cJSON_AddStringToObject(prod, "version", MTPQ_VERSION));
  return q;
}

static enum mtpq_status copy_file(const char *from_dir, const char *to_dir, const char *name,
                                  struct mtpq_err *err) {
  char *src = mtpq__path_join(from_dir, name), *dst = mtpq__path_join(to_dir, name);
  enum mtpq_status st = MTPQ_OK;
  if (src && dst && mtpq__is_file(src)) {
    char *buf = NULL;
    size_t len = 0;
    st = mtpq__read_file(src, (size_t)1 << 30, &buf, &len, err);
    if (!st) st = mtpq__write_file_atomic(dst, buf, len, err);
    free(buf);
  }
  free(src);
  free(dst);
  return st;
}

/* A field ("license", "license_name", "license_link") of the YAML front
 * matter of the target's model card, or NULL. */
static char *card_field(const char *dir, const char *key) {
  char *path = mtpq__path_join(dir, "README.md"), *buf = NULL, *out = NULL;
  size_t len;
  struct mtpq_err e;
  if (path && mtpq__is_file(path) && mtpq__read_file(path, 1 << 20, &buf, &len, &e) == MTPQ_OK &&
      !strncmp(buf, "---", 3)) {
    char *end = strstr(buf + 3, "\n---"), pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    char *l = strstr(buf, pat);
    if (l && (!end || l < end)) {
      l += strlen(pat);
      while (*l == ' ') l++;
      size_t n = strcspn(l, "\r\n");
      while (n && (l[n - 1] == ' ' || l[n - 1] == '"' || l[n - 1] == '\'')) n--;
      if (*l == '"' || *l == '\'') l++, n = n ? n - 1 : 0;
      out = n ? malloc(n + 1) : NULL;
      if (out) memcpy(out, l, n), out[n] = '\0';
    }
  }
  free(buf);
  free(path);
  return out;
}

static int hubid_form(const char *s) { /* ORG/NAME: one slash inside, no spaces, not a path */
  const char *sl = s ? strchr(s, '/') : NULL;
  return sl && sl != s && sl[1] && !strchr(sl + 1, '/') && !strpbrk(s, " \t") && s[0] != '.';
}

void mtpq_drafter_base_model(const char *target_dir, const char *base, char *id, size_t id_cap, char *rev,
                             size_t rev_cap) {
  rev[0] = '\0';
  /* the Hub cache: models--ORG--NAME/snapshots/COMMIT, or mtpq's partial
   * fetches models--ORG--NAME/COMMIT-SELECTION */
  const char *m = strstr(target_dir, "models--"), *sn = m ? strchr(m, '/') : NULL;
  if (m && sn) {
    const char *c = sn + 1;
    if (!strncmp(c, "snapshots/", 10)) c += 10;
    size_t cl = strcspn(c, "-/");
    if (cl == 40 && strspn(c, "0123456789abcdef") >= 40 && rev_cap > 40) memcpy(rev, c, 40), rev[40] = '\0';
  }
  if (base && *base) {
    snprintf(id, id_cap, "%s", base);
    return;
  }
  if (m && sn) {
    const char *o = m + 8, *sep = strstr(o, "--");
    if (sep && sep < sn) {
      snprintf(id, id_cap, "%.*s/%.*s", (int)(sep - o), o, (int)(sn - sep - 2), sep + 2);
      return;
    }
  }
  char *cp = mtpq__path_join(target_dir, "config.json"), *buf = NULL;
  size_t len;
  struct mtpq_err e;
  if (cp && mtpq__is_file(cp) && mtpq__read_file(cp, 1 << 24, &buf, &len, &e) == MTPQ_OK) {
    cJSON *j = cJSON_ParseWithLength(buf, len);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "_name_or_path");
    if (cJSON_IsString(n) && hubid_form(n->valuestring)) {
      snprintf(id, id_cap, "%s", n->valuestring);
      cJSON_Delete(j), free(buf), free(cp);
      return;
    }
    cJSON_Delete(j);
  }
  free(buf), free(cp);
  size_t tl = strlen(target_dir);
  while (tl > 1 && target_dir[tl - 1] == '/') tl--;
  const char *b = target_dir + tl;
  while (b > target_dir && b[-1] != '/') b--;
  snprintf(id, id_cap, "%.*s", (int)(target_dir + tl - b), b);
}

static enum mtpq_status write_card(const struct mtpq_drafter_params *p, const struct mtpq_plan *pl,
                                   const char *dir, struct mtpq_err *err) {
  struct drafter_priv *pv = pl->priv;
  size_t n_fp8 = 0, n_nv = 0, n_copy = 0;
  uint64_t in_q = 0, out_q = 0;
  for (size_t i = 0; i < pl->n; i++) {
    const struct mtpq_plan_item *it = &pl->items[i];
    if (it->kind == MTPQ_ITEM_COPY) n_copy++;
    else if (it->kind != MTPQ_ITEM_HEAD) { /* the head apart: vLLM's stock drafter shares the target's */
      if (it->kind == MTPQ_ITEM_NVFP4) n_nv++;
      else n_fp8++;
      in_q += it->in_bytes;
      out_q += it->out_bytes;
    }
  }
  const double head_mb = (double)pl->head_rows * (double)pl->hidden / 1e6; /* FP8: a byte a weight */
  char *evidence = NULL;
  enum mtpq_status est = mtpq__card_evidence(p, dir, &evidence, err);
  if (est) return est;
  char base[512], rev[64];
  mtpq_drafter_base_model(mtpq_repo_dir(pv->target), p->base_model, base, sizeof base, rev, sizeof rev);
  char *lic = card_field(mtpq_repo_dir(pv->target), "license");
  char *lic_name = card_field(mtpq_repo_dir(pv->target), "license_name");
  char *lic_link = card_field(mtpq_repo_dir(pv->target), "license_link");
  char licx[1024] = "";
  if (!lic) /* unknown: "other" with a name saying so (the Hub wants one), and the card says to check */
    snprintf(licx, sizeof licx, "license_name: same-as-base-model\n%s%s%s",
             hubid_form(base) ? "license_link: "
                                "https://huggingface.co/"
                              : "",
             hubid_form(base) ? base : "", hubid_form(base) ? "\n" : "");
  else if (lic_name || lic_link)
    snprintf(licx, sizeof licx, "%s%s%s%s%s%s", lic_name ? "license_name: " : "", lic_name ? lic_name : "",
             lic_name ? "\n" : "", lic_link ? "license_link: " : "", lic_link ? lic_link : "", lic_link ? "\n" : "");
  const char *outbase = strrchr(p->out, '/'); /* the drafter's id in the title and the serve line */
  outbase = p->repo_id ? p->repo_id : outbase ? outbase + 1 : p->out;
  size_t cap = ((size_t)1 << 16) + strlen(evidence);
  char *s = malloc(cap);
  if (!s) {
    free(lic), free(lic_name), free(lic_link), free(evidence);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  int n = snprintf(
      s, cap,
      "---\nbase_model: %s\nbase_model_relation: quantized\nlibrary_name: vllm\nlicense: %s\n%s"
      "tags:\n- mtp\n- speculative-decoding\n- draft-model\n- fp8\n- nvfp4\n- mtpq\n---\n\n"
      "# %s: FP8/NVFP4 MTP drafter for %s\n\n"
      "%s"
      "This repo holds only the multi-token-prediction (MTP) drafter of `%s`, quantized by "
      "mtpq %s for speculative decoding in vLLM. The target model itself is unchanged and still "
      "verifies every token, so greedy outputs are the target's.\n\n"
      "## What was quantized\n\n"
      "| part | format | modules |\n|---|---|---|\n"
      "| MoE experts (`mtp.layers.*.mlp.experts.*`) | NVFP4 (E2M1, E4M3 scales per 16, global "
      "scale amax/2688; gate and up share it) | %zu |\n"
      "| draft linears (`mtp.fc`, attention q/k/v/o, shared expert) | FP8 E4M3 per tensor, static "
      "input_scale %.4g | %zu |\n"
      "| draft head `mtp.draft_lm_head` | FP8 E4M3 per tensor: %lld of %lld rows of `%s` | 1 |\n"
      "| router, shared-expert gate, norms | BF16 (copied) | %zu tensors |\n\n"
      "Expert input_scale: gate/up %.6g, down %.6g (%s). Arithmetic: %s (torch on %s).\n\n"
      "## Sizes\n\n"
      "Quantized MTP modules (experts and draft linears): %.1f MB in BF16 -> %.1f MB, %.1f MB of "
      "GPU memory freed. The FP8 draft head adds %.1f MB (vLLM's stock MTP drafter reads the "
      "target's full BF16 head, which stays in memory for the target), and a draft step reads it "
      "instead of the full head. Quantization is weight-only in mtpq's own replay "
      "(bench-acceptance); vLLM also quantizes the FP8 linears' activations with the static "
      "input_scale.\n\n"
      "The draft vocabulary is `mtp_draft_vocab_ids.pt` / `.safetensors` (%zu ids, ascending); "
      "`config.json` carries `mtp_draft_vocab_size`.\n\n"
      "## Use with vLLM\n\n"
      "Stock vLLM builds an MTP drafter with the target's quantization config and has no "
      "reduced-vocabulary MTP head, so this repo ships a vLLM plugin in `vllm_plugin/` (written "
      "for vLLM 0.33.0, 0.34.0 and 0.26.0, whose hooks it was checked against; it warns at load on any other; it "
      "builds the "
      "drafter with this repo's own quantization config and scatters the "
      "FP8 draft head's logits back into the full vocabulary). From a local copy of this repo:\n\n"
      "```sh\npip install './vllm_plugin[vllm]'   # or ./vllm_plugin alone: keeps the vLLM installed\n"
      "vllm serve %s --speculative-config "
      "'{\"method\": \"mtp\", \"num_speculative_tokens\": 3, \"model\": \"%s\"}'\n```\n\n"
      "%s"
      "## Provenance\n\n"
      "`mtpq_manifest.json` lists every file with its sha256, the mtpq version, the target and the "
      "recipe.\n",
      base, lic ? lic : "other", licx, outbase, base,
      lic ? ""
          : "The target's model card gives no license: this drafter is derived from its weights, so the "
            "target's license applies; check it before use.\n\n",
      base, MTPQ_VERSION, n_nv, p->fp8_input_scale, n_fp8, (long long)pl->head_rows, (long long)pl->vocab_rows,
      pl->head_source, n_copy, pl->expert_input_scale_gate_up, pl->expert_input_scale_down,
      pl->expert_input_scale_origin ? pl->expert_input_scale_origin : "no experts",
      p->arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu", p->arith == MTPQ_ARITH_CUDA ? "a GPU" : "a CPU", (double)in_q / 1e6,
      (double)out_q / 1e6, ((double)in_q - (double)out_q) / 1e6, head_mb, pv->n_ids, base, outbase, evidence);
  free(lic), free(lic_name), free(lic_link), free(evidence);
  char *path = mtpq__path_join(dir, "README.md");
  enum mtpq_status st = path && n > 0 ? mtpq__write_file_atomic(path, s, (size_t)n, err)
                                      : mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  free(path);
  free(s);
  return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Relative paths of the regular files under root/rel (one level of
 * subdirectories is all a drafter repo has: vllm_plugin/mtpq_vllm). */
static int list_files(const char *root, const char *rel, char **names, size_t *nn, size_t cap) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d)) != NULL && *nn < cap) {
    if (e->d_name[0] == '.') continue;
    char r[4096], full[8192];
    snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
    snprintf(full, sizeof full, "%s/%s", root, r);
    if (mtpq__is_dir(full))
      rc = list_files(root, r, names, nn, cap);
    else if (!(names[*nn] = mtpq__strdup(r)))
      rc = -1; /* (a file left out of the manifest would go unnoticed) */
    else
      ++*nn;
  }
  closedir(d);
  return rc;
}

static enum mtpq_status write_manifest(const struct mtpq_drafter_params *p, const struct mtpq_plan *pl,
                                       const char *dir, struct mtpq_err *err) {
  char *names[1024];
  size_t nn = 0;
  if (list_files(dir, "", names, &nn, 1024)) {
    for (size_t i = 0; i < nn; i++) free(names[i]);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: cannot list the repo's files (out of memory)", dir);
  }
  qsort(names, nn, sizeof *names, cmp_str);
  cJSON *m = mtpq__jb(cJSON_CreateObject());
  MTPQ_JB(cJSON_AddStringToObject(m, "created_by", "mtpq quantize"));
  MTPQ_JB(cJSON_AddStringToObject(m, "mtpq_version", MTPQ_VERSION));
  cJSON *t = mtpq__jb(cJSON_AddObjectToObject(m, "target"));
  char base[512], rev[64];
  mtpq_drafter_base_model(p->target, p->base_model, base, sizeof base, rev, sizeof rev);
  MTPQ_JB(cJSON_AddStringToObject(t, "path", p->target));
  MTPQ_JB(cJSON_AddStringToObject(t, "base_model", base));
  const char *rv = p->revision && *p->revision ? p->revision : rev;
  if (*rv)
    MTPQ_JB(cJSON_AddStringToObject(t, "revision", rv));
  else
    MTPQ_JB(cJSON_AddNullToObject(t, "revision")); /* a local directory: no Hub commit known */
  MTPQ_JB(cJSON_AddStringToObject(t, "family", pl->family));
  MTPQ_JB(cJSON_AddStringToObject(m, "vocab_ids", p->vocab_ids));
  cJSON *r = mtpq__jb(cJSON_AddObjectToObject(m, "recipe"));
  MTPQ_JB(cJSON_AddStringToObject(r, "experts", "NVFP4 per expert, gate/up share the global scale"));
  MTPQ_JB(cJSON_AddNumberToObject(r, "expert_input_scale_gate_up", pl->expert_input_scale_gate_up));
  MTPQ_JB(cJSON_AddNumberToObject(r, "expert_input_scale_down", pl->expert_input_scale_down));
  MTPQ_JB(cJSON_AddStringToObject(r, "draft_linears", mtpq_format_get(p->fp8_format)->name));
  MTPQ_JB(cJSON_AddNumberToObject(r, "fp8_input_scale", p->fp8_input_scale));
  MTPQ_JB(cJSON_AddStringToObject(r, "draft_head", "FP8 per tensor, rows of the target head for the ids"));
  MTPQ_JB(cJSON_AddStringToObject(r, "kept_bf16", "router, shared_expert_gate, norms"));
  MTPQ_JB(cJSON_AddStringToObject(m, "arith", p->arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu"));
  cJSON *files = mtpq__jb(cJSON_AddObjectToObject(m, "files"));
  enum mtpq_status st = MTPQ_OK;
  for (size_t i = 0; i < nn && !st; i++) {
    char *path = mtpq__path_join(dir, names[i]), hex[65];
    uint64_t len = 0; /* streamed: shards can be GBs */
    st = path ? mtpq__file_digest(path, 0, hex, &len, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
    if (!st) {
      cJSON *f = mtpq__jb(cJSON_AddObjectToObject(files, names[i]));
      MTPQ_JB(cJSON_AddNumberToObject(f, "bytes", (double)len));
      MTPQ_JB(cJSON_AddStringToObject(f, "sha256", hex));
    }
    free(path);
  }
  for (size_t i = 0; i < nn; i++) free(names[i]);
  if (!st) st = write_json(dir, "mtpq_manifest.json", m, err);
  cJSON_Delete(m);
  return st;
}

/* The vLLM plugin, into DIR/vllm_plugin. */
static enum mtpq_status write_plugin(const char *dir, struct mtpq_err *err) {
  char *root = mtpq__path_join(dir, "vllm_plugin");
  char *pkg = root ? mtpq__path_join(root, "mtpq_vllm") : NULL;
  enum mtpq_status st = MTPQ_OK;
  if (!root || !pkg || mkdir(root, 0755) != 0 || mkdir(pkg, 0755) != 0)
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s/vllm_plugin: cannot create", dir);
  for (const struct mtpq_embedded_file *f = mtpq_vllm_plugin_files; !st && f->path; f++) {
    char *path = mtpq__path_join(root, f->path);
    st = path ? mtpq__write_file_atomic(path, f->bytes, f->len, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
    free(path);
  }
  free(root);
  free(pkg);
  return st;
}

enum mtpq_status mtpq__drafter_meta(const struct mtpq_drafter_params *p, const struct mtpq_plan *pl,
                                    const char *dir, struct mtpq_err *err) {
  struct drafter_priv *pv = pl->priv;
  mtpq__jb_reset();
  cJSON *cfg = cJSON_Duplicate((cJSON *)pv->cfg.json, 1);
  if (!cfg) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
  cJSON_DeleteItemFromObjectCaseSensitive(cfg, "mtp_draft_vocab_size");
  MTPQ_JB(cJSON_AddNumberToObject(cfg, "mtp_draft_vocab_size", (double)pv->n_ids));
  mtpq__jb_add(cfg, "quantization_config", quantization_config(pl));
  enum mtpq_status st = write_json(dir, "config.json", cfg, err);
  cJSON_Delete(cfg);
  if (st) return st;
  cJSON *hq = mtpq__jb(cJSON_CreateObject());
  cJSON *prod = mtpq__jb(cJSON_AddObjectToObject(hq, "producer"));
  MTPQ_JB(cJSON_AddStringToObject(prod, "name", "mtpq"));
  MTPQ_JB(cJSON_AddStringToObject(prod, "version", MTPQ_VERSION));
  cJSON *q = mtpq__jb(cJSON_AddObjectToObject(hq, "quantization"));
  MTPQ_JB(cJSON_AddStringToObject(q, "quant_algo", "MIXED_PRECISION"));
  MTPQ_JB(cJSON_AddNullToObject(q, "kv_cache_quant_algo"));
  mtpq__jb_add(q, "quantized_layers", quantized_layers(pl));
  st = write_json(dir, "hf_quant_config.json", hq, err);
  cJSON_Delete(hq);
  static const char *copies[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                 "vocab.json", "merges.txt", "special_tokens_map.json", "chat_template.jinja"};
  for (size_t i = 0; i < sizeof copies / sizeof copies[0] && !st; i++)
    st = copy_file(mtpq_repo_dir(pv->target), dir, copies[i], err);
  if (!st) st = write_plugin(dir, err);
  if (!st) st = write_card(p, pl, dir, err);
  if (!st) st = write_manifest(p, pl, dir, err);
  return st;
}
