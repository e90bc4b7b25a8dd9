/* libFuzzer: the JSON entry every reader goes through (io/json.c): the
 * Hub's answers (revision, tree pages, preupload, LFS batch), JSONL lines,
 * config and index files; a parse either succeeds or says why. */
#include "fuzz_util.h"
#include <string.h>

#include "io/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct mtpq_err err = {0};
  cJSON *j = mtpq__json_parse((const char *)data, size, "fuzz", MTPQ_E_SERVER, &err);
  if (!j && (err.status != MTPQ_E_SERVER || !strstr(err.msg, "fuzz: "))) __builtin_trap();
  if (j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_free(s);
  }
  cJSON_Delete(j);
  return 0;
}
