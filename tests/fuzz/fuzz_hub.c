/* libFuzzer: the handlers of the Hub's answers (hub/answers.h): revision,
 * tree pages, preupload, each object of an LFS batch answer, the commit.
 * The first byte picks the handler (and, for the LFS batch, the file size
 * the offer must cover); the rest is the answer's body. Whatever a handler
 * accepts must hold what mtpq relies on: safe paths, hex oids, one URL for
 * every part of a multipart offer covering the file. */
#include "fuzz_util.h"
#include <string.h>

#include "hub/answers.h"
#include "io/json.h"

static void must(int ok) {
  if (!ok) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  const size_t n = size - 1;
  struct mtpq_err err = {0};
  enum mtpq_status st = MTPQ_OK;
  switch (data[0] % 5) {
  case 0: {
    char commit[41];
    if (!(st = hub_parse_revision(body, n, "rev", commit, &err))) must(hub_is_hex(commit, 40));
    break;
  }
  case 1: {
    struct hub_entry *e = NULL;
    int ne = 0, cap = 0;
    st = hub_parse_tree_page(body, n, "tree", &e, &ne, &cap, &err);
    for (int i = 0; !st && i < ne; i++)
      must(hub_valid_path(e[i].path) && (hub_is_hex(e[i].etag, 64) || hub_is_hex(e[i].etag, 40)));
    hub_free_entries(e, ne);
    break;
  }
  case 2: {
    struct hub_preupload p[3] = {{"a", 0, 0, ""}, {"model.safetensors", 0, 0, ""}, {"d/x.json", 0, 0, ""}};
    if (!(st = hub_parse_preupload(body, n, "pre", p, 3, &err)))
      for (int i = 0; i < 3; i++) must(!p[i].remote[0] || hub_is_hex(p[i].remote, 40) || hub_is_hex(p[i].remote, 64));
    break;
  }
  case 3: {
    const uint64_t fsize = (uint64_t)data[0] * 977; /* the file the offer is for */
    cJSON *j = mtpq__json_parse(body, n, "batch", MTPQ_E_SERVER, &err);
    const cJSON *ob;
    cJSON_ArrayForEach(ob, cJSON_GetObjectItem(j, "objects")) {
      struct hub_lfs_plan p;
      struct mtpq_err e2 = {0};
      if (hub_parse_lfs_object(ob, fsize, "obj", &p, &e2)) {
        must(e2.msg[0] != 0 && p.parts == NULL);
        continue;
      }
      if (p.chunk) {
        must(p.href && p.parts && p.nparts * p.chunk >= fsize &&
             (p.nparts - (p.nparts > 0)) * p.chunk < fsize + !fsize);
        for (uint64_t i = 0; i < p.nparts; i++) must(p.parts[i] != NULL);
      }
      must(p.error || p.present || p.href);
      free(p.parts);
    }
    if (!j) st = MTPQ_E_SERVER;
    cJSON_Delete(j);
    break;
  }
  default: {
    char commit[41], url[256];
    if (!(st = hub_parse_commit(body, n, "commit", commit, url, sizeof url, &err))) must(hub_is_hex(commit, 40));
  }
  }
  must(!st || err.msg[0] != 0);
  return 0;
}
