/* Greedy draft/verify replay; see kernels/replay.h. */
#include "kernels/replay.h"

#include <stdlib.h>
#include <string.h>

#include "io/util.h"

void mtpq_accept_add(struct mtpq_accept_stats *a, const struct mtpq_accept_stats *b) {
  a->k = b->k;
  a->drafts += b->drafts;
  a->draft_tokens += b->draft_tokens;
  for (int i = 0; i < MTPQ_MAX_K; i++) {
    a->accepted[i] += b->accepted[i];
    a->reached[i] += b->reached[i];
  }
  a->draft_s += b->draft_s;
  a->catchup_s += b->catchup_s;
  a->catchups += b->catchups;
}

double mtpq_accept_mal(const struct mtpq_accept_stats *s) {
  double acc = 0;
  for (int i = 0; i < s->k; i++) acc += (double)s->accepted[i];
  return s->drafts ? 1.0 + acc / (double)s->drafts : 0.0;
}
double mtpq_accept_cond(const struct mtpq_accept_stats *s, int i) {
  return s->reached[i] ? (double)s->accepted[i] / (double)s->reached[i] : 0.0;
}
double mtpq_accept_perpos(const struct mtpq_accept_stats *s, int i) {
  return s->drafts ? (double)s->accepted[i] / (double)s->drafts : 0.0;
}
double mtpq_accept_step_us(const struct mtpq_accept_stats *s) {
  return s->draft_tokens ? s->draft_s * 1e6 / (double)s->draft_tokens : 0.0;
}
double mtpq_accept_catchup_us(const struct mtpq_accept_stats *s) {
  return s->catchups ? s->catchup_s * 1e6 / (double)s->catchups : 0.0;
}
double mtpq_accept_round_us(const struct mtpq_accept_stats *s) {
  return (s->drafts ? s->draft_s * 1e6 / (double)s->drafts : 0.0) + mtpq_accept_catchup_us(s);
}
double mtpq_accept_tokens_per_s(const struct mtpq_accept_stats *s) {
  return s->draft_s + s->catchup_s > 0 ? (double)s->draft_tokens / (s->draft_s + s->catchup_s) : 0.0;
}

/* The traces against the model (mtpq_traces_check), and the prompt length
 * of traces that carry none: the file's prompt_len, else 192 (only read
 * when the caller gives no P > 0). */
static enum mtpq_status traces_begin(struct mtpq_rt_model *m, const struct mtpq_traces *t, int64_t P, int64_t *file_P,
                                     struct mtpq_err *err) {
  *file_P = 192;
  enum mtpq_status st = mtpq_traces_check(t, mtpq_rt_model_hidden(m), mtpq_rt_model_vocab(m), err);
  if (!st && P <= 0) st = mtpq_traces_meta_int(t, "prompt_len", 1, INT64_MAX, 192, file_P, err);
  return st;
}

/* trace x's prompt length: P when > 0, else its own prompt_len.NAME, else the file's */
static int64_t trace_prompt(int64_t P, const struct mtpq_trace *x, int64_t file_P) {
  return P > 0 ? P : x->prompt_len > 0 ? x->prompt_len : file_P;
}

enum mtpq_status mtpq_replay_traces(struct mtpq_rt_model *m, enum mtpq_backend be, const struct mtpq_traces *t,
                                    int64_t P, int k, int window, struct mtpq_accept_report *r,
                                    struct mtpq_err *err) {
  memset(r, 0, sizeof *r);
  r->all.k = k;
  int64_t Pf;
  enum mtpq_status st = traces_begin(m, t, P, &Pf, err);
  const size_t nt = mtpq_traces_count(t);
  r->tr = st ? NULL : calloc(nt ? nt : 1, sizeof *r->tr);
  r->tr_dom = st ? NULL : calloc(nt ? nt : 1, sizeof *r->tr_dom);
  if (!st && (!r->tr || !r->tr_dom)) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (size_t i = 0; i < mtpq_traces_count(t) && !st; i++) {
    const struct mtpq_trace *x = mtpq_traces_at(t, i);
    const int64_t Pi = trace_prompt(P, x, Pf);
    int di = 0;
    while (di < r->ndom && strcmp(r->dom[di], x->domain) != 0) di++;
    if (di == r->ndom) {
      if (r->ndom == MTPQ_MAX_DOMAINS)
        return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: more than %d domains (trace %s)", mtpq_traces_path(t),
                            MTPQ_MAX_DOMAINS, x->name);
      memcpy(r->dom[r->ndom++], x->domain, sizeof x->domain);
      r->st[di].k = k;
    }
    /* the tokens are mapped from the file, maybe unaligned: a copy */
    int32_t *xc = malloc((size_t)x->n * sizeof *xc);
    if (!xc) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    memcpy(xc, x->tokens, (size_t)x->n * sizeof *xc);
    struct mtpq_session *s = NULL;
    struct mtpq_accept_stats one = {0};
    st = mtpq_session_open(m, be, x->n, window, &s, err);
    if (!st) st = mtpq_replay_trace(s, xc, x->hidden_bf16, x->n, Pi, k, &one, err);
    if (st == MTPQ_E_INVAL && Pi >= x->n)
      st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: %s has %lld tokens, no continuation after a %lld-token prompt",
                        mtpq_traces_path(t), x->name, (long long)x->n, (long long)Pi);
    if (!st) {
      mtpq_accept_add(&r->st[di], &one), mtpq_accept_add(&r->all, &one);
      r->tr[r->ntr] = one, r->tr[r->ntr].k = k, r->tr_dom[r->ntr++] = di;
    }
    mtpq_session_close(s);
    free(xc);
  }
  return st;
}

void mtpq_accept_report_free(struct mtpq_accept_report *r) {
  free(r->tr), free(r->tr_dom);
  r->tr = NULL, r->tr_dom = NULL, r->ntr = 0;
}

enum mtpq_status mtpq_replay_trace(struct mtpq_session *s, const int32_t *x, const void *hidden_bf16,
                                   int64_t n, int64_t P, int k, struct mtpq_accept_stats *st,
                                   struct mtpq_err *err) {
  if (k < 1 || k > MTPQ_MAX_K) return mtpq_err_set(err, MTPQ_E_INVAL, "k = %d outside 1..%d", k, MTPQ_MAX_K);
  if (P < 1 || P >= n) return mtpq_err_set(err, MTPQ_E_INVAL, "prompt length %lld outside 1..%lld", (long long)P, (long long)(n - 1));
  st->k = k;
  int64_t H = mtpq_session_hidden(s);
  float *out = malloc((size_t)n * (size_t)H * sizeof *out);
  int32_t *tok = malloc((size_t)n * sizeof *tok);
  int64_t *pos = malloc((size_t)n * sizeof *pos);
  float *prev = malloc((size_t)H * sizeof *prev);
  if (!out || !tok || !pos || !prev) {
    free(out), free(tok), free(pos), free(prev);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  enum mtpq_status rc = MTPQ_OK;
  int64_t c = P, from = 0;
  while (!rc && c < n - 1) {
    int64_t m = c - from;
    for (int64_t t = 0; t < m; t++) tok[t] = x[from + t + 1], pos[t] = from + t;
    double t0 = mtpq__now();
    rc = mtpq_session_step(s, (int)m, tok, (const unsigned char *)hidden_bf16 + (size_t)from * (size_t)H * 2, 1,
                           pos, out, err);
    double t1 = mtpq__now();
    if (rc) break;
    if (from > 0) st->catchup_s += t1 - t0, st->catchups++;
    int keff = (int)(n - 1 - c < k ? n - 1 - c : k);
    int32_t d[MTPQ_MAX_K];
    memcpy(prev, out + (size_t)(m - 1) * (size_t)H, (size_t)H * sizeof *prev);
    mtpq_session_head(s, prev, &d[0], NULL);
    if (keff > 1) { /* steps 2..keff from d[0] and prev at position c */
      int64_t p1 = c;
      rc = mtpq_session_draft(s, 1, &d[0], prev, &p1, keff - 1, d + 1, err);
    }
    st->draft_s += mtpq__now() - t1;
    if (rc) break;
    int a = 0;
    while (a < keff && d[a] == x[c + 1 + a]) a++;
    st->drafts++;
    st->draft_tokens += (uint64_t)keff;
    for (int i = 0; i < a; i++) st->accepted[i]++;
    for (int i = 0; i <= a && i < keff; i++) st->reached[i]++;
    from = c;
    c += a + 1;
  }
  free(out), free(tok), free(pos), free(prev);
  return rc;
}

enum mtpq_status mtpq_first_drafts(struct mtpq_rt_model *m, enum mtpq_backend be, const struct mtpq_traces *t,
                                   int64_t P, int32_t **drafts, int32_t **truth, size_t *count, struct mtpq_err *err) {
  *drafts = *truth = NULL, *count = 0;
  int64_t Pf;
  enum mtpq_status st = traces_begin(m, t, P, &Pf, err);
  size_t cap = 0;
  for (size_t i = 0; i < mtpq_traces_count(t) && !st; i++) {
    const struct mtpq_trace *x = mtpq_traces_at(t, i);
    const int64_t Pi = trace_prompt(P, x, Pf);
    if (Pi < 1 || Pi >= x->n - 1) continue; /* no position to draft */
    cap += (size_t)(x->n - 1 - Pi);
  }
  int32_t *d = st ? NULL : malloc((cap ? cap : 1) * sizeof *d), *y = st ? NULL : malloc((cap ? cap : 1) * sizeof *y);
  if (!st && (!d || !y)) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  const int64_t H = mtpq_rt_model_hidden(m);
  enum { CHUNK = 256 };
  float *out = st ? NULL : malloc((size_t)CHUNK * (size_t)H * sizeof *out);
  int32_t tok[CHUNK];
  int64_t pos[CHUNK];
  if (!st && !out) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < mtpq_traces_count(t) && !st; i++) {
    const struct mtpq_trace *x = mtpq_traces_at(t, i);
    const int64_t Pi = trace_prompt(P, x, Pf);
    if (Pi < 1 || Pi >= x->n - 1) continue;
    struct mtpq_session *s = NULL;
    st = mtpq_session_open(m, be, x->n, 0, &s, err);
    /* slots 0 .. n - 3 in chunks; the head on those from P - 1 on */
    for (int64_t s0 = 0; !st && s0 < x->n - 2; s0 += CHUNK) {
      const int nb = (int)(x->n - 2 - s0 < CHUNK ? x->n - 2 - s0 : CHUNK);
      for (int j = 0; j < nb; j++) memcpy(&tok[j], &x->tokens[s0 + j + 1], sizeof *tok), pos[j] = s0 + j;
      st = mtpq_session_step(s, nb, tok, (const unsigned char *)x->hidden_bf16 + (size_t)s0 * (size_t)H * 2, 1, pos,
                             out, err);
      for (int j = 0; !st && j < nb; j++) {
        const int64_t slot = s0 + j;
        if (slot < Pi - 1) continue;
        mtpq_session_head(s, out + (size_t)j * (size_t)H, &d[k], NULL);
        memcpy(&y[k], &x->tokens[slot + 2], sizeof *y), k++;
      }
    }
    mtpq_session_close(s);
  }
  free(out);
  if (st) {
    free(d), free(y);
    return st;
  }
  *drafts = d, *truth = y, *count = k;
  return MTPQ_OK;
}
