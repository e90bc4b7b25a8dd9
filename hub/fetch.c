/* Ranged GETs of one file at a time over a libcurl multi handle; see
 * fetch.h. A transfer's bytes are mapped onto the wanted pieces as they
 * arrive, so a span that covers a gap writes only what was wanted. */
#define _DEFAULT_SOURCE /* timegm, strncasecmp */
#include "hub/fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hub/http.h"

static int by_gap(const void *x, const void *y) {
  const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

size_t hub_plan_spans(const struct hub_piece *p, size_t n, uint64_t gap, size_t budget, struct hub_span *out) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && (p[i].b <= out[m - 1].e || p[i].b - out[m - 1].e <= gap)) { /* (overlapping pieces: one span) */
      if (p[i].e > out[m - 1].e) out[m - 1].e = p[i].e;
    } else {
      out[m++] = (struct hub_span){p[i].b, p[i].e};
    }
  }
  if (budget < 1) budget = 1;
  if (m <= budget) return m;
  /* merge the m - budget smallest gaps: those below the threshold, then
   * gaps equal to it from the left until the count is reached */
  uint64_t *g = malloc((m - 1) * sizeof *g);
  if (!g) { /* no memory to rank them: one span over everything still reads only this file */
    out[0].e = out[m - 1].e;
    return 1;
  }
  for (size_t i = 1; i < m; i++) g[i - 1] = out[i].b - out[i - 1].e;
  qsort(g, m - 1, sizeof *g, by_gap);
  const size_t merge = m - budget;
  const uint64_t t = g[merge - 1];
  size_t below = 0;
  for (size_t i = 0; i < merge; i++) below += g[i] < t;
  size_t equal_left = merge - below, k = 0;
  free(g);
  for (size_t i = 1; i < m; i++) {
    const uint64_t d = out[i].b - out[k].e;
    const int join = d < t || (d == t && equal_left > 0);
    if (join) {
      if (d == t) equal_left--;
      out[k].e = out[i].e;
    } else {
      out[++k] = out[i];
    }
  }
  return k + 1;
}

/* A queued or running request: source bytes [pos, e) of the file. */
struct item {
  uint64_t pos, e;
  int attempts;
  double not_before;
};

struct xfer {
  CURL *c;
  int busy;
  struct item it;
  uint64_t asked; /* pos when the request was sent */
  size_t piece;   /* first piece that may still receive bytes */
  long status;    /* decided from the first body byte */
  int decided, refused, bad_range, range_checked;
  char content_range[128];
  char body[256]; /* an error answer's first bytes, for the message */
  size_t body_len;
  struct curl_slist *hdr;
  struct hub_fetcher *h;
};

struct hub_fetcher {
  const struct mtpq_hub_env *env;
  CURLM *m;
  struct xfer x[HUB_PARALLEL];
  mtpq_hub_progress_fn progress;
  void *ud;
  uint64_t expect, bytes, counted_from; /* progress counts from hub_fetcher_expect */
  unsigned requests;
  /* the call in progress */
  struct hub_file *f;
  uint64_t base;
  const struct hub_piece *p;
  size_t np;
  int fd, write_failed;
};

struct hub_fetcher *hub_fetcher_new(const struct mtpq_hub_env *env, mtpq_hub_progress_fn progress, void *ud) {
  struct hub_fetcher *h = calloc(1, sizeof *h);
  if (!h || !(h->m = curl_multi_init())) {
    free(h);
    return NULL;
  }
  curl_multi_setopt(h->m, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  curl_multi_setopt(h->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)HUB_PARALLEL);
  for (int i = 0; i < HUB_PARALLEL; i++) {
    if (!(h->x[i].c = curl_easy_init())) {
      hub_fetcher_free(h);
      return NULL;
    }
    h->x[i].h = h;
  }
  h->env = env, h->progress = progress, h->ud = ud;
  return h;
}

void hub_fetcher_free(struct hub_fetcher *h) {
  if (!h) return;
  for (int i = 0; i < HUB_PARALLEL; i++) {
    if (h->x[i].busy) curl_multi_remove_handle(h->m, h->x[i].c);
    if (h->x[i].c) curl_easy_cleanup(h->x[i].c);
    curl_slist_free_all(h->x[i].hdr);
  }
  curl_multi_cleanup(h->m);
  free(h);
}

void hub_fetcher_expect(struct hub_fetcher *h, uint64_t total) { h->expect = total, h->counted_from = h->bytes; }
uint64_t hub_fetcher_bytes(const struct hub_fetcher *h) { return h->bytes; }
unsigned hub_fetcher_requests(const struct hub_fetcher *h) { return h->requests; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The end of a signed URL's validity from its query: S3's X-Amz-Date +
 * X-Amz-Expires, or CloudFront's Expires=<epoch>; 0 when it says neither. */
static time_t url_expiry(const char *url) {
  const char *q = strchr(url, '?');
  if (!q) return 0;
  const char *d = strstr(q, "X-Amz-Date="), *x = strstr(q, "X-Amz-Expires="), *e = strstr(q, "Expires=");
  if (d && x) {
    struct tm tm = {0};
    if (sscanf(d + 11, "%4d%2d%2dT%2d%2d%2dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec) != 6)
      return 0;
    tm.tm_year -= 1900, tm.tm_mon -= 1;
    return timegm(&tm) + (time_t)strtol(x + 14, NULL, 10);
  }
  if (e && (e == q + 1 || e[-1] == '&')) return (time_t)strtoll(e + 8, NULL, 10);
  return 0;
}

static enum mtpq_status locate(struct hub_fetcher *h, struct hub_file *f, const char *why, struct mtpq_err *err) {
  if (f->locates > 0) hub_note(h->env, "%s: resolving again (%s)", f->path, why);
  if (f->locates >= 4)
    return mtpq_err_set(err, MTPQ_E_AUTH, "%s: the store refused the file's URL after %d fresh resolves (%s)", f->path,
                        f->locates, why);
  f->locates++;
  enum mtpq_status st = hub_locate(h->env, f->resolve, f->url, sizeof f->url, err);
  if (st) f->url[0] = 0;
  f->expires = st ? 0 : url_expiry(f->url);
  return st;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  struct xfer *x = ud;
  const size_t len = sz * n;
  if (len > 14 && strncasecmp(p, "content-range:", 14) == 0)
    hub_header_value(p, len, 14, x->content_range, sizeof x->content_range);
  return len;
}

static size_t on_data(char *d, size_t sz, size_t nm, void *ud) {
  struct xfer *x = ud;
  struct hub_fetcher *h = x->h;
  const size_t len = sz * nm;
  if (!x->decided) {
    x->decided = 1;
    curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status == 200) { /* the whole file instead of the range: stop now */
      x->refused = 1;
      return 0;
    }
    if (x->status == 206) {
      unsigned long long b = 0;
      x->range_checked = sscanf(x->content_range, "bytes %llu-", &b) == 1 && b == h->base + x->asked;
      if (!x->range_checked) {
        x->bad_range = 1;
        return 0;
      }
    }
  }
  if (x->status != 206) { /* an error answer: keep its start for the message */
    const size_t k = len < sizeof x->body - 1 - x->body_len ? len : sizeof x->body - 1 - x->body_len;
    memcpy(x->body + x->body_len, d, k);
    x->body_len += k;
    x->body[x->body_len] = 0;
    return len;
  }
  uint64_t at = x->it.pos;
  size_t off = 0;
  while (off < len) {
    if (at >= x->it.e) return 0; /* more than was asked for */
    while (x->piece < h->np && h->p[x->piece].e <= at) x->piece++;
    size_t k = len - off;
    if (x->piece < h->np && h->p[x->piece].b <= at) {
      const struct hub_piece *pc = &h->p[x->piece];
      if (k > pc->e - at) k = (size_t)(pc->e - at);
      for (size_t w = 0; w < k;) {
        const ssize_t r = pwrite(h->fd, d + off + w, k - w, (off_t)(pc->dst + (at - pc->b) + w));
        if (r <= 0) {
          h->write_failed = errno ? errno : EIO;
          return 0;
        }
        w += (size_t)r;
      }
    } else { /* a gap inside the span: dropped */
      const uint64_t next = x->piece < h->np && h->p[x->piece].b < x->it.e ? h->p[x->piece].b : x->it.e;
      if (k > next - at) k = (size_t)(next - at);
    }
    off += k, at += k;
  }
  x->it.pos = at;
  h->bytes += len;
  if (h->progress && h->expect) h->progress(h->ud, h->f->path, h->bytes - h->counted_from, h->expect);
  return len;
}

static void start(struct hub_fetcher *h, struct xfer *x, const struct item *it) {
  const struct mtpq_hub_env *env = h->env;
  struct hub_file *f = h->f;
  x->it = *it;
  x->asked = it->pos;
  x->status = 0;
  x->decided = x->refused = x->bad_range = x->range_checked = 0;
  x->content_range[0] = 0;
  x->body_len = 0;
  x->body[0] = 0;
  x->piece = 0;
  while (x->piece < h->np && h->p[x->piece].e <= it->pos) x->piece++;
  curl_slist_free_all(x->hdr);
  x->hdr = NULL;
  char line[600];
  if (env->token[0] && hub_same_origin(f->url, env->endpoint)) {
    snprintf(line, sizeof line, "authorization: Bearer %s", env->token);
    x->hdr = curl_slist_append(x->hdr, line);
  }
  x->hdr = curl_slist_append(x->hdr, "user-agent: mtpq/0.1 (+libcurl)");
  snprintf(line, sizeof line, "range: bytes=%llu-%llu", (unsigned long long)(h->base + it->pos),
           (unsigned long long)(h->base + it->e - 1));
  x->hdr = curl_slist_append(x->hdr, line);
  CURL *c = x->c;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, f->url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->hdr);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(c, CURLOPT_PIPEWAIT, 1L); /* share an HTTP/2 connection rather than open another */
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(env->timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(env->timeout_s < 1 ? 1 : env->timeout_s));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
  curl_multi_add_handle(h->m, c);
  x->busy = 1;
  h->requests++;
}

struct queue {
  struct item *v;
  size_t n, cap;
};
static int push(struct queue *q, struct item it) {
  if (q->n == q->cap) {
    const size_t cap = q->cap ? 2 * q->cap : 16;
    struct item *v = realloc(q->v, cap * sizeof *v);
    if (!v) return -1;
    q->v = v, q->cap = cap;
  }
  q->v[q->n++] = it;
  return 0;
}

/* What a finished transfer means: 0 done or requeued, else the error. */
static enum mtpq_status finish(struct hub_fetcher *h, struct xfer *x, CURLcode cc, struct queue *q,
                               struct mtpq_err *err) {
  struct hub_file *f = h->f;
  long status = x->status;
  if (!x->decided) curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &status);
  if (h->write_failed)
    return mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: writing the fetched bytes: %s", f->path, strerror(h->write_failed));
  if (x->refused)
    return mtpq_err_set(err, MTPQ_E_SERVER, "%s: the server ignored Range: bytes=%llu-%llu (HTTP 200)", f->path,
                        (unsigned long long)(h->base + x->asked), (unsigned long long)(h->base + x->it.e - 1));
  if (x->bad_range)
    return mtpq_err_set(err, MTPQ_E_SERVER, "%s: asked for bytes %llu-%llu, the server sent Content-Range '%s'",
                        f->path, (unsigned long long)(h->base + x->asked), (unsigned long long)(h->base + x->it.e - 1),
                        x->content_range);
  if (cc == CURLE_OK && status == 206 && x->it.pos >= x->it.e) return MTPQ_OK;
  struct item rest = x->it;
  if (x->it.pos > x->asked) rest.attempts = 0; /* bytes came: the count restarts (as a download's) */
  if (cc == CURLE_OK && (status == 401 || status == 403 || (status >= 300 && status < 400)) &&
      !hub_same_origin(f->url, f->resolve)) { /* the signed URL expired or was refused: locate the file again */
    char why[64];
    snprintf(why, sizeof why, "the store answered HTTP %ld", status);
    enum mtpq_status st = locate(h, f, why, err);
    return st ? st : push(q, rest) ? mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory") : MTPQ_OK;
  }
  const int retry = cc != CURLE_OK || status == 206 /* cut short */ || hub_retryable(status);
  if (!retry) {
    return mtpq_err_set(err, status == 401 || status == 403 ? MTPQ_E_AUTH : MTPQ_E_SERVER, "%s: GET %s: HTTP %ld%s%s",
                        f->path, f->url, status, x->body_len ? ": " : "", x->body);
  }
  char why[600];
  if (cc != CURLE_OK)
    snprintf(why, sizeof why, "%s: %s", f->path, curl_easy_strerror(cc));
  else
    snprintf(why, sizeof why, "%s: HTTP %ld after %llu of %llu bytes", f->path, status,
             (unsigned long long)(x->it.pos - x->asked), (unsigned long long)(x->it.e - x->asked));
  if (++rest.attempts > 5) return mtpq_err_set(err, MTPQ_E_NET, "%s: gave up after 5 retries", why);
  double ra = -1;
  if (status == 429 || status == 503) {
    curl_off_t s = -1;
    if (!curl_easy_getinfo(x->c, CURLINFO_RETRY_AFTER, &s) && s >= 0) ra = (double)s;
  }
  const double wait = hub_backoff_s(h->env, rest.attempts - 1, ra);
  hub_note(h->env, "retry %d of 5 in %.1f s: %s", rest.attempts, wait, why);
  rest.not_before = now_s() + wait;
  return push(q, rest) ? mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory") : MTPQ_OK;
}

enum mtpq_status hub_fetch_spans(struct hub_fetcher *h, struct hub_file *f, uint64_t base, const struct hub_span *s,
                                 size_t ns, const struct hub_piece *p, size_t np, int fd, struct mtpq_err *err) {
  h->f = f, h->base = base, h->p = p, h->np = np, h->fd = fd, h->write_failed = 0;
  struct queue q = {0};
  enum mtpq_status st = MTPQ_OK;
  for (size_t i = 0; i < ns && !st; i++)
    if (s[i].e > s[i].b && push(&q, (struct item){s[i].b, s[i].e, 0, 0}))
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  int active = 0;
  while (!st && (q.n || active)) {
    /* start what may start: the earliest-queued items whose wait is over */
    const double t = now_s();
    for (int i = 0; i < HUB_PARALLEL && q.n && !st; i++) {
      if (h->x[i].busy) continue;
      size_t j = 0;
      while (j < q.n && q.v[j].not_before > t) j++;
      if (j == q.n) break;
      if (!f->url[0] || (f->expires && time(NULL) + 30 >= f->expires))
        if ((st = locate(h, f, f->url[0] ? "its signed URL expires" : "first range", err))) break;
      struct item it = q.v[j];
      memmove(q.v + j, q.v + j + 1, (q.n - j - 1) * sizeof *q.v);
      q.n--;
      start(h, &h->x[i], &it);
      active++;
    }
    if (st) break;
    int running = 0;
    if (curl_multi_perform(h->m, &running) != CURLM_OK) {
      st = mtpq_err_set(err, MTPQ_E_NET, "%s: libcurl's multi interface failed", f->path);
      break;
    }
    CURLMsg *msg;
    int left;
    while (!st && (msg = curl_multi_info_read(h->m, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      struct xfer *x = NULL;
      for (int i = 0; i < HUB_PARALLEL; i++)
        if (h->x[i].c == msg->easy_handle) x = &h->x[i];
      if (!x) continue;
      const CURLcode cc = msg->data.result;
      curl_multi_remove_handle(h->m, x->c);
      x->busy = 0;
      active--;
      st = finish(h, x, cc, &q, err);
    }
    if (!st && active)
      curl_multi_poll(h->m, NULL, 0, 100, NULL);
    else if (!st && q.n)
      hub_sleep(0.01); /* every queued item is waiting out a backoff */
  }
  for (int i = 0; i < HUB_PARALLEL; i++)
    if (h->x[i].busy) {
      curl_multi_remove_handle(h->m, h->x[i].c);
      h->x[i].busy = 0;
    }
  free(q.v);
  return st;
}
