/* libcurl requests for hub/ (internal). One request per call; redirects
 * are followed by hand so the token goes only to the endpoint's origin
 * (scheme, host and port), never to a CDN or object store. */
#ifndef MTPQ_HUB_HTTP_H
#define MTPQ_HUB_HTTP_H
#include <stdint.h>
#include <stdio.h>
#include "hub/hub.h"

#define HUB_NO_RANGE UINT64_MAX

struct hub_resp {
  long status;
  char *body; /* response body (NUL-terminated) unless it went to the sink */
  size_t len;
  char url[2048];       /* the URL that answered (after redirects) */
  char commit[64];      /* X-Repo-Commit */
  char etag[160];       /* X-Linked-Etag, else ETag, normalised */
  char raw_etag[160];   /* ETag exactly as sent (multipart parts) */
  char link_next[2048]; /* Link rel="next" */
  char err_code[64];    /* X-Error-Code */
  char err_msg[256];    /* X-Error-Message */
  double retry_after;   /* Retry-After or RateLimit t=, -1 if none */
  int restarted;        /* a ranged GET was answered 200: the sink was truncated */
};
void hub_resp_free(struct hub_resp *r);

/* Byte progress of the body being written to a sink: fn(ud, n) after each
 * piece, n = bytes written to the sink by the current request. One hook per
 * thread; set it around a transfer, clear it with fn NULL. */
typedef void (*hub_sink_progress_fn)(void *ud, uint64_t written);
void hub_set_sink_progress(hub_sink_progress_fn fn, void *ud);

/* One request (following up to 10 redirects). method "GET"/"HEAD"/"POST";
 * sink NULL: the body goes to r->body. range_from != HUB_NO_RANGE sends
 * Range: bytes=from-[to] (to == HUB_NO_RANGE: open-ended); a 200 answer to
 * an open-ended range truncates the sink (the file restarts). Returns
 * MTPQ_OK with r->status set, or E_NET when no HTTP response came. */
enum mtpq_status hub_request(const struct mtpq_hub_env *env, const char *method, const char *url, FILE *sink,
                             uint64_t range_from, struct hub_resp *r, struct mtpq_err *err);
/* GET with retries on network errors, 408, 429 and 5xx (backoff 1, 2, 4, 8,
 * 8 x env->backoff_s, Retry-After honoured); other statuses map to E_AUTH
 * (401, 403) or E_SERVER with the server's message. */
enum mtpq_status hub_get(const struct mtpq_hub_env *env, const char *url, struct hub_resp *r, struct mtpq_err *err);
/* A request with a body: mem (len bytes) or, when f is set, bytes
 * [off, off + len) of f (Content-Length set, never chunked); neither: no
 * body. ctype may be NULL. With retry set, retries like hub_get (never set
 * it for a commit). Errors free r. */
enum mtpq_status hub_send(const struct mtpq_hub_env *env, const char *method, const char *url, const char *ctype,
                          const void *mem, FILE *f, uint64_t off, uint64_t len, int retry, struct hub_resp *r,
                          struct mtpq_err *err);
int hub_retryable(long status);
/* Sleep before retry `attempt` (0-based): 1, 2, 4, 8, 8 s x env->backoff_s,
 * or retry_after + 1 s when the server said (>= 0); hub_note's the retry
 * with why. hub_backoff_s: that wait, without sleeping. */
void hub_backoff(const struct mtpq_hub_env *env, int attempt, double retry_after, const char *why);
double hub_backoff_s(const struct mtpq_hub_env *env, int attempt, double retry_after);
/* A line for the user (a retry, a re-resolve) through env->note, if set. */
void hub_note(const struct mtpq_hub_env *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hub_same_origin(const char *a, const char *b); /* scheme, host and port equal */
/* Where url's bytes are: HEAD url, following relative redirects (a renamed
 * repo) but not one to another origin, whose Location (the store's signed
 * URL) goes to out; a 200 (a git file) gives url itself. Retries like
 * hub_get. */
enum mtpq_status hub_locate(const struct mtpq_hub_env *env, const char *url, char *out, size_t cap,
                            struct mtpq_err *err);
void hub_sleep(double s);
/* a header line's value (line[0, n), its name skip bytes long) into out, blanks and the line end trimmed, cut to cap - 1 */
void hub_header_value(const char *line, size_t n, size_t skip, char *out, size_t cap);
enum mtpq_status hub_status_error(const struct hub_resp *r, const char *what, struct mtpq_err *err);
#endif
