// The CUDA drafter runtime's other kernels (included by kernels/runtime_cuda.cu
// only): embedding + norms, per-head norm + RoPE + KV write, attention split
// over the context (flash-decoding partials, then a combine that applies the
// output gate), routing (softmax + top-k in one warp per token), SwiGLU, the
// residual + final norm, and the feedback of the argmax into the next step.
// Every kernel takes the tokens of one launch (blockIdx over tokens) and
// reads positions, sequences and token ids from device memory, so a CUDA
// graph of the step does not depend on them.
#pragma once
#include "kernels/rt_mv.cuh"
extern "C" {
#include "kernels/rope.h"
}

__device__ float rt_block_sum(float v) { // blockDim.x == 256
  __shared__ float part[8];
  __shared__ float res;
  v = rt_warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < 8 ? part[threadIdx.x] : 0.0f;
    t = rt_warp_sum(t);
    if (threadIdx.x == 0) res = t;
  }
  __syncthreads();
  return res;
}

// y = x / rms(x) * (1 + w), one block
__device__ void rt_zcnorm(const float *x, const float *w, int n, float eps, float *y) {
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  float r = rsqrtf(rt_block_sum(ss) / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r * (1.0f + w[i]);
}

// token t: c[t] = [norm(embed[tok]), norm(hidden)]; also clears the argmax key
__global__ void k_prep(const uint8_t *embed, const int *tok, const float *hid, int H, const float *ne, const float *nh,
                       float eps, float *c, float *scratch, unsigned long long *best) {
  const int t = blockIdx.x;
  const uint16_t *e = reinterpret_cast<const uint16_t *>(embed) + (int64_t)tok[t] * H;
  float *s = scratch + (int64_t)t * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) s[i] = __uint_as_float((uint32_t)e[i] << 16);
  __syncthreads();
  rt_zcnorm(s, ne, H, eps, c + (int64_t)t * 2 * H);
  rt_zcnorm(hid + (int64_t)t * H, nh, H, eps, c + (int64_t)t * 2 * H + H);
  if (threadIdx.x == 0) best[t] = 0;
}

__global__ void k_norm(const float *x, const float *w, int n, float eps, float *y) {
  rt_zcnorm(x + (int64_t)blockIdx.x * n, w, n, eps, y + (int64_t)blockIdx.x * n);
}

// grid (Nq + Nkv, tokens): query heads normed + roped in place (q|gate
// interleaved per head), key heads normed + roped into the cache with v
__global__ void k_qk(float *qg, const float *kk, const float *vv, int Nq, int Nkv, int D, int rot, const int64_t *pos,
                     const int *seq, int64_t max_pos, float theta, const float *nq, const float *nk, float eps,
                     float *kc, float *vc) {
  extern __shared__ float buf[];
  const int h = blockIdx.x, t = blockIdx.y;
  const int64_t KV = (int64_t)Nkv * D, p = pos[t];
  float *q = qg + (int64_t)t * 2 * Nq * D + (int64_t)h * 2 * D;
  const float *src = h < Nq ? q : kk + t * KV + (int64_t)(h - Nq) * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) buf[j] = src[j];
  __syncthreads();
  rt_zcnorm(buf, h < Nq ? nq : nk, D, eps, buf);
  __syncthreads();
  for (int j = threadIdx.x; j < rot / 2; j += blockDim.x) mtpq_rope_pair(buf, j, rot, p, theta);
  __syncthreads();
  if (h < Nq) {
    for (int j = threadIdx.x; j < D; j += blockDim.x) q[j] = buf[j];
  } else {
    const int64_t off = ((int64_t)seq[t] * max_pos + p) * KV + (int64_t)(h - Nq) * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
      kc[off + j] = buf[j];
      vc[off + j] = vv[t * KV + (int64_t)(h - Nq) * D + j];
    }
  }
}

#define RT_CS 32 // cached positions per attention block

// grid (splits, Nkv, tokens), 256 threads: the G = Nq/Nkv query heads of one
// KV head over positions [s*CS, s*CS+CS) ∩ [lo, pos]: partial max, sum and
// unnormalised output per head
__global__ void __launch_bounds__(256) k_attn(const float *qg, const float *kc, const float *vc, int Nq, int Nkv, int D,
                                              const int64_t *pos, const int *seq, int64_t max_pos, int window,
                                              int nsplit, float *po, float *pm, float *pl) {
  extern __shared__ float sm[];
  const int G = Nq / Nkv, sp = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
  float *qs = sm, *ss = sm + G * D;
  const int64_t p = pos[t], KV = (int64_t)Nkv * D;
  const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
  int64_t p0 = (int64_t)sp * RT_CS, p1 = p0 + RT_CS;
  if (p0 < lo) p0 = lo;
  if (p1 > p + 1) p1 = p + 1;
  const int64_t pi = ((int64_t)t * Nq + (int64_t)g * G) * nsplit + sp; // (t, head g*G, split sp)
  if (p0 >= p1) {
    if (threadIdx.x < G) pm[pi + (int64_t)threadIdx.x * nsplit] = -INFINITY, pl[pi + (int64_t)threadIdx.x * nsplit] = 0;
    return;
  }
  const int n = (int)(p1 - p0), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x)
    qs[i] = qg[(int64_t)t * 2 * Nq * D + (int64_t)(g * G + i / D) * 2 * D + i % D];
  __syncthreads();
  const float scale = rsqrtf((float)D);
  const float *kb = kc + (int64_t)seq[t] * max_pos * KV + (int64_t)g * D;
  const float *vb = vc + (int64_t)seq[t] * max_pos * KV + (int64_t)g * D;
  for (int i = warp; i < n; i += 8) {
    const float *kr = kb + (p0 + i) * KV;
    float kv[16], acc[16]; // the row's loads all in flight at once (D <= 512)
#pragma unroll
    for (int q = 0; q < 16; q++) kv[q] = lane + 32 * q < D ? kr[lane + 32 * q] : 0.0f;
#pragma unroll
    for (int h = 0; h < 16; h++) acc[h] = 0.0f;
#pragma unroll
    for (int q = 0; q < 16; q++) {
      if (lane + 32 * q >= D) continue;
#pragma unroll
      for (int h = 0; h < 16; h++)
        if (h < G) acc[h] += qs[h * D + lane + 32 * q] * kv[q];
    }
#pragma unroll
    for (int h = 0; h < 16; h++)
      if (h < G) {
        float s = rt_warp_sum(acc[h]);
        if (lane == 0) ss[h * RT_CS + i] = s * scale;
      }
  }
  __syncthreads();
  for (int h = warp; h < G; h += 8) { // one warp per head: max, exp, sum
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, ss[h * RT_CS + i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    float l = 0;
    for (int i = lane; i < n; i += 32) l += (ss[h * RT_CS + i] = expf(ss[h * RT_CS + i] - m));
    l = rt_warp_sum(l);
    if (lane == 0) pm[pi + (int64_t)h * nsplit] = m, pl[pi + (int64_t)h * nsplit] = l;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float o[16];
    for (int h = 0; h < 16; h++) o[h] = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n; i++) {
      float v = vb[(p0 + i) * KV + j];
#pragma unroll
      for (int h = 0; h < 16; h++)
        if (h < G) o[h] += ss[h * RT_CS + i] * v;
    }
    for (int h = 0; h < G; h++) po[(pi + (int64_t)h * nsplit) * D + j] = o[h];
  }
}

// grid (Nq, tokens), 256 threads, 8 * D floats of shared memory: combine
// the splits (warps over splits, lanes over dims), normalise, apply
// sigmoid(gate)
__global__ void __launch_bounds__(256) k_attn_combine(const float *qg, const float *po, const float *pm,
                                                      const float *pl, int Nq, int D, const int64_t *pos, int window,
                                                      int nsplit, float *att) {
  extern __shared__ float red[];
  const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t p = pos[t];
  const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
  const int s0 = (int)(lo / RT_CS), s1 = (int)(p / RT_CS);
  const int64_t base = ((int64_t)t * Nq + h) * nsplit;
  float M = -INFINITY;
  for (int s = s0 + lane; s <= s1; s += 32) M = fmaxf(M, pm[base + s]);
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, o));
  float L = 0;
  for (int s = s0 + lane; s <= s1; s += 32) L += pl[base + s] * expf(pm[base + s] - M);
  L = rt_warp_sum(L);
  float o[16];
  for (int q = 0; q < 16; q++) o[q] = 0.0f;
  const int nq = (D + 31) / 32; // dims per lane (D <= 512)
#pragma unroll 4
  for (int s = s0 + warp; s <= s1; s += 8) {
    const float w = expf(pm[base + s] - M);
    const float *src = po + (base + s) * D;
#pragma unroll
    for (int q = 0; q < 16; q++)
      if (q < nq && lane + 32 * q < D) o[q] += src[lane + 32 * q] * w;
  }
#pragma unroll
  for (int q = 0; q < 16; q++)
    if (q < nq && lane + 32 * q < D) red[warp * D + lane + 32 * q] = o[q];
  __syncthreads();
  const float *gate = qg + (int64_t)t * 2 * Nq * D + (int64_t)h * 2 * D + D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float v = 0;
    for (int w = 0; w < 8; w++) v += red[w * D + j];
    att[((int64_t)t * Nq + h) * D + j] = v / L * (1.0f / (1.0f + expf(-gate[j])));
  }
}

// y += x0; y2 = norm(y)
__global__ void k_add_norm(float *y, const float *x0, const float *w, int n, float eps, float *y2) {
  const int64_t o = (int64_t)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[o + i] += x0[o + i];
  __syncthreads();
  rt_zcnorm(y + o, w, n, eps, y2 + o);
}

// one warp per token: softmax over E router logits, top-K (ties to the lower
// expert), optional renormalisation; slot K gets sigmoid(shared_expert_gate)
__global__ void k_route(const float *logits, const float *z, int E, int K, int renorm, int have_shared, int *sel,
                        float *wsel) {
  extern __shared__ float pr[];
  const int t = blockIdx.x, lane = threadIdx.x;
  const float *l = logits + (int64_t)t * E;
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, pr[e] = l[e]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  float s = 0;
  for (int e = lane; e < E; e += 32) s += (pr[e] = expf(pr[e] - m));
  s = rt_warp_sum(s);
  for (int e = lane; e < E; e += 32) pr[e] /= s;
  __syncwarp();
  float tot = 0;
  for (int k = 0; k < K; k++) {
    unsigned long long best = 0;
    for (int e = lane; e < E; e += 32) {
      unsigned long long key = pr[e] < 0 ? 0 : rt_argmax_key(pr[e], (uint32_t)e);
      best = key > best ? key : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
      unsigned long long b = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      best = b > best ? b : best;
    }
    const int e = (int)(0xFFFFFFFFu - (uint32_t)(best & 0xFFFFFFFFu));
    const float v = pr[e];
    __syncwarp();
    if (lane == 0) sel[t * RT_KST + k] = e, wsel[t * RT_KST + k] = v, pr[e] = -1.0f; // probabilities are >= 0
    tot += v;
    __syncwarp();
  }
  if (lane == 0) {
    if (renorm)
      for (int k = 0; k < K; k++) wsel[t * RT_KST + k] /= tot;
    wsel[t * RT_KST + K] = have_shared ? 1.0f / (1.0f + expf(-z[t])) : 1.0f;
  }
}

// act = silu(g) * u over n rows of len elements, row stride st
__global__ void k_swiglu(const float *g, const float *u, float *act, int rows, int len, int64_t st) {
  for (int64_t i = threadIdx.x + (int64_t)blockIdx.x * blockDim.x; i < (int64_t)rows * len;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / len, c = i % len, o = r * st + c;
    float x = g[o];
    act[o] = x / (1.0f + expf(-x)) * u[o];
  }
}

// out = norm(m + m2 + r2) (routed experts, shared expert, residual), one
// block per token
__global__ void k_final(float *m, const float *m2, const float *r2, const float *w, int n, float eps, float *out) {
  const int64_t o = (int64_t)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m[o + i] += m2[o + i] + r2[o + i];
  __syncthreads();
  rt_zcnorm(m + o, w, n, eps, out + o);
}

// after the head: token ids for the next draft step, positions + 1, the
// drafted ids recorded at rec[step * n + t] (step counted on the device)
__global__ void k_next(const unsigned long long *best, const int64_t *ids, int *tok, int64_t *pos, int *rec,
                       int *step, int n) {
  const int t = threadIdx.x;
  const int s = *step;
  __syncthreads();
  if (t < n) {
    const int64_t row = (int64_t)(0xFFFFFFFFu - (uint32_t)(best[t] & 0xFFFFFFFFu));
    const int id = (int)(ids ? ids[row] : row);
    tok[t] = id;
    pos[t] += 1;
    rec[s * n + t] = id;
  }
  if (t == 0) *step = s + 1;
}
