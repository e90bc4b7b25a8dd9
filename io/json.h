/* JSON that mtpq reads (config.json, indexes, tokenizer.json, JSONL lines,
 * the Hub's answers): cJSON, with the errors a user needs. Owned by io/. */
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

#endif
