// CUDA backend of the drafter runtime: the model of kernels/runtime.h on the
// device, one slot at a time. First version, written for correctness and as
// the base for the HBM-floor work (issue 7): warp-per-row matrix-vector
// kernels that dequantize BF16 / FP8 / NVFP4 on the fly, routing and expert
// selection on the device (only the selected experts are read), attention
// over the drafter's device KV cache, and the head fused with the argmax.
// Not yet: batching several sequences, split-context attention, CUDA graphs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"
}

#define CK(stmt)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (stmt);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return mtpq_err_set(err, MTPQ_E_GPU, "%s:%d: %s: %s", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
  } while (0)

struct dlin {
  int f;
  int64_t rows, cols;
  const uint8_t *w;
  const uint8_t *sc;
  float s;
};

struct gpu_session {
  const struct mtpq_drafter *d;
  int64_t max_pos;
  int window;
  std::vector<void *> allocs;
  dlin *lins;      // device table: fc q k v o router seg sg su sd head, then eg[E] eu[E] ed[E]
  float *nrm[7];
  const uint8_t *embed;
  int64_t *ids;    // reduced head ids (device)
  float *kc, *vc;  // KV cache
  float *hid_in, *c, *x0, *a, *qg, *kv_k, *kv_v, *att, *y, *y2, *m, *t1, *g1, *u1, *pr, *sc, *z, *wsel, *out;
  int *sel;
  unsigned long long *best;
  uint16_t *hid_bf16;
  float *logits;
};

enum { L_FC, L_Q, L_K, L_V, L_O, L_ROUTER, L_SEG, L_SG, L_SU, L_SD, L_HEAD, L_EXPERTS };

template <typename T>
static enum mtpq_status dalloc(gpu_session *g, T **p, size_t n, struct mtpq_err *err) {
  void *v = nullptr;
  CK(cudaMalloc(&v, n ? n : 16));
  g->allocs.push_back(v);
  *p = static_cast<T *>(v);
  return MTPQ_OK;
}

static enum mtpq_status upload(gpu_session *g, const void *src, size_t n, const uint8_t **dst, struct mtpq_err *err) {
  uint8_t *p = nullptr;
  enum mtpq_status st = dalloc(g, &p, n, err);
  if (st) return st;
  CK(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice));
  *dst = p;
  return MTPQ_OK;
}

static enum mtpq_status upload_lin(gpu_session *g, const struct lin *L, dlin *out, struct mtpq_err *err) {
  out->f = L->f, out->rows = L->rows, out->cols = L->cols, out->s = L->s, out->sc = nullptr;
  size_t wb = L->f == LIN_BF16 ? (size_t)(L->rows * L->cols * 2) : L->f == LIN_FP8 ? (size_t)(L->rows * L->cols)
                                                                                  : (size_t)(L->rows * L->cols / 2);
  enum mtpq_status st = upload(g, L->w, wb, &out->w, err);
  if (!st && L->f == LIN_NVFP4) st = upload(g, L->scales, (size_t)(L->rows * L->cols / 16), &out->sc, err);
  return st;
}

// ---- device helpers ------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ float block_sum(float v) { // blockDim.x == 256
  __shared__ float part[8];
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = threadIdx.x < 8 ? part[threadIdx.x] : 0.0f;
  if (threadIdx.x < 32) t = warp_sum(t);
  __shared__ float res;
  if (threadIdx.x == 0) res = t;
  __syncthreads();
  return res;
}

__device__ float block_max(float v) {
  __shared__ float part[8];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = threadIdx.x < 8 ? part[threadIdx.x] : -INFINITY;
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xFFFFFFFFu, t, o));
  __shared__ float res;
  if (threadIdx.x == 0) res = t;
  __syncthreads();
  return res;
}

// y = x / rms(x) * (1 + w), n elements, one block
__device__ void zcnorm_dev(const float *x, const float *w, int n, float eps, float *y) {
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  float tot = block_sum(ss);
  float r = rsqrtf(tot / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r * (1.0f + w[i]);
}

__device__ __forceinline__ float lin_elem(const dlin &L, int64_t r, int64_t c) {
  if (L.f == LIN_BF16) {
    uint16_t h = reinterpret_cast<const uint16_t *>(L.w)[r * L.cols + c];
    return __uint_as_float((uint32_t)h << 16);
  }
  if (L.f == LIN_FP8) return mtpq_e4m3_to_f32(L.w[r * L.cols + c]) * L.s;
  uint8_t byte = L.w[r * (L.cols / 2) + c / 2];
  uint8_t code = (c & 1) ? (byte >> 4) : (byte & 15);
  return mtpq_e2m1_to_f32(code) * (mtpq_e4m3_to_f32(L.sc[r * (L.cols / 16) + c / 16]) * L.s);
}

// y[r] (+)= scale * dot(L[r], x); one warp per row. lin chosen from a table,
// optionally by an index read on the device (the routed expert).
static __global__ void k_matvec(const dlin *table, const int *sel, int k, const float *x, float *y,
                                const float *wsel, int accumulate) {
  const dlin L = table[sel ? sel[k] : 0];
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= L.rows) return;
  float acc = 0;
  for (int64_t c = lane; c < L.cols; c += 32) acc += lin_elem(L, r, c) * x[c];
  acc = warp_sum(acc);
  if (lane == 0) {
    float v = wsel ? acc * wsel[k] : acc;
    y[r] = accumulate ? y[r] + v : v;
  }
}

static __global__ void k_prep(const uint8_t *embed, int tok, const float *hid, int64_t H, const float *ne,
                              const float *nh, float eps, float *c, float *scratch) {
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    uint16_t h = reinterpret_cast<const uint16_t *>(embed)[(int64_t)tok * H + i];
    scratch[i] = __uint_as_float((uint32_t)h << 16);
  }
  __syncthreads();
  zcnorm_dev(scratch, ne, (int)H, eps, c);
  zcnorm_dev(hid, nh, (int)H, eps, c + H);
}

static __global__ void k_norm(const float *x, const float *w, int n, float eps, float *y) { zcnorm_dev(x, w, n, eps, y); }

__device__ void rope_dev(float *x, int rot, int64_t pos, float theta) {
  __syncthreads();
  int half = rot / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double inv = pow((double)theta, -2.0 * (double)j / (double)rot);
    double ang = (double)pos * inv;
    float c = (float)cos(ang), s = (float)sin(ang);
    float a = x[j], b = x[j + half];
    x[j] = a * c - b * s;
    x[j + half] = b * c + a * s;
  }
  __syncthreads();
}

// blocks 0..Nq-1: query heads (norm + rope in place in qg); Nq..Nq+Nkv-1: key heads into the cache
static __global__ void k_qk(float *qg, const float *kk, const float *vv, int Nq, int Nkv, int D, int rot, int64_t pos,
                            float theta, const float *nq, const float *nk, float eps, float *kc, float *vc) {
  __shared__ float buf[1024];
  int h = blockIdx.x;
  const float *src = h < Nq ? qg + (int64_t)h * 2 * D : kk + (int64_t)(h - Nq) * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) buf[j] = src[j];
  __syncthreads();
  zcnorm_dev(buf, h < Nq ? nq : nk, D, eps, buf);
  rope_dev(buf, rot, pos, theta);
  if (h < Nq) {
    for (int j = threadIdx.x; j < D; j += blockDim.x) qg[(int64_t)h * 2 * D + j] = buf[j];
  } else {
    int64_t kv = (int64_t)Nkv * D, hh = h - Nq;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
      kc[pos * kv + hh * D + j] = buf[j];
      vc[pos * kv + hh * D + j] = vv[hh * D + j];
    }
  }
}

static __global__ void k_attn(const float *qg, const float *kc, const float *vc, int Nq, int Nkv, int D, int64_t pos,
                              int64_t lo, float *sc, float *att) {
  int h = blockIdx.x;
  int64_t kv = (int64_t)Nkv * D, kvh = h / (Nq / Nkv);
  const float *q = qg + (int64_t)h * 2 * D, *gate = q + D;
  float *s = sc + (int64_t)h * (pos + 1);
  float scale = rsqrtf((float)D);
  float mx = -INFINITY;
  for (int64_t p = lo + threadIdx.x; p <= pos; p += blockDim.x) {
    const float *kp = kc + p * kv + kvh * D;
    float dot = 0;
    for (int j = 0; j < D; j++) dot += q[j] * kp[j];
    s[p] = dot * scale;
    mx = fmaxf(mx, s[p]);
  }
  mx = block_max(mx);
  float sum = 0;
  for (int64_t p = lo + threadIdx.x; p <= pos; p += blockDim.x) sum += (s[p] = expf(s[p] - mx));
  sum = block_sum(sum);
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float o = 0;
    for (int64_t p = lo; p <= pos; p++) o += s[p] * vc[p * kv + kvh * D + j];
    att[(int64_t)h * D + j] = o / sum * (1.0f / (1.0f + expf(-gate[j])));
  }
}

static __global__ void k_add_norm(float *y, const float *x0, const float *w, int n, float eps, float *y2) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] += x0[i];
  __syncthreads();
  zcnorm_dev(y, w, n, eps, y2);
}

static __global__ void k_route(float *pr, int E, int K, int renorm, int *sel, float *wsel) {
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, pr[e]);
  mx = block_max(mx);
  float s = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) s += (pr[e] = expf(pr[e] - mx));
  s = block_sum(s);
  for (int e = threadIdx.x; e < E; e += blockDim.x) pr[e] /= s;
  __syncthreads();
  if (threadIdx.x == 0) { // top-k, ties to the lower expert
    float tot = 0;
    for (int k = 0; k < K; k++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        bool used = false;
        for (int q = 0; q < k; q++) used |= sel[q] == e;
        if (!used && (best < 0 || pr[e] > pr[best])) best = e;
      }
      sel[k] = best, wsel[k] = pr[best], tot += pr[best];
    }
    if (renorm)
      for (int k = 0; k < K; k++) wsel[k] /= tot;
  }
}

static __global__ void k_silu_mul(float *g, const float *u, int64_t n) {
  for (int64_t i = threadIdx.x + (int64_t)blockIdx.x * blockDim.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static __global__ void k_zero(float *x, int64_t n) {
  for (int64_t i = threadIdx.x + (int64_t)blockIdx.x * blockDim.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] = 0;
}

static __global__ void k_final(float *m, const float *t1, const float *z, int moe, const float *r2, const float *w,
                               int n, float eps, float *out) {
  float sg = moe ? 1.0f / (1.0f + expf(-z[0])) : 1.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m[i] += sg * t1[i] + r2[i];
  __syncthreads();
  zcnorm_dev(m, w, n, eps, out);
}

// head fused with the argmax: 64-bit key = ordered float bits << 32 | ~row
__device__ __forceinline__ unsigned long long argmax_key(float v, uint32_t row) {
  uint32_t b = __float_as_uint(v);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((unsigned long long)b << 32) | (0xFFFFFFFFu - row);
}

static __global__ void k_head(const dlin *L, const float *x, unsigned long long *best, float *logits) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= L->rows) return;
  float acc = 0;
  for (int64_t c = lane; c < L->cols; c += 32) acc += lin_elem(*L, r, c) * x[c];
  acc = warp_sum(acc);
  if (lane == 0) {
    if (logits) logits[r] = acc;
    atomicMax(best, argmax_key(acc, (uint32_t)r));
  }
}

// ---- host ------------------------------------------------------------------------------

extern "C" void mtpq__cuda_session_close(void *p) {
  gpu_session *g = static_cast<gpu_session *>(p);
  if (!g) return;
  for (void *a : g->allocs) cudaFree(a);
  delete g;
}

extern "C" enum mtpq_status mtpq__cuda_session_open(const struct mtpq_drafter *d, int64_t max_pos, int window,
                                                    void **out, struct mtpq_err *err) {
  *out = nullptr;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return mtpq_err_set(err, MTPQ_E_NO_GPU, "no CUDA device");
  gpu_session *g = new gpu_session();
  g->d = d, g->max_pos = max_pos, g->window = window;
  enum mtpq_status st = MTPQ_OK;
  int64_t E = d->moe ? d->E : 0;
  std::vector<dlin> h(L_EXPERTS + 3 * E);
  const struct lin *base[L_EXPERTS] = {&d->fc, &d->q, &d->k, &d->v, &d->o, &d->router, &d->seg,
                                       &d->sg, &d->su, &d->sd, &d->head};
  for (int i = 0; i < L_EXPERTS && !st; i++)
    if (base[i]->w) st = upload_lin(g, base[i], &h[i], err);
  for (int64_t e = 0; e < E && !st; e++) {
    st = upload_lin(g, &d->eg[e], &h[L_EXPERTS + e], err);
    if (!st) st = upload_lin(g, &d->eu[e], &h[L_EXPERTS + E + e], err);
    if (!st) st = upload_lin(g, &d->ed[e], &h[L_EXPERTS + 2 * E + e], err);
  }
  if (!st) st = dalloc(g, &g->lins, h.size() * sizeof(dlin), err);
  if (!st && cudaMemcpy(g->lins, h.data(), h.size() * sizeof(dlin), cudaMemcpyHostToDevice) != cudaSuccess)
    st = mtpq_err_set(err, MTPQ_E_GPU, "copy of the weight table failed");
  for (int i = 0; i < 7 && !st; i++) {
    int64_t nn = (i == 4 || i == 5) ? d->D : d->H;
    const uint8_t *p = nullptr;
    st = upload(g, d->nrm[i], (size_t)nn * 4, &p, err);
    g->nrm[i] = (float *)p;
  }
  if (!st) st = upload(g, d->embed, (size_t)(d->embed_rows * d->H * 2), &g->embed, err);
  if (!st && d->reduced) {
    const uint8_t *p = nullptr;
    st = upload(g, d->ids, (size_t)d->head.rows * 8, &p, err);
    g->ids = (int64_t *)p;
  }
  int64_t H = d->H, KV = d->Nkv * d->D, QG = 2 * d->Nq * d->D, I = d->sg.rows;
  if (E && d->eg[0].rows > I) I = d->eg[0].rows;
  float **bufs[] = {&g->hid_in, &g->c, &g->x0, &g->a, &g->qg, &g->kv_k, &g->kv_v, &g->att, &g->y, &g->y2,
                    &g->m, &g->t1, &g->g1, &g->u1, &g->pr, &g->sc, &g->z, &g->wsel, &g->out, &g->kc, &g->vc,
                    &g->logits};
  size_t sizes[] = {(size_t)H, (size_t)(2 * H), (size_t)H, (size_t)H, (size_t)QG, (size_t)KV, (size_t)KV,
                    (size_t)(d->Nq * d->D), (size_t)H, (size_t)H, (size_t)H, (size_t)H, (size_t)I, (size_t)I,
                    (size_t)(E ? E : 1), (size_t)(d->Nq * (max_pos + 1)), 4, 64, (size_t)H,
                    (size_t)(max_pos * KV), (size_t)(max_pos * KV), (size_t)d->full_vocab};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !st; i++) st = dalloc(g, bufs[i], sizes[i] * 4, err);
  if (!st) st = dalloc(g, &g->sel, 64 * sizeof(int), err);
  if (!st) st = dalloc(g, &g->best, sizeof(unsigned long long), err);
  if (!st) st = dalloc(g, &g->hid_bf16, (size_t)H * 2, err);
  if (st) {
    mtpq__cuda_session_close(g);
    return st;
  }
  *out = g;
  return MTPQ_OK;
}

static int blocks_for(int64_t rows) { return (int)((rows + 7) / 8); }

extern "C" enum mtpq_status mtpq__cuda_step(void *p, int n, const int32_t *tokens, const void *hidden,
                                            int hidden_bf16, const int64_t *positions, float *out_hidden,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const struct mtpq_drafter *d = g->d;
  int64_t H = d->H, E = d->moe ? d->E : 0;
  std::vector<float> hf((size_t)H);
  for (int i = 0; i < n; i++) {
    int64_t pos = positions[i];
    if (pos < 0 || pos >= g->max_pos)
      return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld outside the cache", (long long)pos);
    if (tokens[i] < 0 || tokens[i] >= d->embed_rows)
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding", tokens[i]);
    if (hidden_bf16)
      for (int64_t j = 0; j < H; j++) {
        uint16_t b;
        memcpy(&b, (const unsigned char *)hidden + ((size_t)i * H + j) * 2, 2);
        hf[j] = mtpq_bf16_to_f32(b);
      }
    else
      memcpy(hf.data(), (const float *)hidden + (size_t)i * H, (size_t)H * 4);
    CK(cudaMemcpy(g->hid_in, hf.data(), (size_t)H * 4, cudaMemcpyHostToDevice));
    k_prep<<<1, 256>>>(g->embed, tokens[i], g->hid_in, H, g->nrm[0], g->nrm[1], d->eps, g->c, g->t1);
    k_matvec<<<blocks_for(d->fc.rows), 256>>>(g->lins + L_FC, nullptr, 0, g->c, g->x0, nullptr, 0);
    k_norm<<<1, 256>>>(g->x0, g->nrm[2], (int)H, d->eps, g->a);
    k_matvec<<<blocks_for(d->q.rows), 256>>>(g->lins + L_Q, nullptr, 0, g->a, g->qg, nullptr, 0);
    k_matvec<<<blocks_for(d->k.rows), 256>>>(g->lins + L_K, nullptr, 0, g->a, g->kv_k, nullptr, 0);
    k_matvec<<<blocks_for(d->v.rows), 256>>>(g->lins + L_V, nullptr, 0, g->a, g->kv_v, nullptr, 0);
    k_qk<<<(unsigned)(d->Nq + d->Nkv), 256>>>(g->qg, g->kv_k, g->kv_v, (int)d->Nq, (int)d->Nkv, (int)d->D, (int)d->rot,
                                               pos, d->theta, g->nrm[4], g->nrm[5], d->eps, g->kc, g->vc);
    int64_t lo = g->window > 0 && pos + 1 > g->window ? pos + 1 - g->window : 0;
    k_attn<<<(unsigned)d->Nq, 256>>>(g->qg, g->kc, g->vc, (int)d->Nq, (int)d->Nkv, (int)d->D, pos, lo, g->sc, g->att);
    k_matvec<<<blocks_for(d->o.rows), 256>>>(g->lins + L_O, nullptr, 0, g->att, g->y, nullptr, 0);
    k_add_norm<<<1, 256>>>(g->y, g->x0, g->nrm[3], (int)H, d->eps, g->y2);
    k_zero<<<8, 256>>>(g->m, H);
    if (E) {
      k_matvec<<<blocks_for(E), 256>>>(g->lins + L_ROUTER, nullptr, 0, g->y2, g->pr, nullptr, 0);
      int K = (int)(d->topk < 64 ? d->topk : 64);
      k_route<<<1, 256>>>(g->pr, (int)E, K, d->norm_topk, g->sel, g->wsel);
      for (int k = 0; k < K; k++) {
        int64_t I = d->eg[0].rows;
        k_matvec<<<blocks_for(I), 256>>>(g->lins + L_EXPERTS, g->sel, k, g->y2, g->g1, nullptr, 0);
        k_matvec<<<blocks_for(I), 256>>>(g->lins + L_EXPERTS + E, g->sel, k, g->y2, g->u1, nullptr, 0);
        k_silu_mul<<<8, 256>>>(g->g1, g->u1, I);
        k_matvec<<<blocks_for(H), 256>>>(g->lins + L_EXPERTS + 2 * E, g->sel, k, g->g1, g->m, g->wsel, 1);
      }
      k_matvec<<<1, 256>>>(g->lins + L_SEG, nullptr, 0, g->y2, g->z, nullptr, 0);
    }
    k_matvec<<<blocks_for(d->sg.rows), 256>>>(g->lins + L_SG, nullptr, 0, g->y2, g->g1, nullptr, 0);
    k_matvec<<<blocks_for(d->su.rows), 256>>>(g->lins + L_SU, nullptr, 0, g->y2, g->u1, nullptr, 0);
    k_silu_mul<<<8, 256>>>(g->g1, g->u1, d->sg.rows);
    k_matvec<<<blocks_for(H), 256>>>(g->lins + L_SD, nullptr, 0, g->g1, g->t1, nullptr, 0);
    k_final<<<1, 256>>>(g->m, g->t1, g->z, E > 0, g->y, g->nrm[6], (int)H, d->eps, g->out);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out_hidden + (size_t)i * H, g->out, (size_t)H * 4, cudaMemcpyDeviceToHost));
  }
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__cuda_head(void *p, const float *hidden, int32_t *tok, float *logits,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const struct mtpq_drafter *d = g->d;
  CK(cudaMemcpy(g->hid_in, hidden, (size_t)d->H * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(g->best, 0, sizeof(unsigned long long)));
  k_head<<<blocks_for(d->head.rows), 256>>>(g->lins + L_HEAD, g->hid_in, g->best, logits ? g->logits : nullptr);
  unsigned long long key = 0;
  CK(cudaMemcpy(&key, g->best, sizeof key, cudaMemcpyDeviceToHost));
  int64_t row = (int64_t)(0xFFFFFFFFu - (uint32_t)(key & 0xFFFFFFFFu));
  *tok = (int32_t)(d->reduced ? d->ids[row] : row);
  if (logits) {
    std::vector<float> small((size_t)d->head.rows);
    CK(cudaMemcpy(small.data(), g->logits, small.size() * 4, cudaMemcpyDeviceToHost));
    if (d->reduced) {
      for (int64_t v = 0; v < d->full_vocab; v++) logits[v] = -INFINITY;
      for (int64_t k = 0; k < d->head.rows; k++) logits[d->ids[k]] = small[(size_t)k];
    } else {
      memcpy(logits, small.data(), small.size() * 4);
    }
  }
  return MTPQ_OK;
}
