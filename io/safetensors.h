/* safetensors reader and writer.
 *
 * File layout (all integers little-endian):
 *
 *   offset 0   u64 N            length of the JSON header in bytes
 *   offset 8   N bytes          JSON object, UTF-8, optionally padded with
 *                               trailing spaces:
 *                 { "__metadata__": { "key": "value", ... },     (optional)
 *                   "<tensor name>": { "dtype": "BF16",
 *                                      "shape": [d0, d1, ...],
 *                                      "data_offsets": [begin, end] }, ... }
 *   offset 8+N data section     tensor bytes, row-major; begin/end are
 *                               relative to the start of the data section
 *
 * The reader treats every file as hostile: it caps the header length, checks
 * the JSON shape and nesting, the dtype names, the shapes (non-negative,
 * overflow-checked, at most MTPQ_ST_MAX_RANK dims), the offsets (inside the
 * data section, end - begin == numel x dtype size), that tensors neither
 * overlap nor leave unused bytes (the rule of the reference implementation),
 * and that names are unique. Each failure has its own mtpq_status and a
 * message naming the file, the tensor and the numbers.
 *
 * The writer streams: all tensors are declared first (so the header, and
 * every tensor's offset, is known), then tensor bytes may be written in any
 * order and in any number of pieces. Output goes to "<path>.tmp.<pid>" and is
 * renamed to <path> only by mtpq_stw_commit(); mtpq_stw_free() without a
 * commit deletes the temporary file. Output bytes are deterministic: header
 * keys in byte order of names with "__metadata__" first, compact JSON, header
 * padded with spaces to a multiple of 8; data ordered by element size
 * (largest first, so every tensor is naturally aligned) then by name.
 */
#ifndef MTPQ_IO_SAFETENSORS_H
#define MTPQ_IO_SAFETENSORS_H

#include <stdint.h>

#include "io/dtype.h"
#include "io/status.h"

#define MTPQ_ST_MAX_RANK 8
/* Header length cap (the reference implementation uses 100 MB). */
#define MTPQ_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* JSON nesting cap: a valid header never nests deeper than 3. */
#define MTPQ_ST_MAX_DEPTH 8
#define MTPQ_ST_MAX_NAME 4096
#define MTPQ_ST_MAX_TENSORS 4000000

/* One tensor. Borrowed from its file: valid until mtpq_st_close() (or
 * mtpq_repo_close() for tensors reached through a repo). */
struct mtpq_tensor {
  const char *name;
  enum mtpq_dtype dtype;
  int rank;
  int64_t shape[MTPQ_ST_MAX_RANK];
  uint64_t numel;
  uint64_t nbytes;
  uint64_t offset;    /* absolute byte offset in the file */
  const void *data;   /* mapped bytes; may be unaligned for foreign files */
  int shard;          /* shard index inside a repo, 0 for a single file */
};

/* ---- reader ------------------------------------------------------------ */

struct mtpq_st_file;

/* Map and validate a safetensors file. On success *out owns the mapping;
 * free it with mtpq_st_close(). */
enum mtpq_status mtpq_st_open(const char *path, struct mtpq_st_file **out,
                              struct mtpq_err *err);

/* Validate a header given as bytes (used for files and for remote reads).
 * buf holds the first `len` bytes of the file (at least 8 + N); data_size
 * is the size of the data section; `label` names the source in messages.
 * data pointers in the result are NULL. */
enum mtpq_status mtpq_st_parse(const void *buf, uint64_t len, uint64_t data_size,
                               const char *label, struct mtpq_st_file **out,
                               struct mtpq_err *err);

/* NULL-safe. */
void mtpq_st_close(struct mtpq_st_file *f);

/* Tensors sorted by name (byte order). */
size_t mtpq_st_count(const struct mtpq_st_file *f);
const struct mtpq_tensor *mtpq_st_at(const struct mtpq_st_file *f, size_t i);
/* NULL when absent. */
const struct mtpq_tensor *mtpq_st_find(const struct mtpq_st_file *f, const char *name);

/* __metadata__ entries in file order; value NULL when the key is absent. */
size_t mtpq_st_metadata_count(const struct mtpq_st_file *f);
const char *mtpq_st_metadata_key(const struct mtpq_st_file *f, size_t i);
const char *mtpq_st_metadata_value(const struct mtpq_st_file *f, size_t i);
const char *mtpq_st_metadata_get(const struct mtpq_st_file *f, const char *key);

/* Path the file was opened from, the header length N and the file size. */
const char *mtpq_st_path(const struct mtpq_st_file *f);
uint64_t mtpq_st_header_len(const struct mtpq_st_file *f);
uint64_t mtpq_st_file_size(const struct mtpq_st_file *f);

/* ---- writer ------------------------------------------------------------ */

struct mtpq_st_writer;

/* Start a writer for `path`. Nothing touches the disk until mtpq_stw_begin. */
enum mtpq_status mtpq_stw_init(const char *path, struct mtpq_st_writer **out,
                               struct mtpq_err *err);
/* Add a __metadata__ entry (strings are copied). */
enum mtpq_status mtpq_stw_metadata(struct mtpq_st_writer *w, const char *key,
                                   const char *value, struct mtpq_err *err);
/* Declare a tensor (name copied). rank 0 declares a scalar. */
enum mtpq_status mtpq_stw_add(struct mtpq_st_writer *w, const char *name,
                              enum mtpq_dtype dtype, int rank, const int64_t *shape,
                              struct mtpq_err *err);
/* Create the temporary file and write the header. No adds after this. */
enum mtpq_status mtpq_stw_begin(struct mtpq_st_writer *w, struct mtpq_err *err);
/* Write n bytes of tensor `name` starting at byte `at` within the tensor. */
enum mtpq_status mtpq_stw_write(struct mtpq_st_writer *w, const char *name,
                                uint64_t at, const void *bytes, uint64_t n,
                                struct mtpq_err *err);
/* Check every tensor was fully written, flush, fsync and rename into place. */
enum mtpq_status mtpq_stw_commit(struct mtpq_st_writer *w, struct mtpq_err *err);
/* NULL-safe; deletes the temporary file if not committed. */
void mtpq_stw_free(struct mtpq_st_writer *w);

/* Convenience: write a whole tensor at once (declared earlier). */
static inline enum mtpq_status mtpq_stw_write_all(struct mtpq_st_writer *w,
                                                  const char *name, const void *bytes,
                                                  uint64_t n, struct mtpq_err *err) {
  return mtpq_stw_write(w, name, 0, bytes, n, err);
}

#endif
