/* libFuzzer: tokenizer.json loading (vocab/tokenizer.c) and, when it
 * loads, encoding a fixed text and the input's own bytes. */
#include "fuzz_util.h"
#include "vocab/tokenizer.h"

static void none(void *ctx, int32_t id) { (void)ctx, (void)id; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = fuzz_file("tokenizer.json", data, size);
  if (!p) return 0;
  struct mtpq_tokenizer *t = NULL;
  struct mtpq_err err = {0};
  if (mtpq_tokenizer_load(p, &t, &err) == MTPQ_OK) {
    static const char text[] = "def f(x):\n    return x  # caf\xc3\xa9 <|endoftext|> 123\n";
    mtpq_tokenizer_encode(t, text, sizeof text - 1, none, NULL, &err);
    mtpq_tokenizer_encode(t, (const char *)data, size < 4096 ? size : 4096, none, NULL, &err);
    char hex[17];
    mtpq_tokenizer_fingerprint(t, hex);
  }
  mtpq_tokenizer_free(t);
  return 0;
}
