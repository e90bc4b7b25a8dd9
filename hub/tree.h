/* Repo listing and cache helpers shared by hub/download.c and
 * hub/partial.c (internal to hub/). */
#ifndef MTPQ_HUB_TREE_H
#define MTPQ_HUB_TREE_H
#include <curl/curl.h>
#include <stdint.h>
#include "hub/hub.h"

struct hub_entry {
  char *path, *etag; /* etag: the LFS sha256, else the git blob sha1 */
  uint64_t size;
  int lfs;
};
int hub_valid_repo(const char *repo);
enum mtpq_status hub_resolve_commit(const struct mtpq_hub_env *env, const char *repo, const char *rev, char *commit,
                                    struct mtpq_err *err);
enum mtpq_status hub_list_tree(const struct mtpq_hub_env *env, const char *repo, const char *commit,
                               struct hub_entry **out, int *nout, struct mtpq_err *err);
/* The download loop over an already listed tree at res->commit (set by the
 * caller): fetch and link the entries o's globs select; sets res->snapshot. */
enum mtpq_status hub_fetch_listed(const struct mtpq_hub_env *env, const struct mtpq_download_opts *o,
                                  const struct hub_entry *e, int n, struct mtpq_download_result *res,
                                  struct mtpq_err *err);
void hub_free_entries(struct hub_entry *e, int n);
char *hub_escape_path(CURL *c, const char *path); /* percent-encoded, '/' kept; free() it */
enum mtpq_status hub_mkdirs(const char *path, struct mtpq_err *err);
/* Offline (HF_HUB_OFFLINE): rev as a 40-hex commit, or the commit the cache's
 * refs/<rev> of repo names, into commit[41]; err names what is missing. */
enum mtpq_status hub_cached_commit(const struct mtpq_hub_env *env, const char *repo, const char *rev, char *commit,
                                   struct mtpq_err *err);
/* rdir/refs/<rev> holding commit (what huggingface_hub writes), atomically */
enum mtpq_status hub_write_ref(const char *rdir, const char *rev, const char *commit, struct mtpq_err *err);
/* The cache's folder of repo: CACHE/models--ORG--NAME */
void hub_repo_dir(const struct mtpq_hub_env *env, const char *repo, char *out, size_t cap);
#endif
