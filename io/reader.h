/* Sequential byte reader over a file that is plain or zstd-compressed
 * (".zst" suffix: decoded as a stream of frames in constant memory). A bad
 * frame is MTPQ_E_BAD_VALUE naming the file and the zstd error. */
#ifndef MTPQ_IO_READER_H
#define MTPQ_IO_READER_H

#include <stddef.h>

#include "io/status.h"

struct mtpq_reader;

enum mtpq_status mtpq_reader_open(const char *path, struct mtpq_reader **out, struct mtpq_err *err);
/* Read up to n bytes into buf; *got = 0 at end of input. */
enum mtpq_status mtpq_reader_read(struct mtpq_reader *r, void *buf, size_t n, size_t *got,
                                  struct mtpq_err *err);
/* Next line without its '\n' (a final line without one is returned too);
 * *line is borrowed until the next call; *len = (size_t)-1 at end of input.
 * Lines longer than 256 MiB are an error. */
enum mtpq_status mtpq_reader_line(struct mtpq_reader *r, const char **line, size_t *len,
                                  struct mtpq_err *err);
/* Lines returned so far (for messages). */
size_t mtpq_reader_lineno(const struct mtpq_reader *r);
void mtpq_reader_close(struct mtpq_reader *r); /* NULL-safe */

#endif
