/* Unit tests for hub/ without a server: the range plan of a partial fetch
 * (hub_plan_spans: gaps merged under the threshold, the per-file budget
 * kept by merging the smallest gaps) and the drafter recipe's selection of
 * tensors by name (mtpq_drafter_select). The fetch itself is tested against
 * the fake Hub (tests/interop/test_hub_download.py, test_hub_scale.py). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "hub/fetch.h"
#include "quant/drafter.h"
#include "testutil.h"

static size_t plan(const uint64_t (*be)[2], size_t n, uint64_t gap, size_t budget, struct hub_span *out) {
  struct hub_piece p[16];
  for (size_t i = 0; i < n; i++) p[i] = (struct hub_piece){be[i][0], be[i][1], 0};
  return hub_plan_spans(p, n, gap, budget, out);
}

START_TEST(test_spans_gap) {
  struct hub_span s[16];
  const uint64_t a[][2] = {{0, 10}, {10, 20}, {25, 30}, {100, 110}, {111, 120}};
  ck_assert_uint_eq(plan(a, 5, 0, 16, s), 4); /* only touching pieces merge */
  ck_assert_uint_eq(s[0].b, 0);
  ck_assert_uint_eq(s[0].e, 20);
  ck_assert_uint_eq(s[1].b, 25);
  ck_assert_uint_eq(s[1].e, 30);
  ck_assert_uint_eq(plan(a, 5, 5, 16, s), 2); /* gaps of 5 and 1 merge, 70 does not */
  ck_assert_uint_eq(s[0].b, 0);
  ck_assert_uint_eq(s[0].e, 30);
  ck_assert_uint_eq(s[1].b, 100);
  ck_assert_uint_eq(s[1].e, 120);
  ck_assert_uint_eq(plan(a, 5, 1000, 16, s), 1);
  ck_assert_uint_eq(s[0].b, 0);
  ck_assert_uint_eq(s[0].e, 120);
  ck_assert_uint_eq(plan(a, 0, 5, 16, s), 0);
  const uint64_t nested[][2] = {{0, 50}, {10, 20}, {60, 70}}; /* a piece inside another keeps the outer end */
  ck_assert_uint_eq(plan(nested, 3, 0, 16, s), 2);
  ck_assert_uint_eq(s[0].e, 50);
}
END_TEST

START_TEST(test_spans_budget) {
  struct hub_span s[16];
  /* gaps: 40, 10, 30, 10, 50 */
  const uint64_t a[][2] = {{0, 10}, {50, 60}, {70, 80}, {110, 120}, {130, 140}, {190, 200}};
  ck_assert_uint_eq(plan(a, 6, 0, 4, s), 4); /* the two gaps of 10 go */
  const uint64_t want4[][2] = {{0, 10}, {50, 80}, {110, 140}, {190, 200}};
  for (int i = 0; i < 4; i++) {
    ck_assert_uint_eq(s[i].b, want4[i][0]);
    ck_assert_uint_eq(s[i].e, want4[i][1]);
  }
  ck_assert_uint_eq(plan(a, 6, 0, 2, s), 2); /* then 30, then 40 */
  ck_assert_uint_eq(s[0].b, 0);
  ck_assert_uint_eq(s[0].e, 140);
  ck_assert_uint_eq(s[1].b, 190);
  ck_assert_uint_eq(s[1].e, 200);
  ck_assert_uint_eq(plan(a, 6, 0, 5, s), 5); /* a tie at the threshold: the left gap of 10 merges */
  ck_assert_uint_eq(s[1].b, 50);
  ck_assert_uint_eq(s[1].e, 80);
  ck_assert_uint_eq(s[2].b, 110);
  ck_assert_uint_eq(s[2].e, 120);
  ck_assert_uint_eq(plan(a, 6, 0, 1, s), 1);
  ck_assert_uint_eq(s[0].e, 200);
  ck_assert_uint_eq(plan(a, 6, 0, 0, s), 1); /* a budget of 0 means 1 */
  /* gap 15 leaves four spans; the budget of 3 then takes the smallest gap left (30) */
  ck_assert_uint_eq(plan(a, 6, 15, 3, s), 3);
  const uint64_t want3[][2] = {{0, 10}, {50, 140}, {190, 200}};
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(s[i].b, want3[i][0]);
    ck_assert_uint_eq(s[i].e, want3[i][1]);
  }
}
END_TEST

static void select_names(int tied, const char *const *names, size_t n, const char *want) {
  unsigned char keep[32] = {0};
  mtpq_drafter_select(tied, names, n, keep);
  char got[33] = {0};
  for (size_t i = 0; i < n; i++) got[i] = keep[i] ? '1' : '0';
  ck_assert_str_eq(got, want);
}

START_TEST(test_drafter_select) {
  const char *const next[] = {"model.embed_tokens.weight",
                              "lm_head.weight",
                              "mtp.fc.weight",
                              "model.layers.46.mlp.experts.3.up_proj.input_scale",
                              "model.layers.47.mlp.experts.3.up_proj.input_scale",
                              "model.layers.47.mlp.experts.3.up_proj.weight_scale_2",
                              "model.layers.47.self_attn.o_proj.input_scale",
                              "model.layers.47.mlp.experts.0.down_proj.input_scale",
                              "mtp.layers.0.mlp.experts.0.up_proj.weight"};
  select_names(0, next, 9, "011010011");  /* untied: lm_head, mtp.*, layer 47's expert input_scales */
  select_names(-1, next, 9, "011010011"); /* the config does not say: lm_head.weight exists, so untied */
  select_names(1, next, 9, "101010011");  /* tied: the embedding is the head */
  const char *const mm[] = {"model.language_model.embed_tokens.weight", "model.visual.blocks.0.attn.qkv.weight",
                            "model.language_model.layers.39.mlp.experts.7.gate_proj.input_scale",
                            "mtp.layers.0.mlp.experts.gate_up_proj"};
  select_names(-1, mm, 4, "1011"); /* no lm_head.weight: tied; the trunk prefix is language_model's */
  const char *const dense[] = {"model.embed_tokens.weight", "lm_head.weight", "model.layers.3.mlp.up_proj.weight"};
  select_names(0, dense, 3, "010"); /* no expert input_scale anywhere */
}
END_TEST

static Suite *hub_suite(void) {
  Suite *s = suite_create("hub");
  TCase *tc = tcase_create("plan");
  tcase_add_test(tc, test_spans_gap);
  tcase_add_test(tc, test_spans_budget);
  tcase_add_test(tc, test_drafter_select);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(hub_suite(), 0); }
