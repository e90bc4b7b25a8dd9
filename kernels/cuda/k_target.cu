// The target model's own kernels (the map is in kernels/cuda/target.cuh)
// and t_enqueue, which launches one forward. float32 arithmetic as the CPU
// reference (kernels/target.c) computes it; sums run in another order
// (trees over threads), and the K/V cache is BF16 (as vLLM caches a BF16
// model; the CPU reference keeps float32), hence the tolerance the GPU tests
// state. Every kernel lets the next one launch at once (rt_trigger) and
// waits for its predecessor (rt_wait) before it reads activations or
// writes anything.
#include "kernels/cuda/target.cuh"
extern "C" {
#include "kernels/rope.h"
}

// sum over the block (blockDim a multiple of 32, at most 1024); sh: 32 floats; every thread gets it
__device__ __forceinline__ float tk_block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = rt_warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < nw; i++) s += sh[i];
  return s;
}

__device__ __forceinline__ float tk_block_max(float v, float *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < nw; i++) m = fmaxf(m, sh[i]);
  return m;
}

__device__ __forceinline__ float tk_sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float tk_silu(float x) { return x * tk_sigm(x); }
__device__ __forceinline__ float tk_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// (1 + w) RMSNorm of row x [n] into y (block-wide; y may be x)
__device__ void tk_zcnorm(const float *x, const float *w, int n, float eps, float *y, float *sh) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  const float r = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r * (1.0f + w[i]);
}

// grid T: the embedding row of each token, its argmax key cleared, layer 0's input norm
__global__ void k_t_embed(const tcall *c, const uint8_t *emb, int f32, int64_t H, int64_t HS, const float *w,
                          float eps, float *h, float *a, unsigned long long *best) {
  __shared__ float sh[32];
  rt_trigger();
  rt_wait();
  const int t = blockIdx.x;
  const int64_t tok = c->tok[t];
  float *ht = h + t * HS;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    ht[j] = f32 ? reinterpret_cast<const float *>(emb)[tok * H + j]
                : rt_f32(reinterpret_cast<const uint16_t *>(emb)[tok * H + j]);
  if (threadIdx.x == 0) best[t] = 0;
  __syncthreads();
  tk_zcnorm(ht, w, (int)H, eps, a + t * HS, sh);
}

// grid T: h += y (+ s y2), then out = (1 + w) RMSNorm(h)
__global__ void k_t_addnorm(const float *y, const float *y2, const float *s2, int64_t ys, float *h, int64_t H,
                            int64_t HS, const float *w, float eps, float *out, int64_t os) {
  __shared__ float sh[32];
  rt_trigger();
  rt_wait();
  const int t = blockIdx.x;
  float *ht = h + t * HS;
  const float s = y2 ? s2[t * RT_KST] : 0.0f;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) ht[j] += y2 ? y[t * ys + j] + s * y2[t * ys + j] : y[t * ys + j];
  __syncthreads();
  tk_zcnorm(ht, w, (int)H, eps, out + t * os, sh);
}

struct tk_attn_args {
  const tcall *c;
  const float *qg, *kk, *vv, *qn, *kn;
  uint16_t *kc, *vc;
  float *pm, *pl, *pacc, *att;
  int Nq, Nkv, D, rot, NS;
  int64_t QGS, KVS, ATS;
  float theta, eps;
};

// grid (Nkv, T): token t's keys normed and rotated, keys and values to the cache at pos0 + t (BF16, to nearest even)
__global__ void k_t_kv(tk_attn_args A) {
  __shared__ float sh[32];
  extern __shared__ float kx[]; // [D]
  rt_trigger();
  rt_wait();
  const int g = blockIdx.x, t = blockIdx.y, D = A.D;
  const int64_t pos = A.c->pos0 + t, KV = (int64_t)A.Nkv * D;
  const float *k = A.kk + t * A.KVS + g * D, *v = A.vv + t * A.KVS + g * D;
  tk_zcnorm(k, A.kn, D, A.eps, kx, sh);
  __syncthreads();
  for (int j = threadIdx.x; j < A.rot / 2; j += blockDim.x) mtpq_rope_pair(kx, j, A.rot, pos, A.theta);
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    A.kc[pos * KV + g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(kx[d]));
    A.vc[pos * KV + g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(v[d]));
  }
}

// grid (Nq, T, NS), block 256: query head h of token t over the cached
// positions [s TA_C, (s + 1) TA_C) up to its own (pos0 + t): the split's
// maximum score, its sum of exponentials and its unnormalised output
__global__ void __launch_bounds__(256) k_t_attn(tk_attn_args A) {
  __shared__ float sh[32];
  __shared__ float sc[TA_C];
  extern __shared__ float q[]; // [D]
  rt_trigger();
  const int h = blockIdx.x, t = blockIdx.y, s = blockIdx.z, D = A.D;
  rt_wait();
  const int64_t pos = A.c->pos0 + t, lo = (int64_t)s * TA_C;
  if (lo > pos) return;
  const int64_t hi = lo + TA_C - 1 < pos ? lo + TA_C - 1 : pos;
  const int n = (int)(hi - lo + 1), g = h / (A.Nq / A.Nkv), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t KV = (int64_t)A.Nkv * D;
  tk_zcnorm(A.qg + t * A.QGS + (int64_t)h * 2 * D, A.qn, D, A.eps, q, sh);
  __syncthreads();
  for (int j = threadIdx.x; j < A.rot / 2; j += blockDim.x) mtpq_rope_pair(q, j, A.rot, pos, A.theta);
  __syncthreads();
  const float scale = 1.0f / sqrtf((float)D);
  for (int i = w; i < n; i += 8) {
    const uint16_t *kp = A.kc + (lo + i) * KV + (int64_t)g * D;
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32) dot += q[d] * rt_f32(kp[d]);
    dot = rt_warp_sum(dot);
    if (lane == 0) sc[i] = dot * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, sc[i]);
  m = tk_block_max(m, sh);
  float l = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) l += (sc[i] = expf(sc[i] - m));
  l = tk_block_sum(l, sh); // (its barriers publish sc)
  const int64_t o = ((int64_t)(t * A.Nq + h)) * A.NS + s;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += sc[i] * rt_f32(A.vc[(lo + i) * KV + (int64_t)g * D + d]);
    A.pacc[o * D + d] = acc;
  }
  if (threadIdx.x == 0) A.pm[o] = m, A.pl[o] = l;
}

// grid (Nq, T): the splits of query head h, token t, merged; x sigmoid(gate)
__global__ void k_t_comb(tk_attn_args A) {
  rt_trigger();
  rt_wait();
  const int h = blockIdx.x, t = blockIdx.y, D = A.D;
  const int ns = (int)((A.c->pos0 + t) / TA_C) + 1;
  const int64_t o = ((int64_t)(t * A.Nq + h)) * A.NS;
  float M = -INFINITY;
  for (int s = 0; s < ns; s++) M = fmaxf(M, A.pm[o + s]);
  float L = 0.0f;
  for (int s = 0; s < ns; s++) L += A.pl[o + s] * expf(A.pm[o + s] - M);
  const float *gate = A.qg + t * A.QGS + (int64_t)h * 2 * D + D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < ns; s++) acc += A.pacc[(o + s) * D + d] * expf(A.pm[o + s] - M);
    A.att[t * A.ATS + (int64_t)h * D + d] = acc / L * tk_sigm(gate[d]);
  }
}

struct tk_gdn_args {
  const tcall *c;
  const float *proj, *conv_w, *A_log, *dt_bias, *gnorm;
  const int *chan_src, *z_src, *b_src, *a_src;
  float *conv, *rec; // nbuf slots each
  float *mixo, *o, *o2;
  int T, HK, HV, dk, dv, Kc, conv_dim;
  int64_t PS, MS, VS;
  float eps;
};

// grid ceil(conv_dim / 128): each channel's causal conv over its last K
// inputs + SiLU, token by token; the state after token i into slot
// (cur + 1 + i) % nbuf
__global__ void k_t_conv(tk_gdn_args A) {
  rt_trigger();
  rt_wait();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= A.conv_dim) return;
  const int K1 = A.Kc - 1, cur = A.c->cur, nbuf = A.c->nbuf;
  const int64_t slot = (int64_t)A.conv_dim * K1;
  float st[8], w[9];
  for (int i = 0; i < K1; i++) st[i] = A.conv[cur * slot + (int64_t)c * K1 + i];
  for (int i = 0; i <= K1; i++) w[i] = A.conv_w[(int64_t)c * A.Kc + i];
  const int src = A.chan_src[c];
  for (int t = 0; t < A.T; t++) {
    const float x = A.proj[t * A.PS + src];
    float acc = 0.0f;
    for (int i = 0; i < K1; i++) acc += w[i] * st[i];
    acc += w[K1] * x;
    for (int i = 0; i + 1 < K1; i++) st[i] = st[i + 1];
    st[K1 - 1] = x;
    float *d = A.conv + ((cur + 1 + t) % nbuf) * slot + (int64_t)c * K1;
    for (int i = 0; i < K1; i++) d[i] = st[i];
    A.mixo[t * A.MS + c] = tk_silu(acc);
  }
}

#define TK_RPT 16 // state rows a thread holds (dk <= 256: at most 16 warps)

// grid (HV, ceil(dv / 32)), block 32 ceil(dk / TK_RPT): value head h's
// recurrent state, columns 32 by, rows TK_RPT a thread, token by token
// (target-architecture.md 2): S = S exp(g); u = S^T k; S += k (beta (v - u))^T;
// o = S^T q, with q and k l2-normed (q also by dk^-0.5). The state after
// token i goes to slot (cur + 1 + i) % nbuf.
__global__ void __launch_bounds__(512) k_t_gdn(tk_gdn_args A) {
  __shared__ float qs[256], ks[256], red[16][32], red2[16][32], scal[4];
  rt_trigger();
  rt_wait();
  const int h = blockIdx.x, lane = threadIdx.x & 31, rg = threadIdx.x >> 5, RG = blockDim.x >> 5;
  const int j = blockIdx.y * 32 + lane, dk = A.dk, dv = A.dv, kh = h / (A.HV / A.HK), kd = A.HK * dk;
  const int cur = A.c->cur, nbuf = A.c->nbuf;
  const int64_t slot = (int64_t)A.HV * dk * dv, hb = (int64_t)h * dk * dv;
  float S[TK_RPT];
#pragma unroll
  for (int i = 0; i < TK_RPT; i++) {
    const int r = rg * TK_RPT + i;
    S[i] = r < dk && j < dv ? A.rec[cur * slot + hb + (int64_t)r * dv + j] : 0.0f;
  }
  for (int t = 0; t < A.T; t++) {
    const float *mx = A.mixo + t * A.MS;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) qs[i] = mx[kh * dk + i], ks[i] = mx[kd + kh * dk + i];
    __syncthreads();
    if (rg == 0) {
      float sq = 0.0f, sk = 0.0f;
      for (int i = lane; i < dk; i += 32) sq += qs[i] * qs[i], sk += ks[i] * ks[i];
      sq = rt_warp_sum(sq), sk = rt_warp_sum(sk);
      if (lane == 0) {
        const float *p = A.proj + t * A.PS;
        scal[0] = 1.0f / sqrtf(sq + 1e-6f) / sqrtf((float)dk);
        scal[1] = 1.0f / sqrtf(sk + 1e-6f);
        scal[2] = tk_sigm(p[A.b_src[h]]);
        scal[3] = expf(-expf(A.A_log[h]) * tk_softplus(p[A.a_src[h]] + A.dt_bias[h]));
      }
    }
    __syncthreads();
    const float rq = scal[0], rk = scal[1], beta = scal[2], dec = scal[3];
    float u = 0.0f;
#pragma unroll
    for (int i = 0; i < TK_RPT; i++) {
      const int r = rg * TK_RPT + i;
      S[i] *= dec;
      if (r < dk) u += S[i] * (ks[r] * rk);
    }
    red[rg][lane] = u;
    __syncthreads();
    u = 0.0f;
    for (int g = 0; g < RG; g++) u += red[g][lane];
    const float v = j < dv ? mx[2 * kd + h * dv + j] : 0.0f, d = beta * (v - u);
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < TK_RPT; i++) {
      const int r = rg * TK_RPT + i;
      if (r < dk) S[i] += (ks[r] * rk) * d, o += S[i] * (qs[r] * rq);
    }
    red2[rg][lane] = o;
    __syncthreads();
    if (rg == 0 && j < dv) {
      float s = 0.0f;
      for (int g = 0; g < RG; g++) s += red2[g][lane];
      A.o[t * A.VS + (int64_t)h * dv + j] = s;
    }
    float *dst = A.rec + ((cur + 1 + t) % nbuf) * slot + hb;
#pragma unroll
    for (int i = 0; i < TK_RPT; i++) {
      const int r = rg * TK_RPT + i;
      if (r < dk && j < dv) dst[(int64_t)r * dv + j] = S[i];
    }
    __syncthreads(); // qs, ks, red, red2 are rewritten by the next token
  }
}

// grid (HV, T): the gated norm of value head h: w (as stored) x RMSNorm(o) x silu(z)
__global__ void k_t_gnorm(tk_gdn_args A) {
  __shared__ float sh[32];
  rt_trigger();
  rt_wait();
  const int h = blockIdx.x, t = blockIdx.y, dv = A.dv;
  const float *o = A.o + t * A.VS + (int64_t)h * dv;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < dv; j += blockDim.x) ss += o[j] * o[j];
  const float rn = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)dv + A.eps);
  for (int j = threadIdx.x; j < dv; j += blockDim.x)
    A.o2[t * A.VS + (int64_t)h * dv + j] = A.gnorm[j] * (o[j] * rn) * tk_silu(A.proj[t * A.PS + A.z_src[h * dv + j]]);
}

// grid T, block 256: softmax over the router's logits, top-k (ties to the
// lower expert), the weights (renormalised with norm_topk) into sel and
// wsel (RT_KST a token), and wsel[K] = sigmoid(shared_expert_gate) (1 without one)
__global__ void k_t_route(const float *pr, int64_t prs, const float *sz, int E, int K, int norm, float *wsel, int *sel) {
  __shared__ float sh[32];
  __shared__ unsigned long long keys[8];
  __shared__ int chosen[RT_TMAX];
  rt_trigger();
  rt_wait();
  const int t = blockIdx.x;
  const float *p = pr + t * prs;
  float m = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, p[e]);
  m = tk_block_max(m, sh);
  float s = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) s += expf(p[e] - m);
  s = tk_block_sum(s, sh);
  float wsum = 0.0f;
  for (int k = 0; k < K; k++) {
    unsigned long long best = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      bool used = false;
      for (int q = 0; q < k; q++) used |= chosen[q] == e;
      if (!used) {
        const unsigned long long key = rt_argmax_key(p[e], (uint32_t)e);
        best = key > best ? key : best;
      }
    }
    best = rt_warp_max_key(best);
    if ((threadIdx.x & 31) == 0) keys[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long b = 0;
      for (int w = 0; w < (int)(blockDim.x >> 5); w++) b = keys[w] > b ? keys[w] : b;
      chosen[k] = (int)(0xFFFFFFFFu - (uint32_t)(b & 0xFFFFFFFFu));
    }
    __syncthreads();
    wsum += expf(p[chosen[k]] - m) / s;
  }
  if (threadIdx.x < K) {
    const float wk = expf(p[chosen[threadIdx.x]] - m) / s;
    sel[t * RT_KST + threadIdx.x] = chosen[threadIdx.x];
    wsel[t * RT_KST + threadIdx.x] = norm ? wk / wsum : wk;
  }
  if (threadIdx.x == 0) wsel[t * RT_KST + K] = sz ? tk_sigm(sz[t]) : 1.0f;
}

__global__ void k_t_swiglu(const float *g, const float *u, float *a, int64_t n) {
  rt_trigger();
  rt_wait();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    a[i] = rt_silu_mul(g[i], u[i]);
}

void t_enqueue(tseq *s, int T, int head) {
  tgpu *m = s->m;
  gpu_session *g = &m->ctx;
  const struct mtpq_target *t = m->t;
  const tplan &p = m->plans[T];
  const int64_t H = m->H, HS = m->HS;
  g->on = g->st;
  go(g, true, k_t_embed, dim3(T), dim3(256), 0, (const tcall *)s->call, m->embed, t->embed_f32, H, HS,
     (const float *)m->L[0].in_norm, t->eps, m->h, m->a, g->x.best);
  tk_attn_args aa = {s->call, m->qg, m->kk, m->vv, nullptr, nullptr, nullptr, nullptr, m->pm, m->pl, m->pacc, m->att,
                     (int)t->Nq, (int)t->Nkv, (int)t->D, (int)t->rot, (int)m->NSMAX, m->QGS, m->KVS, m->ATS,
                     t->theta, t->eps};
  tk_gdn_args ga = {s->call, m->proj, nullptr, nullptr, nullptr, nullptr, m->chan_src, m->z_src, m->b_src, m->a_src,
                    nullptr, nullptr, m->mixo, m->o, m->o2, T, (int)t->HK, (int)t->HV, (int)t->dk, (int)t->dv,
                    (int)t->Kc, (int)t->conv_dim, m->PS, m->MS, m->VS, t->eps};
  for (int64_t i = 0; i < t->L; i++) {
    const tlayer_dev &l = m->L[i];
    launch_mv(g, p.proj[i]);
    if (l.kind == 'A') {
      aa.qn = l.qn, aa.kn = l.kn, aa.kc = s->kc[i], aa.vc = s->vc[i];
      const size_t sm = (size_t)t->D * 4;
      go(g, true, k_t_kv, dim3((unsigned)t->Nkv, T), dim3(128), sm, aa);
      go(g, true, k_t_attn, dim3((unsigned)t->Nq, T, (unsigned)m->NSMAX), dim3(256), sm, aa);
      go(g, true, k_t_comb, dim3((unsigned)t->Nq, T), dim3(128), 0, aa);
    } else {
      ga.conv_w = l.conv_w, ga.A_log = l.A_log, ga.dt_bias = l.dt_bias, ga.gnorm = l.gnorm;
      ga.conv = s->conv[i], ga.rec = s->rec[i];
      go(g, true, k_t_conv, dim3((unsigned)((t->conv_dim + 127) / 128)), dim3(128), 0, ga);
      const int rg = (int)((t->dk + TK_RPT - 1) / TK_RPT);
      go(g, true, k_t_gdn, dim3((unsigned)t->HV, (unsigned)((t->dv + 31) / 32)), dim3(32 * rg), 0, ga);
      go(g, true, k_t_gnorm, dim3((unsigned)t->HV, T), dim3(128), 0, ga);
    }
    launch_mv(g, p.out[i]);
    go(g, true, k_t_addnorm, dim3(T), dim3(256), 0, (const float *)m->y, (const float *)nullptr,
       (const float *)nullptr, HS, m->h, H, HS, (const float *)l.post_norm, t->eps, m->a, HS);
    const int64_t slots = (int64_t)T * m->S * m->IM;
    const unsigned sb = (unsigned)((slots + 255) / 256 < 1024 ? (slots + 255) / 256 : 1024);
    if (l.router >= 0) {
      launch_mv(g, p.rs[i]);
      go(g, true, k_t_route, dim3(T), dim3(256), 0, (const float *)m->pr, m->E, (const float *)(l.seg >= 0 ? m->sz : nullptr),
         (int)m->E, (int)m->K, t->layers[i].mlp.norm_topk, g->x.wsel, g->x.sel);
    }
    launch_mv(g, p.gu[i]);
    go(g, true, k_t_swiglu, dim3(sb), dim3(256), 0, (const float *)m->gb, (const float *)m->ub, m->act, slots);
    launch_mv(g, p.down[i]);
    // the separate shared expert (when it cannot be the down launch's last term) went to y2, weighted by wsel[K]
    const bool sep = l.router >= 0 && l.sg >= 0 && !l.shared_term;
    const bool last = i + 1 == t->L;
    go(g, true, k_t_addnorm, dim3(T), dim3(256), 0, (const float *)m->y, (const float *)(sep ? m->y2 : nullptr),
       (const float *)(g->x.wsel + m->K), HS, m->h, H, HS, (const float *)(last ? m->final_norm : m->L[i + 1].in_norm),
       t->eps, last ? m->hid : m->a, HS);
  }
  if (head == 1) launch_mv(g, p.head);
  if (head == 2) launch_mv(g, p.head_logits);
}
