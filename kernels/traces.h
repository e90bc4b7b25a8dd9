/* Recorded greedy target traces: the file bench-acceptance replays.
 *
 * A safetensors file holding, per trace NAME, "NAME.tokens" (I32 [N]: prompt
 * then the target's greedy continuation) and "NAME.hidden" (BF16 [N, H]: the
 * target's final-norm hidden state at each position). The trace's domain is
 * NAME up to its first '.' ("code_heldout.3" -> "code_heldout"). Metadata
 * "k" and "prompt_len", when present, are the defaults of a replay;
 * "prompt_len.NAME" (mtpq traces writes one a trace) is that trace's own.
 * mtpq_traces_open refuses a file with no trace, a tokens tensor without
 * its hidden states, wrong dtypes or ranks, rows that disagree, and traces
 * of different hidden sizes, naming the file and the tensor.
 */
#ifndef MTPQ_KERNELS_TRACES_H
#define MTPQ_KERNELS_TRACES_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

#define MTPQ_TRACE_DOMAIN_MAX 64

struct mtpq_trace {
  const char *name;                   /* NAME (the tokens tensor without ".tokens") */
  char domain[MTPQ_TRACE_DOMAIN_MAX]; /* NAME up to its first '.' */
  const int32_t *tokens;              /* [n], mapped from the file (a copy where the mapping misaligns them) */
  const void *hidden_bf16;            /* [n, hidden], mapped from the file */
  int64_t n, hidden;
  int64_t prompt_len; /* metadata prompt_len.NAME, or 0 */
};

struct mtpq_traces;

enum mtpq_status mtpq_traces_open(const char *path, struct mtpq_traces **out, struct mtpq_err *err);
void mtpq_traces_close(struct mtpq_traces *t); /* NULL-safe */
size_t mtpq_traces_count(const struct mtpq_traces *t);
const struct mtpq_trace *mtpq_traces_at(const struct mtpq_traces *t, size_t i);
const char *mtpq_traces_path(const struct mtpq_traces *t);
/* A metadata value as an integer in [lo, hi], or dflt when absent; a value
 * that is not such an integer is an error naming the key. */
enum mtpq_status mtpq_traces_meta_int(const struct mtpq_traces *t, const char *key, int64_t lo, int64_t hi,
                                      int64_t dflt, int64_t *out, struct mtpq_err *err);
/* Every trace against a model: hidden size equal, every token id in
 * [0, vocab). */
enum mtpq_status mtpq_traces_check(const struct mtpq_traces *t, int64_t hidden, int64_t vocab,
                                   struct mtpq_err *err);

#endif
