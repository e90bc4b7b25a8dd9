// The prefill's host side (kernels/cuda/prefill.cuh): its workspace, the
// GEMMs, and one chunk of a prompt through the trunk, layer by layer.
#include "kernels/cuda/prefill.cuh"

#include <algorithm>

#define CB(stmt)                                                                                                  \
  do {                                                                                                            \
    cublasStatus_t s_ = (stmt);                                                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                              \
      return mtpq_err_set(err, MTPQ_E_GPU, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #stmt, (int)s_); \
  } while (0)

void tpre_free(tpre *p) {
  if (!p) return;
  if (p->cb) cublasDestroy(p->cb);
  for (void *a : p->chunk) cudaFree(a);
  for (void *a : p->allocs) cudaFree(a);
  delete p;
}

static int64_t al16(int64_t n) { return (n + 15) / 16 * 16; }

static const char *fmt_name(int f) { return f == LIN_BF16 ? "BF16" : f == LIN_FP8 ? "FP8" : f == LIN_NVFP4 ? "NVFP4" : "float32"; }

template <typename T> static enum mtpq_status palloc(std::vector<void *> &v, T **p, size_t n, struct mtpq_err *err) {
  void *x = nullptr;
  if (cudaMalloc(&x, n ? n : 16) != cudaSuccess)
    return mtpq_err_set(err, MTPQ_E_GPU, "out of device memory for the prefill's workspace (%zu bytes more)", n);
  v.push_back(x);
  *p = static_cast<T *>(x);
  return MTPQ_OK;
}

struct tp_shape {
  int64_t IE = 0, IS = 0, E = 0, K = 0, dense = 0; // expert and shared/dense intermediates, experts, top-k, largest dense
};

static tp_shape shape_of(const tgpu *m) {
  tp_shape s;
  const struct mtpq_target *t = m->t;
  const std::vector<dlin> &w = m->ctx.w.host;
  for (int64_t i = 0; i < t->L; i++) {
    const tlayer_dev &l = m->L[(size_t)i];
    const struct rt_mlp &mlp = t->layers[i].mlp;
    if (mlp.moe) s.IE = std::max(s.IE, mlp.eg[0].rows), s.E = std::max(s.E, mlp.E), s.K = mlp.topk;
    if (l.sg >= 0) s.IS = std::max(s.IS, l.glu ? w[(size_t)l.sg].rows / 2 : w[(size_t)l.sg].rows);
    const int ids[] = {l.q, l.k, l.v, l.o, l.p0, l.p1, l.p2, l.p3, l.out, l.router, l.seg, l.sg, l.su, l.sd};
    for (int id : ids)
      if (id >= 0 && id < (int)w.size()) s.dense = std::max(s.dense, w[(size_t)id].rows * w[(size_t)id].cols);
  }
  return s;
}

// the workspace for chunks of C tokens and L key positions
static enum mtpq_status ensure(tgpu *m, int64_t C, int64_t L, struct mtpq_err *err) {
  const struct mtpq_target *t = m->t;
  if (!m->pre) m->pre = new tpre();
  tpre *p = m->pre;
  const tp_shape sh = shape_of(m);
  enum mtpq_status st = MTPQ_OK;
  if (!p->cb) { // (the handle last: a workspace with a handle is whole; a failed one is undone here)
    st = palloc(p->allocs, &p->wdq, (size_t)sh.dense * 2, err);
    int **es[] = {&p->cnt, &p->off, &p->toff};
    for (int k = 0; k < 3 && !st; k++) st = palloc(p->allocs, es[k], (size_t)(sh.E + 1) * 4, err);
    if (!st) st = palloc(p->allocs, &p->bad, 4 * 4, err);
    if (!st && cublasCreate(&p->cb) != CUBLAS_STATUS_SUCCESS)
      p->cb = nullptr, st = mtpq_err_set(err, MTPQ_E_GPU, "cannot create a cuBLAS handle");
    if (!st && cublasSetStream(p->cb, m->ctx.st) != CUBLAS_STATUS_SUCCESS)
      st = mtpq_err_set(err, MTPQ_E_GPU, "cannot set the cuBLAS handle's stream");
    if (st) {
      tpre_free(p);
      m->pre = nullptr;
      return st;
    }
  }
  if (p->C >= C && p->L >= L) return MTPQ_OK;
  C = std::max(C, p->C), L = std::max(L, p->L);
  for (void *a : p->chunk) cudaFree(a);
  p->chunk.clear(), p->C = p->L = 0;
  // CK: a chunk's routed rows
  const int64_t HS = m->HS, CK = C * std::max<int64_t>(sh.K, 1);
  const int64_t IM = std::max<int64_t>(sh.IS, 1), IE = al16(std::max<int64_t>(sh.IE, 1));
  const int64_t QB = std::min<int64_t>(C, TP_QB);
  std::vector<void *> &v = p->chunk;
  struct fb {
    float **p;
    int64_t n;
  } fs[] = {{&p->h, C * HS},         {&p->y, C * HS},           {&p->proj, C * m->PS},  {&p->mix, C * t->conv_dim},
            {&p->beta, C * t->HV},   {&p->lg, C * t->HV},       {&p->o, C * m->VS},
            {&p->qg, C * m->QGS},    {&p->kk, C * m->KVS},      {&p->vv, C * m->KVS},   {&p->att, C * m->ATS},
            {&p->sc, t->Nq * QB * L}, {&p->pr, C * sh.E},       {&p->sz, C},            {&p->wsel, C * RT_KST},
            {&p->ygu, C * 2 * IM},   {&p->yd, CK * t->H},       {&p->ysh, C * HS},      {&p->hid, C * HS},
            {&p->xs, CK},            {&p->yact, CK * IE}};
  for (const fb &f : fs)
    if (!st) st = palloc(v, f.p, (size_t)f.n * 4, err);
  if (!st && t->HV > 0) st = palloc(v, &p->gw, tg_work_floats(C, (int)t->HV, (int)t->dk, (int)t->dv) * 4, err);
  struct bb {
    bf16 **p;
    int64_t n;
  } bs[] = {{p->xa, C * HS}, {p->xo, C * std::max(m->VS, m->ATS)}, {p->xact, std::max(CK * IE, C * IM)},
            {p->qb, t->Nq * C * t->D}, {p->pp, t->Nq * QB * L}};
  for (const bb &b : bs)
    for (int k = 0; k < 2 && !st; k++) st = palloc(v, &b.p[k], (size_t)b.n * 2, err);
  if (!st) st = palloc(v, &p->xh, (size_t)std::max(C * HS, CK * IE) * 2, err);
  int **is[] = {&p->tok, &p->sel, &p->slot, &p->perm, &p->inv};
  const int64_t in[] = {C, C * RT_KST, CK, CK, CK};
  for (int k = 0; k < 5 && !st; k++) st = palloc(v, is[k], (size_t)in[k] * 4, err);
  if (!st) p->C = C, p->L = L;
  return st;
}

// Y [n][ldy] = alpha W X^T: W [rows][cols] BF16 row-major, X the two pieces [n][ldx]; the lo piece's product
// added to the hi one's in the GEMM (beta 1)
static enum mtpq_status gemm(tpre *p, const bf16 *W, int64_t rows, int64_t cols, bf16 *const *X, int64_t ldx,
                             int64_t n, float *Y, int64_t ldy, float alpha, struct mtpq_err *err) {
  for (int k = 0; k < 2; k++) {
    const float beta = k ? 1.0f : 0.0f;
    CB(cublasGemmEx(p->cb, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)cols, &alpha, W, CUDA_R_16BF, (int)cols,
                    X[k], CUDA_R_16BF, (int)ldx, &beta, Y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
  }
  return MTPQ_OK;
}

// product idx over the chunk: its weights as BF16 (dequantized into the scratch unless stored so), scaled by
// alpha unless unscaled (a gate/up whose scales the SwiGLU applies)
static enum mtpq_status dense(tgpu *m, int idx, bf16 *const *X, int64_t ldx, int64_t n, float *Y, int64_t ldy,
                              bool unscaled, struct mtpq_err *err) {
  tpre *p = m->pre;
  const dlin &d = m->ctx.w.host[(size_t)idx];
  const bf16 *W = reinterpret_cast<const bf16 *>(d.w);
  if (d.f != LIN_BF16) tp_dequant(m->ctx.st, m->ctx.w.lins, idx, d.rows, d.cols, p->wdq), W = p->wdq;
  return gemm(p, W, d.rows, d.cols, X, ldx, n, Y, ldy, unscaled ? 1.0f : tp_scale(d, false), err);
}

// gate/up (a pair idx, or gate g and up u) and down over n rows of X: SwiGLU's pieces into act, the down's
// output into Y [n][ldy]
static enum mtpq_status mlp(tgpu *m, int g, int u, int dn, bool pair, bf16 *const *X, int64_t n, float *Y,
                            int64_t ldy, struct mtpq_err *err) {
  tpre *p = m->pre;
  const std::vector<dlin> &w = m->ctx.w.host;
  const int64_t I = pair ? w[(size_t)g].rows / 2 : w[(size_t)g].rows, HS = m->HS;
  enum mtpq_status st = dense(m, g, X, HS, n, p->ygu, 2 * I, true, err);
  if (!st && !pair) st = dense(m, u, X, HS, n, p->ygu + I, 2 * I, true, err);
  if (st) return st;
  const dlin &G = w[(size_t)g], &U = w[(size_t)(pair ? g : u)];
  tp_swiglu(m->ctx.st, p->ygu, 2 * I, pair ? 2 : 1, pair ? 1 : I, I, tp_scale(G, false), tp_scale(U, pair), p->xact[0],
            p->xact[1], I, n);
  return dense(m, dn, p->xact, I, n, Y, ldy, false, err);
}

// layer i's routed experts over the chunk's n tokens (normed input in xa, the routing in sel): the routing
// sorted by expert on the device, then every expert's gate/up with SwiGLU (one launch) and down (one launch)
// into yd (row inv[t K + k] for token t's k-th expert, times the down's tensor scale); kernels/cuda/k_egemm.cu
static enum mtpq_status experts(tgpu *m, int64_t i, int n, struct mtpq_err *err) {
  tpre *p = m->pre;
  gpu_session *g = &m->ctx;
  const tlayer_dev &l = m->L[(size_t)i];
  const struct rt_mlp &mlp = m->t->layers[i].mlp;
  const int E = (int)mlp.E, K = (int)mlp.topk, N = n * K;
  const int64_t H = m->H, IE = mlp.eg[0].rows, IEs = al16(IE);
  const std::vector<dlin> &w = g->w.host;
  const int gi = l.ex, ui = l.glu ? -1 : l.ex + E, di = l.ex + 2 * E;
  const int fg = w[(size_t)gi].f, fd = w[(size_t)di].f;
  for (int e = 0; e < E; e++) { // (one format a launch: the kernels read every expert's rows alike)
    const dlin &G = w[(size_t)(gi + e)], &D = w[(size_t)(di + e)];
    const bool up_ok = ui < 0 || w[(size_t)(ui + e)].f == fg;
    if (G.f != fg || D.f != fd || !up_ok || G.cols % 16 || D.cols % 16)
      return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                          "%s: layer %lld's experts: the CUDA prefill takes every routed expert of a layer in one "
                          "format (gate and up alike) with widths that are multiples of 16; expert %d's gate is "
                          "%s, %lld wide, its down %s, %lld wide (expert 0's: %s, %s)",
                          mtpq__target_name(m->t), (long long)i, e, fmt_name(G.f), (long long)G.cols,
                          fmt_name(D.f), (long long)D.cols, fmt_name(fg), fmt_name(fd));
  }
  tp_route_sort(g->st, p->sel, n, K, E, p->cnt, p->slot, p->off, p->toff, p->perm, p->inv, p->bad, (int)i);
  // FP8 and NVFP4 experts take their inputs as one FP16 piece scaled a row (k_egemm.cu); BF16 experts as the
  // two BF16 pieces
  const bool hg = fg != LIN_BF16, hd = fd != LIN_BF16;
  if (hg) tp_tof16(g->st, p->xa[0], p->xa[1], nullptr, m->HS, H, p->xh, m->HS, p->xs, n);
  tp_eg_args A = {};
  A.tab = g->w.lins, A.w0 = gi, A.u0 = ui, A.E = E, A.off = p->off, A.toff = p->toff, A.perm = p->perm;
  A.x0 = p->xa[0], A.x1 = p->xa[1], A.xh = p->xh, A.xs = p->xs, A.ldx = m->HS, A.kdim = H, A.mdim = IE;
  A.o0 = p->xact[0], A.o1 = p->xact[1], A.ldo = IEs, A.y = hd ? p->yact : nullptr, A.ldy = IEs;
  tp_egemm(g->st, fg, true, A, N);
  if (hd) tp_tof16(g->st, nullptr, nullptr, p->yact, IEs, IE, p->xh, IEs, p->xs, N);
  tp_eg_args D = {};
  D.tab = g->w.lins, D.w0 = di, D.u0 = -1, D.E = E, D.off = p->off, D.toff = p->toff, D.perm = nullptr;
  D.x0 = p->xact[0], D.x1 = p->xact[1], D.xh = p->xh, D.xs = p->xs, D.ldx = IEs, D.kdim = IE, D.mdim = H;
  D.y = p->yd, D.ldy = H;
  tp_egemm(g->st, fd, false, D, N);
  return MTPQ_OK;
}

// layer i's attention over the chunk (its tokens at pos0..): q/k/v, the cache, scores, softmax, values, gate
static enum mtpq_status attention(tgpu *m, tseq *s, int64_t i, int64_t pos0, int n, struct mtpq_err *err) {
  tpre *p = m->pre;
  const struct mtpq_target *t = m->t;
  const tlayer_dev &l = m->L[(size_t)i];
  cudaStream_t st0 = m->ctx.st;
  enum mtpq_status st = dense(m, l.q, p->xa, m->HS, n, p->qg, m->QGS, false, err);
  if (!st) st = dense(m, l.k, p->xa, m->HS, n, p->kk, m->KVS, false, err);
  if (!st) st = dense(m, l.v, p->xa, m->HS, n, p->vv, m->KVS, false, err);
  if (st) return st;
  const int Nq = (int)t->Nq, Nkv = (int)t->Nkv, D = (int)t->D, G = Nq / Nkv;
  const uint16_t *kc = s->kc[(size_t)i], *vc = s->vc[(size_t)i];
  tp_kv(st0, p->kk, p->vv, m->KVS, l.kn, Nkv, D, (int)t->rot, pos0, t->theta, t->eps, s->kc[(size_t)i],
        s->vc[(size_t)i], n);
  tp_attn_args A = {};
  A.qg = p->qg, A.qn = l.qn, A.sc = p->sc, A.att = p->att, A.q0 = p->qb[0], A.q1 = p->qb[1], A.p0 = p->pp[0];
  A.p1 = p->pp[1], A.x0 = p->xo[0], A.x1 = p->xo[1], A.Nq = Nq, A.D = D, A.rot = (int)t->rot, A.QGS = m->QGS;
  A.ATS = m->ATS, A.pos0 = pos0, A.C = n, A.theta = t->theta, A.eps = t->eps;
  tp_queries(st0, A, n);
  const float scale = 1.0f / sqrtf((float)D), one = 1.0f, zero = 0.0f;
  for (int64_t c0 = 0; c0 < n; c0 += TP_QB) {
    const int cb = (int)std::min<int64_t>(TP_QB, n - c0);
    const int64_t L = pos0 + c0 + cb;
    for (int kv = 0; kv < Nkv; kv++)
      for (int k = 0; k < 2; k++)
        CB(cublasGemmStridedBatchedEx(p->cb, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, cb, D, &scale, kc + kv * D,
                                      CUDA_R_16BF, Nkv * D, 0, p->qb[k] + ((int64_t)kv * G * n + c0) * D, CUDA_R_16BF,
                                      D, (int64_t)n * D, k ? &one : &zero, p->sc + (int64_t)kv * G * cb * L,
                                      CUDA_R_32F, (int)L, (int64_t)cb * L, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    tp_softmax(st0, A, c0, cb, L);
    for (int kv = 0; kv < Nkv; kv++)
      for (int k = 0; k < 2; k++)
        CB(cublasGemmStridedBatchedEx(p->cb, CUBLAS_OP_N, CUBLAS_OP_N, D, cb, (int)L, &one, vc + kv * D, CUDA_R_16BF,
                                      Nkv * D, 0, p->pp[k] + (int64_t)kv * G * cb * L, CUDA_R_16BF, (int)L,
                                      (int64_t)cb * L, k ? &one : &zero, p->att + c0 * m->ATS + (int64_t)kv * G * D,
                                      CUDA_R_32F, (int)m->ATS, D, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  tp_gate(st0, A, n);
  return dense(m, l.o, p->xo, m->ATS, n, p->y, m->HS, false, err);
}

static enum mtpq_status gdn(tgpu *m, tseq *s, int64_t i, int cur, int dst, int n, struct mtpq_err *err) {
  tpre *p = m->pre;
  const struct mtpq_target *t = m->t;
  const tlayer_dev &l = m->L[(size_t)i];
  const int64_t kd = t->HK * t->dk, vd = t->HV * t->dv, HS = m->HS, PS = m->PS;
  enum mtpq_status st = dense(m, l.p0, p->xa, HS, n, p->proj, PS, false, err);
  if (!st && l.p2 < 0) st = dense(m, l.p1, p->xa, HS, n, p->proj + 2 * kd + 2 * vd, PS, false, err);
  if (!st && l.p2 >= 0) st = dense(m, l.p1, p->xa, HS, n, p->proj + 2 * kd + vd, PS, false, err);
  if (!st && l.p2 >= 0) st = dense(m, l.p2, p->xa, HS, n, p->proj + 2 * kd + 2 * vd, PS, false, err);
  if (!st && l.p3 >= 0) st = dense(m, l.p3, p->xa, HS, n, p->proj + 2 * kd + 2 * vd + t->HV, PS, false, err);
  if (st) return st;
  const int64_t cs = t->conv_dim * (t->Kc - 1), rs = t->HV * t->dk * t->dv;
  tp_gdn_args A = {};
  A.proj = p->proj, A.conv_w = l.conv_w, A.A_log = l.A_log, A.dt_bias = l.dt_bias, A.gnorm = l.gnorm;
  A.conv_old = s->conv[(size_t)i] + cur * cs, A.rec_old = s->rec[(size_t)i] + cur * rs;
  A.conv_new = s->conv[(size_t)i] + dst * cs, A.rec_new = s->rec[(size_t)i] + dst * rs;
  A.chan_src = m->chan_src, A.z_src = m->z_src, A.b_src = m->b_src, A.a_src = m->a_src;
  A.mix = p->mix, A.beta = p->beta, A.lg = p->lg, A.o = p->o, A.x0 = p->xo[0], A.x1 = p->xo[1];
  A.HK = (int)t->HK, A.HV = (int)t->HV, A.dk = (int)t->dk, A.dv = (int)t->dv, A.Kc = (int)t->Kc;
  A.conv_dim = (int)t->conv_dim, A.PS = PS, A.VS = m->VS, A.eps = t->eps;
  tg_work_split(p->gw, p->C, A.HV, A.dk, A.dv, A);
  tp_gdn(m->ctx.st, A, n);
  return dense(m, l.out, p->xo, m->VS, n, p->y, HS, false, err);
}

extern "C" enum mtpq_status mtpq__tcuda_prefill(void *ps, int n, const int32_t *tokens, int64_t pos0, int cur,
                                                float *hidden, struct mtpq_err *err) {
  tseq *s = static_cast<tseq *>(ps);
  tgpu *m = s->m;
  const struct mtpq_target *t = m->t;
  gpu_session *g = &m->ctx;
  if (n < 1 || n > TP_CHUNK)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a prefill chunk of %d tokens: the CUDA backend takes 1..%d", n, TP_CHUNK);
  if (pos0 < 0 || pos0 + n > s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d tokens at position %lld past the sequence's %lld", n, (long long)pos0,
                        (long long)s->max_pos);
  for (int i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= t->embed_rows)
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tokens[i],
                          (long long)t->embed_rows);
  enum mtpq_status st = ensure(m, std::min<int64_t>(s->max_pos, TP_CHUNK), s->max_pos, err);
  if (st) return st;
  tpre *p = m->pre;
  const int dst = (cur + 1) % s->nbuf;
  const int64_t H = m->H, HS = m->HS;
  g->on = g->st;
  CK(cudaMemcpyAsync(p->tok, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, g->st));
  CK(cudaMemsetAsync(p->bad, 0xFF, 4 * 4, g->st));
  tp_embed(g->st, p->tok, m->embed, t->embed_f32, H, HS, p->h, n);
  tp_addnorm(g->st, nullptr, 0, p->h, H, HS, m->L[0].in_norm, t->eps, p->xa[0], p->xa[1], nullptr, n);
  for (int64_t i = 0; i < t->L && !st; i++) {
    const tlayer_dev &l = m->L[(size_t)i];
    st = l.kind == 'A' ? attention(m, s, i, pos0, n, err) : gdn(m, s, i, cur, dst, n, err);
    if (st) break;
    tp_addnorm(g->st, p->y, HS, p->h, H, HS, l.post_norm, t->eps, p->xa[0], p->xa[1], nullptr, n);
    const bool last = i + 1 == t->L;
    const float *nw = last ? m->final_norm : m->L[(size_t)i + 1].in_norm;
    bf16 *x0 = last ? nullptr : p->xa[0], *x1 = last ? nullptr : p->xa[1];
    float *xf = last ? p->hid : nullptr;
    if (l.router < 0) { // dense MLP
      st = mlp(m, l.sg, l.su, l.sd, false, p->xa, n, p->y, HS, err);
      if (!st) tp_addnorm(g->st, p->y, HS, p->h, H, HS, nw, t->eps, x0, x1, xf, n);
      continue;
    }
    const struct rt_mlp &w = t->layers[i].mlp;
    st = dense(m, l.router, p->xa, HS, n, p->pr, w.E, false, err);
    if (!st && l.seg >= 0) st = dense(m, l.seg, p->xa, HS, n, p->sz, 1, false, err);
    if (st) break;
    ops_route_rows(g, false, n, p->pr, l.seg >= 0 ? p->sz : nullptr, (int)w.E, (int)w.topk, w.norm_topk, p->sel,
                   p->wsel);
    st = experts(m, i, n, err);
    if (!st && l.sg >= 0) st = mlp(m, l.sg, l.su, l.sd, l.glu, p->xa, n, p->ysh, HS, err);
    if (!st)
      tp_moe_addnorm(g->st, p->yd, p->inv, p->wsel, (int)w.topk, l.sg >= 0 ? p->ysh : nullptr, p->h, H, HS, nw,
                     t->eps, x0, x1, xf, n);
  }
  if (st) return st;
  CK(cudaGetLastError());
  if (hidden)
    CK(cudaMemcpy2DAsync(hidden, (size_t)H * 4, p->hid, (size_t)HS * 4, (size_t)H * 4, (size_t)n,
                         cudaMemcpyDefault, g->st)); // (host memory, or the live loop's device rows)
  int bad[3];
  CK(cudaMemcpyAsync(bad, p->bad, sizeof bad, cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
  if (bad[0] >= 0)
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                        "%s: prefill: layer %d routed token %d (position %lld) to expert %d of %lld: the router's "
                        "logits are not finite",
                        mtpq__target_name(t), bad[0], bad[1], (long long)(pos0 + bad[1]), bad[2],
                        (long long)m->E);
  return MTPQ_OK;
}
