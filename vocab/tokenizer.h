/* A native byte-level BPE tokenizer for Hugging Face tokenizer.json files of
 * the Qwen2/Qwen3 kind, giving the ids `tokenizers` gives (without special
 * tokens added by a post-processor).
 *
 * Supported (anything else is refused with MTPQ_E_UNSUPPORTED naming the
 * part): model BPE without dropout, byte fallback or subword affixes;
 * normalizer null or NFC; pre-tokenizer Sequence[Split(Qwen's regex,
 * Isolated), ByteLevel(use_regex false, add_prefix_space false)]; added
 * tokens with lstrip/rstrip/single_word false and normalized false.
 *
 * Pipeline per text: added tokens are matched first (leftmost, longest);
 * the text between them is NFC-normalized, split by the pre-tokenizer regex
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (implemented as a hand-written matcher with Oniguruma's semantics: ordered
 * alternation, greedy quantifiers with backtracking, \s = 0009-000D, 0085
 * and Z*), each piece's UTF-8 bytes are mapped to the byte-level alphabet
 * and merged by rank (lowest rank first, leftmost on ties).
 */
#ifndef MTPQ_VOCAB_TOKENIZER_H
#define MTPQ_VOCAB_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

struct mtpq_tokenizer;

enum mtpq_status mtpq_tokenizer_load(const char *path, struct mtpq_tokenizer **out,
                                     struct mtpq_err *err);
void mtpq_tokenizer_free(struct mtpq_tokenizer *t); /* NULL-safe */

/* Largest id + 1 over the vocabulary and added tokens. */
int32_t mtpq_tokenizer_vocab_size(const struct mtpq_tokenizer *t);
/* Raw bytes of token id (after undoing the byte-level mapping); NULL for an
 * id without a token. Borrowed until mtpq_tokenizer_free. */
const unsigned char *mtpq_tokenizer_bytes(const struct mtpq_tokenizer *t, int32_t id, size_t *len);
/* Number of characters of the token's vocabulary string (byte-level form). */
size_t mtpq_tokenizer_vocab_chars(const struct mtpq_tokenizer *t, int32_t id);
int mtpq_tokenizer_is_added(const struct mtpq_tokenizer *t, int32_t id);
/* A fingerprint of the vocabulary: 16 hex digits of a 64-bit FNV-1a hash
 * over every id's raw bytes in id order (an id without a token counts as
 * empty), so two tokenizer.json files of one vocabulary agree whatever
 * their formatting, and another vocabulary differs. */
void mtpq_tokenizer_fingerprint(const struct mtpq_tokenizer *t, char hex[17]);

typedef void (*mtpq_token_fn)(void *ctx, int32_t id);

/* Encode n bytes of UTF-8 text (invalid sequences are read as U+FFFD). */
enum mtpq_status mtpq_tokenizer_encode(struct mtpq_tokenizer *t, const char *text, size_t n,
                                       mtpq_token_fn emit, void *ctx, struct mtpq_err *err);

/* Length of the longest prefix of text[0, n) after which encoding may be cut
 * without changing the result (the ids of the prefix plus the ids of the
 * rest equal the ids of the whole): the position after the last "\n" that is
 * followed by a letter or digit. 0 if there is none. */
size_t mtpq_tokenizer_safe_cut(const struct mtpq_tokenizer *t, const char *text, size_t n);

#endif
