/* Tensor-level partial reads of a Hub repo (issue 8): fetch each shard's
 * safetensors header with Range, then only the wanted tensors' bytes, and
 * write them as smaller valid shards. */
#define _XOPEN_SOURCE 700 /* symlink, realpath */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "hub/http.h"
#include "hub/tree.h"
#include "io/util.h"

#define MAX_HEADER (100u << 20) /* the safetensors format's own limit */

struct kept {
  const char *name;
  cJSON *info;
  uint64_t b, e; /* source offsets in the data section */
};

static int by_begin(const void *x, const void *y) {
  const struct kept *a = x, *b = y;
  return (a->b > b->b) - (a->b < b->b);
}

/* The original length and header bytes, then a hole up to the shard's size:
 * a valid safetensors file whose tensor bytes read as zeros, which costs no
 * disk and is only ever read for its header (mtpq inspect). */
static enum mtpq_status headers_only(const char *path, const char *shard, const unsigned char len8[8],
                                     const char *hdr, uint64_t n, uint64_t size, struct mtpq_err *err) {
  if (size < 8 + n)
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF, "%s: header of %llu bytes but the file has %llu", shard,
                        (unsigned long long)n, (unsigned long long)size);
  FILE *f = fopen(path, "wb");
  if (!f) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, n, f) != n || fflush(f) ||
            ftruncate(fileno(f), (off_t)size) != 0;
  if (fclose(f)) bad = 1;
  return bad ? mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno)) : MTPQ_OK;
}

/* One shard: header by Range, then the wanted tensors, coalescing runs of
 * adjacent tensors into one request. Adds kept names to wmap (name->file). */
static enum mtpq_status fetch_shard(const struct mtpq_hub_env *env, const char *url, const char *shard,
                                    uint64_t shard_size, const char *out, mtpq_tensor_want_fn want, cJSON *wmap,
                                    struct mtpq_partial_result *res, struct mtpq_err *err) {
  char path[2048]; /* the shard written under out */
  snprintf(path, sizeof path, "%s/%s", out, shard);
  FILE *h = tmpfile();
  if (!h) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "tmpfile: %s", strerror(errno));
  unsigned char len8[8];
  uint64_t n = 0;
  enum mtpq_status st = hub_fetch_range(env, url, h, 0, 7, &res->bytes_fetched, err);
  if (!st && (fseek(h, 0, SEEK_SET) || fread(len8, 1, 8, h) != 8))
    st = mtpq_err_set(err, MTPQ_E_ST_TOO_SMALL, "%s: shorter than the 8-byte header length", shard);
  for (int i = 7; i >= 0 && !st; i--) n = n << 8 | len8[i];
  if (!st && (n == 0 || n > MAX_HEADER))
    st = mtpq_err_set(err, MTPQ_E_ST_HEADER_TOO_LARGE, "%s: header length %llu is outside (0, %u]", shard,
                      (unsigned long long)n, MAX_HEADER);
  char *hdr = NULL;
  if (!st && fseek(h, 0, SEEK_SET) == 0 && ftruncate(fileno(h), 0) == 0)
    st = hub_fetch_range(env, url, h, 8, 8 + n - 1, &res->bytes_fetched, err);
  if (!st && !(hdr = malloc(n + 1))) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (!st && (fseek(h, 0, SEEK_SET) || fread(hdr, 1, n, h) != n))
    st = mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF, "%s: header shorter than %llu bytes", shard, (unsigned long long)n);
  fclose(h);
  if (st) {
    free(hdr);
    return st;
  }
  hdr[n] = 0;
  cJSON *j = mtpq__json_parse(hdr, n, shard, MTPQ_E_ST_HEADER_JSON, err);
  if (!j) {
    free(hdr);
    return MTPQ_E_ST_HEADER_JSON;
  }
  if (!cJSON_IsObject(j)) {
    free(hdr);
    cJSON_Delete(j);
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_NOT_OBJECT, "%s: the header is not a JSON object", shard);
  }
  if (!want) { /* headers only: the shard as a sparse file of its full size */
    st = headers_only(path, shard, len8, hdr, n, shard_size, err);
    if (!st) res->shards++, res->tensors += cJSON_GetArraySize(j) - (cJSON_GetObjectItem(j, "__metadata__") != NULL);
    free(hdr);
    cJSON_Delete(j);
    return st;
  }
  free(hdr);
  int cnt = cJSON_GetArraySize(j), nk = 0;
  struct kept *k = calloc((size_t)cnt + 1, sizeof *k);
  cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (!k || strcmp(it->string, "__metadata__") == 0 || !want(it->string)) continue;
    cJSON *off = cJSON_GetObjectItem(it, "data_offsets");
    cJSON *b = cJSON_GetArrayItem(off, 0), *e = cJSON_GetArrayItem(off, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 || e->valuedouble < b->valuedouble) {
      st = mtpq_err_set(err, MTPQ_E_ST_OFFSETS, "%s: tensor %s has malformed data_offsets", shard, it->string);
      break;
    }
    k[nk++] = (struct kept){it->string, it, (uint64_t)b->valuedouble, (uint64_t)e->valuedouble};
  }
  if (!k) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (st || nk == 0) {
    free(k);
    cJSON_Delete(j);
    return st;
  }
  qsort(k, (size_t)nk, sizeof *k, by_begin);
  /* the new header: kept tensors packed in source order, metadata kept */
  cJSON *nh = cJSON_CreateObject();
  cJSON *meta = cJSON_GetObjectItem(j, "__metadata__");
  if (meta) cJSON_AddItemToObject(nh, "__metadata__", cJSON_Duplicate(meta, 1));
  uint64_t at = 0;
  for (int i = 0; i < nk; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToObject(t, "dtype", cJSON_Duplicate(cJSON_GetObjectItem(k[i].info, "dtype"), 1));
    cJSON_AddItemToObject(t, "shape", cJSON_Duplicate(cJSON_GetObjectItem(k[i].info, "shape"), 1));
    cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)at));
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(at + k[i].e - k[i].b)));
    at += k[i].e - k[i].b;
    cJSON_AddItemToObject(nh, k[i].name, t);
    cJSON_AddStringToObject(wmap, k[i].name, shard);
  }
  char *text = cJSON_PrintUnformatted(nh);
  cJSON_Delete(nh);
  size_t tl = strlen(text), pad = (8 - tl % 8) % 8;
  FILE *f = fopen(path, "wb");
  if (!f) st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  if (!st) {
    uint64_t hl = tl + pad;
    unsigned char l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (unsigned char)(hl >> (8 * i));
    if (fwrite(l8, 1, 8, f) != 8 || fwrite(text, 1, tl, f) != tl || fwrite("        ", 1, pad, f) != pad)
      st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  }
  free(text);
  for (int i = 0; i < nk && !st;) { /* a run of adjacent tensors is one request */
    int r = i;
    while (r + 1 < nk && k[r + 1].b == k[r].e) r++;
    if (k[r].e > k[i].b)
      st = hub_fetch_range(env, url, f, 8 + n + k[i].b, 8 + n + k[r].e - 1, &res->bytes_fetched, err);
    i = r + 1;
  }
  if (f && fclose(f) && !st) st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  if (!st) res->shards++, res->tensors += nk;
  free(k);
  cJSON_Delete(j);
  return st;
}

enum mtpq_status mtpq_hub_fetch_partial(const struct mtpq_hub_env *env, const char *repo, const char *revision,
                                        mtpq_tensor_want_fn want, const char *selection,
                                        struct mtpq_partial_result *res, struct mtpq_err *err) {
  memset(res, 0, sizeof *res);
  if (!hub_valid_repo(repo)) return mtpq_err_set(err, MTPQ_E_INVAL, "'%s' is not a repo id of the form org/name", repo);
  const char *rev = revision ? revision : "main";
  enum mtpq_status st = env->offline ? hub_cached_commit(env, repo, rev, res->commit, err)
                                     : hub_resolve_commit(env, repo, rev, res->commit, err);
  if (st) return st;
  const char *sl = strchr(repo, '/');
  snprintf(res->dir, sizeof res->dir, "%s/.mtpq-partial/models--%.*s--%s/%s-%s", env->cache, (int)(sl - repo), repo,
           sl + 1, res->commit, selection);
  struct stat sb;
  if (stat(res->dir, &sb) == 0) {
    res->cached = 1;
    return MTPQ_OK;
  }
  if (!env->offline && strcmp(rev, res->commit) != 0) { /* refs/<rev> for a later offline run */
    char rdir[1500];
    hub_repo_dir(env, repo, rdir, sizeof rdir);
    if ((st = hub_write_ref(rdir, rev, res->commit, err))) return st;
  }
  if (env->offline) { /* no partial fetch of this commit: a whole snapshot (huggingface_hub's download) serves too */
    char rdir[1500], snap[1600], cfg[1700];
    hub_repo_dir(env, repo, rdir, sizeof rdir);
    snprintf(snap, sizeof snap, "%s/snapshots/%s", rdir, res->commit);
    snprintf(cfg, sizeof cfg, "%s/config.json", snap);
    if (stat(cfg, &sb) == 0) {
      snprintf(res->dir, sizeof res->dir, "%s", snap);
      res->cached = 1;
      return MTPQ_OK;
    }
    return mtpq_err_set(err, MTPQ_E_NET,
                        "HF_HUB_OFFLINE is set and neither mtpq's fetch (%s) nor a snapshot (%s) of %s@%s is cached",
                        res->dir, snap, repo, res->commit);
  }
  struct hub_entry *e = NULL;
  int n = 0;
  if ((st = hub_list_tree(env, repo, res->commit, &e, &n, err))) return st;
  for (int i = 0; i < n; i++) res->repo_bytes += e[i].size;
  /* the small files, through the cache (README.md: the target's card, whose license the drafter's card carries) */
  static const char *const small[] = {"config.json",
                                      "generation_config.json",
                                      "tokenizer.json",
                                      "README.md",
                                      "tokenizer_config.json",
                                      "vocab.json",
                                      "merges.txt",
                                      "special_tokens_map.json",
                                      "chat_template.jinja",
                                      "*.safetensors.index.json"};
  static const char *const describe[] = {"config.json", "*.safetensors.index.json"}; /* headers only */
  struct mtpq_download_opts o = {repo, res->commit, want ? small : describe,
                                 want ? (int)(sizeof small / sizeof small[0]) : 2, NULL, NULL};
  struct mtpq_download_result dr = {0};
  memcpy(dr.commit, res->commit, sizeof dr.commit); /* the tree is listed once, above */
  if ((st = hub_fetch_listed(env, &o, e, n, &dr, err))) goto out;
  res->bytes_fetched += dr.bytes_fetched;
  char tmp[1800];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", res->dir, (long)getpid());
  mtpq__rmtree(tmp);
  if ((st = hub_mkdirs(tmp, err))) goto out;
  cJSON *wmap = cJSON_CreateObject();
  const char *index_name = NULL;
  CURL *c = curl_easy_init();
  for (int i = 0; i < n && !st; i++) {
    if (strchr(e[i].path, '/')) continue; /* shards live at the top level */
    if (mtpq__ends_with(e[i].path, ".safetensors")) {
      char *ep = hub_escape_path(c, e[i].path), url[4096];
      snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", env->endpoint, repo, res->commit, ep);
      free(ep);
      st = fetch_shard(env, url, e[i].path, e[i].size, tmp, want, wmap, res, err);
    } else {
      char src[2400], dst[2048];
      snprintf(src, sizeof src, "%s/%s", dr.snapshot, e[i].path);
      if (stat(src, &sb) != 0) continue; /* not one of the small files */
      if (mtpq__ends_with(e[i].path, ".safetensors.index.json")) {
        index_name = e[i].path;
        continue;
      }
      snprintf(dst, sizeof dst, "%s/%s", tmp, e[i].path);
      char *real = realpath(src, NULL);
      if (!real || symlink(real, dst)) st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot link: %s", dst, strerror(errno));
      free(real);
    }
  }
  curl_easy_cleanup(c);
  if (!st && index_name) { /* the index, cut to the kept tensors (whole when headers only) */
    char src[2400], dst[2048];
    snprintf(src, sizeof src, "%s/%s", dr.snapshot, index_name);
    snprintf(dst, sizeof dst, "%s/%s", tmp, index_name);
    char *buf = NULL;
    st = mtpq__read_file(src, (size_t)256 << 20, &buf, NULL, err); /* io/repo.c's index cap */
    cJSON *idx = st ? NULL : mtpq__json_parse(buf, strlen(buf), index_name, MTPQ_E_IDX_JSON, err);
    free(buf);
    if (!st && !idx)
      st = MTPQ_E_IDX_JSON;
    else if (!st && !cJSON_IsObject(idx))
      st = mtpq_err_set(err, MTPQ_E_IDX_JSON, "%s: index is not a JSON object", index_name);
    if (!st && want) {
      cJSON_ReplaceItemInObject(idx, "weight_map", wmap);
      wmap = NULL;
    }
    if (!st) {
      char *t = cJSON_Print(idx);
      st = mtpq__write_file_atomic(dst, t, strlen(t), err);
      free(t);
    }
    cJSON_Delete(idx);
  }
  cJSON_Delete(wmap);
  if (!st && res->shards == 0)
    st = mtpq_err_set(err, MTPQ_E_REPO_EMPTY, "%s@%s: no safetensors shard holds a wanted tensor", repo, res->commit);
  if (!st && rename(tmp, res->dir)) { /* tmp is a sibling: same parent */
    if (errno == ENOTEMPTY || errno == EEXIST) mtpq__rmtree(tmp); /* another run won */
    else st = mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: %s", res->dir, strerror(errno));
  }
  if (st) mtpq__rmtree(tmp);
out:
  hub_free_entries(e, n);
  return st;
}
