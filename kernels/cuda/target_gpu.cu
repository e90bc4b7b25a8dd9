// The target model's CUDA backend, host side (kernels/target_cuda.h): the
// device copy of a target (weights in one arena, as stored), the task lists
// of its products for each token count, sequences (BF16 K/V caches, GDN
// state slots, a device table of their pointers), and a forward of one or
// several sequences as one CUDA graph per (sequences, tokens each, head),
// replayed with the call blocks (positions, slots, state pointers) of
// whichever sequences the call holds.
#include "kernels/cuda/target.cuh"

#include <algorithm>
#include <cmath>

static size_t al256(size_t n) { return (n + 255) / 256 * 256; }
static int64_t al16(int64_t n) { return (n + 15) / 16 * 16; }

static size_t lin_bytes(const struct lin *L) {
  const size_t w = L->f == LIN_BF16 ? 2 : L->f == LIN_FP8 ? 1 : 0;
  if (L->f == LIN_NVFP4) return al256((size_t)(L->rows * L->cols / 2)) + al256((size_t)(L->rows * L->cols / 16));
  return al256((size_t)(L->rows * L->cols) * w);
}

static enum mtpq_status arena_put(tgpu *m, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err) {
  if (m->arena_used + al256(n) > m->arena_n)
    return mtpq_err_set(err, MTPQ_E_INTERNAL, "target upload: the arena is %zu bytes, short", m->arena_n);
  uint8_t *p = m->arena + m->arena_used;
  m->arena_used += al256(n);
  CK(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice));
  *dst = p;
  return MTPQ_OK;
}

// a product's weights into the arena and its entry in the table; what
// names the product in an error: "layer L's WHAT"
static enum mtpq_status put_lin(tgpu *m, const struct lin *L, int64_t layer, const char *what, int *idx,
                                struct mtpq_err *err) {
  if (!L->w) {
    *idx = -1;
    return MTPQ_OK;
  }
  if (L->f == LIN_F32)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: layer %lld's %s is float32: the CUDA backend takes BF16, FP8 and NVFP4 weights",
                        mtpq__target_name(m->t), (long long)layer, what);
  dlin d = {};
  d.f = L->f, d.rows = L->rows, d.cols = L->cols, d.s = d.s2 = L->s;
  if (L->w == m->t->embed && m->embed) { // the tied head: the embedding's copy
    d.w = m->embed;
  } else {
    enum mtpq_status st = arena_put(m, L->w, (size_t)rt_lin_bytes(d), &d.w, err);
    if (!st && L->f == LIN_NVFP4) st = arena_put(m, L->scales, (size_t)(L->rows * L->cols / 16), &d.sc, err);
    if (st) return st;
  }
  *idx = (int)m->ctx.w.host.size();
  m->ctx.w.host.push_back(d);
  return MTPQ_OK;
}

// a gate/up pair as one row-pair matrix (rows gate 0, up 0, gate 1, ...; the gate's scale s, the up's s2) at *gi
static enum mtpq_status put_pair(tgpu *m, const struct lin *G, const struct lin *U, int *gi, struct mtpq_err *err) {
  dlin d = {};
  d.f = G->f, d.rows = 2 * G->rows, d.cols = G->cols, d.s = G->s, d.s2 = U->s;
  std::vector<uint8_t> buf = interleave_rows(G->w, U->w, G->rows, (size_t)(rt_lin_bytes(d) / d.rows));
  enum mtpq_status st = arena_put(m, buf.data(), buf.size(), &d.w, err);
  if (!st && G->f == LIN_NVFP4) {
    buf = interleave_rows(G->scales, U->scales, G->rows, (size_t)(G->cols / 16));
    st = arena_put(m, buf.data(), buf.size(), &d.sc, err);
  }
  if (st) return st;
  *gi = (int)m->ctx.w.host.size();
  m->ctx.w.host.push_back(d);
  return MTPQ_OK;
}

// the up of a pair: an empty entry (rows 0), so the table's expert ranges keep their places
static int put_empty(tgpu *m, const struct lin *U) {
  dlin e = {};
  e.f = U->f, e.rows = 0, e.cols = U->cols, e.s = e.s2 = 1.0f;
  m->ctx.w.host.push_back(e);
  return (int)m->ctx.w.host.size() - 1;
}

static bool pairable(const struct lin *G, const struct lin *U) {
  return G->w && U->w && G->f == U->f && G->f != LIN_F32 && G->rows == U->rows && G->cols == U->cols;
}

static enum mtpq_status put_vec(tgpu *m, const float *v, int64_t n, float **out, struct mtpq_err *err) {
  *out = nullptr;
  if (!v) return MTPQ_OK;
  const uint8_t *p = nullptr;
  enum mtpq_status st = upload(&m->ctx, v, (size_t)n * 4, &p, err);
  *out = (float *)p;
  return st;
}

static void drop_graphs(tgpu *m) {
  for (auto &by_n : m->graph)
    for (auto &row : by_n)
      for (cudaGraphExec_t &e : row)
        if (e) cudaGraphExecDestroy(e), e = nullptr;
}

static void tgpu_free(tgpu *m) {
  if (!m) return;
  drop_graphs(m);
  tpre_free(m->pre);
  if (m->h_calls) cudaFreeHost(m->h_calls);
  if (m->e0) cudaEventDestroy(m->e0);
  if (m->e1) cudaEventDestroy(m->e1);
  for (void *a : m->ctx.allocs) cudaFree(a);
  if (m->arena) cudaFree(m->arena);
  if (m->ctx.st) cudaStreamDestroy(m->ctx.st);
  delete m;
}

extern "C" void mtpq__tcuda_free(struct mtpq_target *t) {
  tgpu_free(static_cast<tgpu *>(t->gpu));
  t->gpu = nullptr;
}

// the GDN inputs' places in a token's projection row [P]: Qwen3-Next's
// groups per key head [q | k | v (r heads) | z (r heads)] then [b (r) | a (r)],
// or Qwen3.5's [q | k | v] [z] [b] [a]
static void gdn_tables(const struct mtpq_target *t, bool next, std::vector<int> &ch, std::vector<int> &z,
                       std::vector<int> &b, std::vector<int> &a) {
  const int64_t HK = t->HK, HV = t->HV, dk = t->dk, dv = t->dv, r = HV / HK, kd = HK * dk, vd = HV * dv;
  ch.assign((size_t)t->conv_dim, 0), z.assign((size_t)vd, 0), b.assign((size_t)HV, 0), a.assign((size_t)HV, 0);
  if (next) {
    const int64_t g = 2 * dk + 2 * r * dv, R1 = 2 * kd + 2 * vd;
    for (int64_t j = 0; j < HK; j++) {
      for (int64_t i = 0; i < dk; i++) ch[j * dk + i] = (int)(j * g + i), ch[kd + j * dk + i] = (int)(j * g + dk + i);
      for (int64_t i = 0; i < r * dv; i++)
        ch[2 * kd + j * r * dv + i] = (int)(j * g + 2 * dk + i), z[j * r * dv + i] = (int)(j * g + 2 * dk + r * dv + i);
      for (int64_t i = 0; i < r; i++) b[j * r + i] = (int)(R1 + j * 2 * r + i), a[j * r + i] = (int)(R1 + j * 2 * r + r + i);
    }
  } else {
    const int64_t cd = 2 * kd + vd;
    for (int64_t c = 0; c < cd; c++) ch[c] = (int)c;
    for (int64_t i = 0; i < vd; i++) z[i] = (int)(cd + i);
    for (int64_t h = 0; h < HV; h++) b[h] = (int)(cd + vd + h), a[h] = (int)(cd + vd + HV + h);
  }
}

static enum mtpq_status put_ints(tgpu *m, const std::vector<int> &v, int **out, struct mtpq_err *err) {
  const uint8_t *p = nullptr;
  enum mtpq_status st = upload(&m->ctx, v.data(), v.size() * sizeof(int) + 4, &p, err);
  *out = (int *)p;
  return st;
}

static enum mtpq_status load(struct mtpq_target *t, tgpu *m, struct mtpq_err *err) {
  gpu_session *g = &m->ctx;
  const char *dir = mtpq__target_name(t);
  if (mtpq_cuda_tune_get(&g->set.tune, err)) return MTPQ_E_INVAL;
  int n = 0, dev = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return mtpq_err_set(err, MTPQ_E_NO_GPU, "no CUDA device");
  const bool gdn = strchr(t->cfg.layer_types, 'L') != nullptr;
  // (dk: the prefill's chunked recurrence, k_gdnc.cu; dv: k_t_gdn's shared tables)
  if (gdn && (t->Kc > 9 || t->dk > 128 || t->dv > TK_DVMAX || t->HV % t->HK))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: conv kernel %lld, key and value head dims %lld and %lld: the CUDA backend takes up to 9, "
                        "128 and %d",
                        dir, (long long)t->Kc, (long long)t->dk, (long long)t->dv, TK_DVMAX);
  const int64_t G = t->Nq / t->Nkv;
  if (t->D > 256 || t->D % 8 || (G != 1 && G != 2 && G != 4 && G != 8 && G != 16))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "%s: head_dim %lld, %lld query heads per KV head: the CUDA backend takes head_dim <= 256 (a "
                        "multiple of 8) and 1, 2, 4, 8 or 16 query heads per KV head",
                        dir, (long long)t->D, (long long)G);
  if (t->H > TK_HMAX)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: hidden size %lld: the CUDA backend takes up to %d", dir,
                        (long long)t->H, TK_HMAX);
  m->t = t;
  g->set.pdl = g->set.tune.pdl, g->set.glu = g->set.tune.glu, g->set.lt_min = 0, g->set.fast = 1;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || g->sms < 1) g->sms = 1;
  if (cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess)
    return mtpq_err_set(err, MTPQ_E_GPU, "cannot create a CUDA stream");
  g->on = g->st;
  // the arena: every product's weights (the tied head shares the embedding)
  size_t total = al256((size_t)(t->embed_rows * t->H) * (t->embed_f32 ? 4 : 2));
  auto add = [&](const struct lin *L) {
    if (L->w && L->w != t->embed) total += lin_bytes(L);
  };
  add(&t->head);
  int64_t E = 0, K = 0, IM = 1;
  for (int64_t i = 0; i < t->L; i++) {
    const struct tlayer *l = &t->layers[i];
    const struct lin *ls[] = {&l->attn.q, &l->attn.k, &l->attn.v, &l->attn.o, &l->qkvz, &l->ba, &l->qkv, &l->z,
                              &l->b,      &l->a,      &l->out,    &l->mlp.router, &l->mlp.seg, &l->mlp.sg,
                              &l->mlp.su, &l->mlp.sd};
    for (const struct lin *L : ls) add(L);
    if (l->mlp.moe) {
      for (int64_t e = 0; e < 3 * l->mlp.E; e++) add(&l->experts[e]);
      if (K && l->mlp.topk != K)
        return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: MoE layers route to top-%lld and top-%lld experts: the CUDA "
                            "backend takes one top-k", dir, (long long)K, (long long)l->mlp.topk);
      E = l->mlp.E > E ? l->mlp.E : E, K = l->mlp.topk;
      IM = l->mlp.eg[0].rows > IM ? l->mlp.eg[0].rows : IM;
      if (l->mlp.topk > RT_TMAX - 1 || l->mlp.E > RT_EMAX)
        return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                            "%s: top-%lld of %lld experts: the CUDA backend takes top-k <= %d of up to %d", dir,
                            (long long)l->mlp.topk, (long long)l->mlp.E, RT_TMAX - 1, RT_EMAX);
    }
    if (l->mlp.sg.w) IM = l->mlp.sg.rows > IM ? l->mlp.sg.rows : IM;
  }
  CK(cudaMalloc(&m->arena, total));
  m->arena_n = total;
  enum mtpq_status st = arena_put(m, t->embed, (size_t)(t->embed_rows * t->H) * (t->embed_f32 ? 4 : 2), &m->embed, err);
  if (!st) st = put_lin(m, &t->head, -1, "lm_head", &m->head, err);
  m->L.assign((size_t)t->L, tlayer_dev{});
  bool next = false;
  for (int64_t i = 0; i < t->L && !st; i++) {
    const struct tlayer *l = &t->layers[i];
    tlayer_dev &d = m->L[(size_t)i];
    d.kind = l->kind;
    st = put_vec(m, l->in_norm, t->H, &d.in_norm, err);
    if (!st) st = put_vec(m, l->post_norm, t->H, &d.post_norm, err);
    if (l->kind == 'A') {
      if (!st) st = put_lin(m, &l->attn.q, i, "q_proj", &d.q, err);
      if (!st) st = put_lin(m, &l->attn.k, i, "k_proj", &d.k, err);
      if (!st) st = put_lin(m, &l->attn.v, i, "v_proj", &d.v, err);
      if (!st) st = put_lin(m, &l->attn.o, i, "o_proj", &d.o, err);
      if (!st) st = put_vec(m, l->attn.qn, t->D, &d.qn, err);
      if (!st) st = put_vec(m, l->attn.kn, t->D, &d.kn, err);
    } else {
      next = l->qkvz.w != nullptr;
      if (!st) st = put_lin(m, next ? &l->qkvz : &l->qkv, i, next ? "in_proj_qkvz" : "in_proj_qkv", &d.p0, err);
      if (!st) st = put_lin(m, next ? &l->ba : &l->z, i, next ? "in_proj_ba" : "in_proj_z", &d.p1, err);
      d.p2 = d.p3 = -1;
      if (!st && !next) st = put_lin(m, &l->b, i, "in_proj_b", &d.p2, err);
      if (!st && !next) st = put_lin(m, &l->a, i, "in_proj_a", &d.p3, err);
      if (!st) st = put_lin(m, &l->out, i, "out_proj", &d.out, err);
      if (!st) st = put_vec(m, l->conv_w, t->conv_dim * t->Kc, &d.conv_w, err);
      if (!st) st = put_vec(m, l->dt_bias, t->HV, &d.dt_bias, err);
      if (!st) st = put_vec(m, l->A_log, t->HV, &d.A_log, err);
      if (!st) st = put_vec(m, l->gnorm, t->dv, &d.gnorm, err);
    }
    const struct rt_mlp *w = &l->mlp;
    d.router = d.seg = d.ex = -1;
    if (!st && w->moe) st = put_lin(m, &w->router, i, "mlp.gate", &d.router, err);
    if (!st && w->moe) st = put_lin(m, &w->seg, i, "mlp.shared_expert_gate", &d.seg, err);
    // MoE gate/up as row pairs (ledger 34) where every expert's and the shared expert's gate and up match
    d.glu = w->moe && g->set.tune.glu && (!w->sg.w || pairable(&w->sg, &w->su));
    for (int64_t e = 0; d.glu && e < w->E; e++) d.glu = pairable(&w->eg[e], &w->eu[e]);
    if (!st && d.glu && w->sg.w) st = put_pair(m, &w->sg, &w->su, &d.sg, err);
    if (!st && d.glu) d.su = w->sg.w ? put_empty(m, &w->su) : -1;
    if (!st && d.glu && !w->sg.w) d.sg = -1;
    if (!st && !d.glu) st = put_lin(m, &w->sg, i, "gate_proj", &d.sg, err);
    if (!st && !d.glu) st = put_lin(m, &w->su, i, "up_proj", &d.su, err);
    if (!st) st = put_lin(m, &w->sd, i, "down_proj", &d.sd, err);
    if (!st && w->moe) { // gate lins, then up, then down: contiguous in the table, as k_mv's routing indexes them
      const char *nm[3] = {"experts' gate_proj", "experts' up_proj", "experts' down_proj"};
      for (int k = 0; k < 3 && !st; k++)
        for (int64_t e = 0; e < w->E && !st; e++) {
          int idx = 0;
          if (d.glu && k == 0) st = put_pair(m, &w->eg[e], &w->eu[e], &idx, err);
          else if (d.glu && k == 1) idx = put_empty(m, &w->eu[e]);
          else st = put_lin(m, &(k == 0 ? w->eg : k == 1 ? w->eu : w->ed)[e], i, nm[k], &idx, err);
          if (!st && k == 0 && e == 0) d.ex = idx;
        }
      for (int64_t e = 1; e < w->E && !st; e++)
        if (w->eg[e].f != w->eg[0].f || w->eg[e].rows != w->eg[0].rows || w->ed[e].cols != w->ed[0].cols)
          st = mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: layer %lld's experts differ in format or shape", dir,
                            (long long)i);
      d.shared_term = d.sd >= 0 && w->sd.f == w->ed[0].f && w->sd.cols == w->ed[0].cols && w->sd.rows == w->ed[0].rows;
    }
  }
  for (const dlin &L : g->w.host)
    if (L.cols % 16 || rt_lin_bytes(L) >= ((int64_t)1 << 32) || L.rows * L.cols / 16 >= ((int64_t)1 << 32))
      g->set.fast = 0;
  if (!st) st = dalloc(g, &g->w.lins, g->w.host.size() * sizeof(dlin), err);
  if (!st && cudaMemcpy(g->w.lins, g->w.host.data(), g->w.host.size() * sizeof(dlin), cudaMemcpyHostToDevice))
    st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the weight table failed");
  if (!st) st = put_vec(m, t->final_norm, t->H, &m->final_norm, err);
  if (st) return st;
  // activations
  const int64_t NM = MTPQ_TCUDA_MAX_T, kd = t->HK * t->dk, vd = t->HV * t->dv;
  m->H = t->H, m->HS = al16(t->H), m->P = 2 * kd + 2 * vd + 2 * t->HV, m->PS = al16(m->P);
  m->VS = al16(vd), m->QGS = al16(2 * t->Nq * t->D), m->KVS = al16(t->Nkv * t->D), m->ATS = al16(t->Nq * t->D);
  m->E = E, m->K = K, m->IM = al16(IM), m->S = K + 1;
  m->NSMAX = 0; /* the first sequence allocates the attention's partials */
  const int64_t slots = NM * m->S * m->IM;
  float **bufs[] = {&m->h,  &m->a,  &m->y,  &m->y2, &m->proj, &m->o2,  &m->qg,  &m->kk,     &m->vv,
                    &m->att, &m->pr, &m->sz, &m->gb, &m->ub,   &m->act, &m->hid, &m->logits, &m->ydp};
  const int64_t sizes[] = {NM * m->HS,  NM * m->HS,  NM * m->HS,  NM * m->HS,      NM * m->PS, NM * m->VS,
                           NM * m->QGS, NM * m->KVS, NM * m->KVS, NM * m->ATS,     NM * (E ? E : 1), NM,
                           slots,       slots,       slots,       NM * m->HS,      NM * t->V,  NM * m->S * m->HS};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !st; i++) st = dzalloc(g, bufs[i], (size_t)sizes[i] * 4, err);
  if (!st) st = dzalloc(g, &g->x.sel, NM * RT_KST * sizeof(int), err);
  if (!st) st = dzalloc(g, &g->x.wsel, NM * RT_KST * sizeof(float), err);
  if (!st) st = dzalloc(g, &g->x.best, NM * sizeof(unsigned long long), err);
  if (!st) st = dzalloc(g, &g->x.hq, 2 * sizeof(unsigned), err);
  if (!st) st = dzalloc(g, &m->calls, TK_SMAX * sizeof(tcall), err);
  if (!st && (cudaMallocHost((void **)&m->h_calls, TK_SMAX * sizeof(tcall)) != cudaSuccess ||
              cudaEventCreate(&m->e0) != cudaSuccess || cudaEventCreate(&m->e1) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "cannot allocate pinned memory or events");
#ifdef MTPQ_TIMELINE
  if (!st) st = tl_open(g, err);
#endif
  if (!st && gdn) {
    std::vector<int> ch, z, b, a;
    gdn_tables(t, next, ch, z, b, a);
    st = put_ints(m, ch, &m->chan_src, err);
    if (!st) st = put_ints(m, z, &m->z_src, err);
    if (!st) st = put_ints(m, b, &m->b_src, err);
    if (!st) st = put_ints(m, a, &m->a_src, err);
  }
  return st;
}

extern "C" enum mtpq_status mtpq__tcuda_load(struct mtpq_target *t, struct mtpq_err *err) {
  if (t->gpu) return MTPQ_OK;
  tgpu *m = new tgpu();
  enum mtpq_status st = load(t, m, err);
  if (st) {
    tgpu_free(m);
    return st;
  }
  t->gpu = m;
  return MTPQ_OK;
}

// the task lists of T tokens: every layer's launches
static enum mtpq_status build(tgpu *m, int T, struct mtpq_err *err) {
  tplan &p = m->plans[T];
  const struct mtpq_target *t = m->t;
  gpu_session *g = &m->ctx;
  const int64_t HS = m->HS, kd = t->HK * t->dk, vd = t->HV * t->dv, SI = m->S * m->IM, K = m->K;
  p.proj.assign((size_t)t->L, mv_launch{}), p.out = p.rs = p.gu = p.down = p.proj;
  p.dnp.assign((size_t)t->L, 1);
  enum mtpq_status st = MTPQ_OK;
  for (int64_t i = 0; i < t->L && !st; i++) {
    const tlayer_dev &l = m->L[(size_t)i];
    std::vector<mv_task> pr, rs, gu, dn;
    if (l.kind == 'A') {
      pr = {dense_task(l.q, m->a, HS, m->qg, m->QGS, T), dense_task(l.k, m->a, HS, m->kk, m->KVS, T),
            dense_task(l.v, m->a, HS, m->vv, m->KVS, T)};
      st = put_tasks(g, pr, &p.proj[i], err);
      if (!st) st = put_tasks(g, {dense_task(l.o, m->att, m->ATS, m->y, HS, T)}, &p.out[i], err);
    } else {
      pr.push_back(dense_task(l.p0, m->a, HS, m->proj, m->PS, T));
      if (l.p2 < 0) {
        pr.push_back(dense_task(l.p1, m->a, HS, m->proj + 2 * kd + 2 * vd, m->PS, T));
      } else {
        pr.push_back(dense_task(l.p1, m->a, HS, m->proj + 2 * kd + vd, m->PS, T));
        pr.push_back(dense_task(l.p2, m->a, HS, m->proj + 2 * kd + 2 * vd, m->PS, T));
        pr.push_back(dense_task(l.p3, m->a, HS, m->proj + 2 * kd + 2 * vd + t->HV, m->PS, T));
      }
      st = put_tasks(g, pr, &p.proj[i], err);
      if (!st) st = put_tasks(g, {dense_task(l.out, m->o2, m->VS, m->y, HS, T)}, &p.out[i], err);
    }
    if (l.router >= 0) {
      const int64_t E = t->layers[i].mlp.E, Kl = t->layers[i].mlp.topk;
      rs.push_back(dense_task(l.router, m->a, HS, m->pr, m->E, T));
      if (l.seg >= 0) rs.push_back(dense_task(l.seg, m->a, HS, m->sz, 1, T));
      for (int tok = 0; tok < T; tok++) // with pairs one task writes silu(gate) * up straight into act
        for (int64_t k = 0; k < Kl; k++)
          for (int w = 0; w < (l.glu ? 1 : 2); w++) {
            float *y = l.glu ? m->act : w ? m->ub : m->gb;
            mv_task x = dense_task(l.ex + (int)(w * E), m->a + tok * HS, HS, y + tok * SI + k * m->IM, 0, 1);
            x.tok = tok, x.t[0].sel_k = (int)k, x.glu = l.glu;
            gu.push_back(x);
          }
      // the shared expert a task per token too: every task of the launch one token, so it runs on k_mv's
      // one-token kernels (with the shared expert at T tokens the whole launch took the T-token ones, whose
      // registers go to tokens the routed tasks do not have: 4.9 ms of 11.6 at T = 4, ledger 29)
      for (int tok = 0; l.sg >= 0 && tok < T; tok++) {
        if (l.glu) {
          mv_task x = dense_task(l.sg, m->a + tok * HS, HS, m->act + tok * SI + K * m->IM, SI, 1);
          x.glu = 1;
          gu.push_back(x);
          continue;
        }
        gu.push_back(dense_task(l.sg, m->a + tok * HS, HS, m->gb + tok * SI + K * m->IM, SI, 1));
        gu.push_back(dense_task(l.su, m->a + tok * HS, HS, m->ub + tok * SI + K * m->IM, SI, 1));
      }
      // from two tokens on, where k_mvs takes the down: a task a (token, expert), each its own partial
      // output, the shared expert's last; the residual's kernel adds a token's partials in that order (one
      // streamed launch; k_mv took the down as a task a token, its experts as terms, in several waves of
      // short blocks: ledger 69)
      const dlin &D = g->w.host[(size_t)(l.ex + 2 * E)];
      const int np = (int)Kl + (l.shared_term ? 1 : 0);
      if (T > 1 && np > 1 && (l.sg < 0 || l.shared_term) && mvs_fits(g, D.f, D.rows, D.cols)) {
        p.dnp[(size_t)i] = np;
        for (int tok = 0; tok < T; tok++)
          for (int k = 0; k < np; k++) {
            const bool sh = k == Kl; // the shared expert: weighted by sigmoid(shared_expert_gate), wsel[K]
            mv_task x = dense_task(sh ? l.sd : l.ex + (int)(2 * E), m->act + tok * SI + (sh ? K : k) * m->IM, 0,
                                   m->ydp + (tok * np + k) * HS, 0, 1);
            x.tok = tok, x.t[0].sel_k = sh ? -1 : k, x.t[0].w = g->x.wsel + tok * RT_KST + (sh ? K : k);
            dn.push_back(x);
          }
      } else {
        for (int tok = 0; tok < T; tok++) {
          mv_task x = dense_task(l.ex + (int)(2 * E), nullptr, 0, m->y + tok * HS, 0, 1);
          x.tok = tok, x.nterm = 0;
          for (int64_t k = 0; k < Kl; k++)
            x.t[x.nterm++] =
                mv_term{l.ex + (int)(2 * E), (int)k, m->act + tok * SI + k * m->IM, g->x.wsel + tok * RT_KST + k};
          if (l.shared_term)
            x.t[x.nterm++] = mv_term{l.sd, -1, m->act + tok * SI + K * m->IM, g->x.wsel + tok * RT_KST + K};
          dn.push_back(x);
        }
      }
      if (l.sd >= 0 && !l.shared_term) dn.push_back(dense_task(l.sd, m->act + K * m->IM, SI, m->y2, HS, T));
      if (!st) st = put_tasks(g, rs, &p.rs[i], err);
    } else {
      gu = {dense_task(l.sg, m->a, HS, m->gb, SI, T), dense_task(l.su, m->a, HS, m->ub, SI, T)};
      dn = {dense_task(l.sd, m->act, SI, m->y, HS, T)};
    }
    if (!st) st = put_tasks(g, gu, &p.gu[i], err);
    if (!st) st = put_tasks(g, dn, &p.down[i], err);
    // MoE: the gate/up launch lets the down launch start only once the routing is done, so the down reads the
    // choice and requests its first routed weights before it waits for the gate/up (k_mv's flags, ledger 9)
    if (l.router >= 0) p.gu[i].fl = RT_MV_LATE_TRIGGER, p.down[i].fl = RT_MV_SEL_EARLY;
  }
  mv_task hd = dense_task(m->head, m->hid, HS, nullptr, t->V, T);
  hd.best = g->x.best;
  if (!st) st = put_tasks(g, {hd}, &p.head, err);
  hd.logits = m->logits;
  if (!st) st = put_tasks(g, {hd}, &p.head_logits, err);
  p.built = !st;
  return st;
}

extern "C" void mtpq__tcuda_seq_close(void *p) {
  tseq *s = static_cast<tseq *>(p);
  if (!s) return;
  for (void *a : s->allocs) cudaFree(a);
  delete s;
}

extern "C" enum mtpq_status mtpq__tcuda_seq_open(struct mtpq_target *t, int64_t max_pos, int nbuf, void **out,
                                                 struct mtpq_err *err) {
  *out = nullptr;
  if (max_pos > (int64_t)TA_NSMAX * TA_C)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "a %lld-position sequence: the CUDA backend takes up to %lld",
                        (long long)max_pos, (long long)TA_NSMAX * TA_C);
  enum mtpq_status st = mtpq__tcuda_load(t, err);
  if (st) return st;
  tgpu *m = static_cast<tgpu *>(t->gpu);
  tseq *s = new tseq();
  s->m = m, s->max_pos = max_pos, s->nbuf = nbuf;
  s->kc.assign((size_t)t->L, nullptr), s->vc = s->kc, s->conv.assign((size_t)t->L, nullptr), s->rec = s->conv;
  auto zal = [&](void **p, size_t n) -> enum mtpq_status {
    if (cudaMalloc(p, n ? n : 16) != cudaSuccess)
      return mtpq_err_set(err, MTPQ_E_GPU, "out of device memory for a %lld-position target sequence",
                          (long long)max_pos);
    s->allocs.push_back(*p);
    return cudaMemset(*p, 0, n) == cudaSuccess ? MTPQ_OK : mtpq_err_set(err, MTPQ_E_GPU, "cudaMemset failed");
  };
  const size_t kv = (size_t)(max_pos * t->Nkv * t->D) * 2;
  for (int64_t i = 0; i < t->L && !st; i++) {
    if (t->layers[i].kind == 'A') {
      st = zal((void **)&s->kc[i], kv);
      if (!st) st = zal((void **)&s->vc[i], kv);
    } else {
      st = zal((void **)&s->conv[i], (size_t)(nbuf * t->conv_dim * (t->Kc - 1)) * 4);
      if (!st) st = zal((void **)&s->rec[i], (size_t)(nbuf * t->HV * t->dk * t->dv) * 4);
    }
  }
  if (!st) { // the per-layer state pointers as the kernels find them (tcall)
    std::vector<void *> ptrs((size_t)(4 * t->L));
    for (int64_t i = 0; i < t->L; i++)
      ptrs[(size_t)i] = s->kc[(size_t)i], ptrs[(size_t)(t->L + i)] = s->vc[(size_t)i],
      ptrs[(size_t)(2 * t->L + i)] = s->conv[(size_t)i], ptrs[(size_t)(3 * t->L + i)] = s->rec[(size_t)i];
    st = zal((void **)&s->dptr, ptrs.size() * sizeof(void *));
    if (!st && cudaMemcpy(s->dptr, ptrs.data(), ptrs.size() * sizeof(void *), cudaMemcpyHostToDevice) != cudaSuccess)
      st = mtpq_err_set(err, MTPQ_E_GPU, "copy of a sequence's state pointers failed");
  }
  // the attention grid covers the longest context any sequence has (its splits past a call's positions return at once)
  const int64_t ns = ta_grid(max_pos);
  if (!st && ns > m->NSMAX) {
    gpu_session *g = &m->ctx;
    m->NSMAX = ns;
    drop_graphs(m); // (they hold the partials' buffers and the split count)
    const size_t np = (size_t)(MTPQ_TCUDA_MAX_T * t->Nq * ns);
    st = dalloc(g, &m->pm, np * 4, err);
    if (!st) st = dalloc(g, &m->pl, np * 4, err);
    if (!st) st = dalloc(g, &m->pacc, np * (size_t)t->D * 4, err);
  }
  if (st) {
    mtpq__tcuda_seq_close(s);
    return st;
  }
  *out = s;
  return MTPQ_OK;
}

// t_enqueue; timeline builds keep the forward's marks (names and launch counts) for tl_write
static void tl_enqueue(tgpu *m, int n, int Tn, int hm) {
#ifdef MTPQ_TIMELINE
  gpu_session *g = &m->ctx;
  g->prof.tl = &m->tl_marks[n][Tn][hm];
  g->prof.tl->clear();
  g->prof.nlaunch = 0;
  mark(g, "start");
  t_enqueue(m, n, Tn, hm);
  g->prof.tl = nullptr;
#else
  t_enqueue(m, n, Tn, hm);
#endif
}

// the graph of a forward of Tn tokens of each of n sequences, any of them (made on first use)
static enum mtpq_status forward_graph(tgpu *m, int n, int Tn, int hm, cudaGraphExec_t **out, struct mtpq_err *err) {
  gpu_session *g = &m->ctx;
  cudaGraphExec_t *ex = &m->graph[n][Tn][hm];
  if (!*ex) {
    cudaGraph_t gr;
    CK(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal));
    tl_enqueue(m, n, Tn, hm);
    CK(cudaStreamEndCapture(g->st, &gr));
    cudaError_t e = cudaGraphInstantiate(ex, gr, 0);
    cudaGraphDestroy(gr);
    CK(e);
  }
  *out = ex;
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__tcuda_forward_many(void *const *ps, int n, int Tn, const int32_t *const *tokens,
                                                     const int64_t *pos0, const int *cur, int head,
                                                     float *const *hidden, float *const *logits,
                                                     int32_t *const *argmax, struct mtpq_err *err) {
  if (n < 1 || n > TK_SMAX || Tn < 1 || n * Tn > MTPQ_TCUDA_MAX_T)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a forward of %d tokens of %d sequences: the CUDA backend takes 1..%d in all",
                        Tn, n, MTPQ_TCUDA_MAX_T);
  tseq *const *ss = reinterpret_cast<tseq *const *>(ps);
  tgpu *m = ss[0]->m;
  gpu_session *g = &m->ctx;
  const struct mtpq_target *t = m->t;
  const int T = n * Tn;
  for (int b = 0; b < n; b++) {
    const tseq *s = ss[b];
    if (s->m != m || std::find(ss, ss + b, s) != ss + b)
      return mtpq_err_set(err, MTPQ_E_INVAL, "a forward of several sequences: sequence %d is %s", b,
                          s->m != m ? "of another target" : "given twice");
    if (Tn >= s->nbuf)
      return mtpq_err_set(err, MTPQ_E_INVAL, "a forward of %d tokens: the CUDA backend takes 1..%d (%d slots)", Tn,
                          s->nbuf - 1, s->nbuf);
    for (int i = 0; i < Tn; i++)
      if (tokens[b][i] < 0 || tokens[b][i] >= t->embed_rows)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tokens[b][i],
                            (long long)t->embed_rows);
    if (pos0[b] < 0 || pos0[b] + Tn > s->max_pos)
      return mtpq_err_set(err, MTPQ_E_INVAL, "%d tokens at position %lld past the sequence's %lld", Tn,
                          (long long)pos0[b], (long long)s->max_pos);
  }
  if (!m->plans[T].built) {
    enum mtpq_status st = build(m, T, err);
    if (st) return st;
  }
  for (int b = 0; b < n; b++) {
    const tseq *s = ss[b];
    tcall &c = m->h_calls[b];
    const int64_t L = t->L;
    c.pos0 = pos0[b], c.cur = cur[b], c.nbuf = s->nbuf;
    for (int i = 0; i < Tn; i++) c.tok[i] = tokens[b][i];
    c.kc = (uint16_t *const *)s->dptr, c.vc = (uint16_t *const *)(s->dptr + L);
    c.conv = (float *const *)(s->dptr + 2 * L), c.rec = (float *const *)(s->dptr + 3 * L);
  }
  CK(cudaMemcpyAsync(m->calls, m->h_calls, (size_t)n * sizeof(tcall), cudaMemcpyHostToDevice, g->st));
  const int hm = head < 0 ? 0 : head > 2 ? 2 : head;
#ifdef MTPQ_TIMELINE
  tl_reset(g);
#endif
  CK(cudaEventRecord(m->e0, g->st));
  if (g->set.tune.graphs) {
    cudaGraphExec_t *ex = nullptr;
    enum mtpq_status st = forward_graph(m, n, Tn, hm, &ex, err);
    if (st) return st;
    CK(cudaGraphLaunch(*ex, g->st));
  } else {
    tl_enqueue(m, n, Tn, hm);
  }
  CK(cudaGetLastError());
  CK(cudaEventRecord(m->e1, g->st));
  std::vector<unsigned long long> best((size_t)T);
  for (int b = 0; b < n; b++) {
    if (hidden && hidden[b])
      CK(cudaMemcpy2DAsync(hidden[b], (size_t)t->H * 4, m->hid + (int64_t)b * Tn * m->HS, (size_t)m->HS * 4,
                           (size_t)t->H * 4, (size_t)Tn, cudaMemcpyDefault, g->st));
    // hidden and logits: host memory, or device memory (the live loop's rows, a sampler's): the copy's kind by address
    if (hm == 2 && logits && logits[b])
      CK(cudaMemcpyAsync(logits[b], m->logits + (int64_t)b * Tn * t->V, (size_t)(Tn * t->V) * 4, cudaMemcpyDefault,
                         g->st));
  }
  if (hm >= 1 && argmax) CK(cudaMemcpyAsync(best.data(), g->x.best, (size_t)T * 8, cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
#ifdef MTPQ_TIMELINE
  char sfx[32];
  snprintf(sfx, sizeof sfx, "-%dx%d", n, Tn);
  tl_write(sfx, &m->tl_marks[n][Tn][hm]);
#endif
  for (int b = 0; hm >= 1 && argmax && b < n; b++)
    for (int i = 0; argmax[b] && i < Tn; i++) {
      const unsigned long long k = best[(size_t)(b * Tn + i)];
      const float v = rt_argmax_key_value(k);
      if (!std::isfinite(v)) return mtpq__target_nonfinite(t, pos0[b] + i, v, err);
      argmax[b][i] = (int32_t)(0xFFFFFFFFu - (uint32_t)(k & 0xFFFFFFFFu));
    }
  float ms = 0;
  const double us = cudaEventElapsedTime(&ms, m->e0, m->e1) == cudaSuccess ? ms * 1e3 : -1;
  for (int b = 0; b < n; b++) ss[b]->last_us = us;
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__tcuda_forward(void *p, int T, const int32_t *tokens, int64_t pos0, int cur,
                                                int head, float *hidden, float *logits, int32_t *argmax,
                                                struct mtpq_err *err) {
  return mtpq__tcuda_forward_many(&p, 1, T, &tokens, &pos0, &cur, head, &hidden, &logits, &argmax, err);
}

extern "C" enum mtpq_status mtpq__tcuda_seq_gdn(void *p, int layer, int slot, float *conv, float *rec,
                                                struct mtpq_err *err) {
  tseq *s = static_cast<tseq *>(p);
  const struct mtpq_target *t = s->m->t;
  if (layer < 0 || layer >= t->L || !s->rec[(size_t)layer] || slot < 0 || slot >= s->nbuf)
    return mtpq_err_set(err, MTPQ_E_INVAL, "layer %d slot %d: not a GDN state", layer, slot);
  const size_t cn = (size_t)(t->conv_dim * (t->Kc - 1)), rn = (size_t)(t->HV * t->dk * t->dv);
  CK(cudaMemcpy(conv, s->conv[(size_t)layer] + slot * cn, cn * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rec, s->rec[(size_t)layer] + slot * rn, rn * 4, cudaMemcpyDeviceToHost));
  return MTPQ_OK;
}

extern "C" double mtpq__tcuda_last_us(void *p) { return static_cast<tseq *>(p)->last_us; }

extern "C" int mtpq__tcuda_profile(void *p, int T, const char **names, double *us, int max, struct mtpq_err *err) {
  tseq *s = static_cast<tseq *>(p);
  tgpu *m = s->m;
  gpu_session *g = &m->ctx;
  if (T < 1 || T > MTPQ_TCUDA_MAX_T || !m->plans[T].built) {
    mtpq_err_set(err, MTPQ_E_INVAL, "profile: run a forward of %d tokens first", T);
    return -1;
  }
  // the last forward again as one of T tokens of its first sequence (its call block), each kernel launched
  // alone between two events
  g->prof.ev.assign(2048, nullptr);
  for (cudaEvent_t &e : g->prof.ev) cudaEventCreate(&e);
  g->prof.on = true;
  mark(g, "start");
  t_enqueue(m, 1, T, 1);
  g->prof.on = false;
  int k = 0;
  if (cudaStreamSynchronize(g->st) == cudaSuccess)
    for (size_t i = 1; i < g->prof.names.size(); i++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, g->prof.ev[i - 1], g->prof.ev[i]);
      int j = 0; // summed by name, in the order of first appearance
      while (j < k && strcmp(names[j], g->prof.names[i])) j++;
      if (j == k) {
        if (k == max) continue;
        names[k] = g->prof.names[i], us[k++] = 0;
      }
      us[j] += ms * 1e3;
    }
  for (cudaEvent_t e : g->prof.ev) cudaEventDestroy(e);
  g->prof.ev.clear(), g->prof.names.clear();
  return k;
}
