/* libcurl requests, retries and the token's origin rule (hub-protocol.md
 * 1.2, 1.5, 1.6, 2.2, 2.3). */
#define _DEFAULT_SOURCE /* strncasecmp, nanosleep */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "hub/http.h"

void hub_resp_free(struct hub_resp *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
}

void hub_sleep(double s) {
  if (s <= 0) return;
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

/* huggingface_hub's schedule: 1, 2, 4, 8, 8 s, or the server's reset + 1 */
void hub_backoff(const struct mtpq_hub_env *env, int attempt, double retry_after, const char *why) {
  const double s = hub_backoff_s(env, attempt, retry_after);
  hub_note(env, "retry %d of 5 in %.1f s: %s", attempt + 1, s, why);
  hub_sleep(s);
}

double hub_backoff_s(const struct mtpq_hub_env *env, int attempt, double retry_after) {
  static const double waits[] = {1, 2, 4, 8, 8};
  int i = attempt < 0 ? 0 : attempt > 4 ? 4 : attempt;
  return (retry_after >= 0 ? retry_after + 1 : waits[i]) * env->backoff_s;
}

void hub_note(const struct mtpq_hub_env *env, const char *fmt, ...) {
  if (!env->note) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  env->note(env->note_ud, line);
}

int hub_retryable(long status) { return status == 408 || status == 429 || (status >= 500 && status <= 599); }

/* scheme://host:port of url, lower-case host, default ports filled in */
static int origin(const char *url, char *out, size_t cap) {
  CURLU *u = curl_url();
  char *sch = NULL, *host = NULL, *port = NULL;
  int ok = u && !curl_url_set(u, CURLUPART_URL, url, 0) && !curl_url_get(u, CURLUPART_SCHEME, &sch, 0) &&
           !curl_url_get(u, CURLUPART_HOST, &host, 0) && !curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  if (ok) {
    for (char *c = host; *c; c++)
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    snprintf(out, cap, "%s://%s:%s", sch, host, port);
  }
  curl_free(sch);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return ok;
}

int hub_same_origin(const char *a, const char *b) {
  char oa[1200], ob[1200];
  return origin(a, oa, sizeof oa) && origin(b, ob, sizeof ob) && strcmp(oa, ob) == 0;
}

struct sinkctx {
  CURL *c;
  FILE *sink;
  uint64_t range_from; /* an open-ended resume from here (HUB_NO_RANGE: none) */
  int decided, to_file;
  struct hub_resp *r;
  uint64_t written; /* to the sink by this request */
};

static _Thread_local hub_sink_progress_fn sink_progress;
static _Thread_local void *sink_progress_ud;
void hub_set_sink_progress(hub_sink_progress_fn fn, void *ud) { sink_progress = fn, sink_progress_ud = ud; }

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  struct sinkctx *x = ud;
  size_t len = sz * n;
  if (!x->decided) {
    long code = 0;
    curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
    x->decided = 1;
    x->to_file = x->sink && (code == 200 || code == 206);
    if (x->to_file && code == 200 && x->range_from != HUB_NO_RANGE && x->range_from > 0) {
      /* the server ignored the Range: start the file over */
      if (fflush(x->sink) || ftruncate(fileno(x->sink), 0) || fseek(x->sink, 0, SEEK_SET)) return 0;
      x->r->restarted = 1;
    }
  }
  if (x->to_file) {
    if (fwrite(p, 1, len, x->sink) != len) return 0;
    x->written += len;
    if (sink_progress) sink_progress(sink_progress_ud, x->written);
    return len;
  }
  if (x->r->len > (64u << 20)) return 0; /* an API body this large is not one we asked for */
  char *nb = realloc(x->r->body, x->r->len + len + 1);
  if (!nb) return 0;
  memcpy(nb + x->r->len, p, len);
  x->r->body = nb;
  x->r->len += len;
  nb[x->r->len] = 0;
  return len;
}

void hub_header_value(const char *line, size_t n, size_t skip, char *out, size_t cap) {
  const char *v = line + skip;
  size_t m = n - skip;
  while (m && (*v == ' ' || *v == '\t')) v++, m--;
  while (m && (v[m - 1] == '\r' || v[m - 1] == '\n' || v[m - 1] == ' ')) m--;
  if (m >= cap) m = cap - 1;
  memcpy(out, v, m);
  out[m] = 0;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  struct hub_resp *r = ud;
  size_t len = sz * n;
  char tmp[2048];
  if (len > 5 && strncmp(p, "HTTP/", 5) == 0) { /* a new response (redirect hop) */
    r->etag[0] = r->raw_etag[0] = r->link_next[0] = r->err_code[0] = r->err_msg[0] = 0;
    r->retry_after = -1;
    return len;
  }
#define H(name) (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0)
  if (H("x-repo-commit:"))
    hub_header_value(p, len, 14, r->commit, sizeof r->commit);
  else if (H("x-linked-etag:") || (H("etag:") && !r->etag[0])) {
    if (H("etag:")) hub_header_value(p, len, 5, r->raw_etag, sizeof r->raw_etag);
    hub_header_value(p, len, H("etag:") ? 5 : 14, tmp, sizeof tmp);
    char *t = tmp;
    if (strncmp(t, "W/", 2) == 0) t += 2;
    size_t m = strlen(t);
    if (m >= 2 && t[0] == '"' && t[m - 1] == '"') t[m - 1] = 0, t++;
    snprintf(r->etag, sizeof r->etag, "%s", t);
  } else if (H("x-error-code:"))
    hub_header_value(p, len, 13, r->err_code, sizeof r->err_code);
  else if (H("x-error-message:"))
    hub_header_value(p, len, 16, r->err_msg, sizeof r->err_msg);
  else if (H("retry-after:")) {
    hub_header_value(p, len, 12, tmp, sizeof tmp);
    char *end;
    double v = strtod(tmp, &end);
    if (end != tmp && r->retry_after < 0) r->retry_after = v;
  } else if (H("ratelimit:")) {
    hub_header_value(p, len, 10, tmp, sizeof tmp);
    const char *rr = strstr(tmp, ";r="), *t = strstr(tmp, ";t=");
    if (rr && t && atoi(rr + 3) == 0) r->retry_after = atof(t + 3);
  } else if (H("link:")) {
    hub_header_value(p, len, 5, tmp, sizeof tmp);
    /* <url>; rel="next" (possibly among several links) */
    for (char *s = tmp; (s = strchr(s, '<'));) {
      char *e = strchr(s, '>');
      if (!e) break;
      if (strstr(e, "rel=\"next\"") && (!strchr(e + 1, '<') || strstr(e, "rel=\"next\"") < strchr(e + 1, '<'))) {
        snprintf(r->link_next, sizeof r->link_next, "%.*s", (int)(e - s - 1), s + 1);
        break;
      }
      s = e;
    }
  }
#undef H
  return len;
}

struct body {
  const char *ctype;
  const unsigned char *mem;
  FILE *f;
  uint64_t off, len, pos;
};

static size_t on_read(char *buf, size_t sz, size_t n, void *ud) {
  struct body *b = ud;
  size_t want = sz * n;
  if (want > b->len - b->pos) want = (size_t)(b->len - b->pos);
  if (want == 0) return 0;
  if (b->f) {
    if (fseek(b->f, (long)(b->off + b->pos), SEEK_SET) || fread(buf, 1, want, b->f) != want) return CURL_READFUNC_ABORT;
  } else {
    memcpy(buf, b->mem + b->pos, want);
  }
  b->pos += want;
  return want;
}

/* range_from: the bytes from there on (a resume; HUB_NO_RANGE: all);
 * stop_cross: a redirect to another origin is not followed; r->url is then
 * its target and r->status the 3xx (hub_locate). */
static enum mtpq_status request_body(const struct mtpq_hub_env *env, const char *method, const char *url0, FILE *sink,
                                     uint64_t range_from, struct body *body, int stop_cross, struct hub_resp *r,
                                     struct mtpq_err *err) {
  memset(r, 0, sizeof *r);
  r->retry_after = -1;
  if (env->offline) return mtpq_err_set(err, MTPQ_E_NET, "HF_HUB_OFFLINE is set: no request to %s", url0);
  CURL *c = curl_easy_init();
  if (!c) return mtpq_err_set(err, MTPQ_E_NOMEM, "curl_easy_init failed");
  char url[2048];
  snprintf(url, sizeof url, "%s", url0);
  long sink_start = sink ? ftell(sink) : 0;
  enum mtpq_status st = MTPQ_OK;
  for (int hop = 0;; hop++) {
    struct curl_slist *hdr = NULL;
    char auth[600];
    if (env->token[0] && hub_same_origin(url, env->endpoint)) {
      snprintf(auth, sizeof auth, "authorization: Bearer %s", env->token);
      hdr = curl_slist_append(hdr, auth);
    }
    hdr = curl_slist_append(hdr, "user-agent: mtpq/0.1 (+libcurl)");
    char range[64];
    if (range_from != HUB_NO_RANGE) {
      snprintf(range, sizeof range, "range: bytes=%llu-", (unsigned long long)range_from);
      hdr = curl_slist_append(hdr, range);
    }
    struct sinkctx x = {c, sink, range_from, 0, 0, r, 0};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(env->timeout_s * 1000));
    /* a stalled transfer (no bytes for the timeout) is a network error */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(env->timeout_s < 1 ? 1 : env->timeout_s));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    char ct[200];
    if (body) { /* re-sent from its start on every hop and retry */
      body->pos = 0;
      if (body->ctype) {
        snprintf(ct, sizeof ct, "content-type: %s", body->ctype);
        hdr = curl_slist_append(hdr, ct);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
      }
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body->len);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, body);
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method); /* UPLOAD alone means PUT */
    } else if (strcmp(method, "HEAD") == 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    snprintf(r->url, sizeof r->url, "%s", url);
    if (cc != CURLE_OK) {
      st = mtpq_err_set(err, MTPQ_E_NET, "%s %s: %s", method, url, curl_easy_strerror(cc));
      break;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    char *loc = NULL;
    if (r->status >= 300 && r->status < 400 && !curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) && loc) {
      if (hop >= 10) {
        st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: more than 10 redirects", url0);
        break;
      }
      if (stop_cross && !hub_same_origin(loc, url)) {
        snprintf(r->url, sizeof r->url, "%s", loc);
        break;
      }
      snprintf(url, sizeof url, "%s", loc); /* libcurl resolved a relative Location against url */
      hub_resp_free(r);
      if (sink && fseek(sink, sink_start, SEEK_SET)) {
        st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "seek in the download file failed");
        break;
      }
      continue;
    }
    break;
  }
  curl_easy_cleanup(c);
  return st;
}

enum mtpq_status hub_request(const struct mtpq_hub_env *env, const char *method, const char *url, FILE *sink,
                             uint64_t range_from, struct hub_resp *r, struct mtpq_err *err) {
  return request_body(env, method, url, sink, range_from, NULL, 0, r, err);
}

/* after a failed attempt (st, or r's status): r freed, then the wait before attempt + 1, its reason noted */
static void retry_wait(const struct mtpq_hub_env *env, int attempt, enum mtpq_status st, struct hub_resp *r,
                       const char *method, const char *url, const struct mtpq_err *err) {
  const double ra = r->retry_after;
  char why[600];
  if (st)
    snprintf(why, sizeof why, "%s", err->msg);
  else
    snprintf(why, sizeof why, "%s %s: HTTP %ld", method, url, r->status);
  hub_resp_free(r);
  hub_backoff(env, attempt, ra, why);
}

enum mtpq_status hub_send(const struct mtpq_hub_env *env, const char *method, const char *url, const char *ctype,
                          const void *mem, FILE *f, uint64_t off, uint64_t len, int retry, struct hub_resp *r,
                          struct mtpq_err *err) {
  struct body b = {ctype, mem, f, off, len, 0};
  for (int attempt = 0;; attempt++) {
    enum mtpq_status st = request_body(env, method, url, NULL, HUB_NO_RANGE, mem || f ? &b : NULL, 0, r, err);
    int again = retry && ((st == MTPQ_E_NET && !env->offline) || (!st && hub_retryable(r->status)));
    if (!again || attempt == 5) {
      if (!st && r->status >= 400) st = hub_status_error(r, url, err);
      if (st) hub_resp_free(r);
      return st;
    }
    retry_wait(env, attempt, st, r, method, url, err);
  }
}

enum mtpq_status hub_status_error(const struct hub_resp *r, const char *what, struct mtpq_err *err) {
  const char *msg = r->err_msg[0] ? r->err_msg : (r->body && r->len < 300 ? r->body : "");
  if (r->status == 401 || r->status == 403)
    return mtpq_err_set(err, MTPQ_E_AUTH, "%s: HTTP %ld%s%s%s%s (set HF_TOKEN to a token with access)", what,
                        r->status, r->err_code[0] ? " " : "", r->err_code, *msg ? ": " : "", msg);
  return mtpq_err_set(err, MTPQ_E_SERVER, "%s: HTTP %ld%s%s%s%s", what, r->status, r->err_code[0] ? " " : "",
                      r->err_code, *msg ? ": " : "", msg);
}

enum mtpq_status hub_get(const struct mtpq_hub_env *env, const char *url, struct hub_resp *r, struct mtpq_err *err) {
  return hub_send(env, "GET", url, NULL, NULL, NULL, 0, 0, 1, r, err);
}

enum mtpq_status hub_locate(const struct mtpq_hub_env *env, const char *url, char *out, size_t cap,
                            struct mtpq_err *err) {
  for (int attempt = 0;; attempt++) {
    struct hub_resp r;
    enum mtpq_status st = request_body(env, "HEAD", url, NULL, HUB_NO_RANGE, NULL, 1, &r, err);
    const long status = r.status;
    const int again = (st == MTPQ_E_NET && !env->offline) || (!st && hub_retryable(status));
    if (!again || attempt == 5) {
      if (!st && (status == 200 || (status >= 300 && status < 400)))
        snprintf(out, cap, "%s", r.url); /* the store's (signed) URL, or the Hub's own for a git file */
      else if (!st)
        st =
            again ? mtpq_err_set(err, MTPQ_E_SERVER, "HEAD %s: HTTP %ld", url, status) : hub_status_error(&r, url, err);
      hub_resp_free(&r);
      return st;
    }
    retry_wait(env, attempt, st, &r, "HEAD", url, err);
  }
}
