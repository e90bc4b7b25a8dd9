/* The Hub's JSON answers, read into plain values (internal to hub/): pure
 * functions of the answer's bytes, so that tests/fuzz/fuzz_hub.c reaches
 * every handler without a server. Each either fills its outputs or returns
 * MTPQ_E_SERVER (MTPQ_E_NOMEM) with err naming label (the URL) and what is
 * wrong; nothing an answer holds is trusted: paths are checked for "." and
 * ".." components, oids for their hex length, numbers for their range. */
#ifndef MTPQ_HUB_ANSWERS_H
#define MTPQ_HUB_ANSWERS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "hub/tree.h"

int hub_valid_path(const char *p);       /* relative, no empty, "." or ".." component, at most 900 bytes */
int hub_is_hex(const char *s, size_t n); /* exactly n lowercase hex digits */

/* GET /api/models/REPO/revision/REV: {"sha": 40 hex} into commit[41] */
enum mtpq_status hub_parse_revision(const char *body, size_t n, const char *label, char *commit, struct mtpq_err *err);

/* One page of GET .../tree/COMMIT: its files appended to (*e, *ne, *cap)
 * (free with hub_free_entries, on error too) */
enum mtpq_status hub_parse_tree_page(const char *body, size_t n, const char *label, struct hub_entry **e, int *ne,
                                     int *cap, struct mtpq_err *err);

/* POST .../preupload/REV: for each of the n paths asked about, whether the
 * Hub wants it as LFS (lfs), to be left out (skip), and the oid it has for
 * it (remote, "" when none); entries the answer leaves out keep 0 / "". */
struct hub_preupload {
  const char *path;
  int lfs, skip;
  char remote[65];
};
enum mtpq_status hub_parse_preupload(const char *body, size_t n, const char *label, struct hub_preupload *p, int np,
                                     struct mtpq_err *err);

/* One object of the LFS batch answer for a file of size bytes: refused
 * (error set: its code and message), present (no upload action), a basic
 * PUT (href), or multipart (href: the completion; chunk and the nparts
 * part URLs in part order, each checked to exist exactly once); verify:
 * the verify href or NULL. Strings point into obj. */
struct hub_lfs_plan {
  int error, error_code;
  const char *error_msg;
  int present;
  const char *href, *verify;
  uint64_t chunk, nparts;
  const char **parts; /* nparts entries (free() the array) */
};
enum mtpq_status hub_parse_lfs_object(const cJSON *obj, uint64_t size, const char *label, struct hub_lfs_plan *p,
                                      struct mtpq_err *err);

/* POST .../commit/REV: {"commitOid": 40 hex, "commitUrl"} */
enum mtpq_status hub_parse_commit(const char *body, size_t n, const char *label, char *commit, char *url,
                                  size_t url_cap, struct mtpq_err *err);

#endif
