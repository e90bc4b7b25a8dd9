/* Byte ranges of repo files through their store URLs, many at once
 * (internal to hub/; used by hub/partial.c). Each file is located once (a
 * HEAD of its resolve URL, hub_locate) and its signed URL reused for every
 * range until it expires or the store refuses it (then located again). One
 * libcurl multi handle a fetch keeps its connections alive across files
 * and multiplexes HTTP/2 where the server offers it; at most HUB_PARALLEL
 * transfers run at once. The token never goes to another origin. */
#ifndef MTPQ_HUB_FETCH_H
#define MTPQ_HUB_FETCH_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hub/hub.h"

/* Two wanted byte ranges of a file become one request when the bytes
 * between them are at most HUB_GAP_BYTES: a request costs a round trip
 * (tens of ms to a CDN), in which a connection moves a few MB. */
#define HUB_GAP_BYTES ((uint64_t)4 << 20)
/* Requests a file's wanted ranges may take at most; past it the smallest
 * gaps are fetched too. */
#define HUB_FILE_BUDGET 12
#define HUB_PARALLEL 4

/* Source bytes [b, e) of a file, written at dst of the output file. */
struct hub_piece {
  uint64_t b, e, dst;
};
/* One request: source bytes [b, e). */
struct hub_span {
  uint64_t b, e;
};
/* Coalesce pieces (sorted by b; overlapping ones share a span) into at most budget spans
 * (budget >= 1): neighbours merge when their gap is at most gap, then the
 * smallest remaining gaps until the budget holds. out has room for n.
 * Returns the number of spans. */
size_t hub_plan_spans(const struct hub_piece *p, size_t n, uint64_t gap, size_t budget, struct hub_span *out);

struct hub_file {
  const char *path;   /* the repo path, for messages and progress */
  char resolve[4096]; /* {endpoint}/{repo}/resolve/{commit}/{path} */
  char url[4096];     /* where the bytes are; "" until located */
  time_t expires;     /* the signed URL's end (X-Amz-Date + X-Amz-Expires, or Expires=); 0 unknown */
  int locates;        /* HEADs of resolve so far */
};

struct hub_fetcher;
struct hub_fetcher *hub_fetcher_new(const struct mtpq_hub_env *env, mtpq_hub_progress_fn progress, void *ud);
void hub_fetcher_free(struct hub_fetcher *h);
/* Bytes the rest of the fetch will request: progress reports the bytes
 * received from here on against it (none before it is set). */
void hub_fetcher_expect(struct hub_fetcher *h, uint64_t total);
uint64_t hub_fetcher_bytes(const struct hub_fetcher *h);    /* received */
unsigned hub_fetcher_requests(const struct hub_fetcher *h); /* ranged GETs sent, retries included */

/* Fetch spans of f (source offsets + base) and write the bytes that fall in
 * pieces to fd at their dst (pwrite; bytes between pieces are dropped).
 * Retries a cut transfer from where it broke (1, 2, 4, 8, 8 s x backoff),
 * locates f again when its URL expired or the store answers 401/403, and
 * refuses a 200 (Range ignored) or a Content-Range that is not the one
 * asked for. */
enum mtpq_status hub_fetch_spans(struct hub_fetcher *h, struct hub_file *f, uint64_t base, const struct hub_span *s,
                                 size_t ns, const struct hub_piece *p, size_t np, int fd, struct mtpq_err *err);
#endif
