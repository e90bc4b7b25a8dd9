/* mtpq inspect: what a checkpoint holds (tensors, groups, family, MTP). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/model.h"

const struct cli_opt inspect_opts[] = {
    {"json", 0, OPT_FLAG, 0, NULL, "print one JSON object instead of text"},
    {"summary", 's', OPT_FLAG, 0, NULL, "text mode: omit the per-tensor table"},
    {"revision", 0, OPT_STR, 0, "REV", "with a Hub repo id (org/name): branch, tag or commit (default main)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

/* Group of a tensor: a layer stack collapses to "<prefix>.layers", other
 * names drop their last component ("mtp.fc.weight" -> "mtp.fc"). */
static void group_of(const char *name, char *out, size_t cap) {
  const char *l = strstr(name, ".layers.");
  if (l && l[8] >= '0' && l[8] <= '9') {
    snprintf(out, cap, "%.*s.layers", (int)(l - name), name);
    return;
  }
  if (strncmp(name, "layers.", 7) == 0) {
    snprintf(out, cap, "layers");
    return;
  }
  const char *dot = strrchr(name, '.');
  if (dot) snprintf(out, cap, "%.*s", (int)(dot - name), name);
  else snprintf(out, cap, "%s", name);
}

struct group {
  char name[160];
  size_t tensors;
  unsigned long long bytes;
  unsigned dtypes; /* bit per dtype */
};

static int collect_groups(const struct mtpq_repo *r, struct group **out, size_t *n) {
  size_t cap = 16, k = 0;
  struct group *g = calloc(cap, sizeof *g);
  if (!g) return -1;
  for (size_t i = 0; i < mtpq_repo_count(r); i++) {
    const struct mtpq_tensor *t = mtpq_repo_at(r, i);
    char name[160];
    group_of(t->name, name, sizeof name);
    size_t j = 0;
    while (j < k && strcmp(g[j].name, name) != 0) j++;
    if (j == k) {
      if (k == cap) {
        struct group *ng = realloc(g, 2 * cap * sizeof *g);
        if (!ng) {
          free(g);
          return -1;
        }
        g = ng;
        cap *= 2;
      }
      memset(&g[k], 0, sizeof g[k]);
      snprintf(g[k].name, sizeof g[k].name, "%s", name);
      k++;
    }
    g[j].tensors++;
    g[j].bytes += t->nbytes;
    g[j].dtypes |= 1u << t->dtype;
  }
  *out = g;
  *n = k;
  return 0;
}

static void dtypes_str(unsigned mask, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int d = 0; d < MTPQ_DTYPE_COUNT; d++)
    if (mask & (1u << d)) {
      if (buf[0]) strncat(buf, ",", cap - strlen(buf) - 1);
      strncat(buf, mtpq_dtype_name((enum mtpq_dtype)d), cap - strlen(buf) - 1);
    }
}

static void shape_str(const struct mtpq_tensor *t, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < t->rank && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static int print_json(const char *path, const struct mtpq_repo *r,
                      const struct mtpq_model_config *cfg, const struct mtpq_model_desc *d,
                      const struct group *g, size_t ng) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", path);
  cJSON_AddNumberToObject(o, "tensor_count", (double)mtpq_repo_count(r));
  cJSON_AddNumberToObject(o, "total_bytes", (double)mtpq_repo_bytes(r));
  cJSON *sh = cJSON_AddArrayToObject(o, "shards");
  for (size_t s = 0; s < mtpq_repo_shard_count(r); s++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", mtpq_repo_shard_name(r, s));
    cJSON_AddNumberToObject(x, "tensors", (double)mtpq_st_count(mtpq_repo_shard(r, s)));
    cJSON_AddNumberToObject(x, "file_bytes", (double)mtpq_st_file_size(mtpq_repo_shard(r, s)));
    cJSON_AddItemToArray(sh, x);
  }
  cJSON_AddStringToObject(o, "family", mtpq_family_name(d->family));
  cJSON_AddStringToObject(o, "architecture", cfg ? cfg->architecture : "");
  cJSON_AddBoolToObject(o, "multimodal", d->multimodal);
  cJSON_AddStringToObject(o, "trunk_prefix", d->trunk_prefix);
  cJSON_AddNumberToObject(o, "trunk_layers", d->trunk_layers);
  cJSON_AddBoolToObject(o, "tied_embeddings", d->tied);
  if (d->lm_head) cJSON_AddStringToObject(o, "lm_head", d->lm_head->name);
  else cJSON_AddNullToObject(o, "lm_head");
  cJSON *m = cJSON_AddObjectToObject(o, "mtp");
  cJSON_AddNumberToObject(m, "layers", d->mtp_layers);
  cJSON_AddNumberToObject(m, "experts", d->mtp_experts);
  cJSON_AddStringToObject(m, "expert_layout", mtpq_expert_layout_name(d->expert_layout));
  cJSON_AddNumberToObject(m, "tensors", (double)d->mtp_tensors);
  cJSON_AddNumberToObject(m, "bytes", (double)d->mtp_bytes);
  cJSON *ga = cJSON_AddArrayToObject(o, "groups");
  for (size_t i = 0; i < ng; i++) {
    char dt[128];
    dtypes_str(g[i].dtypes, dt, sizeof dt);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", g[i].name);
    cJSON_AddNumberToObject(x, "tensors", (double)g[i].tensors);
    cJSON_AddNumberToObject(x, "bytes", (double)g[i].bytes);
    cJSON_AddStringToObject(x, "dtypes", dt);
    cJSON_AddItemToArray(ga, x);
  }
  cJSON *ta = cJSON_AddArrayToObject(o, "tensors");
  for (size_t i = 0; i < mtpq_repo_count(r); i++) {
    const struct mtpq_tensor *t = mtpq_repo_at(r, i);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", t->name);
    cJSON_AddStringToObject(x, "dtype", mtpq_dtype_name(t->dtype));
    cJSON *s = cJSON_AddArrayToObject(x, "shape");
    for (int k = 0; k < t->rank; k++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[k]));
    cJSON_AddNumberToObject(x, "bytes", (double)t->nbytes);
    cJSON_AddStringToObject(x, "shard", mtpq_repo_shard_name(r, (size_t)t->shard));
    cJSON_AddItemToArray(ta, x);
  }
  char *txt = cJSON_Print(o);
  cJSON_Delete(o);
  if (!txt) {
    cli_error("out of memory");
    return MTPQ_EXIT_FAILURE;
  }
  fputs(txt, stdout);
  fputc('\n', stdout);
  free(txt);
  return 0;
}

static void print_text(const char *path, const struct mtpq_repo *r,
                       const struct mtpq_model_config *cfg, const struct mtpq_model_desc *d,
                       const struct group *g, size_t ng, int summary) {
  char b1[32];
  printf("%s: %zu tensors in %zu shard%s, %s\n", path, mtpq_repo_count(r),
         mtpq_repo_shard_count(r), mtpq_repo_shard_count(r) == 1 ? "" : "s",
         cli_bytes(mtpq_repo_bytes(r), b1, sizeof b1));
  const struct mtpq_tensor *dh = mtpq_repo_find(r, "mtp.draft_lm_head.weight");
  if (dh) { /* an mtpq drafter repo: the MTP layer alone, its quantization */
    size_t nv = 0, n8 = 0;
    for (size_t i = 0; i < mtpq_repo_count(r); i++) {
      const char *nm = mtpq_repo_at(r, i)->name;
      const size_t l = strlen(nm);
      if (l > 15 && !strcmp(nm + l - 15, ".weight_scale_2"))
        nv++;
      else if (l > 13 && !strcmp(nm + l - 13, ".weight_scale") && mtpq_repo_at(r, i)->dtype == MTPQ_DTYPE_F32)
        n8++;
    }
    printf("family:     mtpq drafter repo for %s%s%s%s (the MTP layer alone; the trunk is the target's)\n",
           mtpq_family_name(d->family), cfg && cfg->architecture[0] ? " (" : "", cfg ? cfg->architecture : "",
           cfg && cfg->architecture[0] ? ")" : "");
    printf("quantized:  %zu NVFP4 modules, %zu FP8 modules (the draft head included), draft head %lld x %lld "
           "(mtp_draft_vocab_ids.safetensors)\n",
           nv, n8, (long long)dh->shape[0], (long long)(dh->rank > 1 ? dh->shape[1] : 0));
  } else {
    printf("family:     %s%s%s%s, %d trunk layers%s\n", mtpq_family_name(d->family),
           cfg && cfg->architecture[0] ? " (" : "", cfg ? cfg->architecture : "",
           cfg && cfg->architecture[0] ? ")" : "", d->trunk_layers,
           d->multimodal ? ", multimodal (trunk under model.language_model.)" : "");
  }
  if (d->mtp_layers) {
    printf("mtp:        %d layer%s, %s", d->mtp_layers, d->mtp_layers == 1 ? "" : "s",
           d->mtp_experts ? "MoE" : "dense MLP");
    if (d->mtp_experts)
      printf(" with %d experts (%s)", d->mtp_experts, mtpq_expert_layout_name(d->expert_layout));
    printf(", %zu tensors, %s\n", d->mtp_tensors, cli_bytes(d->mtp_bytes, b1, sizeof b1));
  } else {
    printf("mtp:        none (no mtp.layers.* tensors)\n");
  }
  if (d->lm_head)
    printf("lm head:    %s%s\n", d->lm_head->name, d->tied ? " (tied embeddings)" : "");
  else if (!dh)
    printf("lm head:    none found\n");
  printf("\n%-44s %8s %12s  %s\n", "group", "tensors", "bytes", "dtypes");
  for (size_t i = 0; i < ng; i++) {
    char dt[128];
    dtypes_str(g[i].dtypes, dt, sizeof dt);
    printf("%-44s %8zu %12s  %s\n", g[i].name, g[i].tensors,
           cli_bytes(g[i].bytes, b1, sizeof b1), dt);
  }
  if (summary) return;
  printf("\n%-60s %-8s %-18s %12s  %s\n", "tensor", "dtype", "shape", "bytes", "shard");
  for (size_t i = 0; i < mtpq_repo_count(r); i++) {
    const struct mtpq_tensor *t = mtpq_repo_at(r, i);
    char shp[96];
    shape_str(t, shp, sizeof shp);
    printf("%-60s %-8s %-18s %12llu  %s\n", t->name, mtpq_dtype_name(t->dtype), shp,
           (unsigned long long)t->nbytes, mtpq_repo_shard_name(r, (size_t)t->shard));
  }
}

int cmd_inspect(int argc, char **argv) {
  struct cli_args a;
  int help;
  if (cli_parse("inspect", inspect_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos != 1) return cli_usage_error("inspect", "inspect needs exactly one PATH");
  static char path[2048]; /* a Hub repo id: only the shards' headers are fetched (Range) */
  int hrc = cli_hub_target("inspect", a.pos[0], cli_str(inspect_opts, &a, "revision"), NULL, "headers", path,
                           sizeof path);
  if (hrc) return hrc;
  struct mtpq_err err = {0};
  struct mtpq_repo *r = NULL;
  enum mtpq_status st = mtpq_repo_open(path, &r, &err);
  if (st) return cli_fail(st, &err);

  struct mtpq_model_config cfg;
  int have_cfg = 0;
  st = mtpq_config_load_dir(mtpq_repo_dir(r), &cfg, &have_cfg, &err);
  if (st) {
    mtpq_repo_close(r);
    return cli_fail(st, &err);
  }
  struct mtpq_model_desc d;
  mtpq_model_describe(r, have_cfg ? &cfg : NULL, &d);
  struct group *g = NULL;
  size_t ng = 0;
  int rc = 0;
  if (collect_groups(r, &g, &ng) != 0) {
    cli_error("out of memory");
    rc = MTPQ_EXIT_FAILURE;
  } else if (cli_has(inspect_opts, &a, "json")) {
    rc = print_json(a.pos[0], r, have_cfg ? &cfg : NULL, &d, g, ng);
  } else {
    print_text(a.pos[0], r, have_cfg ? &cfg : NULL, &d, g, ng, cli_has(inspect_opts, &a, "summary"));
  }
  free(g);
  if (have_cfg) mtpq_config_free(&cfg);
  mtpq_repo_close(r);
  if (fflush(stdout) != 0 && rc == 0) {
    cli_error("cannot write to standard output");
    rc = MTPQ_EXIT_IO;
  }
  return rc;
}
