/* JSON that mtpq reads (config.json, indexes, tokenizer.json, JSONL lines,
 * the Hub's answers): cJSON, with the errors a user needs; and JSON that it
 * writes, built through checked adds. Owned by io/. */
#ifndef MTPQ_IO_JSON_H
#define MTPQ_IO_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "io/status.h"

/* 1 if s[0, n) opens more than cap objects and arrays inside one another
 * (strings skipped); a scan, no parse. */
int mtpq__json_depth_exceeds(const char *s, size_t n, int cap);

/* Parse s[0, n) (it need not be NUL-terminated); the root, or NULL with err
 * set to status st and a message naming label: "nests deeper than N
 * levels" when it does (cJSON's own limit, found before parsing so that
 * the message says so rather than "not valid JSON"), else "not valid JSON
 * (near byte B of N)". */
cJSON *mtpq__json_parse(const char *s, size_t n, const char *label, enum mtpq_status st, struct mtpq_err *err);

/* Building a file's JSON: cJSON's Add and Create functions return NULL (or
 * false) when an allocation fails and leave the object without the item.
 * Built through these, a failure is remembered in a per-thread flag, and
 * the writer refuses to write an object built after one (so no config or
 * report is ever written with a field missing): mtpq__jb_reset() before
 * building, mtpq__jb_failed() before writing. */
void mtpq__jb_reset(void);
int mtpq__jb_failed(void);
cJSON *mtpq__jb(cJSON *x); /* x, remembering NULL */
void mtpq__jb_ok(int ok);  /* remembering 0 (a cJSON_Add* that returns a bool) */
#define MTPQ_JB(x) mtpq__jb_ok((x) != 0)
/* item into o under k (o an array: k NULL); an item that cannot be added is freed */
void mtpq__jb_add(cJSON *o, const char *k, cJSON *item);
/* j, printed and ended with a newline, into path (written whole, then
 * renamed into place); refused with MTPQ_E_NOMEM when j is NULL or was
 * built after a failed add (mtpq__jb_failed) */
enum mtpq_status mtpq__json_write_file(const char *path, const cJSON *j, struct mtpq_err *err);

#endif
