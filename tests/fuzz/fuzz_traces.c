/* libFuzzer: the traces file bench-acceptance replays (kernels/traces.c). */
#include "fuzz_util.h"
#include "kernels/traces.h"

static volatile int64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = fuzz_file("traces.safetensors", data, size);
  if (!p) return 0;
  struct mtpq_traces *t = NULL;
  struct mtpq_err err = {0};
  if (mtpq_traces_open(p, &t, &err) == MTPQ_OK) {
    int64_t v;
    mtpq_traces_meta_int(t, "prompt_len", 1, 1 << 20, 0, &v, &err);
    mtpq_traces_check(t, 128, 151936, &err);
    for (size_t i = 0; i < mtpq_traces_count(t); i++) {
      const struct mtpq_trace *x = mtpq_traces_at(t, i);
      for (int64_t j = 0; j < x->n; j++) sink += x->tokens[j]; /* every token readable */
    }
  }
  mtpq_traces_close(t);
  return 0;
}
