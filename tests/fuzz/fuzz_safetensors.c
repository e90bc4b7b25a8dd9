/* libFuzzer: the safetensors header reader (io/st_read.c) on arbitrary
 * bytes taken as a whole file: the 8-byte length, the header, the data. */
#include "fuzz_util.h"
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t hlen = 0;
  if (size >= 8) memcpy(&hlen, data, 8); /* (little-endian hosts) */
  const uint64_t data_size = size >= 8 && hlen <= size - 8 ? size - 8 - hlen : 0;
  struct mtpq_st_file *f = NULL;
  struct mtpq_err err = {0};
  if (mtpq_st_parse(data, size, data_size, "fuzz", &f, &err) == MTPQ_OK) {
    for (size_t i = 0; i < mtpq_st_count(f); i++) {
      const struct mtpq_tensor *t = mtpq_st_at(f, i);
      if (mtpq_st_find(f, t->name) == NULL) __builtin_trap(); /* every listed name is found */
    }
  }
  mtpq_st_close(f);
  return 0;
}
