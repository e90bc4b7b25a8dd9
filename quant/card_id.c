/* The drafter's id on its card, rewritten for the repo it is published to;
 * see quant/card.h. The card (quant/drafter_meta.c) names the drafter in
 * two places: the title "# ID: FP8/NVFP4 MTP drafter for BASE" and the
 * serve line's speculative config, "model": "ID". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/util.h"
#include "quant/card.h"

static const char TITLE_TAIL[] = ": FP8/NVFP4 MTP drafter for ";
static const char MODEL_KEY[] = "\"model\": \"";

enum mtpq_status mtpq_card_set_repo_id(const char *dir, const char *repo, int *changed, char *old, size_t old_cap,
                                       struct mtpq_err *err) {
  *changed = 0;
  if (old_cap) old[0] = 0;
  char *mpath = mtpq__path_join(dir, "mtpq_manifest.json"), *cpath = mtpq__path_join(dir, "README.md");
  char *card = NULL, *man = NULL, *out = NULL;
  cJSON *m = NULL;
  enum mtpq_status st = mpath && cpath ? MTPQ_OK : mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (st || !mtpq__is_file(mpath) || !mtpq__is_file(cpath)) goto done;
  size_t n = 0, mn = 0;
  st = mtpq__read_file(cpath, 1 << 24, &card, &n, err);
  if (st) goto done;
  /* the title: the first line "# ID: FP8/NVFP4 MTP drafter for ..." */
  char *t = strstr(card, "\n# "), *te = t ? strstr(t, TITLE_TAIL) : NULL, *nl = t ? strchr(t + 1, '\n') : NULL;
  char *sv = strstr(card, "--speculative-config"), *mk = sv ? strstr(sv, MODEL_KEY) : NULL;
  char *me = mk ? strchr(mk + sizeof MODEL_KEY - 1, '"') : NULL;
  if (!t || !te || (nl && te > nl) || !mk || !me) goto done; /* not the card mtpq writes */
  t += 3, mk += sizeof MODEL_KEY - 1;
  if (old_cap) snprintf(old, old_cap, "%.*s", (int)(te - t), t);
  const size_t rl = strlen(repo);
  if ((size_t)(te - t) == rl && !memcmp(t, repo, rl) && (size_t)(me - mk) == rl && !memcmp(mk, repo, rl)) goto done;
  out = malloc(n + 2 * rl + 1);
  if (!out) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto done;
  }
  const size_t len = (size_t)sprintf(out, "%.*s%s%.*s%s%s", (int)(t - card), card, repo, (int)(mk - te), te, repo, me);
  st = mtpq__write_file_atomic(cpath, out, len, err);
  /* the manifest's digest of the new card */
  if (!st) st = mtpq__read_file(mpath, 1 << 24, &man, &mn, err);
  if (!st && !(m = mtpq__json_parse(man, mn, mpath, MTPQ_E_BAD_VALUE, err))) st = MTPQ_E_BAD_VALUE;
  cJSON *f = st ? NULL : cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "files"), "README.md");
  if (!st && f) {
    char hex[65];
    uint64_t sz = 0;
    st = mtpq__file_digest(cpath, 0, hex, &sz, err);
    if (!st) {
      mtpq__jb_reset(); /* (written as quantize writes it: io/json.h) */
      MTPQ_JB(cJSON_ReplaceItemInObjectCaseSensitive(f, "bytes", cJSON_CreateNumber((double)sz)));
      MTPQ_JB(cJSON_ReplaceItemInObjectCaseSensitive(f, "sha256", cJSON_CreateString(hex)));
      st = mtpq__json_write_file(mpath, m, err);
    }
  }
  if (!st) *changed = 1;
done:
  cJSON_Delete(m);
  free(card), free(man), free(out), free(mpath), free(cpath);
  return st;
}
