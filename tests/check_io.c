/* Unit tests for io/: status table, dtypes, safetensors writer/reader round
 * trip, hostile headers (one expected status each), sharded repos, config. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/config.h"
#include "io/model.h"
#include "io/repo.h"
#include "io/safetensors.h"
#include "io/util.h"
#include "testutil.h"

/* ---- status + dtype tables ---------------------------------------------- */

START_TEST(test_status_table) {
  size_t n = mtpq_status_count();
  ck_assert_uint_gt(n, 40);
  for (size_t i = 0; i < n; i++) {
    enum mtpq_status s = mtpq_status_at(i);
    for (size_t j = i + 1; j < n; j++) ck_assert_int_ne(s, mtpq_status_at(j));
    ck_assert_str_ne(mtpq_status_str(s), "unknown status");
    if (s != MTPQ_OK) ck_assert_int_ne(mtpq_status_exit_code(s), 0);
  }
  ck_assert_int_eq(mtpq_status_exit_code(MTPQ_E_ST_OVERLAP), 4);
  ck_assert_int_eq(mtpq_status_exit_code(MTPQ_E_IO_OPEN), 3);
  ck_assert_int_eq(mtpq_status_exit_code(MTPQ_E_DIFFERS), 9);
  ck_assert_str_eq(mtpq_status_name(MTPQ_E_ST_GAP), "E_ST_GAP");
}
END_TEST

START_TEST(test_dtype_table) {
  static const struct {
    const char *name;
    size_t size;
  } want[] = {{"BOOL", 1}, {"U8", 1},   {"I8", 1},   {"I16", 2},     {"U16", 2},
              {"I32", 4},  {"U32", 4},  {"I64", 8},  {"U64", 8},     {"F16", 2},
              {"BF16", 2}, {"F32", 4},  {"F64", 8},  {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  ck_assert_int_eq(MTPQ_DTYPE_COUNT, 15);
  for (size_t i = 0; i < 15; i++) {
    enum mtpq_dtype d = mtpq_dtype_parse(want[i].name, strlen(want[i].name));
    ck_assert_int_ne(d, MTPQ_DTYPE_COUNT);
    ck_assert_str_eq(mtpq_dtype_name(d), want[i].name);
    ck_assert_uint_eq(mtpq_dtype_size(d), want[i].size);
  }
  ck_assert_int_eq(mtpq_dtype_parse("F8", 2), MTPQ_DTYPE_COUNT);
  ck_assert_int_eq(mtpq_dtype_parse("bf16", 4), MTPQ_DTYPE_COUNT);
}
END_TEST

/* ---- writer / reader round trip ----------------------------------------- */

struct rt_tensor {
  char name[64];
  enum mtpq_dtype dtype;
  int rank;
  int64_t shape[4];
  size_t nbytes;
  unsigned char *bytes;
};

static int make_random_set(struct rt_tensor *ts, uint64_t seed) {
  uint64_t s = seed + 99;
  int n = 0;
  for (int d = 0; d < MTPQ_DTYPE_COUNT; d++) {
    for (int rep = 0; rep < 2; rep++) {
      struct rt_tensor *t = &ts[n];
      snprintf(t->name, sizeof t->name, "blk.%d.%s.w%u", n, mtpq_dtype_name((enum mtpq_dtype)d),
               (unsigned)(tu_rand(&s) % 1000));
      t->dtype = (enum mtpq_dtype)d;
      t->rank = (int)(tu_rand(&s) % 4); /* includes 0-dim scalars */
      size_t numel = 1;
      for (int k = 0; k < t->rank; k++) {
        t->shape[k] = (int64_t)(tu_rand(&s) % 7); /* includes zero-size dims */
        numel *= (size_t)t->shape[k];
      }
      t->nbytes = numel * mtpq_dtype_size(t->dtype);
      t->bytes = malloc(t->nbytes + 1);
      tu_fill(t->bytes, t->nbytes, seed * 1000 + (uint64_t)n);
      n++;
    }
  }
  return n;
}

static void write_set(const char *path, struct rt_tensor *ts, int n, int pieces) {
  struct mtpq_st_writer *w = NULL;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_stw_init(path, &w, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_metadata(w, "format", "pt", &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_metadata(w, "a \"quoted\"\nkey", "v\\al", &err), MTPQ_OK);
  for (int i = n - 1; i >= 0; i--) /* declared out of order on purpose */
    ck_assert_int_eq(mtpq_stw_add(w, ts[i].name, ts[i].dtype, ts[i].rank, ts[i].shape, &err),
                     MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_begin(w, &err), MTPQ_OK);
  for (int i = 0; i < n; i++) {
    if (pieces && ts[i].nbytes > 1) {
      size_t h = ts[i].nbytes / 2;
      ck_assert_int_eq(mtpq_stw_write(w, ts[i].name, h, ts[i].bytes + h, ts[i].nbytes - h, &err), MTPQ_OK);
      ck_assert_int_eq(mtpq_stw_write(w, ts[i].name, 0, ts[i].bytes, h, &err), MTPQ_OK);
    } else {
      ck_assert_int_eq(mtpq_stw_write_all(w, ts[i].name, ts[i].bytes, ts[i].nbytes, &err), MTPQ_OK);
    }
  }
  ck_assert_msg(mtpq_stw_commit(w, &err) == MTPQ_OK, "commit: %s", err.msg);
  mtpq_stw_free(w);
}

START_TEST(test_roundtrip_random) {
  char *dir = tu_scratch();
  char *p1 = tu_path(dir, "a.safetensors"), *p2 = tu_path(dir, "b.safetensors");
  struct rt_tensor ts[64];
  int n = make_random_set(ts, (uint64_t)_i + 1);
  write_set(p1, ts, n, 0);
  write_set(p2, ts, n, 1);

  /* Deterministic: same content written in a different order and in pieces
   * gives the same bytes. */
  size_t n1, n2;
  unsigned char *b1 = tu_slurp(p1, &n1), *b2 = tu_slurp(p2, &n2);
  ck_assert_uint_eq(n1, n2);
  ck_assert_int_eq(memcmp(b1, b2, n1), 0);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | b1[i];
  ck_assert_uint_eq((8 + hl) % 8, 0);
  ck_assert_int_eq(b1[8], '{');
  free(b1);
  free(b2);

  struct mtpq_st_file *f = NULL;
  struct mtpq_err err = {0};
  ck_assert_msg(mtpq_st_open(p1, &f, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_uint_eq(mtpq_st_count(f), (size_t)n);
  ck_assert_str_eq(mtpq_st_metadata_get(f, "format"), "pt");
  ck_assert_str_eq(mtpq_st_metadata_get(f, "a \"quoted\"\nkey"), "v\\al");
  for (int i = 0; i < n; i++) {
    const struct mtpq_tensor *t = mtpq_st_find(f, ts[i].name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ts[i].dtype);
    ck_assert_int_eq(t->rank, ts[i].rank);
    for (int k = 0; k < t->rank; k++) ck_assert_int_eq(t->shape[k], ts[i].shape[k]);
    ck_assert_uint_eq(t->nbytes, ts[i].nbytes);
    ck_assert_msg(ts[i].nbytes == 0 || memcmp(t->data, ts[i].bytes, ts[i].nbytes) == 0,
                  "tensor %s bytes differ", ts[i].name);
    /* The writer orders data by element size, so views are aligned. */
    ck_assert_uint_eq((uintptr_t)t->data % mtpq_dtype_size(t->dtype), 0);
  }
  for (size_t i = 1; i < mtpq_st_count(f); i++)
    ck_assert_int_lt(strcmp(mtpq_st_at(f, i - 1)->name, mtpq_st_at(f, i)->name), 0);
  mtpq_st_close(f);
  for (int i = 0; i < n; i++) free(ts[i].bytes);
  tu_rmtree(dir);
  free(p1);
  free(p2);
  free(dir);
}
END_TEST

START_TEST(test_writer_abort_leaves_nothing) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "out.safetensors");
  struct mtpq_st_writer *w = NULL;
  struct mtpq_err err = {0};
  int64_t shape[1] = {4};
  unsigned char four[4] = {1, 2, 3, 4};
  ck_assert_int_eq(mtpq_stw_init(p, &w, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_add(w, "x", MTPQ_DTYPE_U8, 1, shape, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_add(w, "x", MTPQ_DTYPE_U8, 1, shape, &err), MTPQ_E_ST_DUPLICATE);
  ck_assert_int_eq(mtpq_stw_add(w, "__metadata__", MTPQ_DTYPE_U8, 1, shape, &err), MTPQ_E_ST_NAME);
  ck_assert_int_eq(mtpq_stw_begin(w, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_write(w, "x", 2, four, 4, &err), MTPQ_E_INVAL); /* past the end */
  ck_assert_int_eq(mtpq_stw_write(w, "y", 0, four, 1, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_stw_write(w, "x", 0, four, 2, &err), MTPQ_OK);
  /* Incomplete tensor: commit refuses and nothing appears under the name. */
  ck_assert_int_eq(mtpq_stw_commit(w, &err), MTPQ_E_INVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "2 of 4 bytes"));
  mtpq_stw_free(w);
  struct stat sb;
  ck_assert_int_ne(stat(p, &sb), 0);
  /* And the temporary file is gone too: the directory is empty. */
  ck_assert_int_eq(rmdir(dir), 0);
  free(p);
  free(dir);
}
END_TEST

/* ---- hostile files ------------------------------------------------------- */

struct hostile {
  const char *label;
  const char *header; /* NULL: raw bytes below */
  size_t data_len;
  enum mtpq_status want;
};

#define T1(off) "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":" off "}}"

static const struct hostile hostile_cases[] = {
    {"header_not_json", "{not json", 0, MTPQ_E_ST_HEADER_JSON},
    {"trailing_garbage", "{}x", 0, MTPQ_E_ST_HEADER_JSON},
    {"truncated_object", "{\"a\":{\"dtype\":\"U8\"", 0, MTPQ_E_ST_HEADER_JSON},
    {"header_array", "[1,2]", 0, MTPQ_E_ST_HEADER_NOT_OBJECT},
    {"header_string", "\"hello\"", 0, MTPQ_E_ST_HEADER_NOT_OBJECT},
    {"deep_nesting", "{\"a\":[[[[[[[[[[[[1]]]]]]]]]]]]}", 0, MTPQ_E_ST_HEADER_DEPTH},
    {"entry_number", "{\"a\":5}", 0, MTPQ_E_ST_ENTRY_NOT_OBJECT},
    {"metadata_value_number", "{\"__metadata__\":{\"k\":1}}", 0, MTPQ_E_ST_METADATA},
    {"metadata_array", "{\"__metadata__\":[\"k\"]}", 0, MTPQ_E_ST_METADATA},
    {"empty_name", "{\"\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, MTPQ_E_ST_NAME},
    {"duplicate_name",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
     4, MTPQ_E_ST_DUPLICATE},
    {"dtype_unknown", "{\"a\":{\"dtype\":\"F7\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_DTYPE},
    {"dtype_missing", "{\"a\":{\"shape\":[4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_DTYPE},
    {"dtype_lowercase", "{\"a\":{\"dtype\":\"bf16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_DTYPE},
    {"shape_not_array", "{\"a\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SHAPE},
    {"shape_fraction", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SHAPE},
    {"shape_huge", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SHAPE},
    {"shape_string", "{\"a\":{\"dtype\":\"U8\",\"shape\":[\"4\"],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SHAPE},
    {"shape_negative", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SHAPE_NEGATIVE},
    {"rank_nine", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_RANK},
    {"numel_overflow", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4,
     MTPQ_E_ST_OVERFLOW},
    {"bytes_overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,4]}}", 4,
     MTPQ_E_ST_OVERFLOW},
    {"offsets_missing", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, MTPQ_E_ST_OFFSETS},
    {"offsets_one", T1("[4]"), 4, MTPQ_E_ST_OFFSETS},
    {"offsets_three", T1("[0,4,8]"), 4, MTPQ_E_ST_OFFSETS},
    {"offsets_negative", T1("[-4,0]"), 4, MTPQ_E_ST_OFFSETS},
    {"offsets_reversed", T1("[4,0]"), 4, MTPQ_E_ST_OFFSETS_ORDER},
    {"offsets_past_data", T1("[0,4000]"), 4, MTPQ_E_ST_OFFSETS_PAST_DATA},
    {"size_mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_SIZE_MISMATCH},
    {"overlap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
     12, MTPQ_E_ST_OVERLAP},
    {"gap_between",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
     12, MTPQ_E_ST_GAP},
    {"trailing_data", T1("[0,4]"), 16, MTPQ_E_ST_GAP},
    /* names and metadata must be UTF-8 (inspect --json would print invalid JSON): a lone continuation byte,
     * an overlong '/', a UTF-16 surrogate, a code point past U+10FFFF, a truncated sequence */
    {"name_lone_continuation", "{\"a\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     MTPQ_E_ST_NAME},
    {"name_overlong", "{\"\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_NAME},
    {"name_surrogate", "{\"\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_NAME},
    {"name_past_max", "{\"\xf4\x90\x80\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
     MTPQ_E_ST_NAME},
    {"name_truncated", "{\"ab\xe2\x82\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, MTPQ_E_ST_NAME},
    {"metadata_value_latin1", "{\"__metadata__\":{\"k\":\"caf\xe9\"}}", 0, MTPQ_E_ST_METADATA},
};

static void expect_open_fails(const char *path, enum mtpq_status want, const char *label) {
  struct mtpq_st_file *f = NULL;
  struct mtpq_err err = {0};
  enum mtpq_status st = mtpq_st_open(path, &f, &err);
  ck_assert_msg(st == want, "%s: got %s (%s), want %s", label, mtpq_status_name(st), err.msg,
                mtpq_status_name(want));
  ck_assert_ptr_null(f);
  ck_assert_msg(strstr(err.msg, path) != NULL, "%s: message does not name the file: %s", label,
                err.msg);
}

START_TEST(test_hostile_header) {
  const struct hostile *h = &hostile_cases[_i];
  char *dir = tu_scratch();
  char *p = tu_path(dir, "bad.safetensors");
  tu_write_st(p, h->header, h->data_len);
  expect_open_fails(p, h->want, h->label);
  tu_rmtree(dir);
  free(p);
  free(dir);
}
END_TEST

/* well-formed UTF-8 passes, ill-formed is caught at its first bad byte */
START_TEST(test_utf8_check) {
  ck_assert_int_eq(mtpq__utf8_bad_at("mtp.layers.0.\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 22), -1);
  ck_assert_int_eq(mtpq__utf8_bad_at("\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7), -1); /* U+FFFF, U+10FFFF */
  ck_assert_int_eq(mtpq__utf8_bad_at("ab\xe2\x82", 4), 2);
  ck_assert_int_eq(mtpq__utf8_bad_at("abc\xc1\xbf", 5), 3);
  ck_assert_int_eq(mtpq__utf8_bad_at("\xe0\x9f\xbf", 3), 0);  /* overlong 3-byte */
  ck_assert_int_eq(mtpq__utf8_bad_at("x\xed\xbf\xbf", 4), 1); /* surrogate */
  ck_assert_int_eq(mtpq__utf8_bad_at("\xc3\xa9\xff", 3), 2);
}
END_TEST

START_TEST(test_hostile_framing) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "bad.safetensors");
  unsigned char buf[32] = {0};
  /* 4 bytes: shorter than the length field. */
  tu_write(p, buf, 4);
  expect_open_fails(p, MTPQ_E_ST_TOO_SMALL, "too_small");
  /* Length 2^40: above the cap. */
  buf[5] = 1;
  tu_write(p, buf, 16);
  expect_open_fails(p, MTPQ_E_ST_HEADER_TOO_LARGE, "header_too_large");
  /* Length 1000 in a 20-byte file. */
  memset(buf, 0, sizeof buf);
  buf[0] = 0xe8;
  buf[1] = 0x03;
  tu_write(p, buf, 20);
  expect_open_fails(p, MTPQ_E_ST_HEADER_PAST_EOF, "header_past_eof");
  /* Length 0: empty header is not JSON. */
  memset(buf, 0, sizeof buf);
  tu_write(p, buf, 8);
  expect_open_fails(p, MTPQ_E_ST_HEADER_JSON, "empty_header");
  /* A directory, and a missing file. */
  expect_open_fails(dir, MTPQ_E_IO_OPEN, "directory");
  char *missing = tu_path(dir, "missing.safetensors");
  expect_open_fails(missing, MTPQ_E_IO_OPEN, "missing");
  free(missing);
  tu_rmtree(dir);
  free(p);
  free(dir);
}
END_TEST

/* Random byte flips of a valid file must never crash: each either loads or
 * fails with a format status. */
START_TEST(test_hostile_fuzz_flips) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "f.safetensors");
  struct rt_tensor ts[64];
  int n = make_random_set(ts, 5);
  write_set(p, ts, n, 0);
  size_t len;
  unsigned char *orig = tu_slurp(p, &len);
  uint64_t s = 12345;
  for (int it = 0; it < 300; it++) {
    unsigned char *b = malloc(len);
    memcpy(b, orig, len);
    int flips = 1 + (int)(tu_rand(&s) % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = (size_t)(tu_rand(&s) % (len < 600 ? len : 600));
      b[at] = (unsigned char)(tu_rand(&s) >> 56);
    }
    tu_write(p, b, len);
    struct mtpq_st_file *f = NULL;
    struct mtpq_err err = {0};
    enum mtpq_status st = mtpq_st_open(p, &f, &err);
    if (st == MTPQ_OK) mtpq_st_close(f);
    else ck_assert_int_eq(mtpq_status_exit_code(st), 4);
    free(b);
  }
  free(orig);
  for (int i = 0; i < n; i++) free(ts[i].bytes);
  tu_rmtree(dir);
  free(p);
  free(dir);
}
END_TEST

/* ---- repos --------------------------------------------------------------- */

static void write_small(const char *path, const char *name1, const char *name2) {
  struct mtpq_st_writer *w = NULL;
  struct mtpq_err err = {0};
  int64_t shape[2] = {2, 3};
  unsigned char bytes[12];
  tu_fill(bytes, sizeof bytes, 3);
  ck_assert_int_eq(mtpq_stw_init(path, &w, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_add(w, name1, MTPQ_DTYPE_BF16, 2, shape, &err), MTPQ_OK);
  if (name2) ck_assert_int_eq(mtpq_stw_add(w, name2, MTPQ_DTYPE_BF16, 2, shape, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_begin(w, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_write_all(w, name1, bytes, 12, &err), MTPQ_OK);
  if (name2) ck_assert_int_eq(mtpq_stw_write_all(w, name2, bytes, 12, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_commit(w, &err), MTPQ_OK);
  mtpq_stw_free(w);
}

static enum mtpq_status open_repo_with_index(const char *dir, const char *index,
                                             struct mtpq_err *err) {
  char *ip = tu_path(dir, "model.safetensors.index.json");
  tu_write(ip, index, strlen(index));
  free(ip);
  struct mtpq_repo *r = NULL;
  enum mtpq_status st = mtpq_repo_open(dir, &r, err);
  if (st == MTPQ_OK) {
    ck_assert_ptr_nonnull(r);
    mtpq_repo_close(r);
  }
  return st;
}

START_TEST(test_repo_index) {
  char *dir = tu_scratch();
  char *s1 = tu_path(dir, "s1.safetensors"), *s2 = tu_path(dir, "s2.safetensors");
  write_small(s1, "a.weight", "b.weight");
  write_small(s2, "c.weight", NULL);
  struct mtpq_err err = {0};
  const char *good = "{\"metadata\":{},\"weight_map\":{\"a.weight\":\"s1.safetensors\","
                     "\"b.weight\":\"s1.safetensors\",\"c.weight\":\"s2.safetensors\"}}";
  ck_assert_msg(open_repo_with_index(dir, good, &err) == MTPQ_OK, "%s", err.msg);

  struct mtpq_repo *r = NULL;
  ck_assert_int_eq(mtpq_repo_open(dir, &r, &err), MTPQ_OK);
  ck_assert_uint_eq(mtpq_repo_count(r), 3);
  ck_assert_uint_eq(mtpq_repo_shard_count(r), 2);
  ck_assert_int_eq(mtpq_repo_indexed(r), 1);
  const struct mtpq_tensor *c = mtpq_repo_find(r, "c.weight");
  ck_assert_ptr_nonnull(c);
  ck_assert_str_eq(mtpq_repo_shard_name(r, (size_t)c->shard), "s2.safetensors");
  ck_assert_ptr_null(mtpq_repo_find(r, "nope"));
  ck_assert_uint_eq(mtpq_repo_bytes(r), 36);
  mtpq_repo_close(r);

  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\": ", &err), MTPQ_E_IDX_JSON);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\": []}", &err), MTPQ_E_IDX_WEIGHT_MAP);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\": {}}", &err), MTPQ_E_IDX_WEIGHT_MAP);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\": {\"a.weight\": 3}}", &err),
                   MTPQ_E_IDX_WEIGHT_MAP);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\":{\"a.weight\":\"../s1.safetensors\"}}",
                                        &err), MTPQ_E_IDX_SHARD_NAME);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}", &err),
                   MTPQ_E_IDX_SHARD_NAME);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\":{\"a.weight\":\"s3.safetensors\"}}",
                                        &err), MTPQ_E_IO_OPEN);
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\":{\"zz.weight\":\"s1.safetensors\"}}",
                                        &err), MTPQ_E_IDX_TENSOR_MISSING);
  ck_assert_ptr_nonnull(strstr(err.msg, "zz.weight"));
  ck_assert_int_eq(open_repo_with_index(dir, "{\"weight_map\":{\"c.weight\":\"s1.safetensors\"}}",
                                        &err), MTPQ_E_IDX_TENSOR_MISSING);

  /* Without an index every *.safetensors counts; a name in two shards fails. */
  char *ip = tu_path(dir, "model.safetensors.index.json");
  unlink(ip);
  free(ip);
  ck_assert_int_eq(mtpq_repo_open(dir, &r, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_repo_indexed(r), 0);
  ck_assert_uint_eq(mtpq_repo_count(r), 3);
  mtpq_repo_close(r);
  char *s3 = tu_path(dir, "s3.safetensors");
  write_small(s3, "c.weight", NULL);
  ck_assert_int_eq(mtpq_repo_open(dir, &r, &err), MTPQ_E_IDX_CROSS_DUPLICATE);
  ck_assert_ptr_nonnull(strstr(err.msg, "c.weight"));
  /* A single file opens as a one-shard repo. */
  ck_assert_int_eq(mtpq_repo_open(s1, &r, &err), MTPQ_OK);
  ck_assert_uint_eq(mtpq_repo_count(r), 2);
  mtpq_repo_close(r);
  tu_rmtree(dir);
  char *empty = tu_scratch();
  ck_assert_int_eq(mtpq_repo_open(empty, &r, &err), MTPQ_E_REPO_EMPTY);
  tu_rmtree(empty);
  free(empty);
  free(s1);
  free(s2);
  free(s3);
  free(dir);
}
END_TEST

START_TEST(test_model_describe_fused_multimodal) {
  char *dir = tu_scratch();
  char *p = tu_path(dir, "model.safetensors");
  struct mtpq_st_writer *w = NULL;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_stw_init(p, &w, &err), MTPQ_OK);
  static const char *names[] = {"model.language_model.embed_tokens.weight",
                                "model.language_model.layers.0.input_layernorm.weight",
                                "model.language_model.layers.1.input_layernorm.weight",
                                "lm_head.weight", "mtp.fc.weight",
                                "mtp.layers.0.mlp.experts.down_proj",
                                "mtp.layers.0.mlp.experts.gate_up_proj",
                                "model.visual.blocks.0.attn.qkv.weight"};
  int64_t s2[2] = {4, 8}, s3[3] = {6, 8, 4};
  for (size_t i = 0; i < 8; i++) {
    int fused = strstr(names[i], "experts.") != NULL;
    ck_assert_int_eq(mtpq_stw_add(w, names[i], MTPQ_DTYPE_BF16, fused ? 3 : 2, fused ? s3 : s2, &err),
                     MTPQ_OK);
  }
  ck_assert_int_eq(mtpq_stw_begin(w, &err), MTPQ_OK);
  unsigned char zeros[6 * 8 * 4 * 2] = {0};
  for (size_t i = 0; i < 8; i++)
    ck_assert_int_eq(mtpq_stw_write_all(w, names[i], zeros, strstr(names[i], "experts.") ? 384 : 64, &err),
                     MTPQ_OK);
  ck_assert_int_eq(mtpq_stw_commit(w, &err), MTPQ_OK);
  mtpq_stw_free(w);
  struct mtpq_repo *r = NULL;
  ck_assert_int_eq(mtpq_repo_open(dir, &r, &err), MTPQ_OK);
  struct mtpq_model_desc d;
  mtpq_model_describe(r, NULL, &d);
  ck_assert_int_eq(d.multimodal, 1);
  ck_assert_str_eq(d.trunk_prefix, "model.language_model.");
  ck_assert_int_eq(d.family, MTPQ_FAMILY_QWEN3_5_MOE);
  ck_assert_int_eq(d.expert_layout, MTPQ_EXPERTS_FUSED);
  ck_assert_int_eq(d.mtp_experts, 6);
  ck_assert_int_eq(d.mtp_layers, 1);
  ck_assert_int_eq(d.trunk_layers, 2);
  ck_assert_int_eq(d.tied, 0);
  ck_assert_str_eq(d.lm_head->name, "lm_head.weight");
  ck_assert_str_eq(d.embed->name, "model.language_model.embed_tokens.weight");
  mtpq_repo_close(r);
  tu_rmtree(dir);
  free(p);
  free(dir);
}
END_TEST

/* ---- config -------------------------------------------------------------- */

START_TEST(test_config_rope_forms) {
  struct mtpq_model_config c;
  struct mtpq_err err = {0};
  const char *flat = "{\"model_type\":\"qwen3_next\",\"architectures\":[\"Qwen3NextForCausalLM\"],"
                     "\"hidden_size\":2048,\"num_attention_heads\":16,\"num_key_value_heads\":2,"
                     "\"head_dim\":256,\"vocab_size\":151936,\"rms_norm_eps\":1e-6,"
                     "\"rope_theta\":10000000,\"partial_rotary_factor\":0.25,\"num_experts\":512,"
                     "\"tie_word_embeddings\":false}";
  ck_assert_int_eq(mtpq_config_parse(flat, strlen(flat), "flat", &c, &err), MTPQ_OK);
  ck_assert_double_eq(c.rope_theta, 1e7);
  ck_assert_double_eq(c.partial_rotary_factor, 0.25);
  ck_assert_int_eq(c.head_dim, 256);
  ck_assert_int_eq(c.num_experts, 512);
  ck_assert_int_eq(c.tie_word_embeddings, 0);
  ck_assert_str_eq(c.architecture, "Qwen3NextForCausalLM");
  mtpq_config_free(&c);

  const char *nested = "{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"hidden_size\":2048,"
                       "\"num_attention_heads\":16,\"vocab_size\":248320,\"rms_norm_eps\":1e-6,"
                       "\"rope_parameters\":{\"rope_theta\":5000000.0,\"partial_rotary_factor\":0.5},"
                       "\"mtp_num_hidden_layers\":1}}";
  ck_assert_int_eq(mtpq_config_parse(nested, strlen(nested), "nested", &c, &err), MTPQ_OK);
  ck_assert_double_eq(c.rope_theta, 5e6);
  ck_assert_double_eq(c.partial_rotary_factor, 0.5);
  ck_assert_int_eq(c.head_dim, 128); /* hidden / heads when absent */
  ck_assert_int_eq(c.vocab_size, 248320);
  ck_assert_int_eq(c.mtp_num_hidden_layers, 1);
  ck_assert_int_eq(c.tie_word_embeddings, -1);
  mtpq_config_free(&c);

  const char *missing = "{\"hidden_size\":2048,\"num_attention_heads\":16,\"rms_norm_eps\":1e-6}";
  ck_assert_int_eq(mtpq_config_parse(missing, strlen(missing), "missing.json", &c, &err),
                   MTPQ_E_CONFIG_FIELD);
  ck_assert_ptr_nonnull(strstr(err.msg, "vocab_size"));
  const char *badtype = "{\"hidden_size\":\"big\",\"num_attention_heads\":16,\"vocab_size\":5,"
                        "\"rms_norm_eps\":1e-6}";
  ck_assert_int_eq(mtpq_config_parse(badtype, strlen(badtype), "b", &c, &err), MTPQ_E_CONFIG_FIELD);
  ck_assert_int_eq(mtpq_config_parse("{", 1, "x", &c, &err), MTPQ_E_CONFIG_JSON);
}
END_TEST

START_TEST(test_tiny_model) {
  const char *dir = MTPQ_TESTDATA "/tiny-qwen3next/model";
  struct mtpq_repo *r = NULL;
  struct mtpq_err err = {0};
  ck_assert_msg(mtpq_repo_open(dir, &r, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_uint_eq(mtpq_repo_count(r), 311);
  ck_assert_uint_eq(mtpq_repo_shard_count(r), 2);
  struct mtpq_model_config c;
  ck_assert_int_eq(mtpq_config_load(MTPQ_TESTDATA "/tiny-qwen3next/model/config.json", &c, &err),
                   MTPQ_OK);
  ck_assert_double_eq(c.rope_theta, 1e7);
  struct mtpq_model_desc d;
  mtpq_model_describe(r, &c, &d);
  ck_assert_int_eq(d.family, MTPQ_FAMILY_QWEN3_NEXT);
  ck_assert_int_eq(d.mtp_layers, 1);
  ck_assert_int_eq(d.mtp_experts, 16);
  ck_assert_int_eq(d.expert_layout, MTPQ_EXPERTS_PER_EXPERT);
  ck_assert_int_eq(d.tied, 1);
  ck_assert_str_eq(d.lm_head->name, "model.embed_tokens.weight");
  const struct mtpq_tensor *fc = mtpq_repo_find(r, "mtp.fc.weight");
  ck_assert_ptr_nonnull(fc);
  ck_assert_int_eq(fc->shape[0], 128);
  ck_assert_int_eq(fc->shape[1], 256);
  mtpq_config_free(&c);
  mtpq_repo_close(r);
}
END_TEST

static Suite *io_suite(void) {
  Suite *s = suite_create("io");
  TCase *tc = tcase_create("tables");
  tcase_add_test(tc, test_status_table);
  tcase_add_test(tc, test_dtype_table);
  suite_add_tcase(s, tc);
  tc = tcase_create("roundtrip");
  tcase_add_loop_test(tc, test_roundtrip_random, 0, 8);
  tcase_add_test(tc, test_writer_abort_leaves_nothing);
  suite_add_tcase(s, tc);
  tc = tcase_create("hostile");
  tcase_add_loop_test(tc, test_hostile_header, 0,
                      (int)(sizeof hostile_cases / sizeof hostile_cases[0]));
  tcase_add_test(tc, test_hostile_framing);
  tcase_add_test(tc, test_utf8_check);
  tcase_add_test(tc, test_hostile_fuzz_flips);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  tc = tcase_create("repo");
  tcase_add_test(tc, test_repo_index);
  tcase_add_test(tc, test_model_describe_fused_multimodal);
  tcase_add_test(tc, test_tiny_model);
  suite_add_tcase(s, tc);
  tc = tcase_create("config");
  tcase_add_test(tc, test_config_rope_forms);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(io_suite(), 0); }
