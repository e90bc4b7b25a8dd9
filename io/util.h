/* Small internal helpers shared by the library's modules (not for the CLI).
 * Names with a double underscore cross files but are not public API. */
#ifndef MTPQ_IO_UTIL_H
#define MTPQ_IO_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

/* strdup that accepts NULL (returns NULL). Free with free(). */
char *mtpq__strdup(const char *s);
/* 1 if s ends with suf. */
int mtpq__ends_with(const char *s, const char *suf);
/* Remove a directory tree (no links followed); best effort. */
void mtpq__rmtree(const char *dir);
/* A growable byte string, kept NUL-terminated. Appends after a failed
 * allocation are dropped and oom stays set, so callers check once at the
 * end. Free p with free(). */
struct mtpq__buf {
  char *p;
  size_t n, cap;
  int oom;
};
void mtpq__buf_put(struct mtpq__buf *b, const void *s, size_t n);
/* Stream a file through sha256 (git_blob_sha1 0) or git's blob id, the
 * sha1 of "blob <size>\0" + bytes (1); hex gets lowercase hex + NUL (65
 * bytes suffice); *size (may be NULL) the file's length. */
enum mtpq_status mtpq__file_digest(const char *path, int git_blob_sha1, char *hex, uint64_t *size,
                                   struct mtpq_err *err);
/* "<a>/<b>" in a new string (free with free()); NULL on OOM. */
char *mtpq__path_join(const char *a, const char *b);
/* The offset of the first byte of s[0, n) that does not belong to
 * well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF), or -1 when all of it does. */
long mtpq__utf8_bad_at(const char *s, size_t n);
/* 1 if path names an existing regular file / directory. */
int mtpq__is_file(const char *path);
int mtpq__is_dir(const char *path);
/* Read a whole regular file of at most `cap` bytes; *out is NUL-terminated,
 * free with free(). */
enum mtpq_status mtpq__read_file(const char *path, size_t cap, char **out, size_t *len,
                                 struct mtpq_err *err);
/* Write bytes to path atomically: "<path>.tmp.<pid>", fsync, rename. */
enum mtpq_status mtpq__write_file_atomic(const char *path, const void *bytes, size_t n,
                                         struct mtpq_err *err);
/* Temporary sibling name "<path>.tmp.<pid>" (free with free()). */
char *mtpq__tmp_name(const char *path);
/* Tell the kernel the mapped bytes [p, p + n) are no longer needed, so a
 * streaming pass over a mapped checkpoint keeps its resident set small
 * (only whole pages inside the range are released; read-only mappings are
 * re-read from the file if touched again). */
void mtpq__release_pages(const void *p, size_t n);
/* Seconds from a monotonic clock. */
double mtpq__now(void);

#endif
