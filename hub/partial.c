/* Tensor-level partial reads of a Hub repo (issue 8): fetch each shard's
 * safetensors header with Range, then only the wanted tensors' bytes, and
 * write them as smaller valid shards. */
#define _XOPEN_SOURCE 700 /* symlink, realpath */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "hub/fetch.h"
#include "hub/http.h"
#include "hub/tree.h"
#include "io/util.h"

#define MAX_HEADER (100u << 20) /* the safetensors format's own limit */

/* One shard of the repo: where it is, its header, its tensors' place in the
 * list every shard's tensors make. */
struct shard {
  const struct hub_entry *e;
  struct hub_file file;
  unsigned char len8[8];
  uint64_t n; /* header bytes */
  char *hdr;  /* n bytes + NUL */
  cJSON *j;   /* the parsed header */
  size_t first, count;
  struct hub_piece *pieces; /* the kept tensors, source data offsets -> output file */
  struct hub_span *spans;
  size_t npieces, nspans;
  char *new_hdr; /* the output's header (padded to 8) */
  uint64_t new_hl, out_size;
};

struct tensor {
  const char *name;
  cJSON *info;
  uint64_t b, e;
};

static int by_begin(const void *x, const void *y) {
  const struct hub_piece *a = x, *b = y;
  return (a->b > b->b) - (a->b < b->b);
}

/* The original length and header bytes, then a hole up to the shard's size:
 * a valid safetensors file whose tensor bytes read as zeros, which costs no
 * disk and is only ever read for its header (mtpq inspect). */
static enum mtpq_status headers_only(const char *path, const struct shard *s, struct mtpq_err *err) {
  if (s->e->size < 8 + s->n)
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF, "%s: header of %llu bytes but the file has %llu", s->e->path,
                        (unsigned long long)s->n, (unsigned long long)s->e->size);
  FILE *f = fopen(path, "wb");
  if (!f) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  int bad = fwrite(s->len8, 1, 8, f) != 8 || fwrite(s->hdr, 1, s->n, f) != s->n || fflush(f) ||
            ftruncate(fileno(f), (off_t)s->e->size) != 0;
  if (fclose(f)) bad = 1;
  return bad ? mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno)) : MTPQ_OK;
}

/* A shard's 8-byte length and JSON header: two ranged GETs into a scratch
 * file through the fetcher (the first locates the file). */
static enum mtpq_status read_header(struct hub_fetcher *h, struct shard *s, struct mtpq_err *err) {
  FILE *t = tmpfile();
  if (!t) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "tmpfile: %s", strerror(errno));
  const int fd = fileno(t);
  const char *name = s->e->path;
  struct hub_piece p = {0, 8, 0};
  struct hub_span sp = {0, 8};
  enum mtpq_status st = MTPQ_OK;
  if (s->e->size < 8) st = mtpq_err_set(err, MTPQ_E_ST_TOO_SMALL, "%s: shorter than the 8-byte header length", name);
  if (!st) st = hub_fetch_spans(h, &s->file, 0, &sp, 1, &p, 1, fd, err);
  if (!st && pread(fd, s->len8, 8, 0) != 8)
    st = mtpq_err_set(err, MTPQ_E_ST_TOO_SMALL, "%s: shorter than the 8-byte header length", name);
  for (int i = 7; i >= 0 && !st; i--) s->n = s->n << 8 | s->len8[i];
  if (!st && (s->n == 0 || s->n > MAX_HEADER))
    st = mtpq_err_set(err, MTPQ_E_ST_HEADER_TOO_LARGE, "%s: header length %llu is outside (0, %u]", name,
                      (unsigned long long)s->n, MAX_HEADER);
  if (!st && 8 + s->n > s->e->size)
    st = mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF, "%s: header of %llu bytes but the file has %llu", name,
                      (unsigned long long)s->n, (unsigned long long)s->e->size);
  if (!st) {
    p = (struct hub_piece){8, 8 + s->n, 0};
    sp = (struct hub_span){8, 8 + s->n};
    st = hub_fetch_spans(h, &s->file, 0, &sp, 1, &p, 1, fd, err);
  }
  if (!st && !(s->hdr = malloc(s->n + 1))) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (!st && pread(fd, s->hdr, s->n, 0) != (ssize_t)s->n)
    st = mtpq_err_set(err, MTPQ_E_ST_HEADER_PAST_EOF, "%s: header shorter than %llu bytes", name,
                      (unsigned long long)s->n);
  fclose(t);
  if (st) return st;
  s->hdr[s->n] = 0;
  if (!(s->j = mtpq__json_parse(s->hdr, s->n, name, MTPQ_E_ST_HEADER_JSON, err))) return MTPQ_E_ST_HEADER_JSON;
  if (!cJSON_IsObject(s->j))
    return mtpq_err_set(err, MTPQ_E_ST_HEADER_NOT_OBJECT, "%s: the header is not a JSON object", name);
  return MTPQ_OK;
}

/* Every tensor of the header into t (grown as needed); offsets checked. */
static enum mtpq_status list_tensors(struct shard *s, struct tensor **t, size_t *nt, size_t *cap,
                                     struct mtpq_err *err) {
  s->first = *nt;
  cJSON *it;
  cJSON_ArrayForEach(it, s->j) {
    if (strcmp(it->string, "__metadata__") == 0) continue;
    cJSON *off = cJSON_GetObjectItem(it, "data_offsets");
    cJSON *b = cJSON_GetArrayItem(off, 0), *e = cJSON_GetArrayItem(off, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 || e->valuedouble < b->valuedouble ||
        8 + s->n + (uint64_t)e->valuedouble > s->e->size)
      return mtpq_err_set(err, MTPQ_E_ST_OFFSETS, "%s: tensor %s has malformed data_offsets", s->e->path, it->string);
    if (!cJSON_IsString(cJSON_GetObjectItem(it, "dtype")) || !cJSON_IsArray(cJSON_GetObjectItem(it, "shape")))
      return mtpq_err_set(err, MTPQ_E_ST_HEADER_JSON, "%s: tensor %s has no dtype or no shape", s->e->path, it->string);
    if (*nt == *cap) {
      const size_t c = *cap ? 2 * *cap : 1024;
      struct tensor *v = realloc(*t, c * sizeof *v);
      if (!v) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      *t = v, *cap = c;
    }
    (*t)[(*nt)++] = (struct tensor){it->string, it, (uint64_t)b->valuedouble, (uint64_t)e->valuedouble};
  }
  s->count = *nt - s->first;
  return MTPQ_OK;
}

/* The output shard's header (kept tensors packed in source order, metadata
 * kept) and its pieces and spans. Adds the kept names to wmap. */
static enum mtpq_status plan_shard(struct shard *s, const struct tensor *t, const unsigned char *keep, cJSON *wmap,
                                   struct mtpq_err *err) {
  size_t nk = 0;
  for (size_t i = 0; i < s->count; i++) nk += keep[s->first + i] != 0;
  if (nk == 0) return MTPQ_OK;
  struct hub_piece *pc = calloc(nk, sizeof *pc);
  if (!pc) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (size_t i = 0, k = 0; i < s->count; i++)
    if (keep[s->first + i]) pc[k] = (struct hub_piece){t[s->first + i].b, t[s->first + i].e, s->first + i}, k++;
  qsort(pc, nk, sizeof *pc, by_begin);               /* dst holds the tensor's index until the offsets are known */
  for (size_t i = 0, last = SIZE_MAX; i < nk; i++) { /* each source byte is written once: overlaps are refused */
    if (pc[i].e == pc[i].b) continue;                /* (an empty tensor overlaps nothing) */
    if (last != SIZE_MAX && pc[i].b < pc[last].e) {
      const char *a = t[pc[last].dst].name, *b = t[pc[i].dst].name;
      free(pc);
      return mtpq_err_set(err, MTPQ_E_ST_OVERLAP, "%s: tensors %s and %s overlap", s->e->path, a, b);
    }
    last = i;
  }
  cJSON *nh = cJSON_CreateObject();
  cJSON *meta = cJSON_GetObjectItem(s->j, "__metadata__");
  enum mtpq_status st = MTPQ_OK;
  if (!nh || (meta && !cJSON_AddItemToObject(nh, "__metadata__", cJSON_Duplicate(meta, 1)))) st = MTPQ_E_NOMEM;
  uint64_t at = 0;
  for (size_t i = 0; i < nk && !st; i++) {
    const struct tensor *x = &t[pc[i].dst];
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
    cJSON *dt = cJSON_Duplicate(cJSON_GetObjectItem(x->info, "dtype"), 1);
    cJSON *sp = cJSON_Duplicate(cJSON_GetObjectItem(x->info, "shape"), 1);
    int ok = o && a && dt && sp && cJSON_AddItemToArray(a, cJSON_CreateNumber((double)at)) &&
             cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(at + x->e - x->b)));
    if (ok && (ok = cJSON_AddItemToObject(o, "dtype", dt))) dt = NULL; /* owned by o from here */
    if (ok && (ok = cJSON_AddItemToObject(o, "shape", sp))) sp = NULL;
    if (ok && (ok = cJSON_AddItemToObject(o, "data_offsets", a))) a = NULL;
    if (ok && (ok = cJSON_AddItemToObject(nh, x->name, o))) o = NULL;
    ok = ok && cJSON_AddStringToObject(wmap, x->name, s->e->path) != NULL;
    cJSON_Delete(o), cJSON_Delete(a), cJSON_Delete(dt), cJSON_Delete(sp);
    if (!ok) {
      st = MTPQ_E_NOMEM;
      break;
    }
    pc[i].dst = at; /* relative to the data section for now */
    at += x->e - x->b;
  }
  char *text = st ? NULL : cJSON_PrintUnformatted(nh);
  cJSON_Delete(nh);
  if (!text) {
    free(pc);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  const size_t tl = strlen(text), pad = (8 - tl % 8) % 8;
  char *h = realloc(text, tl + pad + 1);
  if (!h) {
    free(text);
    free(pc);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  memset(h + tl, ' ', pad);
  h[tl + pad] = 0;
  s->new_hdr = h, s->new_hl = tl + pad;
  s->out_size = 8 + s->new_hl + at;
  size_t np = 0; /* empty tensors need no bytes */
  for (size_t i = 0; i < nk; i++)
    if (pc[i].e > pc[i].b) pc[np] = pc[i], pc[np].dst += 8 + s->new_hl, np++;
  s->pieces = pc, s->npieces = np;
  if (np && !(s->spans = malloc(np * sizeof *s->spans))) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  s->nspans = np ? hub_plan_spans(pc, np, HUB_GAP_BYTES, HUB_FILE_BUDGET, s->spans) : 0;
  return MTPQ_OK;
}

static enum mtpq_status write_shard(struct hub_fetcher *h, struct shard *s, const char *path, struct mtpq_err *err) {
  FILE *f = fopen(path, "wb");
  if (!f) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  unsigned char l8[8];
  for (int i = 0; i < 8; i++) l8[i] = (unsigned char)(s->new_hl >> (8 * i));
  enum mtpq_status st = MTPQ_OK;
  if (fwrite(l8, 1, 8, f) != 8 || fwrite(s->new_hdr, 1, s->new_hl, f) != s->new_hl || fflush(f) ||
      ftruncate(fileno(f), (off_t)s->out_size))
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  if (!st) st = hub_fetch_spans(h, &s->file, 8 + s->n, s->spans, s->nspans, s->pieces, s->npieces, fileno(f), err);
  if (fclose(f) && !st) st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", path, strerror(errno));
  return st;
}

static void free_shards(struct shard *s, size_t n) {
  for (size_t i = 0; s && i < n; i++) {
    free(s[i].hdr);
    cJSON_Delete(s[i].j);
    free(s[i].pieces);
    free(s[i].spans);
    free(s[i].new_hdr);
  }
  free(s);
}

/* Every shard's header, the selection over all of them, then the kept
 * tensors' bytes as smaller shards under tmp. */
static enum mtpq_status fetch_shards(const struct mtpq_hub_env *env, const struct mtpq_partial_opts *o,
                                     const char *commit, const char *small_dir, const struct hub_entry *e, int n,
                                     const char *tmp, cJSON *wmap, struct mtpq_partial_result *res,
                                     struct mtpq_err *err) {
  struct shard *sh = calloc((size_t)n + 1, sizeof *sh);
  struct hub_fetcher *h = hub_fetcher_new(env, o->progress, o->progress_ud);
  struct tensor *t = NULL;
  size_t nt = 0, cap = 0, ns = 0;
  unsigned char *keep = NULL;
  const char **names = NULL;
  enum mtpq_status st = !sh || !h ? mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory") : MTPQ_OK;
  CURL *c = st ? NULL : curl_easy_init();
  if (!st && !c) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int i = 0; i < n && !st; i++) {
    if (strchr(e[i].path, '/') || !mtpq__ends_with(e[i].path, ".safetensors")) continue; /* shards: top level */
    struct shard *s = &sh[ns++];
    s->e = &e[i];
    s->file.path = e[i].path;
    char *ep = hub_escape_path(c, e[i].path);
    if (!ep)
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    else
      snprintf(s->file.resolve, sizeof s->file.resolve, "%s/%s/resolve/%s/%s", env->endpoint, o->repo, commit, ep);
    free(ep);
    if (!st) st = read_header(h, s, err);
    if (!st) st = list_tensors(s, &t, &nt, &cap, err);
  }
  if (c) curl_easy_cleanup(c);
  if (!st && !o->select) { /* headers only: each shard as a sparse file of its full size */
    for (size_t i = 0; i < ns && !st; i++) {
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", tmp, sh[i].e->path);
      st = headers_only(path, &sh[i], err);
      if (!st) res->shards++, res->tensors += (int)sh[i].count;
    }
    goto out;
  }
  if (!st && (!(keep = calloc(nt + 1, 1)) || !(names = calloc(nt + 1, sizeof *names))))
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (size_t i = 0; i < nt && !st; i++) names[i] = t[i].name;
  if (!st) {
    char cfg[1800];
    snprintf(cfg, sizeof cfg, "%s/config.json", small_dir);
    st = o->select(o->select_ud, cfg, names, nt, keep, err);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < ns && !st; i++) {
    st = plan_shard(&sh[i], t, keep, wmap, err);
    for (size_t k = 0; k < sh[i].nspans; k++) total += sh[i].spans[k].e - sh[i].spans[k].b;
  }
  if (!st) hub_fetcher_expect(h, total);
  for (size_t i = 0; i < ns && !st; i++) {
    if (!sh[i].new_hdr) continue; /* nothing wanted here */
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", tmp, sh[i].e->path);
    st = write_shard(h, &sh[i], path, err);
    if (!st) {
      res->shards++;
      for (size_t k = 0; k < sh[i].count; k++) res->tensors += keep[sh[i].first + k] != 0;
    }
  }
out:
  if (h) {
    res->bytes_fetched += hub_fetcher_bytes(h);
    res->range_requests = hub_fetcher_requests(h);
  }
  for (size_t i = 0; i < ns; i++) res->resolves += sh[i].file.locates;
  hub_fetcher_free(h);
  free_shards(sh, ns);
  free(t);
  free(keep);
  free(names);
  return st;
}

enum mtpq_status mtpq_hub_fetch_partial(const struct mtpq_hub_env *env, const struct mtpq_partial_opts *po,
                                        struct mtpq_partial_result *res, struct mtpq_err *err) {
  memset(res, 0, sizeof *res);
  const char *repo = po->repo, *revision = po->revision, *selection = po->selection;
  const int want = po->select != NULL;
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
  if (!wmap) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (!st) st = fetch_shards(env, po, res->commit, dr.snapshot, e, n, tmp, wmap, res, err);
  for (int i = 0; i < n && !st; i++) {
    if (strchr(e[i].path, '/')) continue; /* shards live at the top level */
    if (!mtpq__ends_with(e[i].path, ".safetensors")) {
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
