/* The live loop's hand-over (kernels/runtime.h: mtpq_session_step_at,
 * mtpq_session_draft_at, mtpq_backend_*) against the host-memory calls on
 * the same backend: check_runtime runs it on the CPU, check_gpu_runtime on
 * the CUDA backend. Include after <check.h>, <math.h>, <string.h> and
 * kernels/runtime.h; target and drafter as mtpq_rt_model_open takes them. */
#ifndef MTPQ_TESTS_HAND_OVER_H
#define MTPQ_TESTS_HAND_OVER_H

#include "quant/numerics.h"

/* Two sequences of 20 and 17 slots (chunks of 8 on the device, queued
 * without a wait) caught up from hidden rows in the backend's memory, read
 * rounded to BF16, then 3 drafts each in one call: the outputs equal
 * mtpq_session_step's on host rows rounded by hand, bit for bit; the drafts
 * equal the head on each last output followed by mtpq_session_draft; a
 * NULL row drafts as a row of zeros; bad calls are refused. */
static void check_hand_over(const char *target, const char *drafter, enum mtpq_backend be) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(mtpq_rt_model_open(target, drafter, &d, &err) == MTPQ_OK, "%s", err.msg);
  enum { PRE = 20, STEPS = 3, MAXH = 4096 };
  const int64_t H = mtpq_rt_model_hidden(d);
  ck_assert(H <= MAXH);
  const size_t rows = (size_t)(PRE * H) * sizeof(float);
  float *h = malloc(rows), *hr = malloc(rows), *ref = malloc(2 * rows), *got = malloc(2 * rows);
  ck_assert(h && hr && ref && got);
  for (int64_t i = 0; i < PRE * H; i++) { /* values BF16 does not hold: the rounding shows */
    h[i] = sinf(0.37f * (float)i) * 1.7f + 0.013f;
    hr[i] = mtpq_bf16_to_f32(mtpq_f32_to_bf16(h[i]));
  }
  int32_t tok[2][PRE];
  int64_t pos[PRE];
  for (int i = 0; i < PRE; i++) tok[0][i] = 100 + 7 * i, tok[1][i] = 5000 + 13 * i, pos[i] = i;
  const int n[2] = {PRE, PRE - 3};
  int64_t start[2] = {PRE, PRE - 3};
  /* the host-memory calls: sequence q's outputs at ref + q PRE H */
  struct mtpq_session *a = NULL, *b = NULL;
  ck_assert_msg(mtpq_session_open_batch(d, be, PRE + STEPS + 1, 0, 2, &a, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_msg(mtpq_session_open_batch(d, be, PRE + STEPS + 1, 0, 2, &b, &err) == MTPQ_OK, "%s", err.msg);
  static float last[2 * MAXH]; /* the two last outputs side by side */
  int32_t d0[2], want[2 * STEPS], drafted[2 * STEPS];
  for (int q = 0; q < 2; q++) {
    float *r = ref + (size_t)(q * PRE) * H;
    ck_assert_int_eq(mtpq_session_select(a, q, &err), MTPQ_OK);
    ck_assert_msg(mtpq_session_step(a, n[q], tok[q], hr, 0, pos, r, &err) == MTPQ_OK, "%s", err.msg);
    memcpy(last + q * H, r + (n[q] - 1) * H, (size_t)H * sizeof(float));
    mtpq_session_head(a, last + q * H, &d0[q], NULL);
    want[q] = d0[q];
  }
  ck_assert_msg(mtpq_session_draft(a, 2, d0, last, start, STEPS - 1, want + 2, &err) == MTPQ_OK, "%s", err.msg);
  /* the same from the backend's memory, no copy back between the calls */
  float *dh = mtpq_backend_alloc(be, rows), *dout = mtpq_backend_alloc(be, 2 * rows);
  ck_assert(dh && dout);
  ck_assert_msg(mtpq_backend_copy(be, dh, h, rows, &err) == MTPQ_OK, "%s", err.msg);
  const float *at[2];
  for (int q = 0; q < 2; q++) {
    float *o = dout + (size_t)(q * PRE) * H;
    ck_assert_int_eq(mtpq_session_select(b, q, &err), MTPQ_OK);
    ck_assert_msg(mtpq_session_step_at(b, n[q], tok[q], dh, 1, pos, o, &err) == MTPQ_OK, "%s", err.msg);
    at[q] = o + (n[q] - 1) * H;
  }
  ck_assert_msg(mtpq_session_draft_at(b, 2, at, start, STEPS, drafted, &err) == MTPQ_OK, "%s", err.msg);
  for (int i = 0; i < 2 * STEPS; i++)
    ck_assert_msg(drafted[i] == want[i], "draft %d of sequence %d: %d, the host calls' %d", i / 2, i % 2, drafted[i],
                  want[i]);
  ck_assert_msg(mtpq_backend_copy(be, got, dout, 2 * rows, &err) == MTPQ_OK, "%s", err.msg);
  for (int q = 0; q < 2; q++)
    for (int64_t i = 0; i < n[q] * H; i++) {
      const size_t at_i = (size_t)(q * PRE) * (size_t)H + (size_t)i;
      ck_assert_msg(memcmp(&got[at_i], &ref[at_i], sizeof *got) == 0,
                    "sequence %d slot %lld value %lld: %.9g against %.9g", q, (long long)(i / H), (long long)(i % H),
                    got[at_i], ref[at_i]);
    }
  /* unrounded (bf16 = 0) the outputs differ from the rounded rows' */
  ck_assert_int_eq(mtpq_session_select(b, 0, &err), MTPQ_OK);
  ck_assert_msg(mtpq_session_step_at(b, 4, tok[0], dh, 0, pos, dout, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_msg(mtpq_backend_copy(be, got, dout, (size_t)(4 * H) * 4, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert(memcmp(got, ref, (size_t)(4 * H) * 4) != 0);
  /* a NULL row drafts as zeros */
  int32_t z1[STEPS], z2[STEPS];
  const float *none[1] = {NULL}, *zrow[1] = {dout};
  memset(got, 0, (size_t)H * 4);
  ck_assert_msg(mtpq_backend_copy(be, dout, got, (size_t)H * 4, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_int_eq(mtpq_session_draft_at(b, 1, none, start, STEPS, z1, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_session_draft_at(b, 1, zrow, start, STEPS, z2, &err), MTPQ_OK);
  ck_assert(!memcmp(z1, z2, sizeof z1));
  /* refused: more sequences than the session, no steps, a position past the cache */
  ck_assert_int_eq(mtpq_session_draft_at(b, 3, at, start, STEPS, drafted, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_session_draft_at(b, 2, at, start, 0, drafted, &err), MTPQ_E_INVAL);
  const int64_t far[2] = {PRE + STEPS + 1, 0};
  ck_assert_int_eq(mtpq_session_draft_at(b, 2, at, far, STEPS, drafted, &err), MTPQ_E_INVAL);
  mtpq_backend_free(be, dh), mtpq_backend_free(be, dout);
  mtpq_session_close(a), mtpq_session_close(b);
  free(h), free(hr), free(ref), free(got);
  mtpq_rt_model_close(d);
}

#endif
