/* Unicode support for the tokenizer: UTF-8, the character classes of the
 * Qwen pre-tokenizer regex (\p{L}, \p{N}, \s as Oniguruma defines it) and
 * NFC normalization. Tables are generated (vocab/gen_unicode.py) from
 * Python's unicodedata; vocab/unicode_data.c says which Unicode version. */
#ifndef MTPQ_VOCAB_UNICODE_H
#define MTPQ_VOCAB_UNICODE_H

#include <stddef.h>
#include <stdint.h>

extern const uint32_t mtpq__uni_letter[][2];
extern const size_t mtpq__uni_letter_n;
extern const uint32_t mtpq__uni_number[][2];
extern const size_t mtpq__uni_number_n;
extern const uint32_t mtpq__uni_space[][2];
extern const size_t mtpq__uni_space_n;
extern const uint32_t mtpq__uni_ccc[][3];
extern const size_t mtpq__uni_ccc_n;
extern const uint32_t mtpq__uni_decomp[][3];
extern const size_t mtpq__uni_decomp_n;
extern const uint32_t mtpq__uni_comp[][3];
extern const size_t mtpq__uni_comp_n;

int mtpq__uni_is_letter(uint32_t cp);
int mtpq__uni_is_number(uint32_t cp);
int mtpq__uni_is_space(uint32_t cp);
int mtpq__uni_ccc_of(uint32_t cp);

/* Decode one UTF-8 sequence at s (n bytes left); invalid bytes decode as
 * U+FFFD consuming one byte (as a lossy decoder would). Returns the length. */
size_t mtpq__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encode cp into out (4 bytes room); returns the length. */
size_t mtpq__utf8_encode(uint32_t cp, unsigned char *out);

/* NFC of the n code points in `in` into `out` (capacity >= 4 * n: canonical
 * decomposition expands at most 4x for the data we ship). Returns the
 * number of code points written. */
size_t mtpq__nfc(const uint32_t *in, size_t n, uint32_t *out);

#endif
