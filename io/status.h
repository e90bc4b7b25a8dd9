/* mtpq status codes and the error record every fallible call fills.
 *
 * Every library function that can fail returns enum mtpq_status (MTPQ_OK is
 * 0) and, when given a non-NULL struct mtpq_err, writes one line that names
 * the file, tensor and offending values. The library never prints and never
 * exits: the CLI turns a status into a message and an exit code.
 *
 * Numeric values are stable once released: scripts see them through the exit
 * code classes below and through `--json` reports, so new statuses are only
 * ever appended.
 */
#ifndef MTPQ_IO_STATUS_H
#define MTPQ_IO_STATUS_H

#include <stddef.h>

/* Exit-code classes (documented in man/mtpq.1, EXIT STATUS). */
#define MTPQ_EXIT_OK 0
#define MTPQ_EXIT_FAILURE 1   /* internal error, out of memory */
#define MTPQ_EXIT_USAGE 2     /* bad command line */
#define MTPQ_EXIT_IO 3        /* cannot read or write a file */
#define MTPQ_EXIT_FORMAT 4    /* invalid or unsupported input */
#define MTPQ_EXIT_GPU 5       /* CUDA error or no device */
#define MTPQ_EXIT_NETWORK 6   /* network failure */
#define MTPQ_EXIT_AUTH 7      /* authentication or permission refused */
#define MTPQ_EXIT_SERVER 8    /* the server refused the request */
#define MTPQ_EXIT_DIFFERS 9   /* verification found differences */
#define MTPQ_EXIT_EXISTS 10   /* output exists and --force not given */
#define MTPQ_EXIT_INTERRUPTED 130 /* SIGINT (SIGTERM: 143); nothing half-written */

/* X(NAME, value, exit class, short description) */
#define MTPQ_STATUS_MAP(X)                                                                                             \
  X(OK, 0, MTPQ_EXIT_OK, "success")                                                                                    \
  X(E_NOMEM, 1, MTPQ_EXIT_FAILURE, "out of memory")                                                                    \
  X(E_INTERNAL, 2, MTPQ_EXIT_FAILURE, "internal error")                                                                \
  X(E_INVAL, 3, MTPQ_EXIT_USAGE, "invalid argument")                                                                   \
  X(E_IO_OPEN, 10, MTPQ_EXIT_IO, "cannot open file")                                                                   \
  X(E_IO_READ, 11, MTPQ_EXIT_IO, "cannot read file")                                                                   \
  X(E_IO_WRITE, 12, MTPQ_EXIT_IO, "cannot write file")                                                                 \
  X(E_IO_RENAME, 13, MTPQ_EXIT_IO, "cannot move output into place")                                                    \
  X(E_EXISTS, 14, MTPQ_EXIT_EXISTS, "output already exists")                                                           \
  X(E_NOT_FOUND, 15, MTPQ_EXIT_FORMAT, "not found")                                                                    \
  X(E_ST_TOO_SMALL, 20, MTPQ_EXIT_FORMAT, "file shorter than the 8-byte header length")                                \
  X(E_ST_HEADER_TOO_LARGE, 21, MTPQ_EXIT_FORMAT, "header length above the cap")                                        \
  X(E_ST_HEADER_PAST_EOF, 22, MTPQ_EXIT_FORMAT, "header runs past end of file")                                        \
  X(E_ST_HEADER_JSON, 23, MTPQ_EXIT_FORMAT, "header is not valid JSON")                                                \
  X(E_ST_HEADER_NOT_OBJECT, 24, MTPQ_EXIT_FORMAT, "header is not a JSON object")                                       \
  X(E_ST_HEADER_DEPTH, 25, MTPQ_EXIT_FORMAT, "header JSON nested too deeply")                                          \
  X(E_ST_ENTRY_NOT_OBJECT, 26, MTPQ_EXIT_FORMAT, "tensor entry is not an object")                                      \
  X(E_ST_METADATA, 27, MTPQ_EXIT_FORMAT, "__metadata__ is not a string map")                                           \
  X(E_ST_NAME, 28, MTPQ_EXIT_FORMAT, "invalid tensor name")                                                            \
  X(E_ST_DUPLICATE, 29, MTPQ_EXIT_FORMAT, "duplicate tensor name")                                                     \
  X(E_ST_DTYPE, 30, MTPQ_EXIT_FORMAT, "missing or unknown dtype")                                                      \
  X(E_ST_SHAPE, 31, MTPQ_EXIT_FORMAT, "missing or malformed shape")                                                    \
  X(E_ST_SHAPE_NEGATIVE, 32, MTPQ_EXIT_FORMAT, "negative dimension")                                                   \
  X(E_ST_RANK, 33, MTPQ_EXIT_FORMAT, "too many dimensions")                                                            \
  X(E_ST_OVERFLOW, 34, MTPQ_EXIT_FORMAT, "tensor size overflows")                                                      \
  X(E_ST_OFFSETS, 35, MTPQ_EXIT_FORMAT, "missing or malformed data_offsets")                                           \
  X(E_ST_OFFSETS_ORDER, 36, MTPQ_EXIT_FORMAT, "data_offsets end before begin")                                         \
  X(E_ST_OFFSETS_PAST_DATA, 37, MTPQ_EXIT_FORMAT, "data_offsets past the data section")                                \
  X(E_ST_SIZE_MISMATCH, 38, MTPQ_EXIT_FORMAT, "byte range differs from numel x dtype size")                            \
  X(E_ST_OVERLAP, 39, MTPQ_EXIT_FORMAT, "tensors overlap")                                                             \
  X(E_ST_GAP, 40, MTPQ_EXIT_FORMAT, "data section has unused bytes")                                                   \
  X(E_ST_TOO_MANY, 41, MTPQ_EXIT_FORMAT, "too many tensors")                                                           \
  X(E_IDX_JSON, 50, MTPQ_EXIT_FORMAT, "index is not valid JSON")                                                       \
  X(E_IDX_WEIGHT_MAP, 51, MTPQ_EXIT_FORMAT, "index has no valid weight_map")                                           \
  X(E_IDX_SHARD_NAME, 52, MTPQ_EXIT_FORMAT, "index names an unsafe shard path")                                        \
  X(E_IDX_TENSOR_MISSING, 53, MTPQ_EXIT_FORMAT, "indexed tensor missing from its shard")                               \
  X(E_IDX_CROSS_DUPLICATE, 54, MTPQ_EXIT_FORMAT, "tensor stored in two shards")                                        \
  X(E_REPO_EMPTY, 55, MTPQ_EXIT_FORMAT, "no safetensors files found")                                                  \
  X(E_CONFIG_JSON, 60, MTPQ_EXIT_FORMAT, "config.json is not valid JSON")                                              \
  X(E_CONFIG_FIELD, 61, MTPQ_EXIT_FORMAT, "config.json field missing or invalid")                                      \
  X(E_UNSUPPORTED, 62, MTPQ_EXIT_FORMAT, "unsupported model or format")                                                \
  X(E_DTYPE_MISMATCH, 63, MTPQ_EXIT_FORMAT, "unexpected tensor dtype or shape")                                        \
  X(E_BAD_VALUE, 64, MTPQ_EXIT_FORMAT, "non-finite or out-of-range value")                                             \
  X(E_GPU, 70, MTPQ_EXIT_GPU, "CUDA error")                                                                            \
  X(E_NO_GPU, 71, MTPQ_EXIT_GPU, "no CUDA device or CUDA not built")                                                   \
  X(E_NET, 80, MTPQ_EXIT_NETWORK, "network error")                                                                     \
  X(E_AUTH, 81, MTPQ_EXIT_AUTH, "authentication refused")                                                              \
  X(E_SERVER, 82, MTPQ_EXIT_SERVER, "server refused the request")                                                      \
  X(E_DIFFERS, 90, MTPQ_EXIT_DIFFERS, "contents differ")                                                               \
  X(E_INTERRUPTED, 91, MTPQ_EXIT_INTERRUPTED, "interrupted")

enum mtpq_status {
#define MTPQ_STATUS_ENUM_(name, value, exitc, msg) MTPQ_##name = value,
  MTPQ_STATUS_MAP(MTPQ_STATUS_ENUM_)
#undef MTPQ_STATUS_ENUM_
};

/* Caller-owned error record; msg is always NUL-terminated. */
#define MTPQ_ERR_MSG_SIZE 512
struct mtpq_err {
  enum mtpq_status status;
  char msg[MTPQ_ERR_MSG_SIZE];
};

/* Short description ("tensors overlap"); "unknown status" for bad input. */
const char *mtpq_status_str(enum mtpq_status s);
/* Symbolic name without prefix ("E_ST_OVERLAP"). */
const char *mtpq_status_name(enum mtpq_status s);
/* Exit-code class of a status (MTPQ_EXIT_*). */
int mtpq_status_exit_code(enum mtpq_status s);
/* Number of defined statuses and the i-th one, for tables and tests. */
size_t mtpq_status_count(void);
enum mtpq_status mtpq_status_at(size_t i);

/* Record status s and a printf-style message into err (may be NULL).
 * Returns s so callers can write `return mtpq_err_set(err, MTPQ_E_..., ...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
enum mtpq_status mtpq_err_set(struct mtpq_err *err, enum mtpq_status s,
                              const char *fmt, ...);

/* Clear err to MTPQ_OK and an empty message (err may be NULL). */
void mtpq_err_clear(struct mtpq_err *err);

#endif
