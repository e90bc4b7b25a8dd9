/* libFuzzer: token-count files (vocab/corpus.c): the first byte picks plain
 * ".tsv" (even) or ".tsv.zst" (odd), the rest is the file.
 * A .zst frame can inflate about 30,000:1 (RLE blocks), so 64 KB of input may
 * stand for a 2 GB file: legitimate, but minutes a run under ASan. Inputs that
 * inflate past FUZZ_INFLATE_CAP are skipped here (the reader stays unbounded:
 * real count files are that large); ones zstd refuses still go to the reader,
 * whose error paths are the point. */
#include "fuzz_util.h"
#include "vocab/corpus.h"

#include <zstd.h>

#define FUZZ_INFLATE_CAP (1u << 20)

/* 1 when the frames in data inflate past the cap before an error or the end */
static int inflates_past_cap(const uint8_t *data, size_t size) {
  ZSTD_DCtx *d = ZSTD_createDCtx();
  if (!d) return 0;
  static uint8_t out[1 << 16];
  ZSTD_inBuffer in = {data, size, 0};
  size_t total = 0;
  int past = 0;
  for (;;) {
    ZSTD_outBuffer o = {out, sizeof out, 0};
    const size_t was = in.pos;
    const size_t r = ZSTD_decompressStream(d, &o, &in);
    if (ZSTD_isError(r)) break;
    total += o.pos;
    if ((past = total > FUZZ_INFLATE_CAP)) break;
    if (o.pos < sizeof out && (in.pos == in.size || in.pos == was)) break; /* all out, or stuck */
  }
  ZSTD_freeDCtx(d);
  return past;
}

static void none(void *ctx, int32_t id, uint64_t count) { (void)ctx, (void)id, (void)count; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 1) && inflates_past_cap(data + 1, size - 1)) return 0;
  const char *p = fuzz_file(data[0] & 1 ? "counts.tsv.zst" : "counts.tsv", data + 1, size - 1);
  if (!p) return 0;
  struct mtpq_err err = {0};
  mtpq_counts_read(p, 151936, none, NULL, &err);
  return 0;
}
