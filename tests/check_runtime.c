/* The CPU drafter runtime against the independent PyTorch reference
 * (testdata/runtime/forward_ref.safetensors, made by
 * tests/bench/torch_mtp_reference.py with transformers' Qwen3-Next modules on
 * the GPU machine), the replay rules, and refused inputs. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kernels/accept_ci.h"
#include "kernels/cuda/tune.h"
#include "kernels/replay.h"
#include "kernels/traces.h"
#include "kernels/runtime.h"
#include "testutil.h"
#include "hand_over.h"

#define T MTPQ_TESTDATA "/tiny-qwen3next"

static double rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return sqrt(num / den);
}

START_TEST(test_forward_matches_torch) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(mtpq_rt_model_open(T "/model", NULL, &d, &err) == MTPQ_OK, "%s", err.msg);
  struct mtpq_st_file *ref = NULL, *tr = NULL;
  ck_assert_int_eq(mtpq_st_open(MTPQ_TESTDATA "/runtime/forward_ref.safetensors", &ref, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_st_open(T "/traces.safetensors", &tr, &err), MTPQ_OK);
  const struct mtpq_tensor *xt = mtpq_st_find(tr, "code_heldout.0.tokens"), *ht = mtpq_st_find(tr, "code_heldout.0.hidden");
  int64_t P = 192, H = mtpq_rt_model_hidden(d), V = mtpq_rt_model_vocab(d);
  struct mtpq_session *s = NULL;
  ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, 288, 0, &s, &err), MTPQ_OK);
  int32_t tok[192];
  int64_t pos[192];
  memcpy(tok, (const int32_t *)xt->data + 1, sizeof tok);
  for (int i = 0; i < 192; i++) pos[i] = i;
  float *out = malloc((size_t)(P * H) * 4), *lg = malloc((size_t)V * 4);
  ck_assert_int_eq(mtpq_session_step(s, 192, tok, ht->data, 1, pos, out, &err), MTPQ_OK);
  /* every slot's output, and the argmax of every slot */
  const struct mtpq_tensor *oh = mtpq_st_find(ref, "out_hidden"), *am = mtpq_st_find(ref, "argmax"),
                           *l2 = mtpq_st_find(ref, "logits_last2");
  /* Bound 1e-4: K and V are cached in BF16, and an element whose float
   * value differs by an ulp between two implementations (summation order)
   * can round to neighbouring BF16 values, 2^-8 apart, which puts their
   * agreement at 1e-5 to 3e-5 (2.2e-5 here, on the GPU machine's torch;
   * 2e-5 held while both cached float32); a cache left unrounded against
   * this reference is 8.7e-4 off */
  double e = rel_err(out, oh->data, (size_t)(P * H));
  printf("drafter outputs vs torch: relative L2 error %.3g over %lld x %lld\n", e, (long long)P, (long long)H);
  ck_assert_msg(e < 1e-4, "drafter outputs: relative error %.3g vs torch (bound 1e-4)", e);
  int32_t want_arg[192];
  memcpy(want_arg, am->data, sizeof want_arg);
  for (int64_t i = 0; i < P; i++) {
    int32_t a;
    mtpq_session_head(s, out + i * H, &a, i >= P - 2 ? lg : NULL);
    ck_assert_msg(a == want_arg[i], "slot %lld: argmax %d, torch %d", (long long)i, a, want_arg[i]);
    if (i >= P - 2) {
      double le = rel_err(lg, (const float *)l2->data + (i - (P - 2)) * V, (size_t)V);
      printf("slot %lld logits vs torch: relative L2 error %.3g\n", (long long)i, le);
      ck_assert_msg(le < 1e-4, "slot %lld logits: relative error %.3g (bound 1e-4)", (long long)i, le);
    }
  }
  /* one chained step: the drafter's own output and draft at position P */
  int32_t t2 = want_arg[P - 1];
  int64_t p2 = P;
  float step[1024];
  ck_assert_int_eq(mtpq_session_step(s, 1, &t2, out + (P - 1) * H, 0, &p2, step, &err), MTPQ_OK);
  double se = rel_err(step, mtpq_st_find(ref, "step_hidden")->data, (size_t)H);
  printf("chained step vs torch: relative L2 error %.3g\n", se);
  ck_assert_msg(se < 1e-4, "chained step: relative error %.3g", se);
  int32_t a2, w2;
  mtpq_session_head(s, step, &a2, lg);
  memcpy(&w2, mtpq_st_find(ref, "step_argmax")->data, 4);
  ck_assert_int_eq(a2, w2);
  ck_assert(rel_err(lg, mtpq_st_find(ref, "step_logits")->data, (size_t)V) < 1e-4);
  free(out);
  free(lg);
  mtpq_session_close(s);
  mtpq_st_close(ref);
  mtpq_st_close(tr);
  mtpq_rt_model_close(d);
}
END_TEST

START_TEST(test_replay_rules_and_errors) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_int_eq(mtpq_rt_model_open(T "/model", NULL, &d, &err), MTPQ_OK);
  struct mtpq_session *s = NULL;
  ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, 8, 0, &s, &err), MTPQ_OK);
  int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint16_t hid[8 * 128] = {0};
  struct mtpq_accept_stats st = {0};
  ck_assert_int_eq(mtpq_replay_trace(s, x, hid, 8, 4, 0, &st, &err), MTPQ_E_INVAL); /* k < 1 */
  ck_assert_int_eq(mtpq_replay_trace(s, x, hid, 8, 8, 3, &st, &err), MTPQ_E_INVAL); /* no generated part */
  ck_assert_int_eq(mtpq_replay_trace(s, x, hid, 8, 4, 3, &st, &err), MTPQ_OK);
  /* 3 tokens after the first generated one: rounds cover them exactly */
  ck_assert_uint_ge(st.drafts, 1);
  ck_assert_uint_le(st.draft_tokens, 3 * st.drafts);
  uint64_t covered = st.drafts;
  for (int i = 0; i < 3; i++) covered += st.accepted[i];
  ck_assert_uint_eq(covered, 3); /* accepted + 1 per round = the tokens predicted */
  int64_t far = 9;
  float o[128];
  ck_assert_int_eq(mtpq_session_step(s, 1, x, hid, 1, &far, o, &err), MTPQ_E_INVAL);
  int32_t bad = 200000;
  int64_t p0 = 0;
  ck_assert_int_eq(mtpq_session_step(s, 1, &bad, hid, 1, &p0, o, &err), MTPQ_E_BAD_VALUE);
#ifndef MTPQ_HAVE_CUDA
  struct mtpq_session *g = NULL;
  ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CUDA, 8, 0, &g, &err), MTPQ_E_NO_GPU);
#endif
  mtpq_session_close(s);
  mtpq_rt_model_close(d);
}
END_TEST

/* Multi-sequence sessions: each sequence has its own cache (drafting two
 * sequences in one session equals drafting each in a session of its own,
 * whatever was prefilled into the other), the draft chain equals step +
 * head fed back by hand, and the selection survives a draft. */
START_TEST(test_sequences_and_draft) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_int_eq(mtpq_rt_model_open(T "/model", NULL, &d, &err), MTPQ_OK);
  enum { H = 128, PRE = 12, STEPS = 3 };
  float h[PRE * H], out[PRE * H];
  int32_t tok[2][PRE];
  int64_t pos[PRE];
  for (int i = 0; i < PRE * H; i++) h[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < PRE; i++) tok[0][i] = 100 + 7 * i, tok[1][i] = 5000 + 13 * i, pos[i] = i;
  struct mtpq_session *b = NULL, *one[2] = {NULL, NULL};
  ck_assert_int_eq(mtpq_session_open_batch(d, MTPQ_BACKEND_CPU, PRE + STEPS, 0, 2, &b, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_session_select(b, 2, &err), MTPQ_E_INVAL);
  for (int q = 0; q < 2; q++) {
    ck_assert_int_eq(mtpq_session_select(b, q, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_session_step(b, PRE - 2 * q, tok[q], h, 0, pos, out, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, PRE + STEPS, 0, &one[q], &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_session_step(one[q], PRE - 2 * q, tok[q], h, 0, pos, out, &err), MTPQ_OK);
  }
  int32_t t0[2] = {tok[0][PRE - 1], tok[1][PRE - 3]}, drafted[2 * STEPS], solo[STEPS];
  int64_t start[2] = {PRE, PRE - 2};
  ck_assert_int_eq(mtpq_session_draft(b, 2, t0, h, start, STEPS, drafted, &err), MTPQ_OK);
  for (int q = 0; q < 2; q++) {
    ck_assert_int_eq(mtpq_session_draft(one[q], 1, &t0[q], h + q * H, &start[q], STEPS, solo, &err), MTPQ_OK);
    for (int k = 0; k < STEPS; k++) ck_assert_int_eq(drafted[k * 2 + q], solo[k]);
  }
  /* by hand on sequence 0's own session: step, head, feed back */
  struct mtpq_session *m = NULL;
  ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, PRE + STEPS, 0, &m, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_session_step(m, PRE, tok[0], h, 0, pos, out, &err), MTPQ_OK);
  float x[H], y[H];
  memcpy(x, h, sizeof x);
  int32_t t = t0[0];
  for (int k = 0; k < STEPS; k++) {
    int64_t p = PRE + k;
    ck_assert_int_eq(mtpq_session_step(m, 1, &t, x, 0, &p, y, &err), MTPQ_OK);
    mtpq_session_head(m, y, &t, NULL);
    ck_assert_int_eq(t, drafted[k * 2]);
    memcpy(x, y, sizeof x);
  }
  /* the selection is kept across a draft; bad counts are refused */
  ck_assert_int_eq(mtpq_session_select(b, 1, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_session_draft(b, 1, t0, h, start, STEPS, drafted, &err), MTPQ_OK);
  int64_t p1 = PRE - 2;
  ck_assert_int_eq(mtpq_session_step(b, 1, &t0[1], h, 0, &p1, out, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_session_draft(b, 3, t0, h, start, STEPS, drafted, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_session_draft(b, 1, t0, h, start, 0, drafted, &err), MTPQ_E_INVAL);
  struct mtpq_session *bad = NULL;
  ck_assert_int_eq(mtpq_session_open_batch(d, MTPQ_BACKEND_CPU, 4, 0, MTPQ_MAX_SEQS + 1, &bad, &err), MTPQ_E_INVAL);
  mtpq_session_close(m);
  mtpq_session_close(one[0]), mtpq_session_close(one[1]);
  mtpq_session_close(b);
  mtpq_rt_model_close(d);
}
END_TEST

/* the live loop's hand-over (tests/hand_over.h) on the CPU backend */
START_TEST(test_hand_over) { check_hand_over(T "/model", NULL, MTPQ_BACKEND_CPU); }
END_TEST

/* The CUDA settings: defaults, every key in and out of range, kill switches,
 * and what is refused (the parser is plain C: checked here, on CPU-only
 * machines too). */
START_TEST(test_cuda_settings) {
  struct mtpq_err err = {0};
  struct mtpq_cuda_tune t, d = mtpq_cuda_tune_default();
  ck_assert_int_eq(mtpq_cuda_tune_parse(NULL, NULL, NULL, &t, &err), MTPQ_OK);
  ck_assert_int_eq(memcmp(&t, &d, sizeof t), 0);
  ck_assert(d.graphs == 1 && d.pdl == 1 && d.head_mma == 1 && d.dmma == 1 && d.glu == 1 && d.lt == 5 &&
            d.attn_ring == 2 && d.attn_x == 0 && d.kv_ef == -1 && d.mvs == -1 && d.tattn == 0 && d.tattn_slots == 0 &&
            d.dmv == 0);
  ck_assert_int_eq(mtpq_cuda_tune_parse(
                       "0", "0",
                       "head_mma=0,dmma=0,glu=0,lt=8,attn_ring=0,attn_x=7,kv_ef=1,mvs=1,tattn=1,tattn_slots=4,dmv=1",
                       &t, &err),
                   MTPQ_OK);
  ck_assert(t.graphs == 0 && t.pdl == 0 && t.head_mma == 0 && t.dmma == 0 && t.glu == 0 && t.lt == 8 &&
            t.attn_ring == 0 && t.attn_x == 7 && t.kv_ef == 1 && t.mvs == 1 && t.tattn == 1 && t.tattn_slots == 4 &&
            t.dmv == 1);
  char buf[512];
  mtpq_cuda_tune_describe(&t, buf, sizeof buf);
  ck_assert_msg(strstr(buf, "graphs OFF") && strstr(buf, "pdl OFF") && strstr(buf, "lt=8*") &&
                strstr(buf, "kv_ef=1*"), "%s", buf);
  mtpq_cuda_tune_describe(&d, buf, sizeof buf);
  ck_assert_msg(!strchr(buf, '*') && strstr(buf, "graphs on, pdl on"), "%s", buf);
  static const struct {
    const char *graphs, *tune, *says;
  } bad[] = {
      {NULL, "bogus=1", "unknown key \"bogus\""},
      {NULL, "lt=9", "lt: value \"9\""},
      {NULL, "kv_ef=-2", "kv_ef: value \"-2\""},
      {NULL, "mvs=2", "mvs: value \"2\""},
      {NULL, "tattn=2", "tattn: value \"2\""},
      {NULL, "tattn_slots=-1", "tattn_slots: value \"-1\""},
      {NULL, "attn_ring=1x", "attn_ring: value \"1x\""},
      {NULL, "dmma", "not key=value"},
      {NULL, "dmma=", "dmma: value \"\""},
      {"2", NULL, "MTPQ_CUDA_GRAPHS: value \"2\""},
      {"", NULL, "MTPQ_CUDA_GRAPHS: value \"\""},
      {NULL, "glu=0,,", "not key=value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(mtpq_cuda_tune_parse(bad[i].graphs, NULL, bad[i].tune, &t, &err), MTPQ_E_INVAL);
    ck_assert_msg(strstr(err.msg, bad[i].says), "%s: %s", bad[i].tune ? bad[i].tune : bad[i].graphs, err.msg);
  }
  /* the process's settings: read once, replaceable for tests */
  ck_assert_int_eq(mtpq_cuda_tune_override(NULL, NULL, "attn_x=3", &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_cuda_tune_get(&t, &err), MTPQ_OK);
  ck_assert_int_eq(t.attn_x, 3);
  ck_assert_int_eq(mtpq_cuda_tune_override(NULL, NULL, "nope=1", &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_cuda_settings(buf, sizeof buf, &err), MTPQ_E_INVAL); /* every CUDA session would refuse */
  ck_assert_int_eq(mtpq_cuda_tune_override(NULL, NULL, NULL, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_cuda_settings(buf, sizeof buf, &err), MTPQ_OK);
}
END_TEST

/* The trace file: the shipped traces read, their domains and metadata; a
 * file with no traces, a tokens tensor without its hidden states, mixed
 * hidden sizes, a bad metadata value and tokens outside the vocabulary are
 * refused naming the file and tensor. */
START_TEST(test_traces) {
  struct mtpq_err err = {0};
  struct mtpq_traces *t = NULL;
  ck_assert_int_eq(mtpq_traces_open(T "/traces.safetensors", &t, &err), MTPQ_OK);
  ck_assert_uint_eq(mtpq_traces_count(t), 24);
  int code = 0, prose = 0;
  for (size_t i = 0; i < mtpq_traces_count(t); i++) {
    const struct mtpq_trace *x = mtpq_traces_at(t, i);
    code += !strcmp(x->domain, "code_heldout"), prose += !strcmp(x->domain, "prose_heldout");
    ck_assert_int_eq(x->hidden, 128);
  }
  ck_assert_int_eq(code + prose, 24);
  int64_t k = 0;
  ck_assert_int_eq(mtpq_traces_meta_int(t, "k", 1, 16, 9, &k, &err), MTPQ_OK);
  ck_assert_int_eq(k, 3);
  ck_assert_int_eq(mtpq_traces_meta_int(t, "prompt_len", 1, 1000, 192, &k, &err), MTPQ_OK);
  ck_assert_int_eq(k, 192); /* absent: the default */
  ck_assert_int_eq(mtpq_traces_meta_int(t, "hidden", 1, 1000, 1, &k, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "metadata hidden"));
  ck_assert_int_eq(mtpq_traces_check(t, 64, 151936, &err), MTPQ_E_DTYPE_MISMATCH);
  ck_assert_ptr_nonnull(strstr(err.msg, "hidden size 128 but the drafter's is 64"));
  ck_assert_int_eq(mtpq_traces_check(t, 128, 100, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "outside the vocabulary (100)"));
  mtpq_traces_close(t);
  char *dir = tu_scratch(), *p = tu_path(dir, "t.safetensors");
  tu_write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  ck_assert_int_eq(mtpq_traces_open(p, &t, &err), MTPQ_E_NOT_FOUND);
  ck_assert_msg(strstr(err.msg, "no traces") && strstr(err.msg, p), "%s", err.msg);
  tu_write_st(p, "{\"d.0.tokens\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  ck_assert_int_eq(mtpq_traces_open(p, &t, &err), MTPQ_E_DTYPE_MISMATCH);
  ck_assert_msg(strstr(err.msg, "d.0.hidden") && strstr(err.msg, "no such tensor"), "%s", err.msg);
  tu_write_st(p, "{\"d.0.tokens\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"d.0.hidden\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[4,8]},"
                 "\"d.1.tokens\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                 "\"d.1.hidden\":{\"dtype\":\"BF16\",\"shape\":[1,4],\"data_offsets\":[12,20]}}", 20);
  ck_assert_int_eq(mtpq_traces_open(p, &t, &err), MTPQ_E_DTYPE_MISMATCH);
  ck_assert_msg(strstr(err.msg, "hidden size 4"), "%s", err.msg);
  tu_rmtree(dir);
  free(p), free(dir);
}
END_TEST

/* The per-domain replay of a trace file equals the sum of its traces'
 * replays, domain by domain, and the metrics are what their definitions
 * say (a file of the shipped traces' first trace of each domain and one
 * more of the first: three replays, cheap under the sanitizers). */
START_TEST(test_replay_traces) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_int_eq(mtpq_rt_model_open(T "/model", NULL, &d, &err), MTPQ_OK);
  struct mtpq_traces *full = NULL;
  ck_assert_int_eq(mtpq_traces_open(T "/traces.safetensors", &full, &err), MTPQ_OK);
  static const char *pick[] = {"code_heldout.0", "prose_heldout.0", "code_heldout.1"};
  char *dir = tu_scratch(), *p = tu_path(dir, "three.safetensors");
  struct mtpq_st_writer *w = NULL;
  ck_assert_int_eq(mtpq_stw_init(p, &w, &err), MTPQ_OK);
  const struct mtpq_trace *x[3];
  for (int i = 0; i < 3; i++) {
    x[i] = NULL;
    for (size_t j = 0; j < mtpq_traces_count(full); j++)
      if (!strcmp(mtpq_traces_at(full, j)->name, pick[i])) x[i] = mtpq_traces_at(full, j);
    ck_assert_ptr_nonnull(x[i]);
    char n[64];
    int64_t sh[2] = {x[i]->n, x[i]->hidden};
    snprintf(n, sizeof n, "%s.tokens", pick[i]);
    ck_assert_int_eq(mtpq_stw_add(w, n, MTPQ_DTYPE_I32, 1, sh, &err), MTPQ_OK);
    snprintf(n, sizeof n, "%s.hidden", pick[i]);
    ck_assert_int_eq(mtpq_stw_add(w, n, MTPQ_DTYPE_BF16, 2, sh, &err), MTPQ_OK);
  }
  ck_assert_int_eq(mtpq_stw_begin(w, &err), MTPQ_OK);
  for (int i = 0; i < 3; i++) {
    char n[64];
    snprintf(n, sizeof n, "%s.tokens", pick[i]);
    ck_assert_int_eq(mtpq_stw_write_all(w, n, x[i]->tokens, (uint64_t)x[i]->n * 4, &err), MTPQ_OK);
    snprintf(n, sizeof n, "%s.hidden", pick[i]);
    ck_assert_int_eq(mtpq_stw_write_all(w, n, x[i]->hidden_bf16, (uint64_t)(x[i]->n * x[i]->hidden) * 2, &err),
                     MTPQ_OK);
  }
  ck_assert_int_eq(mtpq_stw_commit(w, &err), MTPQ_OK);
  mtpq_stw_free(w);
  struct mtpq_traces *t = NULL;
  ck_assert_int_eq(mtpq_traces_open(p, &t, &err), MTPQ_OK);
  struct mtpq_accept_report r;
  ck_assert_int_eq(mtpq_replay_traces(d, MTPQ_BACKEND_CPU, t, 192, 3, 0, &r, &err), MTPQ_OK);
  ck_assert_int_eq(r.ndom, 2);
  ck_assert_str_eq(r.dom[0], "code_heldout");
  ck_assert_str_eq(r.dom[1], "prose_heldout");
  /* each trace alone, by hand: the domains hold their own traces' sums */
  struct mtpq_accept_stats one[3], code = {0};
  for (int i = 0; i < 3; i++) {
    int32_t *xc = malloc((size_t)x[i]->n * 4);
    memcpy(xc, x[i]->tokens, (size_t)x[i]->n * 4);
    struct mtpq_session *s = NULL;
    memset(&one[i], 0, sizeof one[i]);
    ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, x[i]->n, 0, &s, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_replay_trace(s, xc, x[i]->hidden_bf16, x[i]->n, 192, 3, &one[i], &err), MTPQ_OK);
    mtpq_session_close(s);
    free(xc);
  }
  mtpq_accept_add(&code, &one[0]), mtpq_accept_add(&code, &one[2]);
  ck_assert_uint_eq(r.st[0].drafts, code.drafts);
  ck_assert_uint_eq(r.st[1].drafts, one[1].drafts);
  ck_assert_uint_eq(r.all.drafts, code.drafts + one[1].drafts);
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(r.st[0].accepted[i], code.accepted[i]);
    ck_assert_uint_eq(r.all.accepted[i], code.accepted[i] + one[1].accepted[i]);
  }
  double acc = 0;
  for (int i = 0; i < 3; i++) acc += (double)r.all.accepted[i];
  ck_assert(fabs(mtpq_accept_mal(&r.all) - (1.0 + acc / (double)r.all.drafts)) < 1e-12);
  ck_assert(fabs(mtpq_accept_perpos(&r.all, 1) - (double)r.all.accepted[1] / (double)r.all.drafts) < 1e-12);
  ck_assert(fabs(mtpq_accept_cond(&r.all, 1) - (double)r.all.accepted[1] / (double)r.all.reached[1]) < 1e-12);
  struct mtpq_accept_stats zero = {0};
  ck_assert(mtpq_accept_mal(&zero) == 0 && mtpq_accept_cond(&zero, 0) == 0 && mtpq_accept_step_us(&zero) == 0);
  /* each trace's own counts, in file order, with its domain: the intervals' units */
  ck_assert_uint_eq(r.ntr, 3);
  for (size_t i = 0; i < 3; i++) {
    int j = 0;
    while (strcmp(pick[j], mtpq_traces_at(t, i)->name)) j++;
    ck_assert_uint_eq(r.tr[i].drafts, one[j].drafts);
    for (int a = 0; a < 3; a++) ck_assert_uint_eq(r.tr[i].accepted[a], one[j].accepted[a]);
    ck_assert_int_eq(r.tr_dom[i], j == 1);
  }
  mtpq_accept_report_free(&r);
  ck_assert(r.tr == NULL && r.ntr == 0);
  mtpq_traces_close(t);
  mtpq_traces_close(full);
  mtpq_rt_model_close(d);
  tu_rmtree(dir);
  free(p), free(dir);
}
END_TEST

/* units of k = 1: rounds and how many accepted their draft */
static struct mtpq_accept_stats unit1(uint64_t rounds, uint64_t acc) {
  struct mtpq_accept_stats u = {0};
  u.k = 1, u.drafts = rounds, u.draft_tokens = rounds, u.accepted[0] = acc, u.reached[0] = rounds;
  return u;
}

START_TEST(test_bootstrap) {
  struct mtpq_err err = {0};
  struct mtpq_accept_ci c, c2;
  /* two traces, one accepting nothing (MAL 1), one everything (MAL 2): a
   * resample holds both twice a quarter of the time each, so the 2.5% and
   * 97.5% points are the two traces' own MALs; the point is the pooled 1.5 */
  struct mtpq_accept_stats u[4] = {unit1(10, 0), unit1(10, 10)};
  ck_assert_int_eq(mtpq_accept_bootstrap(u, NULL, NULL, 2, 0, &c, &err), MTPQ_OK);
  ck_assert(fabs(c.mal - 1.5) < 1e-12 && c.mal_ci[0] == 1.0 && c.mal_ci[1] == 2.0);
  ck_assert(c.perpos_ci[0][0] == 0.0 && c.perpos_ci[0][1] == 1.0 && !c.paired && c.units == 2);
  /* the same draws every call */
  ck_assert_int_eq(mtpq_accept_bootstrap(u, NULL, NULL, 2, 0, &c2, &err), MTPQ_OK);
  ck_assert(!memcmp(&c, &c2, sizeof c));
  /* identical traces: no spread */
  struct mtpq_accept_stats same[5];
  for (int i = 0; i < 5; i++) same[i] = unit1(20, 7);
  ck_assert_int_eq(mtpq_accept_bootstrap(same, NULL, NULL, 5, 500, &c, &err), MTPQ_OK);
  ck_assert(c.mal_ci[0] == c.mal && c.mal_ci[1] == c.mal && fabs(c.mal - 1.35) < 1e-12);
  /* paired: traces that differ a lot, a drafter a little better on each;
   * the difference's interval is narrow and excludes 0, the drafter's own
   * interval is wide; a drafter paired with itself differs by exactly 0 */
  struct mtpq_accept_stats b[12], q[12];
  for (int i = 0; i < 12; i++) b[i] = unit1(100, (uint64_t)(8 * i)), q[i] = unit1(100, (uint64_t)(8 * i + 3));
  ck_assert_int_eq(mtpq_accept_bootstrap(q, b, NULL, 12, 0, &c, &err), MTPQ_OK);
  ck_assert(c.paired && fabs(c.dmal - 0.03) < 1e-12);
  ck_assert(fabs(c.dmal_ci[0] - 0.03) < 1e-12 && fabs(c.dmal_ci[1] - 0.03) < 1e-12); /* the same +3 on every trace */
  ck_assert(c.mal_ci[1] - c.mal_ci[0] > 0.2 && c.mal_ci[0] < c.mal && c.mal < c.mal_ci[1]);
  ck_assert_int_eq(mtpq_accept_bootstrap(b, b, NULL, 12, 0, &c, &err), MTPQ_OK);
  ck_assert(c.dmal == 0 && c.dmal_ci[0] == 0 && c.dmal_ci[1] == 0);
  /* a selection (a domain): only those units */
  const int sel[2] = {1, 0};
  ck_assert_int_eq(mtpq_accept_bootstrap(u, NULL, sel, 1, 0, &c, &err), MTPQ_OK);
  ck_assert(c.mal == 2.0 && c.mal_ci[0] == 2.0 && c.mal_ci[1] == 2.0 && c.units == 1);
}
END_TEST

int main(void) {
  Suite *su = suite_create("runtime");
  TCase *tc = tcase_create("runtime");
  tcase_add_test(tc, test_forward_matches_torch);
  tcase_add_test(tc, test_replay_rules_and_errors);
  tcase_add_test(tc, test_sequences_and_draft);
  tcase_add_test(tc, test_hand_over);
  tcase_add_test(tc, test_cuda_settings);
  tcase_add_test(tc, test_traces);
  tcase_add_test(tc, test_replay_traces);
  tcase_add_test(tc, test_bootstrap);
  tcase_set_timeout(tc, 300); /* (about 70 s under ASan + UBSan) */
  suite_add_tcase(su, tc);
  return tu_run_suite(su, 0);
}
