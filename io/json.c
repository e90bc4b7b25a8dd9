/* JSON parsing with user-facing errors, and checked building and writing; see io/json.h. */
#include "io/json.h"

#include <stdlib.h>
#include <string.h>

#include "io/util.h"

int mtpq__json_depth_exceeds(const char *s, size_t n, int cap) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      if (++depth > cap) return 1;
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  return 0;
}

cJSON *mtpq__json_parse(const char *s, size_t n, const char *label, enum mtpq_status st, struct mtpq_err *err) {
  if (mtpq__json_depth_exceeds(s, n, CJSON_NESTING_LIMIT)) {
    mtpq_err_set(err, st, "%s: JSON nests deeper than %d levels", label, CJSON_NESTING_LIMIT);
    return NULL;
  }
  cJSON *root = cJSON_ParseWithLength(s, n);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    if (at && at >= s && at <= s + n)
      mtpq_err_set(err, st, "%s: not valid JSON (near byte %zu of %zu)", label, (size_t)(at - s), n);
    else
      mtpq_err_set(err, st, "%s: not valid JSON", label);
  }
  return root;
}

static _Thread_local int jb_failed;
void mtpq__jb_reset(void) { jb_failed = 0; }
int mtpq__jb_failed(void) { return jb_failed; }
cJSON *mtpq__jb(cJSON *x) {
  if (!x) jb_failed = 1;
  return x;
}
void mtpq__jb_ok(int ok) {
  if (!ok) jb_failed = 1;
}
void mtpq__jb_add(cJSON *o, const char *k, cJSON *item) {
  if (!item || !(k ? cJSON_AddItemToObject(o, k, item) : cJSON_AddItemToArray(o, item))) {
    cJSON_Delete(item);
    jb_failed = 1;
  }
}

enum mtpq_status mtpq__json_write_file(const char *path, const cJSON *j, struct mtpq_err *err) {
  if (jb_failed || !j) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory while building it", path);
  char *txt = cJSON_Print(j);
  if (!txt) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  const size_t n = strlen(txt);
  txt[n] = '\n'; /* end the file with a newline (replaces the terminator) */
  enum mtpq_status st = mtpq__write_file_atomic(path, txt, n + 1, err);
  free(txt);
  return st;
}
