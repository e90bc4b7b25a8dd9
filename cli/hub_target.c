/* A command's TARGET that is a Hub repo id (org/name) rather than a local
 * directory: fetched tensor by tensor (hub/partial.c) into the cache, and
 * the command then reads that directory. Shared by quantize and inspect. */
#include <ctype.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* 1 when target can only be a local path: not ORG/NAME in the Hub's name
 * form (letters, digits, '-', '_', '.'; one slash inside; no leading '.'),
 * or its first component is a local directory (models/qwen3 beside a
 * folder models/). */
static int path_like(const char *t) {
  const char *sl = strchr(t, '/');
  if (!sl || sl == t || !sl[1] || strchr(sl + 1, '/') || t[0] == '.' || sl[1] == '.') return 1;
  for (const char *p = t; *p; p++)
    if (p != sl && !(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.')) return 1;
  char first[512];
  snprintf(first, sizeof first, "%.*s", (int)(sl - t), t);
  struct stat sb;
  return stat(first, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void note(void *ud, const char *line) {
  (void)ud;
  cli_note("%s", line); /* -v: one line per retry or re-resolve */
}

void cli_hub_hooks(struct mtpq_hub_env *env) {
  env->note = note;
  env->note_ud = NULL;
}

struct rate {
  double t0, last;
  int shown, tty, quarter; /* quarter: the log's last line (1..4) */
};

/* Progress of a fetch: on a terminal a line of bytes, rate and time left,
 * redrawn at most 5 times a second; in a log (a CI job) a line at each
 * quarter of a fetch of 256 MB or more, so a long fetch is not silent. */
static void fetch_progress(void *ud, const char *path, uint64_t done, uint64_t total) {
  struct rate *r = ud;
  const double t = cli_now_s();
  if (r->t0 == 0) r->t0 = r->last = t; /* the first call starts the clock */
  const double el = t - r->t0, rate = el > 0 ? (double)done / el : 0;
  char a[32], b[32], left[40] = "";
  const double pct = total ? 100.0 * (double)done / (double)total : 100.0;
  if (!r->tty) {
    const int q = total && done < total ? (int)(4 * done / total) : 4;
    if (total < ((uint64_t)256 << 20) || q <= r->quarter) return;
    r->quarter = q;
    fprintf(stderr, "mtpq: fetched %s of %s (%.0f%%) at %.1f MB/s\n", cli_bytes(done, a, sizeof a),
            cli_bytes(total, b, sizeof b), pct, rate / 1e6);
    return;
  }
  if (done < total && t - r->last < 0.2) return;
  r->last = t;
  if (rate > 0 && total > done) snprintf(left, sizeof left, ", %.0f s left", (double)(total - done) / rate);
  fprintf(stderr, "\rmtpq: fetching %s of %s (%5.1f%%) at %.1f MB/s%s  %-28.28s", cli_bytes(done, a, sizeof a),
          cli_bytes(total, b, sizeof b), pct, rate / 1e6, left, path);
  r->shown = 1;
}

int cli_hub_target(const char *cmd, const char *target, const char *rev, mtpq_tensor_select_fn select,
                   const char *selection, char *dir, size_t cap) {
  struct stat sb;
  if (stat(target, &sb) == 0 || !strchr(target, '/')) { /* (a bare name: the command's own error) */
    snprintf(dir, cap, "%s", target);
    return 0;
  }
  if (path_like(target)) { /* never a request */
    cli_error("%s: %s: no such file or directory", cmd, target);
    return MTPQ_EXIT_IO;
  }
  struct mtpq_err err = {0};
  struct mtpq_hub_env env;
  struct mtpq_partial_result r;
  struct rate rt = {0};
  struct mtpq_partial_opts o = {target, rev, selection, select, NULL, NULL, NULL};
  rt.tty = isatty(2);
  if (cli_verbosity >= 1) o.progress = fetch_progress, o.progress_ud = &rt;
  enum mtpq_status st = mtpq_hub_env_load(&env, &err);
  if (!st) {
    cli_hub_hooks(&env);
    if (!env.offline && cli_verbosity >= 1)
      fprintf(stderr, "mtpq: %s: %s is not a local path: reading %s of it from %s\n", cmd, target,
              select ? "the tensors it needs" : "the shards' headers", env.endpoint);
    st = mtpq_hub_fetch_partial(&env, &o, &r, &err);
  }
  if (rt.shown) fputc('\n', stderr);
  if (st &&
      (st == MTPQ_E_NET || st == MTPQ_E_NOT_FOUND || st == MTPQ_E_SERVER)) { /* it may have been meant as a path */
    const size_t n = strlen(err.msg);
    snprintf(err.msg + n, sizeof err.msg - n, " (and there is no local file or directory '%s')", target);
  }
  if (st) return cli_fail(st, &err);
  if (cli_verbosity < 1) {
  } else if (r.cached) fprintf(stderr, "mtpq: %s: %s@%s already fetched (%s)\n", cmd, target, r.commit, r.dir);
  else
    fprintf(stderr,
            "mtpq: %s: fetched %s %d tensors from %d shards of %s@%s: %.3f MB of the repo's %.1f MB "
            "(%d shards resolved, %u ranged requests)\n",
            cmd, select ? "the bytes of" : "the headers of", r.tensors, r.shards, target, r.commit,
            (double)r.bytes_fetched / 1e6, (double)r.repo_bytes / 1e6, r.resolves, r.range_requests);
  snprintf(dir, cap, "%s", r.dir);
  return 0;
}
