/* Writing the drafter repo: ids, quantization, shards, atomic directory. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/torch_pt.h"
#include "io/util.h"
#include "quant/gpu_quant.h"
#include "quant/drafter_priv.h"

static volatile sig_atomic_t cancel_flag;
void mtpq_request_cancel(void) { cancel_flag = 1; }
int mtpq__cancelled(void) { return cancel_flag != 0; }

enum mtpq_status mtpq__drafter_load_ids(const struct mtpq_drafter_params *p, struct drafter_priv *pv,
                                        const struct mtpq_tensor *head, struct mtpq_err *err) {
  struct mtpq_st_file *f = NULL;
  enum mtpq_status st = mtpq_st_open(p->vocab_ids, &f, err);
  if (st) return st;
  const struct mtpq_tensor *t = mtpq_st_find(f, "ids");
  for (size_t i = 0; !t && i < mtpq_st_count(f); i++)
    if (mtpq_st_at(f, i)->dtype == MTPQ_DTYPE_I64 && mtpq_st_at(f, i)->rank == 1) t = mtpq_st_at(f, i);
  if (!t || t->dtype != MTPQ_DTYPE_I64 || t->rank != 1 || t->numel == 0) {
    mtpq_st_close(f);
    return mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: no non-empty 1-D I64 ids tensor", p->vocab_ids);
  }
  if (head->dtype != MTPQ_DTYPE_BF16 || head->rank != 2) {
    mtpq_st_close(f);
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "head %s is %s rank %d; need BF16 [vocab, hidden]", head->name,
                        mtpq_dtype_name(head->dtype), head->rank);
  }
  pv->n_ids = (size_t)t->numel;
  pv->ids = malloc(pv->n_ids * sizeof *pv->ids);
  size_t row = (size_t)head->shape[1] * 2;
  pv->head = malloc(pv->n_ids * row);
  if (!pv->ids || !pv->head) {
    mtpq_st_close(f);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for %zu head rows", pv->n_ids);
  }
  memcpy(pv->ids, t->data, pv->n_ids * 8);
  for (size_t i = 0; i < pv->n_ids && !st; i++) {
    int64_t id = pv->ids[i];
    if (id < 0 || id >= head->shape[0])
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: ids[%zu] = %lld is outside the head's %lld rows (%s)",
                        p->vocab_ids, i, (long long)id, (long long)head->shape[0], head->name);
    else if (i && id <= pv->ids[i - 1])
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: ids[%zu] = %lld after %lld: ids must be strictly ascending",
                        p->vocab_ids, i, (long long)id, (long long)pv->ids[i - 1]);
    else
      memcpy((unsigned char *)pv->head + i * row, (const unsigned char *)head->data + (size_t)id * row, row);
  }
  mtpq_st_close(f);
  mtpq__release_pages(head->data, (size_t)head->nbytes); /* only the gathered copy is used now */
  return st;
}

/* ---- temporary directory ---------------------------------------------------------- */

/* "<parent>/.<base>.mtpq-tmp.<pid>"; stale ones (dead pid) are removed. */
static char *tmp_dir_for(const char *out) {
  const char *slash = strrchr(out, '/');
  size_t plen = slash ? (size_t)(slash - out) + 1 : 0;
  const char *base = slash ? slash + 1 : out;
  size_t n = strlen(out) + 64;
  char *t = malloc(n);
  if (!t) return NULL;
  char parent[4096];
  snprintf(parent, sizeof parent, "%.*s", plen ? (int)plen : 1, plen ? out : ".");
  DIR *d = opendir(parent);
  char pre[1024];
  snprintf(pre, sizeof pre, ".%s.mtpq-tmp.", base);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, pre, strlen(pre)) != 0) continue;
      long pid = strtol(e->d_name + strlen(pre), NULL, 10);
      if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        char stale[8192];
        snprintf(stale, sizeof stale, "%s/%s", parent, e->d_name);
        mtpq__rmtree(stale);
      }
    }
    closedir(d);
  }
  snprintf(t, n, "%.*s.%s.mtpq-tmp.%ld", (int)plen, out, base, (long)getpid());
  return t;
}

/* ---- tensors ---------------------------------------------------------------------------- */

struct shard {
  struct mtpq_st_writer *w;
  char name[64];
};

static enum mtpq_status declare_item(struct mtpq_st_writer *w, const struct mtpq_plan_item *it,
                                     const struct mtpq_tensor *src, struct mtpq_err *err) {
  char n[600];
  int64_t s2[2];
  enum mtpq_status st = MTPQ_OK;
  if (it->kind == MTPQ_ITEM_COPY)
    return mtpq_stw_add(w, it->name, src->dtype, src->rank, src->shape, err);
  int nv = it->kind == MTPQ_ITEM_NVFP4;
  int64_t c16 = (it->cols + 15) / 16 * 16;
  s2[0] = it->rows, s2[1] = nv ? c16 / 2 : it->cols;
  snprintf(n, sizeof n, "%s.weight", it->name);
  st = mtpq_stw_add(w, n, nv ? MTPQ_DTYPE_U8 : MTPQ_DTYPE_F8_E4M3, 2, s2, err);
  if (!st) {
    snprintf(n, sizeof n, "%s.weight_scale", it->name);
    s2[1] = c16 / 16;
    st = nv ? mtpq_stw_add(w, n, MTPQ_DTYPE_F8_E4M3, 2, s2, err) : mtpq_stw_add(w, n, MTPQ_DTYPE_F32, 0, s2, err);
  }
  if (!st && nv) {
    snprintf(n, sizeof n, "%s.weight_scale_2", it->name);
    st = mtpq_stw_add(w, n, MTPQ_DTYPE_F32, 0, s2, err);
  }
  if (!st) {
    snprintf(n, sizeof n, "%s.input_scale", it->name);
    st = mtpq_stw_add(w, n, MTPQ_DTYPE_F32, 0, s2, err);
  }
  return st;
}

static enum mtpq_status write_item(const struct mtpq_drafter_params *p, struct mtpq_st_writer *w,
                                   const struct mtpq_plan_item *it, float group_amax,
                                   const struct mtpq_tensor *src, struct mtpq_err *err) {
  if (it->kind == MTPQ_ITEM_COPY) return mtpq_stw_write_all(w, it->name, src->data, src->nbytes, err);
  enum mtpq_format fmt = it->kind == MTPQ_ITEM_NVFP4 ? MTPQ_FMT_NVFP4 : p->fp8_format;
  struct mtpq_quant_opts o = mtpq_quant_default_opts();
  o.arith = p->arith;
  o.threads = p->threads;
  o.group_amax = group_amax;
  struct mtpq_qtensor q;
  enum mtpq_status st = p->use_gpu ? mtpq_gpu_quantize(fmt, it->src, it->rows, it->cols, &o, &q, err)
                                   : mtpq_quantize(fmt, it->src, it->rows, it->cols, &o, &q, err);
  if (st) {
    /* name the source tensor in the message */
    char msg[MTPQ_ERR_MSG_SIZE];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    return mtpq_err_set(err, st, "tensor %s: %s", it->src_name, msg);
  }
  char n[600];
  snprintf(n, sizeof n, "%s.weight", it->name);
  st = mtpq_stw_write_all(w, n, q.data, q.data_bytes, err);
  if (!st) {
    snprintf(n, sizeof n, "%s.weight_scale", it->name);
    st = q.scales ? mtpq_stw_write_all(w, n, q.scales, q.scale_bytes, err)
                  : mtpq_stw_write_all(w, n, &q.scale, 4, err);
  }
  if (!st && q.scales) {
    snprintf(n, sizeof n, "%s.weight_scale_2", it->name);
    st = mtpq_stw_write_all(w, n, &q.scale, 4, err);
  }
  if (!st) {
    snprintf(n, sizeof n, "%s.input_scale", it->name);
    st = mtpq_stw_write_all(w, n, &it->input_scale, 4, err);
  }
  mtpq_qtensor_free(&q);
  return st;
}

static enum mtpq_status write_index(const char *dir, const struct mtpq_plan *pl, const int *shard_of,
                                    const struct shard *sh, uint64_t total, struct mtpq_err *err) {
  /* Tensor names per item are derived the same way as in declare_item. */
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  if (!s) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  n += (size_t)snprintf(s, cap, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                        (unsigned long long)total);
  static const char *nv_parts[] = {".input_scale", ".weight", ".weight_scale", ".weight_scale_2"};
  int first = 1;
  for (size_t i = 0; i < pl->n; i++) {
    const struct mtpq_plan_item *it = &pl->items[i];
    int parts = it->kind == MTPQ_ITEM_COPY ? 1 : it->kind == MTPQ_ITEM_NVFP4 ? 4 : 3;
    for (int k = 0; k < parts; k++) {
      const char *suf = it->kind == MTPQ_ITEM_COPY ? "" : nv_parts[k];
      if (n + strlen(it->name) + 256 > cap) {
        char *ns = realloc(s, cap *= 2);
        if (!ns) {
          free(s);
          return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        }
        s = ns;
      }
      n += (size_t)snprintf(s + n, cap - n, "%s\n    \"%s%s\": \"%s\"", first ? "" : ",", it->name, suf,
                            sh[shard_of[i]].name);
      first = 0;
    }
  }
  n += (size_t)snprintf(s + n, cap - n, "\n  }\n}\n");
  char *path = mtpq__path_join(dir, "model.safetensors.index.json");
  enum mtpq_status st = path ? mtpq__write_file_atomic(path, s, n, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
  free(path);
  free(s);
  return st;
}

enum mtpq_status mtpq_drafter_check_out(const char *out, int force, struct mtpq_err *err) {
  if (!out || !*out) return mtpq_err_set(err, MTPQ_E_INVAL, "an empty output path");
  const int dir = mtpq__is_dir(out);
  if (!dir && !mtpq__is_file(out)) return MTPQ_OK;
  if (!force) return mtpq_err_set(err, MTPQ_E_EXISTS, "%s exists; pass --force to replace it", out);
  if (!dir)
    return mtpq_err_set(err, MTPQ_E_EXISTS,
                        "%s is a file, not an earlier mtpq output: --force replaces only those "
                        "(or an empty directory); remove it yourself",
                        out);
  char *man = mtpq__path_join(out, "mtpq_manifest.json");
  const int ours = man && mtpq__is_file(man);
  free(man);
  if (ours) return MTPQ_OK;
  DIR *d = opendir(out);
  if (!d) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot list: %s", out, strerror(errno));
  struct dirent *e;
  char first[256] = "";
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(first, sizeof first, "%s", e->d_name);
      break;
    }
  closedir(d);
  if (!first[0]) return MTPQ_OK; /* empty */
  return mtpq_err_set(err, MTPQ_E_EXISTS,
                      "%s holds %s and no mtpq_manifest.json: not an earlier mtpq output, so "
                      "--force leaves it alone; choose another --out or remove it yourself",
                      out, first);
}

enum mtpq_status mtpq_drafter_write(const struct mtpq_drafter_params *p, struct mtpq_plan *pl,
                                    mtpq_progress_fn progress, void *ctx, struct mtpq_err *err) {
  struct drafter_priv *pv = pl->priv;
  enum mtpq_status cst = mtpq_drafter_check_out(p->out, p->force, err);
  if (cst) return cst;
  char *tmp = tmp_dir_for(p->out);
  if (!tmp) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (mkdir(tmp, 0755) != 0) {
    enum mtpq_status st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return st;
  }
  enum mtpq_status st = MTPQ_OK;
  float *amax = calloc(pl->n ? pl->n : 1, sizeof *amax);
  int *shard_of = calloc(pl->n ? pl->n : 1, sizeof *shard_of);
  const struct mtpq_tensor **srcs = calloc(pl->n ? pl->n : 1, sizeof *srcs);
  struct shard *sh = calloc(pl->n + 1, sizeof *sh);
  int nsh = 0;
  if (!amax || !shard_of || !srcs || !sh) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  /* 1. amax of every NVFP4 weight, then the max over each gate/up group */
  for (size_t i = 0; i < pl->n && !st; i++) {
    const struct mtpq_plan_item *it = &pl->items[i];
    srcs[i] = it->kind == MTPQ_ITEM_COPY ? mtpq_repo_find(pv->target, it->src_name) : NULL;
    amax[i] = -1.0f;
    if (it->kind != MTPQ_ITEM_NVFP4) continue;
    char label[600];
    snprintf(label, sizeof label, "%s: tensor %s", p->target, it->src_name);
    st = mtpq_amax_bf16(it->src, (size_t)(it->rows * it->cols), label, &amax[i], err);
    mtpq__release_pages(it->src, (size_t)it->in_bytes);
  }
  for (size_t i = 0; i < pl->n && !st; i++)
    if (pl->items[i].kind == MTPQ_ITEM_NVFP4 && pl->items[i].group >= 0)
      for (size_t j = 0; j < pl->n; j++)
        if (j != i && pl->items[j].kind == MTPQ_ITEM_NVFP4 && pl->items[j].group == pl->items[i].group &&
            amax[j] > amax[i])
          amax[i] = amax[j];
  if (st) goto out;
  /* 2. shards: fill in name order up to the limit */
  uint64_t fill = 0;
  nsh = 1;
  for (size_t i = 0; i < pl->n; i++) {
    if (fill && fill + pl->items[i].out_bytes > p->max_shard_bytes) {
      nsh++;
      fill = 0;
    }
    shard_of[i] = nsh - 1;
    fill += pl->items[i].out_bytes;
  }
  for (int s = 0; s < nsh && !st; s++) {
    if (nsh == 1) snprintf(sh[s].name, sizeof sh[s].name, "model.safetensors");
    else snprintf(sh[s].name, sizeof sh[s].name, "model-%05d-of-%05d.safetensors", s + 1, nsh);
    char *path = mtpq__path_join(tmp, sh[s].name);
    st = path ? mtpq_stw_init(path, &sh[s].w, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
    free(path);
    if (!st) st = mtpq_stw_metadata(sh[s].w, "format", "pt", err);
  }
  for (size_t i = 0; i < pl->n && !st; i++) st = declare_item(sh[shard_of[i]].w, &pl->items[i], srcs[i], err);
  for (int s = 0; s < nsh && !st; s++) st = mtpq_stw_begin(sh[s].w, err);
  /* 3. quantize and write, one module at a time */
  for (size_t i = 0; i < pl->n && !st; i++) {
    if (mtpq__cancelled()) {
      st = mtpq_err_set(err, MTPQ_E_INTERRUPTED, "interrupted; nothing was written to %s", p->out);
      break;
    }
    if (progress) progress(ctx, i, pl->n, pl->items[i].name);
    st = write_item(p, sh[shard_of[i]].w, &pl->items[i], amax[i], srcs[i], err);
    if (pl->items[i].kind != MTPQ_ITEM_HEAD) /* the head rows are our own copy */
      mtpq__release_pages(pl->items[i].src, (size_t)pl->items[i].in_bytes);
  }
  for (int s = 0; s < nsh && !st; s++) st = mtpq_stw_commit(sh[s].w, err);
  if (!st && nsh > 1) {
    uint64_t total = 0;
    for (size_t i = 0; i < pl->n; i++) total += pl->items[i].out_bytes;
    st = write_index(tmp, pl, shard_of, sh, total, err);
  }
  /* 4. ids, metadata, card, manifest */
  if (!st) {
    char *a = mtpq__path_join(tmp, "mtp_draft_vocab_ids.pt");
    st = a ? mtpq_pt_write_i64(a, pv->ids, pv->n_ids, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
    free(a);
  }
  if (!st) {
    char *a = mtpq__path_join(tmp, "mtp_draft_vocab_ids.safetensors");
    struct mtpq_st_writer *w = NULL;
    int64_t shape[1] = {(int64_t)pv->n_ids};
    st = a ? mtpq_stw_init(a, &w, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
    if (!st) st = mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, err);
    if (!st) st = mtpq_stw_begin(w, err);
    if (!st) st = mtpq_stw_write_all(w, "ids", pv->ids, pv->n_ids * 8, err);
    if (!st) st = mtpq_stw_commit(w, err);
    mtpq_stw_free(w);
    free(a);
  }
  if (!st) st = mtpq__drafter_meta(p, pl, tmp, err);
  if (!st && mtpq__cancelled())
    st = mtpq_err_set(err, MTPQ_E_INTERRUPTED, "interrupted; nothing was written to %s", p->out);
  /* 5. into place */
  if (!st) {
    char *old = NULL;
    if (mtpq__is_dir(p->out) || mtpq__is_file(p->out)) {
      old = malloc(strlen(tmp) + 8);
      if (old) {
        sprintf(old, "%s.old", tmp);
        if (rename(p->out, old) != 0)
          st = mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: cannot move the old output aside: %s", p->out,
                            strerror(errno));
      }
    }
    if (!st && rename(tmp, p->out) != 0)
      st = mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: cannot rename to %s: %s", tmp, p->out, strerror(errno));
    if (old) {
      if (st) rename(old, p->out); /* put the old one back */
      else mtpq__rmtree(old);
      free(old);
    }
  }
out:
  for (int s = 0; s < nsh; s++) mtpq_stw_free(sh[s].w);
  if (st) mtpq__rmtree(tmp);
  free(tmp);
  free(amax);
  free(shard_of);
  free(srcs);
  free(sh);
  return st;
}
