/* dtype table: one row per safetensors element type. */
#include "io/dtype.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtype_rows[MTPQ_DTYPE_COUNT] = {
    [MTPQ_DTYPE_BOOL] = {"BOOL", 1},    [MTPQ_DTYPE_U8] = {"U8", 1},
    [MTPQ_DTYPE_I8] = {"I8", 1},        [MTPQ_DTYPE_I16] = {"I16", 2},
    [MTPQ_DTYPE_U16] = {"U16", 2},      [MTPQ_DTYPE_I32] = {"I32", 4},
    [MTPQ_DTYPE_U32] = {"U32", 4},      [MTPQ_DTYPE_I64] = {"I64", 8},
    [MTPQ_DTYPE_U64] = {"U64", 8},      [MTPQ_DTYPE_F16] = {"F16", 2},
    [MTPQ_DTYPE_BF16] = {"BF16", 2},    [MTPQ_DTYPE_F32] = {"F32", 4},
    [MTPQ_DTYPE_F64] = {"F64", 8},      [MTPQ_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [MTPQ_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

const char *mtpq_dtype_name(enum mtpq_dtype t) {
  return (unsigned)t < MTPQ_DTYPE_COUNT ? dtype_rows[t].name : NULL;
}

size_t mtpq_dtype_size(enum mtpq_dtype t) {
  return (unsigned)t < MTPQ_DTYPE_COUNT ? dtype_rows[t].size : 0;
}

enum mtpq_dtype mtpq_dtype_parse(const char *s, size_t len) {
  for (int i = 0; i < MTPQ_DTYPE_COUNT; i++)
    if (strlen(dtype_rows[i].name) == len && memcmp(dtype_rows[i].name, s, len) == 0)
      return (enum mtpq_dtype)i;
  return MTPQ_DTYPE_COUNT;
}
