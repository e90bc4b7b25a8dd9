/* Helpers shared by the Check test programs: scratch directories, seeded
 * random bytes and file writing. Header-only so each test program stays one
 * translation unit plus this file. */
#ifndef MTPQ_TESTUTIL_H
#define MTPQ_TESTUTIL_H

#include <check.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/gpu_quant.h"

/* xorshift64*: deterministic bytes from a seed. */
static inline uint64_t tu_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

static inline void tu_fill(void *p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tu_rand(&s) >> 56);
}

/* A fresh scratch directory under TMPDIR (or /tmp); caller frees the string. */
static inline char *tu_scratch(void) {
  const char *base = getenv("TMPDIR");
  char *d = malloc(512);
  snprintf(d, 512, "%s/mtpq-test-XXXXXX", base && *base ? base : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(d));
  return d;
}

static inline int tu_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static inline void tu_rmtree(const char *d) { nftw(d, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static inline char *tu_path(const char *dir, const char *name) {
  char *p = malloc(strlen(dir) + strlen(name) + 2);
  sprintf(p, "%s/%s", dir, name);
  return p;
}

static inline void tu_write(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  if (n) ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* Write a safetensors file from a header string (length field = strlen) and
 * `data_len` bytes of deterministic data. */
static inline void tu_write_st(const char *path, const char *header, size_t data_len) {
  size_t hl = strlen(header);
  unsigned char *buf = calloc(1, 8 + hl + data_len + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  tu_fill(buf + 8 + hl, data_len, 7);
  tu_write(path, buf, 8 + hl + data_len);
  free(buf);
}

static inline unsigned char *tu_slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return b;
}

/* A gpu test program's first step: 1, with the reason printed, where no
 * device can run (the program then returns 77, ctest's skip). */
static inline int tu_no_gpu(void) {
  struct mtpq_err err = {0};
  if (mtpq_gpu_available(&err)) return 0;
  printf("skip: %s\n", err.msg);
  return 1;
}

/* Run suite s; the program's exit status (EXIT_FAILURE when a test
 * failed). nofork: every test in this process (CK_NOFORK), for programs
 * that initialise CUDA, which a forked child cannot use. */
static inline int tu_run_suite(Suite *s, int nofork) {
  SRunner *sr = srunner_create(s);
  if (nofork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
