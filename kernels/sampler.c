/* The sampler: the CPU reference (kernels/sample.c on host rows) and the
 * dispatch to the CUDA backend; see kernels/sampler.h. */
#include "kernels/sampler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sampler_cuda.h"

struct mtpq_sampler {
  int64_t V;
  int nseq, rows;
  void *gpu; /* the CUDA backend's sampler, or NULL */
  /* nseq x rows target rows, nseq x draft_rows(rows) draft rows: host memory, or the CUDA backend's */
  float *p, *q;
  uint64_t *keys[MTPQ_MAX_SEQS]; /* CPU: a sequence's sort scratch (mtpq_sample_probs) */
};

/* a verify of rows positions has rows - 1 drafts (no speculation: one row, unused) */
static int64_t draft_rows(int rows) { return rows > 1 ? rows - 1 : 1; }

enum mtpq_status mtpq_sampler_open(enum mtpq_backend be, int64_t V, int nseq, int rows, struct mtpq_sampler **out,
                                   struct mtpq_err *err) {
  *out = NULL;
  const int most = be == MTPQ_BACKEND_CUDA ? 8 : MTPQ_MAX_K + 1;
  if (V < 1 || nseq < 1 || nseq > MTPQ_MAX_SEQS || rows < 1 || rows > most)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a sampler of %d sequences (1..%d) x %d rows (1..%d) over %lld tokens", nseq,
                        MTPQ_MAX_SEQS, rows, most, (long long)V);
  struct mtpq_sampler *m = calloc(1, sizeof *m);
  if (!m) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  m->V = V, m->nseq = nseq, m->rows = rows;
  enum mtpq_status rc = MTPQ_OK;
  if (be == MTPQ_BACKEND_CUDA) {
    rc = mtpq__csample_open(V, nseq, rows, draft_rows(rows), &m->gpu, &m->p, &m->q, err);
  } else {
    m->p = malloc((size_t)(nseq * rows) * (size_t)V * sizeof *m->p);
    m->q = malloc((size_t)(nseq * draft_rows(rows)) * (size_t)V * sizeof *m->q);
    int ok = m->p && m->q;
    for (int b = 0; b < nseq && ok; b++) ok = (m->keys[b] = malloc((size_t)V * sizeof **m->keys)) != NULL;
    if (!ok)
      rc = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory (a sampler of %d x %d rows of %lld tokens)", nseq, rows,
                        (long long)V);
  }
  if (rc) {
    mtpq_sampler_close(m);
    return rc;
  }
  *out = m;
  return MTPQ_OK;
}

void mtpq_sampler_close(struct mtpq_sampler *m) {
  if (!m) return;
  if (m->gpu)
    mtpq__csample_close(m->gpu); /* (its rows with it) */
  else
    free(m->p), free(m->q);
  for (int b = 0; b < MTPQ_MAX_SEQS; b++) free(m->keys[b]);
  free(m);
}

float *mtpq_sampler_p(struct mtpq_sampler *m, int b, int r) {
  return m->p + ((size_t)b * (size_t)m->rows + (size_t)r) * (size_t)m->V;
}

float *mtpq_sampler_q(struct mtpq_sampler *m, int b, int r) {
  return m->q + ((size_t)b * (size_t)draft_rows(m->rows) + (size_t)r) * (size_t)m->V;
}

static enum mtpq_status check_row(const struct mtpq_sampler *m, int b, int r, int q, struct mtpq_err *err) {
  if (b < 0 || b >= m->nseq || r < 0 || r >= m->rows - q)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s row %d of sequence %d in a sampler of %d x %d", q ? "draft" : "target",
                        r, b, m->nseq, m->rows);
  return MTPQ_OK;
}

enum mtpq_status mtpq_sampler_row_copy(struct mtpq_sampler *m, int b, int r, int q, float *host, int to_sampler,
                                       struct mtpq_err *err) {
  enum mtpq_status rc = check_row(m, b, r, q, err);
  if (rc) return rc;
  float *row = q ? mtpq_sampler_q(m, b, r) : mtpq_sampler_p(m, b, r);
  if (m->gpu) return mtpq__csample_copy(row, host, m->V, to_sampler, err);
  memcpy(to_sampler ? row : host, to_sampler ? host : row, (size_t)m->V * sizeof *row);
  return MTPQ_OK;
}

enum mtpq_status mtpq_sampler_draft(struct mtpq_sampler *m, int b, int r, const struct mtpq_sampling *sp, uint64_t *rng,
                                    int32_t *tok, struct mtpq_err *err) {
  enum mtpq_status rc = check_row(m, b, r, 1, err);
  if (rc) return rc;
  if (m->gpu) return mtpq__csample_draft(m->gpu, b, r, sp, mtpq_uniform(rng), tok, err);
  float *q = mtpq_sampler_q(m, b, r);
  mtpq_sample_probs(q, m->V, sp, q, m->keys[b]);
  *tok = mtpq_sample_draw(q, m->V, rng);
  return MTPQ_OK;
}

/* One sequence's acceptance on the CPU (its own rows, scratch and stream). */
struct accept_job {
  struct mtpq_sampler *m;
  int b, keff;
  const int32_t *d;
  const struct mtpq_sampling *sp;
  uint64_t *rng;
  int acc;
  int32_t next;
};

static void *accept_cpu(void *p) {
  struct accept_job *a = p;
  const int64_t V = a->m->V;
  uint64_t *keys = a->m->keys[a->b];
  int j = 0;
  a->next = -1;
  for (; j < a->keff; j++) {
    float *pj = mtpq_sampler_p(a->m, a->b, j);
    mtpq_sample_probs(pj, V, a->sp, pj, keys);
    if (!mtpq_sample_reject(pj, mtpq_sampler_q(a->m, a->b, j), V, a->d[j], a->rng, &a->next)) break;
  }
  if (j == a->keff) {
    float *pk = mtpq_sampler_p(a->m, a->b, a->keff);
    mtpq_sample_probs(pk, V, a->sp, pk, keys);
    a->next = mtpq_sample_draw(pk, V, a->rng);
  }
  a->acc = j;
  return NULL;
}

enum mtpq_status mtpq_sampler_accept(struct mtpq_sampler *m, int n, const int *seq, const int *keff,
                                     const int32_t *const *d, const struct mtpq_sampling *sp, uint64_t *const *rng,
                                     int *acc, int32_t *next, struct mtpq_err *err) {
  if (n < 0 || n > m->nseq) return mtpq_err_set(err, MTPQ_E_INVAL, "an acceptance of %d sequences of %d", n, m->nseq);
  for (int i = 0; i < n; i++) {
    enum mtpq_status rc = check_row(m, seq[i], keff[i], 0, err);
    if (rc) return rc;
    for (int c = 0; c < i; c++)
      if (seq[c] == seq[i]) return mtpq_err_set(err, MTPQ_E_INVAL, "an acceptance names sequence %d twice", seq[i]);
    for (int j = 0; j < keff[i]; j++)
      if (d[i][j] < 0 || d[i][j] >= m->V)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "draft %d of sequence %d is token %d, outside the %lld", j, seq[i],
                            d[i][j], (long long)m->V);
  }
  if (m->gpu) {
    double u[MTPQ_MAX_SEQS * MTPQ_CSAMPLE_MAX_U] = {0};
    int used[MTPQ_MAX_SEQS];
    for (int i = 0; i < n; i++) { /* the uniforms the reference would draw next, the stream left where it is */
      uint64_t r = *rng[i];
      for (int k = 0; k < MTPQ_CSAMPLE_MAX_U; k++) u[i * MTPQ_CSAMPLE_MAX_U + k] = mtpq_uniform(&r);
    }
    enum mtpq_status rc = mtpq__csample_accept(m->gpu, n, seq, keff, d, sp, u, acc, next, used, err);
    for (int i = 0; i < n && !rc; i++)
      for (int k = 0; k < used[i]; k++) (void)mtpq_uniform(rng[i]);
    return rc;
  }
  struct accept_job jobs[MTPQ_MAX_SEQS];
  pthread_t tid[MTPQ_MAX_SEQS];
  int started[MTPQ_MAX_SEQS] = {0};
  for (int i = 0; i < n; i++) jobs[i] = (struct accept_job){m, seq[i], keff[i], d ? d[i] : NULL, sp, rng[i], 0, -1};
  /* a distribution over the vocabulary is milliseconds on one core: the sequences at once, a thread each
   * but the first (inline where a thread cannot start) */
  for (int i = 1; i < n; i++)
    if (!(started[i] = pthread_create(&tid[i], NULL, accept_cpu, &jobs[i]) == 0)) accept_cpu(&jobs[i]);
  if (n) accept_cpu(&jobs[0]);
  for (int i = 0; i < n; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    acc[i] = jobs[i].acc, next[i] = jobs[i].next;
  }
  return MTPQ_OK;
}
