/* The tensors of a target the drafter recipe reads, decided from names
 * alone, so a Hub fetch can ask for only those (hub/partial.c). Mirrors
 * what mtpq_drafter_plan reads: mtp.*, the head (io/model.c's choice of
 * lm_head or the tied embedding) and the last trunk layer's expert
 * input_scales (drafter.c's target_expert_scales). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/util.h"
#include "quant/drafter.h"

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* L of "<prefix>layers.L.mlp.experts.*_proj.input_scale", else -1 */
static long expert_scale_layer(const char *name, const char *prefix) {
  const size_t pl = strlen(prefix);
  if (!starts_with(name, prefix) || !starts_with(name + pl, "layers.") || !strstr(name, ".mlp.experts.") ||
      !mtpq__ends_with(name, "_proj.input_scale"))
    return -1;
  char *end;
  const long L = strtol(name + pl + 7, &end, 10);
  return end != name + pl + 7 && *end == '.' ? L : -1;
}

void mtpq_drafter_select(int tied, const char *const *names, size_t n, unsigned char *keep) {
  const char *prefix = "model.";
  int have_head = 0;
  for (size_t i = 0; i < n; i++) {
    if (starts_with(names[i], "model.language_model.")) prefix = "model.language_model.";
    if (strcmp(names[i], "lm_head.weight") == 0) have_head = 1;
  }
  if (tied < 0) tied = !have_head; /* io/model.c: no lm_head.weight means the embedding is the head */
  char embed[64];
  snprintf(embed, sizeof embed, "%sembed_tokens.", prefix);
  long last = -1;
  for (size_t i = 0; i < n; i++) {
    const long L = expert_scale_layer(names[i], prefix);
    if (L > last) last = L;
  }
  for (size_t i = 0; i < n; i++)
    keep[i] = starts_with(names[i], "mtp.") ||
              (tied ? starts_with(names[i], embed) : starts_with(names[i], "lm_head.")) ||
              (last >= 0 && expert_scale_layer(names[i], prefix) == last);
}
