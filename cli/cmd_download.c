/* mtpq download: fetch a Hub repo (or the files matching --include) into
 * the huggingface_hub cache; prints the snapshot directory. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"
#include "hub/hub.h"

const struct cli_opt download_opts[] = {
    {"revision", 0, OPT_STR, 0, "REV", "branch, tag or commit (default main)"},
    {"include", 0, OPT_STR, OPT_MULTI, "GLOB", "only files matching GLOB (repeatable; fnmatch, * crosses /)"},
    {"json", 0, OPT_FLAG, 0, NULL, "print a JSON summary instead of the snapshot path"},
    {NULL, 0, 0, 0, NULL, NULL},
};

static void progress(void *ud, const char *path, uint64_t done, uint64_t total) {
  (void)ud;
  fprintf(stderr, "\r%-50.50s %6.1f%% of %.1f MB", path, total ? 100.0 * (double)done / (double)total : 100.0,
          (double)total / 1e6);
  if (done == total) fputc('\n', stderr);
}

int cmd_download(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "download";
  if (cli_parse(cmd, download_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos != 1) return cli_usage_error(cmd, "expected one REPO (org/name)");
  struct mtpq_err err = {0};
  struct mtpq_hub_env env;
  enum mtpq_status st = mtpq_hub_env_load(&env, &err);
  if (st) return cli_fail(st, &err);
  cli_hub_hooks(&env);
  int ii = cli_opt_index(download_opts, "include");
  struct mtpq_download_opts o = {a.pos[0], cli_str(download_opts, &a, "revision"), a.multi[ii], a.set[ii], NULL, NULL};
  if (cli_verbosity > 0 && isatty(2)) o.progress = progress;
  struct mtpq_download_result r;
  st = mtpq_hub_download(&env, &o, &r, &err);
  if (st) return cli_fail(st, &err);
  if (cli_has(download_opts, &a, "json")) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "repo", a.pos[0]);
    cJSON_AddStringToObject(j, "commit", r.commit);
    cJSON_AddStringToObject(j, "snapshot", r.snapshot);
    cJSON_AddNumberToObject(j, "files", r.files);
    cJSON_AddNumberToObject(j, "fetched", r.fetched);
    cJSON_AddNumberToObject(j, "bytes_fetched", (double)r.bytes_fetched);
    cJSON_AddNumberToObject(j, "bytes_total", (double)r.bytes_total);
    char *t = cJSON_Print(j);
    puts(t);
    free(t);
    cJSON_Delete(j);
    return 0;
  }
  if (env.offline) cli_note("offline: served %s from the cache", r.commit);
  else cli_note("%s@%s: %d files, %d fetched (%.1f of %.1f MB)", a.pos[0], r.commit, r.files, r.fetched,
                (double)r.bytes_fetched / 1e6, (double)r.bytes_total / 1e6);
  puts(r.snapshot);
  return 0;
}
