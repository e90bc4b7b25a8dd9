/* A command's TARGET that is a Hub repo id (org/name) rather than a local
 * directory: fetched tensor by tensor (hub/partial.c) into the cache, and
 * the command then reads that directory. Shared by quantize and inspect. */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

int cli_hub_target(const char *cmd, const char *target, const char *rev, mtpq_tensor_want_fn want,
                   const char *selection, char *dir, size_t cap) {
  struct stat sb;
  if (stat(target, &sb) == 0 || !strchr(target, '/') || target[0] == '/' || target[0] == '.') {
    snprintf(dir, cap, "%s", target);
    return 0;
  }
  struct mtpq_err err = {0};
  struct mtpq_hub_env env;
  struct mtpq_partial_result r;
  enum mtpq_status st = mtpq_hub_env_load(&env, &err);
  if (!st) st = mtpq_hub_fetch_partial(&env, target, rev, want, selection, &r, &err);
  if (st) return cli_fail(st, &err);
  if (cli_verbosity < 1) {
  } else if (r.cached) fprintf(stderr, "mtpq: %s: %s@%s already fetched (%s)\n", cmd, target, r.commit, r.dir);
  else fprintf(stderr, "mtpq: %s: fetched %s %d tensors from %d shards of %s@%s: %.3f MB of the repo's %.1f MB\n",
                cmd, want ? "the bytes of" : "the headers of", r.tensors, r.shards, target, r.commit,
                (double)r.bytes_fetched / 1e6, (double)r.repo_bytes / 1e6);
  snprintf(dir, cap, "%s", r.dir);
  return 0;
}
