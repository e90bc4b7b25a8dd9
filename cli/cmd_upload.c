/* mtpq upload: publish a folder (a drafter repo) to the Hub as one commit. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "hub/hub.h"
#include "quant/card.h"

const struct cli_opt upload_opts[] = {
    {"private", 0, OPT_FLAG, 0, NULL, "create the repo private (when it does not exist)"},
    {"revision", 0, OPT_STR, 0, "BRANCH", "branch to commit to (default main)"},
    {"message", 'm', OPT_STR, 0, "TEXT", "commit summary (default \"Upload with mtpq\")"},
    {"json", 0, OPT_FLAG, 0, NULL, "print a JSON summary (commit, url, counts)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

int cmd_upload(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "upload";
  if (cli_parse(cmd, upload_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos != 2) return cli_usage_error(cmd, "expected DIR and REPO (org/name)");
  struct mtpq_err err = {0};
  struct mtpq_hub_env env;
  enum mtpq_status st = mtpq_hub_env_load(&env, &err);
  if (st) return cli_fail(st, &err);
  cli_hub_hooks(&env);
  /* an mtpq drafter's card names its repo: the one it is published to */
  char was[512];
  int changed = 0;
  if (env.token[0]) /* (without one the upload stops at once: the folder stays as it is) */
    st = mtpq_card_set_repo_id(a.pos[0], a.pos[1], &changed, was, sizeof was, &err);
  if (st) return cli_fail(st, &err);
  if (changed && cli_verbosity >= 1)
    fprintf(
        stderr,
        "mtpq: upload: %s/README.md: the card's drafter id '%s' is now '%s' (its title and serve line; the manifest's "
        "digest of it updated)\n",
        a.pos[0], was, a.pos[1]);
  struct mtpq_upload_opts o = {a.pos[0], a.pos[1], cli_str(upload_opts, &a, "revision"),
                               cli_str(upload_opts, &a, "message"), cli_has(upload_opts, &a, "private")};
  struct mtpq_upload_result r;
  st = mtpq_hub_upload(&env, &o, &r, &err);
  if (st) return cli_fail(st, &err);
  if (cli_has(upload_opts, &a, "json")) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "repo", a.pos[1]);
    cJSON_AddStringToObject(j, "commit", r.commit);
    cJSON_AddStringToObject(j, "url", r.url);
    cJSON_AddBoolToObject(j, "committed", r.committed);
    cJSON_AddNumberToObject(j, "files", r.files);
    cJSON_AddNumberToObject(j, "unchanged", r.unchanged);
    cJSON_AddNumberToObject(j, "lfs_uploaded", r.lfs_uploaded);
    cJSON_AddNumberToObject(j, "lfs_already_present", r.lfs_present);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)r.bytes_sent);
    char *t = cJSON_Print(j);
    puts(t);
    free(t);
    cJSON_Delete(j);
    return 0;
  }
  if (!r.committed) printf("nothing to commit: %s is unchanged at %s\n", a.pos[1], r.commit);
  else printf("%s\n", r.url[0] ? r.url : r.commit);
  return 0;
}
