/* Download into the huggingface_hub cache (hub-protocol.md 2.4, 2.5):
 * models--org--name/{blobs,snapshots,refs}, .locks/, relative links, so
 * that huggingface_hub finds the files offline. */
#define _DEFAULT_SOURCE /* flock, symlink */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "hub/answers.h"
#include "hub/http.h"
#include "hub/tree.h"
#include "io/util.h"

#define entry hub_entry

int hub_valid_repo(const char *r) {
  const char *sl = strchr(r, '/');
  if (!sl || sl == r || !sl[1] || strchr(sl + 1, '/') || strlen(r) > 200) return 0;
  for (const char *c = r; *c; c++)
    if (!(*c == '/' || *c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
          (*c >= 'A' && *c <= 'Z')))
      return 0;
  return strstr(r, "..") == NULL;
}

enum mtpq_status hub_mkdirs(const char *path, struct mtpq_err *err) {
  char tmp[2048];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) && errno != EEXIST) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0777) && errno != EEXIST) return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", tmp, strerror(errno));
  return MTPQ_OK;
}

static enum mtpq_status parent_dirs(const char *file, struct mtpq_err *err) {
  char d[2048];
  snprintf(d, sizeof d, "%s", file);
  char *s = strrchr(d, '/');
  if (!s) return MTPQ_OK;
  *s = 0;
  return hub_mkdirs(d, err);
}

char *hub_escape_path(CURL *c, const char *p) {
  size_t cap = strlen(p) * 3 + 1, o = 0;
  char *out = malloc(cap);
  for (const char *s = p; *s;) {
    size_t n = strcspn(s, "/");
    char *e = curl_easy_escape(c, s, (int)n);
    o += (size_t)snprintf(out + o, cap - o, "%s%s", e, s[n] ? "/" : "");
    curl_free(e);
    s += n + (s[n] ? 1 : 0);
  }
  return out;
}

void hub_free_entries(struct entry *e, int n) {
  for (int i = 0; i < n; i++) free(e[i].path), free(e[i].etag);
  free(e);
}

/* the tree at commit, following Link rel="next" */
enum mtpq_status hub_list_tree(const struct mtpq_hub_env *env, const char *repo, const char *commit,
                                  struct entry **out, int *nout, struct mtpq_err *err) {
  char url[2048];
  snprintf(url, sizeof url, "%s/api/models/%s/tree/%s?recursive=true&expand=false", env->endpoint, repo, commit);
  struct entry *e = NULL;
  int n = 0, cap = 0;
  enum mtpq_status st = MTPQ_OK;
  for (int page = 0; url[0] && !st; page++) {
    struct hub_resp r;
    if ((st = hub_get(env, url, &r, err))) break;
    st = hub_parse_tree_page(r.body ? r.body : "", r.body ? strlen(r.body) : 0, url, &e, &n, &cap, err);
    snprintf(url, sizeof url, "%s", r.link_next);
    hub_resp_free(&r);
    if (page > 100000) st = mtpq_err_set(err, MTPQ_E_SERVER, "tree listing does not end");
  }
  if (st) {
    hub_free_entries(e, n);
    return st;
  }
  *out = e, *nout = n;
  return MTPQ_OK;
}

enum mtpq_status hub_resolve_commit(const struct mtpq_hub_env *env, const char *repo, const char *rev,
                                       char *commit, struct mtpq_err *err) {
  if (hub_is_hex(rev, 40)) {
    memcpy(commit, rev, 41);
    return MTPQ_OK;
  }
  CURL *c = curl_easy_init();
  char *q = curl_easy_escape(c, rev, 0); /* "refs/pr/1" -> refs%2Fpr%2F1 */
  char url[2048];
  snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", env->endpoint, repo, q);
  curl_free(q);
  curl_easy_cleanup(c);
  struct hub_resp r;
  enum mtpq_status st = hub_get(env, url, &r, err);
  if (st) return st;
  st = hub_parse_revision(r.body ? r.body : "", r.body ? strlen(r.body) : 0, url, commit, err);
  hub_resp_free(&r);
  return st;
}

/* refs/<rev> = commit, atomically and only when it changes */
enum mtpq_status hub_write_ref(const char *rdir, const char *rev, const char *commit, struct mtpq_err *err) {
  char p[2048], cur[64] = {0};
  snprintf(p, sizeof p, "%s/refs/%s", rdir, rev);
  FILE *f = fopen(p, "r");
  if (f) {
    size_t n = fread(cur, 1, 63, f);
    cur[n] = 0;
    fclose(f);
    if (strcmp(cur, commit) == 0) return MTPQ_OK;
  }
  enum mtpq_status st = parent_dirs(p, err);
  if (st) return st;
  return mtpq__write_file_atomic(p, commit, strlen(commit), err);
}

/* Byte progress of one blob for the caller's callback, at most ~10 updates a second. */
struct blob_progress {
  const struct mtpq_download_opts *o;
  const char *path;
  uint64_t base, total;
  double last;
};

static void on_blob_bytes(void *ud, uint64_t written) {
  struct blob_progress *b = ud;
  double now = mtpq__now();
  if (now - b->last < 0.1) return;
  b->last = now;
  uint64_t done = b->base + written;
  b->o->progress(b->o->progress_ud, b->path, done < b->total ? done : b->total - (b->total > 0), b->total);
}

/* Fetch one blob under its lock, resuming <blob>.incomplete. */
static enum mtpq_status fetch_blob(const struct mtpq_hub_env *env, const struct mtpq_download_opts *o,
                                   const char *rdir, const char *commit, const struct entry *e,
                                   struct mtpq_download_result *res, struct mtpq_err *err) {
  char blob[2048], part[2100], lock[2048];
  snprintf(blob, sizeof blob, "%s/blobs/%s", rdir, e->etag);
  snprintf(part, sizeof part, "%s.incomplete", blob);
  const char *slash = strrchr(rdir, '/');
  snprintf(lock, sizeof lock, "%.*s/.locks/%s/%s.lock", (int)(slash - rdir), rdir, slash + 1, e->etag);
  enum mtpq_status st = parent_dirs(lock, err);
  if (!st) st = parent_dirs(blob, err);
  if (st) return st;
  int lfd = open(lock, O_RDWR | O_CREAT, 0664);
  if (lfd < 0 || flock(lfd, LOCK_EX)) {
    if (lfd >= 0) close(lfd);
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot lock: %s", lock, strerror(errno));
  }
  struct stat sb;
  if (stat(blob, &sb) == 0) goto done; /* another process fetched it meanwhile */
  FILE *f = fopen(part, "ab+");
  if (!f) {
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", part, strerror(errno));
    goto done;
  }
  fseek(f, 0, SEEK_END);
  uint64_t have = (uint64_t)ftell(f);
  if (have > e->size) { /* not ours to resume */
    if (ftruncate(fileno(f), 0)) {}
    fseek(f, 0, SEEK_SET);
    have = 0;
  }
  CURL *c = curl_easy_init();
  char *ep = hub_escape_path(c, e->path);
  curl_easy_cleanup(c);
  char url[4096];
  snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", env->endpoint, o->repo, commit, ep);
  free(ep);
  int fails = 0;
  while (have < e->size || e->size == 0) {
    struct hub_resp r;
    struct blob_progress bp = {o, e->path, have, e->size, mtpq__now()};
    if (o->progress) {
      o->progress(o->progress_ud, e->path, have, e->size);
      hub_set_sink_progress(on_blob_bytes, &bp);
    }
    st = hub_request(env, "GET", url, f, have ? have : HUB_NO_RANGE, &r, err);
    hub_set_sink_progress(NULL, NULL);
    fflush(f);
    uint64_t now = (uint64_t)ftell(f);
    int restarted = r.restarted, progress = now > have || restarted;
    long status = r.status;
    double ra = r.retry_after;
    if (!st && status >= 400 && !hub_retryable(status)) st = hub_status_error(&r, url, err);
    hub_resp_free(&r);
    res->bytes_fetched += restarted ? now : (now > have ? now - have : 0);
    have = now;
    if (st && st != MTPQ_E_NET) break;
    if (!st && (status == 200 || status == 206) && have >= e->size) {
      st = MTPQ_OK;
      break;
    }
    /* a cut connection, a timeout, 408/429/5xx: retry, resuming; the
     * counter restarts whenever bytes arrived (hub-protocol.md 2.3) */
    if (progress) fails = 0;
    if (++fails > 5) {
      if (!st) st = mtpq_err_set(err, MTPQ_E_NET, "%s: gave up after 5 retries (HTTP %ld, %llu of %llu bytes)", url,
                                 status, (unsigned long long)have, (unsigned long long)e->size);
      break;
    }
    char why[700];
    if (st)
      snprintf(why, sizeof why, "%s", err->msg);
    else
      snprintf(why, sizeof why, "%s: HTTP %ld after %llu of %llu bytes", e->path, status, (unsigned long long)have,
               (unsigned long long)e->size);
    st = MTPQ_OK;
    hub_backoff(env, fails - 1, ra, why);
  }
  if (fclose(f) && !st) st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: %s", part, strerror(errno));
  if (st) goto done; /* the partial file stays for the next run to resume */
  if (have != e->size) {
    unlink(part);
    st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: got %llu bytes, the listing says %llu", url, (unsigned long long)have,
                      (unsigned long long)e->size);
    goto done;
  }
  char hex[65];
  if ((st = mtpq__file_digest(part, !e->lfs, hex, NULL, err))) goto done;
  if (strcmp(hex, e->etag) != 0) {
    unlink(part);
    st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: content %s is %s but the hub says %s (partial file removed)", e->path,
                      e->lfs ? "sha256" : "git sha1", hex, e->etag);
    goto done;
  }
  if (rename(part, blob)) st = mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: %s", blob, strerror(errno));
  else res->fetched++;
  if (o->progress) o->progress(o->progress_ud, e->path, e->size, e->size);
done:
  flock(lfd, LOCK_UN);
  close(lfd);
  return st;
}

static enum mtpq_status link_snapshot(const char *rdir, const char *commit, const struct entry *e,
                                      struct mtpq_err *err) {
  char ptr[2048], target[2048] = "";
  snprintf(ptr, sizeof ptr, "%s/snapshots/%s/%s", rdir, commit, e->path);
  enum mtpq_status st = parent_dirs(ptr, err);
  if (st) return st;
  /* relative: ../../blobs/<etag>, one more ../ per directory in path */
  for (const char *s = e->path; (s = strchr(s, '/')); s++) strcat(target, "../");
  strcat(target, "../../blobs/");
  strcat(target, e->etag);
  char tmp[2100];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", ptr, (long)getpid());
  unlink(tmp);
  if (symlink(target, tmp) || rename(tmp, ptr)) {
    unlink(tmp);
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot link: %s", ptr, strerror(errno));
  }
  return MTPQ_OK;
}

/* models--{org}--{name}: "/" of the repo id becomes "--", case kept */
void hub_repo_dir(const struct mtpq_hub_env *env, const char *repo, char *out, size_t cap) {
  const char *slash = strchr(repo, '/');
  snprintf(out, cap, "%s/models--%.*s--%s", env->cache, (int)(slash - repo), repo, slash + 1);
}

enum mtpq_status hub_cached_commit(const struct mtpq_hub_env *env, const char *repo, const char *rev, char *commit,
                                   struct mtpq_err *err) {
  if (hub_is_hex(rev, 40)) {
    memcpy(commit, rev, 41);
    return MTPQ_OK;
  }
  char rdir[1500], p[2100];
  hub_repo_dir(env, repo, rdir, sizeof rdir);
  snprintf(p, sizeof p, "%s/refs/%s", rdir, rev);
  FILE *f = fopen(p, "r");
  size_t n = f ? fread(commit, 1, 40, f) : 0;
  if (f) fclose(f);
  commit[n] = 0;
  if (!hub_is_hex(commit, 40))
    return mtpq_err_set(err, MTPQ_E_NET, "HF_HUB_OFFLINE is set and the cache has no ref '%s' of %s (%s)", rev, repo,
                        p);
  return MTPQ_OK;
}

static int selected(const struct mtpq_download_opts *o, const char *path) {
  if (o->ninclude == 0) return 1;
  for (int i = 0; i < o->ninclude; i++)
    if (fnmatch(o->include[i], path, 0) == 0) return 1;
  return 0;
}

enum mtpq_status mtpq_hub_download(const struct mtpq_hub_env *env, const struct mtpq_download_opts *o,
                                   struct mtpq_download_result *res, struct mtpq_err *err) {
  memset(res, 0, sizeof *res);
  const char *rev = o->revision ? o->revision : "main";
  if (!hub_valid_repo(o->repo))
    return mtpq_err_set(err, MTPQ_E_INVAL, "'%s' is not a repo id of the form org/name", o->repo);
  if (!*rev || strstr(rev, "..") || rev[0] == '/' || strlen(rev) > 200)
    return mtpq_err_set(err, MTPQ_E_INVAL, "'%s' is not a valid revision", rev);
  char rdir[1500];
  hub_repo_dir(env, o->repo, rdir, sizeof rdir);
  enum mtpq_status st;
  if (env->offline) { /* serve from the cache: refs/<rev> or the commit itself */
    if ((st = hub_cached_commit(env, o->repo, rev, res->commit, err))) return st;
    snprintf(res->snapshot, sizeof res->snapshot, "%s/snapshots/%s", rdir, res->commit);
    struct stat sb;
    if (stat(res->snapshot, &sb))
      return mtpq_err_set(err, MTPQ_E_NET, "HF_HUB_OFFLINE is set and %s is not cached", res->snapshot);
    return MTPQ_OK;
  }
  if ((st = hub_resolve_commit(env, o->repo, rev, res->commit, err))) return st;
  snprintf(res->snapshot, sizeof res->snapshot, "%s/snapshots/%s", rdir, res->commit);
  struct entry *e = NULL;
  int n = 0;
  if ((st = hub_list_tree(env, o->repo, res->commit, &e, &n, err))) return st;
  st = hub_fetch_listed(env, o, e, n, res, err);
  hub_free_entries(e, n);
  if (!st && strcmp(rev, res->commit) != 0) st = hub_write_ref(rdir, rev, res->commit, err);
  return st;
}

enum mtpq_status hub_fetch_listed(const struct mtpq_hub_env *env, const struct mtpq_download_opts *o,
                                  const struct hub_entry *e, int n, struct mtpq_download_result *res,
                                  struct mtpq_err *err) {
  char rdir[1500];
  hub_repo_dir(env, o->repo, rdir, sizeof rdir);
  snprintf(res->snapshot, sizeof res->snapshot, "%s/snapshots/%s", rdir, res->commit);
  enum mtpq_status st = MTPQ_OK;
  for (int i = 0; i < n && !st; i++) {
    if (!selected(o, e[i].path)) continue;
    res->files++;
    res->bytes_total += e[i].size;
    char blob[2200], ptr[2200];
    snprintf(blob, sizeof blob, "%s/blobs/%s", rdir, e[i].etag);
    snprintf(ptr, sizeof ptr, "%s/snapshots/%s/%s", rdir, res->commit, e[i].path);
    struct stat sb;
    if (stat(ptr, &sb) == 0 && (uint64_t)sb.st_size == e[i].size) continue;
    if (stat(blob, &sb) != 0) st = fetch_blob(env, o, rdir, res->commit, &e[i], res, err);
    if (!st) st = link_snapshot(rdir, res->commit, &e[i], err);
  }
  return st;
}
