// The CUDA backend's sessions: checks of what the kernels take, the weights
// uploaded as the model stores them (a routed expert's gate and up as one
// row-pair matrix where they share a format), activations, KV caches and
// staging allocated once for 1..8 tokens a launch.
#include "kernels/cuda/backend.cuh"
extern "C" {
#include "kernels/rope.h"
}

enum mtpq_status upload(gpu_session *g, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err) {
  uint8_t *p = nullptr;
  enum mtpq_status st = dalloc(g, &p, n, err);
  if (st) return st;
  CK(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice));
  *dst = p;
  return MTPQ_OK;
}

#ifdef MTPQ_TIMELINE
__device__ rt_tl_rec *rt_tl_buf;
__device__ unsigned int rt_tl_cap;
__device__ unsigned int rt_tl_n;

// kernels/cuda/timeline.cuh's records: a buffer for TL_CAP blocks (one per
// process: the last session or target opened owns it), its count zeroed
// before each draft call or target forward and, after it, the call's records
// written to the file MTPQ_CUDA_TL_FILE names (CSV; tests/bench/timeline.py
// reads it)
#define TL_CAP (1u << 18)
enum mtpq_status tl_open(gpu_session *g, struct mtpq_err *err) {
  rt_tl_rec *buf = nullptr;
  enum mtpq_status st = dalloc(g, &buf, TL_CAP * sizeof(rt_tl_rec), err);
  const unsigned cap = TL_CAP;
  if (!st && (cudaMemcpyToSymbol(rt_tl_buf, &buf, sizeof buf) != cudaSuccess ||
              cudaMemcpyToSymbol(rt_tl_cap, &cap, sizeof cap) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "timeline: cannot set its buffer");
  return st;
}

void tl_reset(gpu_session *g) {
  void *n = nullptr;
  if (cudaGetSymbolAddress(&n, rt_tl_n) == cudaSuccess) cudaMemsetAsync(n, 0, sizeof(unsigned), g->st);
}

void tl_write(const char *suffix, const std::vector<std::pair<const char *, int>> *marks) { // after the sync
  const char *env = getenv("MTPQ_CUDA_TL_FILE");
  unsigned n = 0;
  rt_tl_rec *buf = nullptr;
  if (!env || cudaMemcpyFromSymbol(&n, rt_tl_n, sizeof n) != cudaSuccess ||
      cudaMemcpyFromSymbol(&buf, rt_tl_buf, sizeof buf) != cudaSuccess)
    return;
  if (n > TL_CAP) n = TL_CAP;
  std::vector<rt_tl_rec> r(n);
  if (n && cudaMemcpy(r.data(), buf, n * sizeof(rt_tl_rec), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  const std::string path = std::string(env) + (suffix ? suffix : "");
  FILE *f = fopen(path.c_str(), "w");
  if (!f) return;
  fprintf(f, "grid,block,sm,start,waited,end,mid1,mid2\n");
  for (const rt_tl_rec &x : r)
    fprintf(f, "%llu,%u,%u,%llu,%llu,%llu,%llu,%llu\n", x.grid, x.block, x.sm, x.t[0], x.t[1], x.t[2], x.t[3], x.t[4]);
  fclose(f);
  // the marks: each name with the launches made before it (the launches since the mark before are its kernels);
  // names are quoted (some hold commas; none holds a quote)
  if (!marks || !(f = fopen((path + ".names").c_str(), "w"))) return;
  fprintf(f, "name,launches\n");
  for (const auto &m : *marks) fprintf(f, "\"%s\",%d\n", m.first, m.second);
  fclose(f);
}
#endif

static enum mtpq_status upload_lin(gpu_session *g, const struct lin *L, dlin *out, struct mtpq_err *err) {
  out->f = L->f, out->rows = L->rows, out->cols = L->cols, out->s = out->s2 = L->s, out->sc = nullptr;
  size_t wb = (size_t)rt_lin_bytes(*out);
  enum mtpq_status st = upload(g, L->w, wb, &out->w, err);
  if (!st && L->f == LIN_NVFP4) st = upload(g, L->scales, (size_t)(L->rows * L->cols / 16), &out->sc, err);
  return st;
}

// A routed expert's gate and up projections as one matrix of row pairs
// (row 2i: gate row i, 2i + 1: up row i; NVFP4 block scales likewise), so
// that the warp holding a pair writes silu(gate) * up itself (no SwiGLU
// kernel); s: the gate's scale, s2: the up's.
static enum mtpq_status upload_pairs(gpu_session *g, const struct lin *G, const struct lin *U, dlin *out,
                                     struct mtpq_err *err) {
  out->f = G->f, out->rows = 2 * G->rows, out->cols = G->cols, out->s = G->s, out->s2 = U->s, out->sc = nullptr;
  std::vector<uint8_t> buf = interleave_rows(G->w, U->w, G->rows, (size_t)(rt_lin_bytes(*out) / out->rows));
  enum mtpq_status st = upload(g, buf.data(), buf.size(), &out->w, err);
  if (!st && G->f == LIN_NVFP4) {
    buf = interleave_rows(G->scales, U->scales, G->rows, (size_t)(G->cols / 16));
    st = upload(g, buf.data(), buf.size(), &out->sc, err);
  }
  return st;
}

extern "C" void mtpq__cuda_session_close(void *p) {
  gpu_session *g = static_cast<gpu_session *>(p);
  if (!g) return;
  for (plan &pl : g->plans) {
    if (pl.step) cudaGraphExecDestroy(pl.step);
    if (pl.chain) cudaGraphExecDestroy(pl.chain);
    lt_head_destroy(pl.lt);
  }
  if (g->lt.h) cublasLtDestroy(g->lt.h);
  for (void *a : g->allocs) cudaFree(a);
  if (g->io.h_rec) cudaFreeHost(g->io.h_rec);
  if (g->io.host) cudaFreeHost(g->io.host);
  if (g->flush_buf) cudaFree(g->flush_buf);
  if (g->prof.t0) cudaEventDestroy(g->prof.t0);
  if (g->prof.t1) cudaEventDestroy(g->prof.t1);
  if (g->st) cudaStreamDestroy(g->st);
  if (g->st2) cudaStreamDestroy(g->st2);
  if (g->fork) cudaEventDestroy(g->fork);
  if (g->join) cudaEventDestroy(g->join);
  if (g->io.staged) cudaEventDestroy(g->io.staged);
  delete g;
}


extern "C" enum mtpq_status mtpq__cuda_session_open(const struct mtpq_rt_model *d, int64_t max_pos, int window,
                                                    int nseq, void **out, struct mtpq_err *err) {
  *out = nullptr;
  mtpq_cuda_tune tune;
  if (mtpq_cuda_tune_get(&tune, err)) return MTPQ_E_INVAL;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return mtpq_err_set(err, MTPQ_E_NO_GPU, "no CUDA device");
  if (nseq < 1 || nseq > RT_NMAX)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences: the CUDA backend batches 1..%d", nseq, RT_NMAX);
  if (d->Nq % d->Nkv || d->Nq / d->Nkv > 16)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%lld query heads over %lld KV heads: the CUDA backend takes up to 16 "
                        "query heads per KV head", (long long)d->Nq, (long long)d->Nkv);
  if (d->moe && (d->topk > RT_TMAX - 1 || d->E > RT_EMAX))
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "top-%lld of %lld experts: the CUDA backend takes top-k <= %d",
                        (long long)d->topk, (long long)d->E, RT_TMAX - 1);
  if (rt_attn_smem((int)(d->Nq / d->Nkv), (int)d->D, 0) * 4 > 200 * 1024 || d->D > 512) /* attention's shared memory */
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "head_dim %lld x %lld query heads per KV head is too large",
                        (long long)d->D, (long long)(d->Nq / d->Nkv));
  if (d->H > 256 * RT_NQ)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "hidden size %lld: the CUDA backend takes up to %d", (long long)d->H,
                        256 * RT_NQ);
  if (d->D % 8) /* 16-byte copies of cached BF16 keys */
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "head_dim %lld: the CUDA backend takes multiples of 8", (long long)d->D);
  gpu_session *g = new gpu_session();
  g->d = d, g->max_pos = max_pos, g->window = window, g->nseq = nseq, g->cur = 0;
  g->nsplit = (int)((max_pos + RT_CS - 1) / RT_CS);
  if ((8 * d->D + g->nsplit) * 4 > 48 * 1024) {
    const int64_t most = (48 * 1024 / 4 - 8 * d->D) * RT_CS;
    delete g;
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%lld cached positions: the CUDA backend takes up to %lld at head_dim "
                        "%lld", (long long)max_pos, (long long)most, (long long)d->D);
  }
  g->K = d->moe ? (int)d->topk : 0;
  g->set.tune = tune;
  g->set.pdl = tune.pdl;
  g->set.lt_min = tune.lt;
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || g->sms < 1) g->sms = 1;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess) cudaGetLastError(), l2 = 0;
  const int64_t kv_per = 2 * d->Nkv * d->D * 2; // a position's BF16 K and V rows
  const int ef = tune.kv_ef;
  g->set.kv_ef_pos = ef == 0 ? INT64_MAX : ef == 1 ? 0 : (int64_t)l2 / 2 / kv_per;
  g->l2 = l2;
  enum mtpq_status st = attn_setup(g, dev, err);
  if (cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&g->st2, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&g->io.staged, cudaEventDisableTiming) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "cannot create CUDA streams and events");
  g->on = g->st;
  int64_t E = d->moe ? d->E : 0;
  std::vector<dlin> &h = g->w.host;
  h.assign(L_EXPERTS + 3 * E, dlin{});
  const struct lin *base[L_EXPERTS] = {&d->fc, &d->q, &d->k, &d->v, &d->o, &d->router, &d->seg,
                                       &d->sg, &d->su, &d->sd, &d->head};
  for (int i = 0; i < L_EXPERTS && !st; i++)
    if (base[i]->w) st = upload_lin(g, base[i], &h[i], err);
  // gate/up pair matrices (ledger 23; tune glu=0: separate, with a SwiGLU kernel) where every
  // expert's gate and up share a format and a shape
  g->set.glu = E > 0 && tune.glu;
  for (int64_t e = 0; e < E; e++)
    if (d->eg[e].f != d->eu[e].f || d->eg[e].rows != d->eu[e].rows || d->eg[e].cols != d->eu[e].cols) g->set.glu = 0;
  for (int64_t e = 0; e < E && !st; e++) {
    if (g->set.glu) { // the up slot stays empty (rows 0: nothing to prefetch)
      st = upload_pairs(g, &d->eg[e], &d->eu[e], &h[L_EXPERTS + e], err);
      h[L_EXPERTS + E + e] = dlin{d->eu[e].f, 0, d->eu[e].cols, nullptr, nullptr, 1.0f, 1.0f};
    } else {
      st = upload_lin(g, &d->eg[e], &h[L_EXPERTS + e], err);
      if (!st) st = upload_lin(g, &d->eu[e], &h[L_EXPERTS + E + e], err);
    }
    if (!st) st = upload_lin(g, &d->ed[e], &h[L_EXPERTS + 2 * E + e], err);
  }
  g->set.fast = 1; // the vectorised kernels need every row to be a whole number of 16-element chunks, and
               // offsets within a matrix (weights, block scales) that fit 32 bits
  for (const dlin &L : h)
    if (L.w && (L.cols % 16 || rt_lin_bytes(L) >= ((int64_t)1 << 32) || L.rows * L.cols / 16 >= ((int64_t)1 << 32)))
      g->set.fast = 0;
  if (!st) st = dalloc(g, &g->w.lins, h.size() * sizeof(dlin), err);
  if (!st && cudaMemcpy(g->w.lins, h.data(), h.size() * sizeof(dlin), cudaMemcpyHostToDevice) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the weight table failed");
  for (int i = 0; i < 7 && !st; i++) {
    int64_t nn = (i == 4 || i == 5) ? d->D : d->H;
    const uint8_t *p = nullptr;
    st = upload(g, d->nrm[i], (size_t)nn * 4, &p, err);
    g->w.nrm[i] = (float *)p;
  }
  if (!st) st = upload(g, d->embed, (size_t)(d->embed_rows * d->H * 2), &g->w.embed, err);
  g->w.ids = nullptr;
  if (!st && d->reduced) {
    const uint8_t *p = nullptr;
    st = upload(g, d->ids, (size_t)d->head.rows * 8, &p, err);
    g->w.ids = (int64_t *)p;
  }
  const int64_t H = d->H, KV = d->Nkv * d->D, QG = 2 * d->Nq * d->D, NM = RT_NMAX;
  g->IM = d->sg.w ? d->sg.rows : 1;
  if (E && d->eg[0].rows > g->IM) g->IM = d->eg[0].rows;
  g->IM = (g->IM + 15) / 16 * 16;
  const int64_t slots = NM * (g->K + 1) * g->IM, ps = NM * d->Nq * (int64_t)g->nsplit;
  float **bufs[] = {&g->x.c, &g->x.x0, &g->x.a, &g->x.qg, &g->x.kk, &g->x.vv, &g->x.att, &g->x.y,
                    &g->x.y2, &g->x.m, &g->x.m2, &g->x.pr, &g->x.z, &g->x.gb, &g->x.ub, &g->x.act, &g->x.po, &g->x.pm, &g->x.pl,
                    &g->x.logits, &g->x.wsel};
  size_t sizes[] = {(size_t)(NM * 2 * H), (size_t)(NM * H), (size_t)(NM * H),
                    (size_t)(NM * QG), (size_t)(NM * KV), (size_t)(NM * KV), (size_t)(NM * d->Nq * d->D),
                    (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * H), (size_t)(NM * (E ? E : 1)),
                    (size_t)NM,
                    (size_t)slots, (size_t)slots, (size_t)slots, (size_t)(ps * d->D), (size_t)ps, (size_t)ps,
                    (size_t)d->head.rows, (size_t)(NM * RT_KST)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !st; i++) st = dzalloc(g, bufs[i], sizes[i] * 4, err);
  if (!st) st = dzalloc(g, &g->kv.kc, (size_t)(nseq * max_pos * KV) * 2, err); // (BF16)
  if (!st) st = dzalloc(g, &g->kv.vc, (size_t)(nseq * max_pos * KV) * 2, err);
  if (!st) {
    const int64_t hp = d->rot / 2;
    std::vector<float2> t((size_t)(max_pos * hp));
    for (int64_t q = 0; q < max_pos; q++)
      for (int64_t j = 0; j < hp; j++) mtpq_rope_cs(j, d->rot, q, d->theta, &t[(size_t)(q * hp + j)].x, &t[(size_t)(q * hp + j)].y);
    st = dalloc(g, &g->x.rcs, t.size() * sizeof(float2), err);
    if (!st && !t.empty() && cudaMemcpy(g->x.rcs, t.data(), t.size() * sizeof(float2), cudaMemcpyHostToDevice) != cudaSuccess)
      st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the RoPE table failed");
  }
  if (!st) st = dalloc(g, &g->x.sel, NM * RT_KST * sizeof(int), err);
  if (!st) st = dalloc(g, &g->io.rec, NM * RT_MAXSTEPS * sizeof(int), err);
  if (!st) st = dalloc(g, &g->x.best, NM * sizeof(unsigned long long), err);
  if (!st) st = dzalloc(g, &g->x.hq, 2 * sizeof(unsigned), err);
  static_assert(ST_SEQ >= ST_TOK + RT_NMAX * 4 && ST_POS >= ST_SEQ + RT_NMAX * 4 &&
                    ST_STEP >= ST_POS + RT_NMAX * 8 && ST_HID >= ST_STEP + 4 && ST_HID % 16 == 0,
                "staging layout");
  const size_t sb = ST_HID + (size_t)(NM * H) * 4;
  if (!st) st = dzalloc(g, &g->io.dev, sb, err);
  if (!st && (cudaMallocHost((void **)&g->io.host, sb) != cudaSuccess ||
              cudaMallocHost((void **)&g->io.h_rec, NM * RT_MAXSTEPS * 4 + NM * 8) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "cudaMallocHost failed");
  if (!st) {
    memset(g->io.host, 0, sb); // the step counter stays 0: each draft call's copy resets it
    g->io.tok = (int *)(g->io.dev + ST_TOK), g->io.seq = (int *)(g->io.dev + ST_SEQ);
    g->io.pos = (int64_t *)(g->io.dev + ST_POS), g->io.stepc = (int *)(g->io.dev + ST_STEP);
    g->x.out = (float *)(g->io.dev + ST_HID);
    g->io.h_tok = (int *)(g->io.host + ST_TOK), g->io.h_seq = (int *)(g->io.host + ST_SEQ);
    g->io.h_pos = (int64_t *)(g->io.host + ST_POS), g->io.h_hid = (float *)(g->io.host + ST_HID);
    g->io.h_best = (unsigned long long *)(g->io.h_rec + NM * RT_MAXSTEPS);
  }
  if (!st && (cudaEventCreate(&g->prof.t0) != cudaSuccess || cudaEventCreate(&g->prof.t1) != cudaSuccess))
    st = mtpq_err_set(err, MTPQ_E_GPU, "cannot create CUDA events");
#ifdef MTPQ_TIMELINE
  if (!st) st = tl_open(g, err);
#endif
  if (st) {
    mtpq__cuda_session_close(g);
    return st;
  }
  *out = g;
  return MTPQ_OK;
}

extern "C" void mtpq__cuda_select(void *p, int seq) { static_cast<gpu_session *>(p)->cur = seq; }

