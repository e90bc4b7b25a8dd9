/* Upload a folder as one commit (hub-protocol.md 3.1-3.9): create repo,
 * preupload, LFS batch (basic and multipart transfers), NDJSON commit. */
#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "hub/answers.h"
#include "hub/http.h"
#include "hub/tree.h"
#include "io/util.h"

#define BATCH 256 /* preupload and LFS batch take at most 256 entries */

struct ufile {
  char *path; /* relative, POSIX */
  uint64_t size;
  int lfs, skip;
  char oid[65];    /* sha256 (LFS) or git blob sha1 (regular) */
  char remote[65]; /* the oid preupload reported for the path, "" if none */
};

/* nftw passes no user pointer: the walk's state is file-scope, so one
 * upload runs at a time per process. */
static struct {
  const char *root;
  struct ufile *f;
  int n, cap, bad;
} walk;

static int forbidden(const char *rel) {
  for (const char *s = rel; *s;) {
    size_t n = strcspn(s, "/");
    if ((n == 4 && strncmp(s, ".git", 4) == 0) || (n == 6 && strncmp(s, ".cache", 6) == 0)) return 1;
    s += n + (s[n] ? 1 : 0);
  }
  return 0;
}

static int on_file(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  if (flag != FTW_F) return 0;
  const char *rel = p + strlen(walk.root) + 1;
  if (forbidden(rel)) return 0; /* .git and .cache/huggingface are never uploaded */
  if (walk.n == walk.cap) {
    walk.cap = walk.cap ? 2 * walk.cap : 64;
    struct ufile *nf = realloc(walk.f, (size_t)walk.cap * sizeof *nf);
    if (!nf) return walk.bad = 1;
    walk.f = nf;
  }
  walk.f[walk.n++] = (struct ufile){strdup(rel), (uint64_t)sb->st_size, 0, 0, "", ""};
  return 0;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const struct ufile *)a)->path, ((const struct ufile *)b)->path);
}

static char *b64(const unsigned char *p, size_t n) {
  char *out = malloc(4 * ((n + 2) / 3) + 1);
  if (out) EVP_EncodeBlock((unsigned char *)out, p, (int)n);
  return out;
}

static enum mtpq_status post_json(const struct mtpq_hub_env *env, const char *url, const char *ctype, cJSON *j,
                                  int retry, struct hub_resp *r, struct mtpq_err *err) {
  char *t = cJSON_PrintUnformatted(j);
  enum mtpq_status st = hub_send(env, "POST", url, ctype, t, NULL, 0, strlen(t), retry, r, err);
  free(t);
  return st;
}

static enum mtpq_status create_repo(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o,
                                    struct mtpq_err *err) {
  const char *sl = strchr(o->repo, '/');
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", sl + 1);
  char org[256];
  snprintf(org, sizeof org, "%.*s", (int)(sl - o->repo), o->repo);
  cJSON_AddStringToObject(j, "organization", org);
  cJSON_AddStringToObject(j, "type", "model");
  cJSON_AddStringToObject(j, "visibility", o->private_repo ? "private" : "public");
  char url[1024];
  snprintf(url, sizeof url, "%s/api/repos/create", env->endpoint);
  struct hub_resp r;
  enum mtpq_status st = MTPQ_OK;
  for (int i = 0; i < 10; i++) {
    char *t = cJSON_PrintUnformatted(j);
    st = hub_send(env, "POST", url, "application/json", t, NULL, 0, strlen(t), 1, &r, err);
    free(t);
    if (st != MTPQ_E_SERVER || !strstr(err->msg, "HTTP 409")) break;
    /* 409: it exists (fine), or another operation is in progress (wait, retry) */
    if (!strstr(err->msg, "conflicting operation")) {
      st = MTPQ_OK;
      memset(&r, 0, sizeof r);
      break;
    }
    hub_sleep(env->backoff_s * 2);
  }
  cJSON_Delete(j);
  if (!st) hub_resp_free(&r);
  /* 401/402/403 on create: a token may write to a repo it may not create
   * (an org's repo); the repo's info answering is what counts (hub-protocol 3.1) */
  if (st == MTPQ_E_AUTH || (st == MTPQ_E_SERVER && strstr(err->msg, "HTTP 402"))) {
    struct mtpq_err e2 = {0};
    snprintf(url, sizeof url, "%s/api/models/%s", env->endpoint, o->repo);
    if (hub_send(env, "GET", url, NULL, NULL, NULL, 0, 0, 1, &r, &e2) == MTPQ_OK) {
      hub_resp_free(&r);
      st = MTPQ_OK;
    }
  }
  return st;
}

static enum mtpq_status preupload(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o, const char *q,
                                  struct ufile *f, int n, struct mtpq_err *err) {
  char url[1024];
  snprintf(url, sizeof url, "%s/api/models/%s/preupload/%s", env->endpoint, o->repo, q);
  enum mtpq_status st = MTPQ_OK;
  for (int b = 0; b < n && !st; b += BATCH) {
    int e = b + BATCH < n ? b + BATCH : n;
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "files");
    for (int i = b; i < e && !st; i++) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", o->dir, f[i].path);
      unsigned char sample[512];
      FILE *fp = fopen(p, "rb");
      size_t sn = fp ? fread(sample, 1, sizeof sample, fp) : 0;
      if (fp) fclose(fp);
      else st = mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: %s", p, strerror(errno));
      char *s64 = b64(sample, sn);
      cJSON *it = cJSON_CreateObject();
      cJSON_AddStringToObject(it, "path", f[i].path);
      cJSON_AddNumberToObject(it, "size", (double)f[i].size);
      cJSON_AddStringToObject(it, "sample", s64 ? s64 : "");
      free(s64);
      cJSON_AddItemToArray(arr, it);
    }
    struct hub_resp r;
    if (!st) st = post_json(env, url, "application/json", j, 1, &r, err);
    cJSON_Delete(j);
    if (st) break;
    struct hub_preupload pa[BATCH];
    for (int i = b; i < e; i++) pa[i - b] = (struct hub_preupload){f[i].path, 0, 0, ""};
    st = hub_parse_preupload(r.body ? r.body : "", r.body ? strlen(r.body) : 0, url, pa, e - b, err);
    hub_resp_free(&r);
    for (int i = b; i < e && !st; i++) {
      f[i].lfs = pa[i - b].lfs && f[i].size > 0; /* empty files are always regular: S3 refuses empty LFS objects */
      f[i].skip = pa[i - b].skip;
      memcpy(f[i].remote, pa[i - b].remote, sizeof f[i].remote);
    }
  }
  return st;
}

static enum mtpq_status put_part(const struct mtpq_hub_env *env, const char *href, FILE *fp, uint64_t off,
                                 uint64_t len, char *etag, size_t cap, struct mtpq_err *err) {
  struct hub_resp r;
  enum mtpq_status st = hub_send(env, "PUT", href, NULL, NULL, fp, off, len, 1, &r, err);
  if (st) return st;
  if (etag) snprintf(etag, cap, "%s", r.raw_etag);
  hub_resp_free(&r);
  return MTPQ_OK;
}

/* A per-object refusal in the batch answer ({"error": {code, message}}). */
static enum mtpq_status object_error(const struct ufile *u, const struct hub_lfs_plan *p, struct mtpq_err *err) {
  return mtpq_err_set(err, MTPQ_E_SERVER, "%s: the LFS batch refused object %s: %d %s", u->path, u->oid, p->error_code,
                      p->error_msg);
}

/* One object of the batch answer, planned (hub_parse_lfs_object): skip,
 * basic PUT, or multipart. */
static enum mtpq_status send_object(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o,
                                    const struct ufile *u, const struct hub_lfs_plan *p, struct mtpq_upload_result *res,
                                    struct mtpq_err *err) {
  if (p->present) {
    res->lfs_present++;
    return MTPQ_OK;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", o->dir, u->path);
  FILE *fp = fopen(path, "rb");
  if (!fp) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: %s", path, strerror(errno));
  enum mtpq_status st = MTPQ_OK;
  if (p->chunk) { /* multipart: the parts in order, then the completion on the Hub without auth */
    cJSON *done = cJSON_CreateObject(), *plist;
    cJSON_AddStringToObject(done, "oid", u->oid);
    plist = cJSON_AddArrayToObject(done, "parts");
    for (uint64_t i = 1; i <= p->nparts && !st; i++) {
      uint64_t off = (i - 1) * p->chunk, len = off + p->chunk > u->size ? u->size - off : p->chunk;
      char etag[160];
      st = put_part(env, p->parts[i - 1], fp, off, len, etag, sizeof etag, err);
      if (!st) {
        cJSON *pe = cJSON_CreateObject();
        cJSON_AddNumberToObject(pe, "partNumber", (double)i);
        cJSON_AddStringToObject(pe, "etag", etag);
        cJSON_AddItemToArray(plist, pe);
        res->bytes_sent += len;
      }
    }
    struct hub_resp r;
    if (!st) {
      struct mtpq_hub_env noauth = *env; /* the completion carries no token */
      noauth.token[0] = 0;
      st = post_json(&noauth, p->href, "application/vnd.git-lfs+json", done, 1, &r, err);
      if (!st) hub_resp_free(&r);
    }
    cJSON_Delete(done);
  } else {
    st = put_part(env, p->href, fp, 0, u->size, NULL, 0, err);
    if (!st) res->bytes_sent += u->size;
  }
  fclose(fp);
  if (!st && p->verify) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "oid", u->oid);
    cJSON_AddNumberToObject(v, "size", (double)u->size);
    struct hub_resp r;
    st = post_json(env, p->verify, "application/vnd.git-lfs+json", v, 1, &r, err);
    if (!st) hub_resp_free(&r);
    cJSON_Delete(v);
  }
  if (!st) res->lfs_uploaded++;
  return st;
}

static enum mtpq_status lfs_batch(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o, const char *rev,
                                  struct ufile *f, int n, struct mtpq_upload_result *res, struct mtpq_err *err) {
  char url[1024];
  snprintf(url, sizeof url, "%s/%s.git/info/lfs/objects/batch", env->endpoint, o->repo);
  int idx[BATCH];
  enum mtpq_status st = MTPQ_OK, refused = MTPQ_OK;
  struct mtpq_err first = {0};
  int nrefused = 0;
  for (int i = 0; i < n && !st;) {
    int m = 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "operation", "upload");
    cJSON *tr = cJSON_AddArrayToObject(j, "transfers");
    cJSON_AddItemToArray(tr, cJSON_CreateString("basic"));
    cJSON_AddItemToArray(tr, cJSON_CreateString("multipart"));
    cJSON_AddStringToObject(j, "hash_algo", "sha256");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(j, "ref"), "name", rev);
    cJSON *objs = cJSON_AddArrayToObject(j, "objects");
    for (; i < n && m < BATCH; i++) {
      if (!f[i].lfs || f[i].skip) continue;
      cJSON *ob = cJSON_CreateObject();
      cJSON_AddStringToObject(ob, "oid", f[i].oid);
      cJSON_AddNumberToObject(ob, "size", (double)f[i].size);
      cJSON_AddItemToArray(objs, ob);
      idx[m++] = i;
    }
    struct hub_resp r;
    if (m) st = post_json(env, url, "application/vnd.git-lfs+json", j, 1, &r, err);
    cJSON_Delete(j);
    if (st || !m) break;
    cJSON *ans = mtpq__json_parse(r.body ? r.body : "", r.body ? strlen(r.body) : 0, url, MTPQ_E_SERVER, err), *ob;
    if (!ans) {
      hub_resp_free(&r);
      st = MTPQ_E_SERVER;
      break;
    }
    hub_resp_free(&r);
    int seen = 0;
    cJSON_ArrayForEach(ob, cJSON_GetObjectItem(ans, "objects")) {
      const char *oid = cJSON_GetStringValue(cJSON_GetObjectItem(ob, "oid"));
      for (int k = 0; oid && k < m && !st; k++) {
        if (strcmp(f[idx[k]].oid, oid) != 0) continue;
        seen++;
        struct hub_lfs_plan plan;
        char label[4200];
        snprintf(label, sizeof label, "%s", f[idx[k]].path);
        st = hub_parse_lfs_object(ob, f[idx[k]].size, label, &plan, err);
        /* a refused object does not stop the others: the rerun sends only it */
        if (!st && plan.error && !nrefused++)
          refused = object_error(&f[idx[k]], &plan, &first);
        else if (!st && !plan.error)
          st = send_object(env, o, &f[idx[k]], &plan, res, err);
        free(plan.parts);
      }
      if (st) break;
    }
    cJSON_Delete(ans);
    if (!st && seen < m) st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: the LFS batch answered %d of %d objects", url, seen, m);
  }
  if (!st && refused) {
    *err = first;
    st = refused;
    size_t l = strlen(err->msg);
    snprintf(err->msg + l, sizeof err->msg - l,
             " (%d object%s refused in all); nothing was committed: a rerun sends only the refused objects", nrefused,
             nrefused == 1 ? "" : "s");
  }
  return st;
}

static enum mtpq_status commit(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o, const char *q,
                               const char *parent, struct ufile *f, int n, struct mtpq_upload_result *res,
                               struct mtpq_err *err) {
  size_t cap = 1 << 16, len = 0;
  char *body = malloc(cap);
  enum mtpq_status st = body ? MTPQ_OK : mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int i = -1; i < n && !st; i++) {
    cJSON *line = cJSON_CreateObject(), *v;
    if (i < 0) {
      cJSON_AddStringToObject(line, "key", "header");
      v = cJSON_AddObjectToObject(line, "value");
      cJSON_AddStringToObject(v, "summary", o->message ? o->message : "Upload with mtpq");
      cJSON_AddStringToObject(v, "description", "");
      if (parent[0]) cJSON_AddStringToObject(v, "parentCommit", parent);
    } else if (f[i].skip) {
      cJSON_Delete(line);
      continue;
    } else if (f[i].lfs) {
      cJSON_AddStringToObject(line, "key", "lfsFile");
      v = cJSON_AddObjectToObject(line, "value");
      cJSON_AddStringToObject(v, "path", f[i].path);
      cJSON_AddStringToObject(v, "algo", "sha256");
      cJSON_AddStringToObject(v, "oid", f[i].oid);
      cJSON_AddNumberToObject(v, "size", (double)f[i].size);
    } else {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", o->dir, f[i].path);
      char *data = NULL;
      size_t dl = 0;
      /* regular files are small (the Hub sends big ones to LFS); 1 GB is the
       * commit's inline payload limit */
      st = mtpq__read_file(p, (size_t)1 << 30, &data, &dl, err);
      char *c64 = st ? NULL : b64((const unsigned char *)data, dl);
      free(data);
      if (!st && !c64) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      if (st) {
        cJSON_Delete(line);
        break;
      }
      cJSON_AddStringToObject(line, "key", "file");
      v = cJSON_AddObjectToObject(line, "value");
      cJSON_AddStringToObject(v, "path", f[i].path);
      cJSON_AddStringToObject(v, "encoding", "base64");
      cJSON_AddStringToObject(v, "content", c64);
      free(c64);
      res->bytes_sent += f[i].size;
    }
    char *t = cJSON_PrintUnformatted(line);
    cJSON_Delete(line);
    size_t tl = strlen(t);
    if (len + tl + 2 > cap) {
      while (len + tl + 2 > cap) cap *= 2;
      char *nb = realloc(body, cap);
      if (!nb) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      else body = nb;
    }
    if (!st) memcpy(body + len, t, tl), len += tl, body[len++] = '\n';
    free(t);
  }
  char url[1024];
  snprintf(url, sizeof url, "%s/api/models/%s/commit/%s", env->endpoint, o->repo, q);
  struct hub_resp r;
  /* never resent: a lost answer plus a retry could commit twice */
  if (!st) st = hub_send(env, "POST", url, "application/x-ndjson", body, NULL, 0, len, 0, &r, err);
  free(body);
  if (st == MTPQ_E_SERVER && strstr(err->msg, "HTTP 412"))
    return mtpq_err_set(err, MTPQ_E_SERVER, "%s: the branch moved since the upload began (HTTP 412, parent %s); "
                        "rerun: objects already sent are not sent again", o->repo, parent);
  if (st == MTPQ_E_NET) { /* the answer was lost: say what the branch head is now, never resend */
    char head[41] = "";
    struct mtpq_err e2 = {0};
    char *rev = curl_unescape(q, 0);
    if (!hub_resolve_commit(env, o->repo, rev ? rev : q, head, &e2) && strcmp(head, parent) != 0)
      snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
               "; the branch head is now %s, which may be this commit: check before rerunning", head);
    curl_free(rev);
  }
  if (st) return st;
  st = hub_parse_commit(r.body ? r.body : "", r.body ? strlen(r.body) : 0, url, res->commit, res->url, sizeof res->url,
                        err);
  if (!st) res->committed = 1;
  hub_resp_free(&r);
  return st;
}

enum mtpq_status mtpq_hub_upload(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o,
                                 struct mtpq_upload_result *res, struct mtpq_err *err) {
  memset(res, 0, sizeof *res);
  const char *rev = o->revision ? o->revision : "main";
  if (!hub_valid_repo(o->repo)) return mtpq_err_set(err, MTPQ_E_INVAL, "'%s' is not a repo id of the form org/name", o->repo);
  if (env->offline) return mtpq_err_set(err, MTPQ_E_NET, "HF_HUB_OFFLINE is set: cannot upload");
  if (!env->token[0]) return mtpq_err_set(err, MTPQ_E_AUTH, "no token: set HF_TOKEN (a write token) to upload");
  struct stat sb;
  if (stat(o->dir, &sb) || !S_ISDIR(sb.st_mode)) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: not a directory", o->dir);
  memset(&walk, 0, sizeof walk);
  walk.root = o->dir;
  if (nftw(o->dir, on_file, 16, FTW_PHYS) || walk.bad) {
    for (int i = 0; i < walk.n; i++) free(walk.f[i].path);
    free(walk.f);
    return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: cannot list the folder", o->dir);
  }
  struct ufile *f = walk.f;
  int n = walk.n;
  qsort(f, (size_t)n, sizeof *f, by_path);
  res->files = n;
  enum mtpq_status st = n ? MTPQ_OK : mtpq_err_set(err, MTPQ_E_INVAL, "%s: no files to upload", o->dir);
  CURL *c = curl_easy_init();
  char *q = curl_easy_escape(c, rev, 0);
  curl_easy_cleanup(c);
  char parent[41] = "";
  if (!st) st = create_repo(env, o, err);
  if (!st) { /* the head to commit on; an empty repo may have none */
    struct mtpq_err e2 = {0};
    if (hub_resolve_commit(env, o->repo, rev, parent, &e2)) parent[0] = 0;
  }
  if (!st) st = preupload(env, o, q, f, n, err);
  for (int i = 0; i < n && !st; i++) {
    if (f[i].skip) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", o->dir, f[i].path);
    st = mtpq__file_digest(p, !f[i].lfs, f[i].oid, NULL, err);
    if (!st && f[i].remote[0] && strcmp(f[i].remote, f[i].oid) == 0) f[i].skip = 1, res->unchanged++;
  }
  int todo = 0;
  for (int i = 0; i < n; i++) todo += !f[i].skip;
  if (!st) st = lfs_batch(env, o, rev, f, n, res, err);
  if (!st && !todo) memcpy(res->commit, parent, 41); /* nothing changed: no commit */
  else if (!st) st = commit(env, o, q, parent, f, n, res, err);
  curl_free(q);
  for (int i = 0; i < n; i++) free(f[i].path);
  free(f);
  return st;
}
