/* Unit tests for vocab/ and io/reader: UTF-8, NFC, the tokenizer on known
 * ids (from Hugging Face tokenizers 0.23), count files plain and zstd, bad
 * input, and the size / all-or-nothing rules of build-vocab. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "vocab/corpus.h"
#include "vocab/tokenizer.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"
#include "testutil.h"

#define TOK MTPQ_TESTDATA "/tiny-qwen3next/model/tokenizer.json"

START_TEST(test_utf8_and_nfc) {
  uint32_t cp;
  ck_assert_uint_eq(mtpq__utf8_decode((const unsigned char *)"\xc4\x8d", 2, &cp), 2);
  ck_assert_uint_eq(cp, 0x10D);
  ck_assert_uint_eq(mtpq__utf8_decode((const unsigned char *)"\xc0\x80", 2, &cp), 1); /* overlong */
  ck_assert_uint_eq(cp, 0xFFFD);
  ck_assert_uint_eq(mtpq__utf8_decode((const unsigned char *)"\xed\xa0\x80", 3, &cp), 1); /* surrogate */
  ck_assert_uint_eq(mtpq__utf8_decode((const unsigned char *)"\xf0\x9f\x98", 3, &cp), 1); /* truncated */
  /* NFC: c + caron -> U+010D; A + ring + acute -> U+01FA; Hangul jamo L V T
   * -> one syllable; U+212B ANGSTROM SIGN -> U+00C5; ordering of marks. */
  static const struct {
    uint32_t in[4];
    size_t n;
    uint32_t out[4];
    size_t m;
  } cases[] = {{{'c', 0x30C}, 2, {0x10D}, 1},
               {{'A', 0x30A, 0x301}, 3, {0x1FA}, 1},
               {{0x1100, 0x1161, 0x11A8}, 3, {0xAC01}, 1},
               {{0x212B}, 1, {0xC5}, 1},
               {{'a', 0x323, 0x302}, 3, {0x1EAD}, 1},
               {{'a', 0x302, 0x323}, 3, {0x1EAD}, 1},
               {{'q', 0x307, 0x323}, 3, {'q', 0x323, 0x307}, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t out[16];
    size_t m = mtpq__nfc(cases[i].in, cases[i].n, out);
    ck_assert_msg(m == cases[i].m, "case %zu: %zu code points", i, m);
    for (size_t k = 0; k < m; k++) ck_assert_msg(out[k] == cases[i].out[k], "case %zu cp %zu: %x", i, k, out[k]);
  }
  ck_assert(mtpq__uni_is_letter(0x4F60) && mtpq__uni_is_letter('Z') && !mtpq__uni_is_letter('1'));
  ck_assert(mtpq__uni_is_number(0x2460) && mtpq__uni_is_number('7'));
  ck_assert(mtpq__uni_is_space(0x3000) && mtpq__uni_is_space(0x85) && !mtpq__uni_is_space(0x200B));
}
END_TEST

struct ids {
  int32_t v[64];
  int n;
};
static void collect(void *ctx, int32_t id) {
  struct ids *x = ctx;
  if (x->n < 64) x->v[x->n++] = id;
}

START_TEST(test_tokenizer_known_ids) {
  struct mtpq_tokenizer *t = NULL;
  struct mtpq_err err = {0};
  ck_assert_msg(mtpq_tokenizer_load(TOK, &t, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_int_eq(mtpq_tokenizer_vocab_size(t), 151669);
  static const struct {
    const char *text;
    int n;
    int32_t ids[8];
  } cases[] = {{"Hello world", 2, {9707, 1879}},
               {"it's   fine\n\n  ok", 7, {275, 594, 256, 6915, 271, 220, 5394}},
               {"c\xcc\x8c" "e\xcc\x81 \xc4\x90ur\xc4\x91" "evac", 7, {13152, 963, 50327, 324, 50996, 5120, 580}},
               {"<|im_start|>user\n12345", 8, {151644, 872, 198, 16, 17, 18, 19, 20}},
               {"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c", 3, {108386, 3837, 99489}}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct ids x = {{0}, 0};
    ck_assert_int_eq(mtpq_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), collect, &x, &err), MTPQ_OK);
    ck_assert_msg(x.n == cases[i].n, "case %zu: %d ids", i, x.n);
    for (int k = 0; k < x.n; k++) ck_assert_msg(x.v[k] == cases[i].ids[k], "case %zu id %d: %d", i, k, x.v[k]);
  }
  ck_assert(mtpq_tokenizer_is_added(t, 151644));
  size_t n;
  const unsigned char *b = mtpq_tokenizer_bytes(t, 9707, &n);
  ck_assert(b && n == 5 && memcmp(b, "Hello", 5) == 0);
  /* safe cut: after the last newline followed by a letter/digit */
  ck_assert_uint_eq(mtpq_tokenizer_safe_cut(t, "ab\n cd\nef", 9), 7);
  ck_assert_uint_eq(mtpq_tokenizer_safe_cut(t, "ab\n  ", 5), 0);
  mtpq_tokenizer_free(t);
}
END_TEST

START_TEST(test_tokenizer_unsupported) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "tokenizer.json");
  struct mtpq_tokenizer *t = NULL;
  struct mtpq_err err = {0};
  const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
  tu_write(p, wp, strlen(wp));
  ck_assert_int_eq(mtpq_tokenizer_load(p, &t, &err), MTPQ_E_UNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "WordPiece"));
  const char *nfkc = "{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}";
  tu_write(p, nfkc, strlen(nfkc));
  ck_assert_int_eq(mtpq_tokenizer_load(p, &t, &err), MTPQ_E_UNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "normalizer NFKC"));
  tu_write(p, "{", 1);
  ck_assert_int_eq(mtpq_tokenizer_load(p, &t, &err), MTPQ_E_CONFIG_JSON);
  tu_rmtree(dir);
  free(p);
  free(dir);
}
END_TEST

struct sum {
  uint64_t total;
  int calls;
};
static void add(void *ctx, int32_t id, uint64_t c) {
  struct sum *s = ctx;
  s->total += c + (uint64_t)id;
  s->calls++;
}

START_TEST(test_counts_plain_zstd_and_errors) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "c.tsv"), *pz = tu_path(dir, "c.tsv.zst");
  const char *good = "0\t5\n7\t10\r\n\n42\t1\n";
  tu_write(p, good, strlen(good));
  struct sum s = {0, 0};
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_counts_read(p, 100, add, &s, &err), MTPQ_OK);
  ck_assert_int_eq(s.calls, 3);
  ck_assert_uint_eq(s.total, 5 + 17 + 43);
  /* the same, zstd-compressed as two frames */
  char z[512];
  size_t n1 = ZSTD_compress(z, sizeof z, good, 5, 3);
  size_t n2 = ZSTD_compress(z + n1, sizeof z - n1, good + 5, strlen(good) - 5, 3);
  ck_assert(!ZSTD_isError(n1) && !ZSTD_isError(n2));
  tu_write(pz, z, n1 + n2);
  s = (struct sum){0, 0};
  ck_assert_msg(mtpq_counts_read(pz, 100, add, &s, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_uint_eq(s.total, 5 + 17 + 43);
  /* corrupt frame, truncated frame */
  z[n1 + 6] ^= 0x55;
  tu_write(pz, z, n1 + n2);
  ck_assert_int_eq(mtpq_counts_read(pz, 100, add, &s, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "c.tsv.zst"));
  z[n1 + 6] ^= 0x55;
  tu_write(pz, z, n1 + n2 - 3);
  ck_assert_int_eq(mtpq_counts_read(pz, 100, add, &s, &err), MTPQ_E_BAD_VALUE);
  /* bad lines */
  static const char *bad[] = {"1 5\n", "1\t-5\n", "x\t5\n", "1\t5x\n", "1\t99999999999999999999\n", "\t5\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_write(p, bad[i], strlen(bad[i]));
    ck_assert_msg(mtpq_counts_read(p, 100, add, &s, &err) == MTPQ_E_BAD_VALUE, "case %zu", i);
    ck_assert_ptr_nonnull(strstr(err.msg, "c.tsv:1"));
  }
  tu_write(p, "100\t1\n", 6);
  ck_assert_int_eq(mtpq_counts_read(p, 100, add, &s, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "beyond the vocabulary"));
  tu_rmtree(dir);
  free(p);
  free(pz);
  free(dir);
}
END_TEST

START_TEST(test_build_vocab_rules) {
  char *dir = tu_scratch();
  char *prefix = tu_path(dir, "dv");
  struct mtpq_vocab_input in = {MTPQ_TESTDATA "/tiny-qwen3next/counts/prose_train.tsv", 1.0};
  struct mtpq_vocab_params p = {TOK, &in, 1, NULL, 0, NULL, NULL, 0, 1000, prefix};
  struct mtpq_vocab_summary s;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_vocab_build(&p, &s, &err), MTPQ_E_INVAL); /* below the forced set */
  ck_assert_ptr_nonnull(strstr(err.msg, "forced set has 17958 ids"));
  p.size = 200000;
  ck_assert_int_eq(mtpq_vocab_build(&p, &s, &err), MTPQ_E_INVAL);
  /* An output directory that does not exist: nothing is left behind. */
  char *bad = tu_path(dir, "missing/dv");
  p.size = 40000;
  p.out_prefix = bad;
  ck_assert_int_ne(mtpq_vocab_build(&p, &s, &err), MTPQ_OK);
  p.out_prefix = prefix;
  ck_assert_msg(mtpq_vocab_build(&p, &s, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_uint_eq(s.forced_total, 17958);
  free(s.report_json);
  struct stat sb;
  char *st = tu_path(dir, "dv.safetensors"), *pt = tu_path(dir, "dv.pt"), *js = tu_path(dir, "dv.json");
  ck_assert_int_eq(stat(st, &sb), 0);
  ck_assert_int_eq(stat(pt, &sb), 0);
  ck_assert_int_eq(stat(js, &sb), 0);
  tu_rmtree(dir);
  free(st), free(pt), free(js), free(bad), free(prefix), free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("vocab");
  TCase *tc = tcase_create("vocab");
  tcase_add_test(tc, test_utf8_and_nfc);
  tcase_add_test(tc, test_tokenizer_known_ids);
  tcase_add_test(tc, test_tokenizer_unsupported);
  tcase_add_test(tc, test_counts_plain_zstd_and_errors);
  tcase_add_test(tc, test_build_vocab_rules);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return tu_run_suite(s, 0);
}
