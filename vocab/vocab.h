/* build-vocab: choose the draft vocabulary from token counts.
 *
 * Forced ids (always kept): every added token (special or not), every token
 * whose vocabulary string is one character (the byte-level alphabet), and
 * every token whose bytes are exactly one UTF-8 encoded code point. Then the
 * most frequent remaining ids by weighted count (sum over inputs of count x
 * weight; text inputs weigh 1) until `size`, ties broken by the lower id; ids
 * never seen fill up last, lowest first. The result is sorted ascending.
 *
 * Outputs: PREFIX.safetensors (tensor "ids", I64 [size]), PREFIX.pt
 * (torch.load gives the same 1-D int64 tensor) and PREFIX.json, the report:
 *   {"size", "tokenizer", "vocab_size", "forced": {"added",
 *    "single_char_strings", "single_unicode_char", "total"},
 *    "corpus": {"tokens", "weighted_tokens", "inputs": [...]},
 *    "heldout": {NAME: {"path", "tokens", "coverage", "coverage_at":
 *                {"32768", "65536", "98304", "131072"}}}}
 * coverage = share of the held-out token occurrences whose id is selected;
 * coverage_at[k] is the same for the selection of size k (null when k is
 * below the forced set or above the vocabulary).
 */
#ifndef MTPQ_VOCAB_VOCAB_H
#define MTPQ_VOCAB_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

struct mtpq_vocab_input {
  const char *path;
  double weight;
};

struct mtpq_vocab_heldout {
  const char *name;
  const char *path; /* a count file (.tsv[.zst]) or text */
};

struct mtpq_vocab_params {
  const char *tokenizer;
  const struct mtpq_vocab_input *counts;
  size_t n_counts;
  const struct mtpq_vocab_input *texts;
  size_t n_texts;
  const char *text_field; /* JSONL field, NULL = "text" */
  const struct mtpq_vocab_heldout *heldout;
  size_t n_heldout;
  int64_t size;
  const char *out_prefix;
};

struct mtpq_vocab_summary {
  int64_t size;
  int32_t vocab_size;
  size_t forced_added, forced_single_char, forced_single_unicode, forced_total;
  uint64_t corpus_tokens;
  char *report_json; /* the PREFIX.json text; free with free() */
};

enum mtpq_status mtpq_vocab_build(const struct mtpq_vocab_params *p, struct mtpq_vocab_summary *s,
                                  struct mtpq_err *err);

#endif
