// The plans of the CUDA backend: for each token count (1..8), the task
// lists of the step's products (mv_task: which weights, which inputs and
// outputs, routed or not) uploaded once, and launch_mv, which hands a
// product launch to the kernel that takes it.
#include "kernels/cuda/backend.cuh"

// ---- plans: the task lists of one token count ------------------------------------

mv_task dense_task(int lin, const float *x, int64_t xs, float *y, int64_t ys, int nb) {
  mv_task t;
  memset(&t, 0, sizeof t);
  t.nterm = 1, t.nb = nb, t.tok = 0, t.xs = xs, t.ys = ys, t.y = y;
  t.t[0] = mv_term{lin, -1, x, nullptr};
  return t;
}

enum mtpq_status put_tasks(gpu_session *g, const std::vector<mv_task> &v, mv_launch *m, struct mtpq_err *err) {
  m->ntask = (int)v.size();
  if (v.empty()) return MTPQ_OK;
  enum mtpq_status st = dalloc(g, &m->dev, v.size() * sizeof(mv_task), err);
  if (st) return st;
  CK(cudaMemcpy(m->dev, v.data(), v.size() * sizeof(mv_task), cudaMemcpyHostToDevice));
  m->nbmax = 0, m->rows = 0, m->glu = v[0].glu != 0, m->best = v[0].best != nullptr, m->groups = 0;
  m->plain = m->unif = true; // (each task below, v[0] included)
  const int64_t cols0 = g->w.host[v[0].t[0].lin].cols, rows0 = g->w.host[v[0].t[0].lin].rows;
  m->cols = cols0; // (task 0's)
  for (const mv_task &t : v) {
    const dlin &L0 = g->w.host[t.t[0].lin];
    m->plain = m->plain && t.nterm == 1 && t.t[0].sel_k < 0 && !t.t[0].w && !t.glu && !t.best && t.y &&
               L0.cols == cols0;
    m->unif = m->unif && t.nterm == 1 && L0.cols == cols0 && L0.rows == rows0;
    m->nbmax = t.nb > m->nbmax ? t.nb : m->nbmax;
    const int gr = t.nterm * (int)((L0.cols + 511) / 512);
    m->groups = !m->groups || gr < m->groups ? gr : m->groups;
    for (int k = 0; k < t.nterm; k++) { // sel-chosen experts all share the shape of expert 0
      const dlin &L = g->w.host[t.t[k].lin];
      if (L.rows != L0.rows || L.cols != L0.cols)
        return mtpq_err_set(err, MTPQ_E_INTERNAL, "a task's terms differ in shape");
      m->fmt = m->fmt < 0 || m->fmt == L.f ? L.f : 3;
    }
    m->rows = L0.rows > m->rows ? L0.rows : m->rows;
    m->trows.push_back(L0.rows);
  }
  return MTPQ_OK;
}

enum mtpq_status build_plan(gpu_session *g, int n, struct mtpq_err *err) {
  plan &p = g->plans[n];
  const struct mtpq_rt_model *d = g->d;
  const int64_t H = d->H, KV = d->Nkv * d->D, QG = 2 * d->Nq * d->D, E = d->moe ? d->E : 0, IM = g->IM;
  const int K = g->K, S = K + 1;
  enum mtpq_status st = put_tasks(g, {dense_task(L_FC, g->x.c, 2 * H, g->x.x0, H, n)}, &p.fc, err);
  if (!st)
    st = put_tasks(g, {dense_task(L_Q, g->x.a, H, g->x.qg, QG, n), dense_task(L_K, g->x.a, H, g->x.kk, KV, n),
                       dense_task(L_V, g->x.a, H, g->x.vv, KV, n)}, &p.qkv, err);
  if (!st) st = put_tasks(g, {dense_task(L_O, g->x.att, d->Nq * d->D, g->x.y, H, n)}, &p.o, err);
  // the routed experts (one format) and the shared expert (often another)
  // run as separate launches so that each kernel is single-format; the
  // shared expert's down projection goes to m2, and k_final adds the two,
  // m2 weighted by sigmoid(shared_expert_gate) from k_route
  std::vector<mv_task> rs, gu, gus, down, downs;
  const bool shared = d->sg.w != nullptr;
  if (E) {
    rs.push_back(dense_task(L_ROUTER, g->x.y2, H, g->x.pr, E, n));
    if (d->seg.w) rs.push_back(dense_task(L_SEG, g->x.y2, H, g->x.z, 1, n));
    for (int t = 0; t < n; t++)
      for (int k = 0; k < K; k++)
        for (int w = 0; w < (g->set.glu ? 1 : 2); w++) {
          float *y = g->set.glu ? g->x.act : w ? g->x.ub : g->x.gb; // pairs: silu(gate) * up straight into act
          mv_task x = dense_task(L_EXPERTS + (int)(w * E), g->x.y2 + t * H, H, y + (t * S + k) * IM, 0, 1);
          x.tok = t, x.t[0].sel_k = k, x.glu = g->set.glu;
          gu.push_back(x);
        }
    for (int t = 0; t < n; t++) {
      mv_task x = dense_task(L_EXPERTS + (int)(2 * E), nullptr, 0, g->x.m + t * H, 0, 1);
      x.tok = t, x.nterm = 0;
      for (int k = 0; k < K; k++)
        x.t[x.nterm++] = mv_term{(int)(L_EXPERTS + 2 * E), k, g->x.act + (t * S + k) * IM, g->x.wsel + t * RT_KST + k};
      down.push_back(x);
    }
  }
  if (shared) // unweighted: k_final applies sigmoid(shared_expert_gate), which the routing computes
    downs.push_back(dense_task(L_SD, g->x.act + K * IM, S * IM, g->x.m2, H, n));
  if (shared) {
    gus.push_back(dense_task(L_SG, g->x.y2, H, g->x.gb + K * IM, S * IM, n));
    gus.push_back(dense_task(L_SU, g->x.y2, H, g->x.ub + K * IM, S * IM, n));
  }
  if (!st) st = put_tasks(g, rs, &p.rs, err);
  if (!st) st = put_tasks(g, gu, &p.gu, err);
  if (!st) st = put_tasks(g, gus, &p.gus, err);
  if (!st) st = put_tasks(g, down, &p.down, err);
  if (!st) st = put_tasks(g, downs, &p.downs, err);
  // the routed gate/up let the down launch start only once the routing is
  // done, so the down reads the choice and requests its first weights before
  // it waits (k_mv's flags)
  p.gu.fl = RT_MV_LATE_TRIGGER;
  p.down.fl = RT_MV_SEL_EARLY;
  mv_task hd = dense_task(L_HEAD, g->x.out, H, nullptr, d->head.rows, n);
  hd.best = g->x.best;
  if (!st) st = put_tasks(g, {hd}, &p.head, err);
  hd.logits = g->x.logits;
  if (!st) st = put_tasks(g, {hd}, &p.head_logits, err);
  if (!st) st = lt_plan(g, n, p, err);
  p.built = !st;
  return st;
}

// A product launch on the kernel that takes it: the head on tensor cores
// where its shape allows (k_head.cu), plain dense products at 2..8 tokens on
// k_dmma (k_dmma.cu), everything else on k_mv's FFMA kernels (k_mv.cu; its
// one-token NVFP4 launches of more than a wave on k_mvs.cu's streamed one). Why
// not tensor cores for the one-token dense products: each kernel was faster
// alone, the step was not (ledger 6).
void launch_mv(gpu_session *g, const mv_launch &m) {
  if (!m.ntask) return;
  if (head_mma_launch(g, m) || dmv_launch(g, m) || dmma_launch(g, m)) return;
  mv_ffma_launch(g, m);
}
