/* Corpus inputs for build-vocab: token-count files and raw text, each plain
 * or zstd-compressed (".zst").
 *
 * Count file: one line per id, "token_id<TAB>count" (decimal, count >= 0);
 * blank lines are skipped; anything else is MTPQ_E_BAD_VALUE naming the
 * file, the line and the text. Ids at or beyond `vocab` are refused.
 * Text: plain UTF-8 (tokenized as one document, streamed in pieces cut
 * where the tokenizer allows, see mtpq_tokenizer_safe_cut) or JSON Lines
 * (".jsonl" / ".jsonl.zst": each line an object whose string field `field`
 * is one document; lines without it are skipped and counted).
 */
#ifndef MTPQ_VOCAB_CORPUS_H
#define MTPQ_VOCAB_CORPUS_H

#include <stdint.h>

#include "vocab/tokenizer.h"

typedef void (*mtpq_count_fn)(void *ctx, int32_t id, uint64_t count);

enum mtpq_status mtpq_counts_read(const char *path, int32_t vocab, mtpq_count_fn fn, void *ctx,
                                  struct mtpq_err *err);

struct mtpq_text_stats {
  uint64_t bytes, documents, skipped_lines;
};

enum mtpq_status mtpq_text_tokenize(struct mtpq_tokenizer *t, const char *path, const char *field,
                                    mtpq_token_fn emit, void *ctx, struct mtpq_text_stats *stats,
                                    struct mtpq_err *err);

/* 1 if path names a count file (".tsv" or ".tsv.zst"). */
int mtpq_is_counts_path(const char *path);

#endif
