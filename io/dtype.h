/* Element types of the safetensors format and their sizes.
 *
 * The names are the strings safetensors headers use ("BF16", "F8_E4M3", ...).
 */
#ifndef MTPQ_IO_DTYPE_H
#define MTPQ_IO_DTYPE_H

#include <stddef.h>

enum mtpq_dtype {
  MTPQ_DTYPE_BOOL,
  MTPQ_DTYPE_U8,
  MTPQ_DTYPE_I8,
  MTPQ_DTYPE_I16,
  MTPQ_DTYPE_U16,
  MTPQ_DTYPE_I32,
  MTPQ_DTYPE_U32,
  MTPQ_DTYPE_I64,
  MTPQ_DTYPE_U64,
  MTPQ_DTYPE_F16,
  MTPQ_DTYPE_BF16,
  MTPQ_DTYPE_F32,
  MTPQ_DTYPE_F64,
  MTPQ_DTYPE_F8_E4M3,
  MTPQ_DTYPE_F8_E5M2,
  MTPQ_DTYPE_COUNT
};

/* Header string of a dtype ("BF16"); NULL for an invalid value. */
const char *mtpq_dtype_name(enum mtpq_dtype t);
/* Bytes per element; 0 for an invalid value. */
size_t mtpq_dtype_size(enum mtpq_dtype t);
/* Parse a header string of length len; returns MTPQ_DTYPE_COUNT if unknown. */
enum mtpq_dtype mtpq_dtype_parse(const char *s, size_t len);

#endif
