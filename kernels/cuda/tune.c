/* The CUDA backend's settings; see kernels/cuda/tune.h. */
#include "kernels/cuda/tune.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/runtime.h"

static const struct key {
  const char *name;
  size_t off;
  int lo, hi;
} keys[] = {
    {"head_mma", offsetof(struct mtpq_cuda_tune, head_mma), 0, 1},
    {"dmma", offsetof(struct mtpq_cuda_tune, dmma), 0, 1},
    {"glu", offsetof(struct mtpq_cuda_tune, glu), 0, 1},
    {"lt", offsetof(struct mtpq_cuda_tune, lt), 0, 8},
    {"attn_ring", offsetof(struct mtpq_cuda_tune, attn_ring), 0, 2},
    {"attn_x", offsetof(struct mtpq_cuda_tune, attn_x), 0, 65536},
    {"kv_ef", offsetof(struct mtpq_cuda_tune, kv_ef), -1, 1},
    {"mvs", offsetof(struct mtpq_cuda_tune, mvs), -1, 1},
    {"dmv", offsetof(struct mtpq_cuda_tune, dmv), 0, 1},
    {"tattn", offsetof(struct mtpq_cuda_tune, tattn), 0, 1},
    {"tattn_slots", offsetof(struct mtpq_cuda_tune, tattn_slots), 0, 65536},
};
#define NKEYS (sizeof keys / sizeof keys[0])

struct mtpq_cuda_tune mtpq_cuda_tune_default(void) {
  struct mtpq_cuda_tune t = {1, 1, 1, 1, 1, 5, 2, 0, -1, -1, 0, 0, 0};
  return t;
}

static int *field(struct mtpq_cuda_tune *t, const struct key *k) { return (int *)(void *)((char *)t + k->off); }
static int cfield(const struct mtpq_cuda_tune *t, const struct key *k) {
  int v;
  memcpy(&v, (const char *)t + k->off, sizeof v);
  return v;
}

static enum mtpq_status parse_int(const char *what, const char *s, size_t n, int lo, int hi, int *out,
                                  struct mtpq_err *err) {
  char buf[32];
  if (n == 0 || n >= sizeof buf)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: value \"%.*s\" is not an integer in %d..%d", what, (int)n, s, lo, hi);
  memcpy(buf, s, n), buf[n] = 0;
  char *end = NULL;
  errno = 0;
  long v = strtol(buf, &end, 10);
  if (errno || *end || end == buf || v < lo || v > hi)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: value \"%s\" is not an integer in %d..%d", what, buf, lo, hi);
  *out = (int)v;
  return MTPQ_OK;
}

enum mtpq_status mtpq_cuda_tune_parse(const char *graphs, const char *pdl, const char *tune,
                                      struct mtpq_cuda_tune *t, struct mtpq_err *err) {
  *t = mtpq_cuda_tune_default();
  enum mtpq_status st = MTPQ_OK;
  if (graphs) st = parse_int("MTPQ_CUDA_GRAPHS", graphs, strlen(graphs), 0, 1, &t->graphs, err);
  if (!st && pdl) st = parse_int("MTPQ_CUDA_PDL", pdl, strlen(pdl), 0, 1, &t->pdl, err);
  for (const char *p = tune; p && *p && !st;) {
    size_t n = strcspn(p, ",");
    const char *eq = memchr(p, '=', n);
    if (!eq) {
      st = mtpq_err_set(err, MTPQ_E_INVAL, "MTPQ_CUDA_TUNE: \"%.*s\" is not key=value", (int)n, p);
      break;
    }
    size_t kn = (size_t)(eq - p);
    const struct key *k = NULL;
    for (size_t i = 0; i < NKEYS && !k; i++)
      if (strlen(keys[i].name) == kn && !strncmp(keys[i].name, p, kn)) k = &keys[i];
    if (!k) {
      char known[256] = "";
      for (size_t i = 0; i < NKEYS; i++) snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                                                  i ? ", " : "", keys[i].name);
      st = mtpq_err_set(err, MTPQ_E_INVAL, "MTPQ_CUDA_TUNE: unknown key \"%.*s\" (known: %s)", (int)kn, p, known);
      break;
    }
    char what[64];
    snprintf(what, sizeof what, "MTPQ_CUDA_TUNE %s", k->name);
    st = parse_int(what, eq + 1, n - kn - 1, k->lo, k->hi, field(t, k), err);
    p += n + (p[n] == ',');
  }
  return st;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct mtpq_cuda_tune env_tune;
static enum mtpq_status env_st;
static struct mtpq_err env_err;

static void read_env(void) {
  env_st = mtpq_cuda_tune_parse(getenv("MTPQ_CUDA_GRAPHS"), getenv("MTPQ_CUDA_PDL"), getenv("MTPQ_CUDA_TUNE"),
                                &env_tune, &env_err);
}

enum mtpq_status mtpq_cuda_tune_get(struct mtpq_cuda_tune *t, struct mtpq_err *err) {
  pthread_once(&once, read_env);
  *t = env_tune;
  if (env_st && err) *err = env_err;
  return env_st;
}

enum mtpq_status mtpq_cuda_tune_override(const char *graphs, const char *pdl, const char *tune,
                                         struct mtpq_err *err) {
  pthread_once(&once, read_env);
  env_st = mtpq_cuda_tune_parse(graphs, pdl, tune, &env_tune, &env_err);
  if (env_st && err) *err = env_err;
  return env_st;
}

void mtpq_cuda_tune_describe(const struct mtpq_cuda_tune *t, char *buf, size_t cap) {
  const struct mtpq_cuda_tune d = mtpq_cuda_tune_default();
  size_t n = (size_t)snprintf(buf, cap, "graphs %s, pdl %s, tune:", t->graphs ? "on" : "OFF", t->pdl ? "on" : "OFF");
  for (size_t i = 0; i < NKEYS && n < cap; i++) {
    const int v = cfield(t, &keys[i]), dv = cfield(&d, &keys[i]);
    n += (size_t)snprintf(buf + n, cap - n, " %s=%d%s", keys[i].name, v, v != dv ? "*" : "");
  }
}

enum mtpq_status mtpq_cuda_settings(char *buf, size_t cap, struct mtpq_err *err) {
  struct mtpq_cuda_tune t;
  enum mtpq_status st = mtpq_cuda_tune_get(&t, err);
  if (!st) mtpq_cuda_tune_describe(&t, buf, cap);
  return st;
}
