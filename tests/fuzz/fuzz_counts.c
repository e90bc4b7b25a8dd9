/* libFuzzer: token-count files (vocab/corpus.c): the first byte picks plain
 * ".tsv" (even) or ".tsv.zst" (odd), the rest is the file. */
#include "fuzz_util.h"
#include "vocab/corpus.h"

static void none(void *ctx, int32_t id, uint64_t count) { (void)ctx, (void)id, (void)count; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *p = fuzz_file(data[0] & 1 ? "counts.tsv.zst" : "counts.tsv", data + 1, size - 1);
  if (!p) return 0;
  struct mtpq_err err = {0};
  mtpq_counts_read(p, 151936, none, NULL, &err);
  return 0;
}
