/* The Hub's JSON answers read into plain values; see hub/answers.h. */
#include "hub/answers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/util.h"

int hub_valid_path(const char *p) {
  if (!*p || *p == '/' || strlen(p) > 900) return 0;
  for (const char *s = p; *s;) { /* no "." or ".." component, no empty one */
    size_t n = strcspn(s, "/");
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    s += n;
    if (*s) s++;
  }
  return 1;
}

int hub_is_hex(const char *s, size_t n) {
  if (strlen(s) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }

enum mtpq_status hub_parse_revision(const char *body, size_t n, const char *label, char *commit, struct mtpq_err *err) {
  cJSON *j = mtpq__json_parse(body, n, label, MTPQ_E_SERVER, err);
  if (!j) return MTPQ_E_SERVER;
  const char *sha = str(j, "sha");
  enum mtpq_status st = MTPQ_OK;
  if (!sha || !hub_is_hex(sha, 40))
    st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: no 40-hex \"sha\" in the answer", label);
  else
    memcpy(commit, sha, 41);
  cJSON_Delete(j);
  return st;
}

enum mtpq_status hub_parse_tree_page(const char *body, size_t n, const char *label, struct hub_entry **e, int *ne,
                                     int *cap, struct mtpq_err *err) {
  cJSON *j = mtpq__json_parse(body, n, label, MTPQ_E_SERVER, err);
  if (!j) return MTPQ_E_SERVER;
  enum mtpq_status st = MTPQ_OK;
  if (!cJSON_IsArray(j)) st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: the tree listing is not a JSON array", label);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (st) break;
    const char *type = str(it, "type");
    if (!type || strcmp(type, "file") != 0) continue;
    const char *path = str(it, "path"), *oid = str(it, "oid");
    const cJSON *sz = cJSON_GetObjectItem(it, "size"), *lfs = cJSON_GetObjectItem(it, "lfs");
    const char *loid = lfs ? str(lfs, "oid") : NULL;
    if (!path || !cJSON_IsNumber(sz) || !(sz->valuedouble >= 0 && sz->valuedouble < 18e18) || (!oid && !loid)) {
      st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: tree entry without path, size or oid", label);
      break;
    }
    const char *etag = loid ? loid : oid;
    if (!hub_valid_path(path) || !(hub_is_hex(etag, 64) || hub_is_hex(etag, 40))) {
      st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: unsafe path '%.200s' or malformed oid '%.80s'", label, path, etag);
      break;
    }
    if (*ne == *cap) {
      const int nc = *cap ? 2 * *cap : 64;
      struct hub_entry *x = realloc(*e, (size_t)nc * sizeof *x);
      if (!x) {
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
        break;
      }
      *e = x, *cap = nc;
    }
    char *p = mtpq__strdup(path), *t = mtpq__strdup(etag);
    if (!p || !t) {
      free(p), free(t);
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    (*e)[(*ne)++] = (struct hub_entry){p, t, (uint64_t)sz->valuedouble, loid != NULL};
  }
  cJSON_Delete(j);
  return st;
}

enum mtpq_status hub_parse_preupload(const char *body, size_t n, const char *label, struct hub_preupload *p, int np,
                                     struct mtpq_err *err) {
  cJSON *j = mtpq__json_parse(body, n, label, MTPQ_E_SERVER, err);
  if (!j) return MTPQ_E_SERVER;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "files")) {
    const char *path = str(it, "path"), *mode = str(it, "uploadMode"), *oid = str(it, "oid");
    for (int i = 0; path && i < np; i++) {
      if (strcmp(p[i].path, path) != 0) continue;
      p[i].lfs = mode && strcmp(mode, "lfs") == 0;
      p[i].skip = cJSON_IsTrue(cJSON_GetObjectItem(it, "shouldIgnore"));
      snprintf(p[i].remote, sizeof p[i].remote, "%s", oid && (hub_is_hex(oid, 40) || hub_is_hex(oid, 64)) ? oid : "");
    }
  }
  cJSON_Delete(j);
  return MTPQ_OK;
}

enum mtpq_status hub_parse_lfs_object(const cJSON *obj, uint64_t size, const char *label, struct hub_lfs_plan *p,
                                      struct mtpq_err *err) {
  memset(p, 0, sizeof *p);
  const cJSON *e = cJSON_GetObjectItem(obj, "error");
  if (e) {
    const double code = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "code"));
    p->error = 1, p->error_code = code >= 0 && code < 1000 ? (int)code : 0, p->error_msg = str(e, "message");
    if (!p->error_msg) p->error_msg = "";
    return MTPQ_OK;
  }
  const cJSON *act = cJSON_GetObjectItem(obj, "actions"), *up = cJSON_GetObjectItem(act, "upload");
  p->verify = str(cJSON_GetObjectItem(act, "verify"), "href");
  if (!up) {
    p->present = 1;
    return MTPQ_OK;
  }
  p->href = str(up, "href");
  if (!p->href) return mtpq_err_set(err, MTPQ_E_SERVER, "%s: upload action without href", label);
  const cJSON *hdr = cJSON_GetObjectItem(up, "header"), *h;
  const char *cs = str(hdr, "chunk_size");
  if (!cs) return MTPQ_OK; /* basic */
  /* multipart: parts "1".."N" (any zero padding) in numeric order */
  char *end = NULL;
  const unsigned long long chunk = strtoull(cs, &end, 10);
  if (!chunk || *end || chunk > (1ull << 40))
    return mtpq_err_set(err, MTPQ_E_SERVER, "%s: multipart chunk_size '%.40s' is not a size", label, cs);
  p->chunk = chunk, p->nparts = (size + chunk - 1) / chunk;
  uint64_t have = 0;
  cJSON_ArrayForEach(h, hdr) if (strcmp(h->string, "chunk_size") != 0) have++;
  if (have != p->nparts || p->nparts > 100000)
    return mtpq_err_set(err, MTPQ_E_SERVER, "%s: multipart offer has %llu part URLs for %llu parts of %llu bytes",
                        label, (unsigned long long)have, (unsigned long long)p->nparts, chunk);
  p->parts = calloc(p->nparts ? p->nparts : 1, sizeof *p->parts);
  if (!p->parts) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  cJSON_ArrayForEach(h, hdr) {
    if (strcmp(h->string, "chunk_size") == 0) continue;
    const unsigned long long i = strtoull(h->string, &end, 10);
    if (*end || i < 1 || i > p->nparts || p->parts[i - 1] || !cJSON_GetStringValue(h)) {
      free(p->parts), p->parts = NULL;
      return mtpq_err_set(err, MTPQ_E_SERVER, "%s: multipart part '%.40s' is not one of 1..%llu once with a URL", label,
                          h->string, (unsigned long long)p->nparts);
    }
    p->parts[i - 1] = cJSON_GetStringValue(h);
  }
  return MTPQ_OK;
}

enum mtpq_status hub_parse_commit(const char *body, size_t n, const char *label, char *commit, char *url,
                                  size_t url_cap, struct mtpq_err *err) {
  cJSON *j = mtpq__json_parse(body, n, label, MTPQ_E_SERVER, err);
  if (!j) return MTPQ_E_SERVER;
  const char *oid = str(j, "commitOid"), *cu = str(j, "commitUrl");
  enum mtpq_status st = MTPQ_OK;
  if (!oid || !hub_is_hex(oid, 40))
    st = mtpq_err_set(err, MTPQ_E_SERVER, "%s: no commitOid in the answer", label);
  else
    memcpy(commit, oid, 41), snprintf(url, url_cap, "%s", cu ? cu : "");
  cJSON_Delete(j);
  return st;
}
