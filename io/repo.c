/* Repository = shards + optional index; see io/repo.h. */
#include "io/json.h"
#include "io/repo.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "io/util.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_CAP ((size_t)256 << 20)

struct mtpq_repo {
  char *dir;
  int indexed;
  size_t n_shards;
  char **shard_names;
  struct mtpq_st_file **shards;
  size_t n;
  const struct mtpq_tensor **t; /* sorted by name */
  uint64_t bytes;
};

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_tptr(const void *a, const void *b) {
  return strcmp((*(const struct mtpq_tensor *const *)a)->name,
                (*(const struct mtpq_tensor *const *)b)->name);
}

static int safe_shard_name(const char *s) {
  return s[0] && strchr(s, '/') == NULL && strchr(s, '\\') == NULL && strcmp(s, ".") != 0 &&
         strcmp(s, "..") != 0;
}

/* Add a unique shard name (sorted later). */
static enum mtpq_status add_name(struct mtpq_repo *r, const char *name, struct mtpq_err *err) {
  for (size_t i = 0; i < r->n_shards; i++)
    if (strcmp(r->shard_names[i], name) == 0) return MTPQ_OK;
  char **nn = realloc(r->shard_names, (r->n_shards + 1) * sizeof *nn);
  if (!nn) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  r->shard_names = nn;
  nn[r->n_shards] = mtpq__strdup(name);
  if (!nn[r->n_shards]) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  r->n_shards++;
  return MTPQ_OK;
}

static enum mtpq_status names_from_dir(struct mtpq_repo *r, struct mtpq_err *err) {
  DIR *d = opendir(r->dir);
  if (!d) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot list directory", r->dir);
  enum mtpq_status st = MTPQ_OK;
  struct dirent *e;
  const char *suf = ".safetensors";
  size_t ls = strlen(suf);
  while (!st && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    /* (an mtpq drafter repo's draft vocabulary beside its weights is not a shard) */
    if (n > ls && strcmp(e->d_name + n - ls, suf) == 0 && strcmp(e->d_name, "mtp_draft_vocab_ids.safetensors")) {
      char *p = mtpq__path_join(r->dir, e->d_name);
      if (p && mtpq__is_file(p)) st = add_name(r, e->d_name, err);
      free(p);
    }
  }
  closedir(d);
  if (!st && r->n_shards == 0)
    st = mtpq_err_set(err, MTPQ_E_REPO_EMPTY, "%s: no *.safetensors files and no %s", r->dir,
                      INDEX_NAME);
  return st;
}

static enum mtpq_status names_from_index(struct mtpq_repo *r, const char *ipath,
                                         cJSON **wm_out, cJSON **root_out,
                                         struct mtpq_err *err) {
  char *buf = NULL;
  size_t len = 0;
  enum mtpq_status st = mtpq__read_file(ipath, INDEX_CAP, &buf, &len, err);
  if (st) return st;
  cJSON *root = mtpq__json_parse(buf, len, ipath, MTPQ_E_IDX_JSON, err);
  free(buf);
  if (!root) return MTPQ_E_IDX_JSON;
  *root_out = root;
  cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(wm))
    return mtpq_err_set(err, MTPQ_E_IDX_WEIGHT_MAP, "%s: weight_map missing or not an object",
                        ipath);
  for (cJSON *c = wm->child; c; c = c->next) {
    if (!cJSON_IsString(c))
      return mtpq_err_set(err, MTPQ_E_IDX_WEIGHT_MAP,
                          "%s: weight_map entry for tensor %s is not a string", ipath,
                          c->string);
    if (!safe_shard_name(c->valuestring))
      return mtpq_err_set(err, MTPQ_E_IDX_SHARD_NAME,
                          "%s: tensor %s maps to \"%.80s\", which is not a file name in the "
                          "same directory",
                          ipath, c->string, c->valuestring);
    st = add_name(r, c->valuestring, err);
    if (st) return st;
  }
  if (r->n_shards == 0)
    return mtpq_err_set(err, MTPQ_E_IDX_WEIGHT_MAP, "%s: weight_map is empty", ipath);
  *wm_out = wm;
  return MTPQ_OK;
}

static enum mtpq_status merge(struct mtpq_repo *r, struct mtpq_err *err) {
  size_t total = 0;
  for (size_t s = 0; s < r->n_shards; s++) total += mtpq_st_count(r->shards[s]);
  r->t = malloc((total ? total : 1) * sizeof *r->t);
  if (!r->t) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (size_t s = 0; s < r->n_shards; s++)
    for (size_t i = 0; i < mtpq_st_count(r->shards[s]); i++) {
      /* The views live in memory this repo owns; tag each with its shard. */
      struct mtpq_tensor *t = (struct mtpq_tensor *)mtpq_st_at(r->shards[s], i);
      t->shard = (int)s;
      r->t[r->n++] = t;
      r->bytes += t->nbytes;
    }
  qsort(r->t, r->n, sizeof *r->t, cmp_tptr);
  for (size_t i = 1; i < r->n; i++)
    if (strcmp(r->t[i - 1]->name, r->t[i]->name) == 0)
      return mtpq_err_set(err, MTPQ_E_IDX_CROSS_DUPLICATE, "%s: tensor %s is in both %s and %s",
                          r->dir, r->t[i]->name, r->shard_names[r->t[i - 1]->shard],
                          r->shard_names[r->t[i]->shard]);
  return MTPQ_OK;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return mtpq__strdup(".");
  if (slash == path) return mtpq__strdup("/");
  char *d = malloc((size_t)(slash - path) + 1);
  if (d) {
    memcpy(d, path, (size_t)(slash - path));
    d[slash - path] = '\0';
  }
  return d;
}

enum mtpq_status mtpq_repo_open(const char *path, struct mtpq_repo **out,
                                struct mtpq_err *err) {
  *out = NULL;
  struct mtpq_repo *r = calloc(1, sizeof *r);
  if (!r) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = MTPQ_OK;
  cJSON *root = NULL, *wm = NULL;
  char *ipath = NULL;
  if (mtpq__is_file(path)) {
    r->dir = dir_of(path);
    const char *base = strrchr(path, '/');
    st = add_name(r, base ? base + 1 : path, err);
  } else if (mtpq__is_dir(path)) {
    r->dir = mtpq__strdup(path);
    ipath = mtpq__path_join(path, INDEX_NAME);
    if (!r->dir || !ipath) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    else if (mtpq__is_file(ipath)) {
      r->indexed = 1;
      st = names_from_index(r, ipath, &wm, &root, err);
    } else {
      st = names_from_dir(r, err);
    }
  } else {
    st = mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: no such file or directory", path);
  }
  if (st) goto out;
  qsort(r->shard_names, r->n_shards, sizeof *r->shard_names, cmp_str);
  r->shards = calloc(r->n_shards, sizeof *r->shards);
  if (!r->shards) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto out;
  }
  for (size_t s = 0; s < r->n_shards && !st; s++) {
    char *p = mtpq__path_join(r->dir, r->shard_names[s]);
    if (!p) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    else st = mtpq_st_open(p, &r->shards[s], err);
    free(p);
  }
  if (st) goto out;
  if (wm) {
    for (cJSON *c = wm->child; c; c = c->next) {
      size_t s = 0;
      while (strcmp(r->shard_names[s], c->valuestring) != 0) s++;
      if (!mtpq_st_find(r->shards[s], c->string)) {
        st = mtpq_err_set(err, MTPQ_E_IDX_TENSOR_MISSING,
                          "%s: index maps tensor %s to %s, which does not contain it", ipath,
                          c->string, c->valuestring);
        goto out;
      }
    }
  }
  st = merge(r, err);
out:
  cJSON_Delete(root);
  free(ipath);
  if (st) {
    mtpq_repo_close(r);
    return st;
  }
  *out = r;
  return MTPQ_OK;
}

void mtpq_repo_close(struct mtpq_repo *r) {
  if (!r) return;
  for (size_t s = 0; s < r->n_shards; s++) {
    if (r->shards) mtpq_st_close(r->shards[s]);
    free(r->shard_names[s]);
  }
  free(r->shards);
  free(r->shard_names);
  free(r->t);
  free(r->dir);
  free(r);
}

size_t mtpq_repo_count(const struct mtpq_repo *r) { return r->n; }

const struct mtpq_tensor *mtpq_repo_at(const struct mtpq_repo *r, size_t i) {
  return i < r->n ? r->t[i] : NULL;
}

const struct mtpq_tensor *mtpq_repo_find(const struct mtpq_repo *r, const char *name) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(r->t[mid]->name, name);
    if (c == 0) return r->t[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

size_t mtpq_repo_shard_count(const struct mtpq_repo *r) { return r->n_shards; }
const char *mtpq_repo_shard_name(const struct mtpq_repo *r, size_t i) {
  return i < r->n_shards ? r->shard_names[i] : NULL;
}
const struct mtpq_st_file *mtpq_repo_shard(const struct mtpq_repo *r, size_t i) {
  return i < r->n_shards ? r->shards[i] : NULL;
}
const char *mtpq_repo_dir(const struct mtpq_repo *r) { return r->dir; }
int mtpq_repo_indexed(const struct mtpq_repo *r) { return r->indexed; }
uint64_t mtpq_repo_bytes(const struct mtpq_repo *r) { return r->bytes; }
