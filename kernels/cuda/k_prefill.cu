// The prefill's own kernels (kernels/cuda/prefill.cuh says what each does
// and why the path exists). float32 arithmetic as the CPU reference
// (kernels/target.c) computes it, in another order; every product's input
// leaves here as two BF16 pieces (tp_put).
#include "kernels/cuda/prefill.cuh"
extern "C" {
#include "kernels/rope.h"
}

__global__ void k_p_embed(const int *tok, const uint8_t *emb, int f32, int64_t H, int64_t HS, float *h) {
  const int64_t t = blockIdx.x, row = tok[t];
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    h[t * HS + j] = f32 ? reinterpret_cast<const float *>(emb)[row * H + j]
                        : rt_f32(reinterpret_cast<const uint16_t *>(emb)[row * H + j]);
}

void tp_embed(cudaStream_t st, const int *tok, const uint8_t *emb, int f32, int64_t H, int64_t HS, float *h, int n) {
  k_p_embed<<<n, 256, 0, st>>>(tok, emb, f32, H, HS, h);
}

// the norm tail of both add-norms: row h [H] of token t
__device__ void tp_norm_row(const float *h, int64_t H, int64_t HS, const float *w, float eps, bf16 *x0, bf16 *x1,
                            float *xf, float *sh) {
  const int64_t t = blockIdx.x;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) ss += h[j] * h[j];
  const float r = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)H + eps);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    const float v = h[j] * r * (1.0f + w[j]);
    if (xf) xf[t * HS + j] = v;
    else tp_put(v, x0, x1, t * HS + j);
  }
}

__global__ void k_p_addnorm(const float *y, int64_t ys, float *h, int64_t H, int64_t HS, const float *w, float eps,
                            bf16 *x0, bf16 *x1, float *xf) {
  __shared__ float sh[32];
  const int64_t t = blockIdx.x;
  float *ht = h + t * HS;
  if (y)
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) ht[j] += y[t * ys + j];
  __syncthreads();
  tp_norm_row(ht, H, HS, w, eps, x0, x1, xf, sh);
}

void tp_addnorm(cudaStream_t st, const float *y, int64_t ys, float *h, int64_t H, int64_t HS, const float *w,
                float eps, bf16 *x0, bf16 *x1, float *xf, int n) {
  k_p_addnorm<<<n, 256, 0, st>>>(y, ys, h, H, HS, w, eps, x0, x1, xf);
}

__global__ void k_p_moe_addnorm(const float *yd, const int *inv, const float *wsel, int K, const float *ysh, float *h,
                                int64_t H, int64_t HS, const float *w, float eps, bf16 *x0, bf16 *x1, float *xf) {
  __shared__ float sh[32];
  __shared__ int rows[RT_TMAX];
  __shared__ float ws[RT_TMAX];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < K) rows[threadIdx.x] = inv[t * K + threadIdx.x], ws[threadIdx.x] = wsel[t * RT_KST + threadIdx.x];
  if (threadIdx.x == 0) ws[K] = wsel[t * RT_KST + K];
  __syncthreads();
  float *ht = h + t * HS;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
      if (rows[k] >= 0) acc += ws[k] * yd[(int64_t)rows[k] * H + j];
    if (ysh) acc += ws[K] * ysh[t * HS + j];
    ht[j] += acc;
  }
  __syncthreads();
  tp_norm_row(ht, H, HS, w, eps, x0, x1, xf, sh);
}

void tp_moe_addnorm(cudaStream_t st, const float *yd, const int *inv, const float *wsel, int K, const float *ysh,
                    float *h, int64_t H, int64_t HS, const float *w, float eps, bf16 *x0, bf16 *x1, float *xf, int n) {
  k_p_moe_addnorm<<<n, 256, 0, st>>>(yd, inv, wsel, K, ysh, h, H, HS, w, eps, x0, x1, xf);
}

// weight i of L unscaled (i < rows x cols)
__device__ __forceinline__ float tp_weight(const dlin &L, int64_t i) {
  if (L.f == LIN_BF16) return rt_f32(reinterpret_cast<const uint16_t *>(L.w)[i]);
  if (L.f == LIN_FP8) return rt_e4m3(L.w[i]);
  const uint8_t b = L.w[i >> 1];
  return rt_e2m1((i & 1) ? b >> 4 : b & 15) * rt_e4m3(L.sc[i >> 4]);
}

// weights i .. i + cnt - 1 of L unscaled into v (cnt <= 16); a whole aligned group of 16 in one load
__device__ __forceinline__ void tp_weights16(const dlin &L, int64_t i, int cnt, float *v) {
  if (cnt == 16 && L.f == LIN_NVFP4 && !(i & 15)) { // 8 bytes of codes (element 2j in the low nibble), one scale
    const uint2 u = *reinterpret_cast<const uint2 *>(L.w + (i >> 1));
    const float sc = rt_e4m3(L.sc[i >> 4]);
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int k = 0; k < 16; k++) v[k] = rt_e2m1((int)(w[k >> 3] >> (4 * (k & 7)))) * sc;
    return;
  }
  for (int k = 0; k < cnt; k++) v[k] = tp_weight(L, i + k);
}

// v[0, cnt) to o as BF16 (each exact: the weights have at most 8 significant bits); 32 bytes in two stores
// where aligned
__device__ __forceinline__ void tp_store16(bf16 *o, const float *v, int cnt) {
  if (cnt == 16 && !(reinterpret_cast<uintptr_t>(o) & 15)) {
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
      w[k] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k])) |
             (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1])) << 16;
    uint4 *q = reinterpret_cast<uint4 *>(o);
    q[0] = make_uint4(w[0], w[1], w[2], w[3]), q[1] = make_uint4(w[4], w[5], w[6], w[7]);
    return;
  }
  for (int k = 0; k < cnt; k++) o[k] = __float2bfloat16_rn(v[k]);
}

// n weights of L from element 0, 16 a thread and step
__device__ __forceinline__ void tp_dequant_run(const dlin &L, int64_t n, bf16 *out, int64_t i0, int64_t step) {
  float v[16];
  for (int64_t i = i0; i < n; i += step) {
    const int cnt = n - i < 16 ? (int)(n - i) : 16;
    tp_weights16(L, i, cnt, v);
    tp_store16(out + i, v, cnt);
  }
}

__global__ void k_p_dequant(const dlin *tab, int idx, int64_t n, bf16 *out) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x * 16;
  tp_dequant_run(tab[idx], n, out, ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 16, step);
}

void tp_dequant(cudaStream_t st, const dlin *tab, int idx, int64_t rows, int64_t cols, bf16 *out) {
  const int64_t n = rows * cols, b = (n / 16 + 255) / 256;
  k_p_dequant<<<(unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096), 256, 0, st>>>(tab, idx, n, out);
}

__global__ void k_p_swiglu(const float *y, int64_t ldy, int gs, int64_t uo, int64_t I, float sg, float su, bf16 *x0,
                           bf16 *x1, int64_t ldo) {
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
    const float g = y[r * ldy + i * gs] * sg, u = y[r * ldy + uo + i * gs] * su;
    tp_put(tk_silu(g) * u, x0, x1, r * ldo + i);
  }
}

void tp_swiglu(cudaStream_t st, const float *y, int64_t ldy, int gs, int64_t uo, int64_t I, float sg, float su,
               bf16 *x0, bf16 *x1, int64_t ldo, int64_t rows) {
  if (rows < 1) return;
  k_p_swiglu<<<(unsigned)rows, 256, 0, st>>>(y, ldy, gs, uo, I, sg, su, x0, x1, ldo);
}

// ---- Gated DeltaNet (target-architecture.md 2) ----

// grid n, block 256: token t's conv + SiLU of every channel (inputs before the chunk from the old conv state),
// q and k l2-normed (q also by dk^-0.5), beta = sigmoid(b), the log decay -exp(A_log) softplus(a + dt_bias)
// (k_gdnc.cu sums it over a chunk)
__global__ void k_p_gdn_pre(tp_gdn_args A) {
  const int64_t t = blockIdx.x;
  const int K1 = A.Kc - 1, kd = A.HK * A.dk;
  float *mx = A.mix + t * A.conv_dim;
  for (int c = threadIdx.x; c < A.conv_dim; c += blockDim.x) {
    const int src = A.chan_src[c];
    float acc = 0.0f;
    for (int k = 0; k < A.Kc; k++) { // input at token t - K1 + k
      const int64_t tt = t - K1 + k;
      const float in = tt >= 0 ? A.proj[tt * A.PS + src] : A.conv_old[(int64_t)c * K1 + (K1 + tt)];
      acc += A.conv_w[(int64_t)c * A.Kc + k] * in;
    }
    mx[c] = tk_silu(acc);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int j = w; j < 2 * A.HK; j += nw) { // a warp a key head's q (j < HK) or k
    float *v = mx + (j < A.HK ? j * A.dk : kd + (j - A.HK) * A.dk);
    float ss = 0.0f;
    for (int i = lane; i < A.dk; i += 32) ss += v[i] * v[i];
    ss = rt_warp_sum(ss);
    const float r = j < A.HK ? 1.0f / sqrtf(ss + 1e-6f) / sqrtf((float)A.dk) : 1.0f / sqrtf(ss + 1e-6f);
    __syncwarp();
    for (int i = lane; i < A.dk; i += 32) v[i] *= r;
  }
  __syncthreads();
  for (int h = threadIdx.x; h < A.HV; h += blockDim.x) {
    const float *p = A.proj + t * A.PS;
    const float a = p[A.a_src[h]] + A.dt_bias[h];
    A.beta[t * A.HV + h] = tk_sigm(p[A.b_src[h]]);
    A.lg[t * A.HV + h] = -expf(A.A_log[h]) * tk_softplus(a);
  }
}

// the conv state after the chunk's last token: its last K - 1 inputs, oldest first
__global__ void k_p_conv_state(tp_gdn_args A, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, K1 = A.Kc - 1;
  if (c >= A.conv_dim) return;
  const int src = A.chan_src[c];
  for (int k = 0; k < K1; k++) {
    const int64_t tt = (int64_t)n - K1 + k;
    A.conv_new[(int64_t)c * K1 + k] = tt >= 0 ? A.proj[tt * A.PS + src] : A.conv_old[(int64_t)c * K1 + (K1 + tt)];
  }
}

// grid (n, HV), block 128: the gated RMSNorm (plain w) x silu(z) of value head h, token t, as pieces
__global__ void k_p_gdn_norm(tp_gdn_args A) {
  __shared__ float sh[32];
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const float *o = A.o + t * A.VS + (int64_t)h * A.dv;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < A.dv; j += blockDim.x) ss += o[j] * o[j];
  const float rn = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)A.dv + A.eps);
  for (int j = threadIdx.x; j < A.dv; j += blockDim.x) {
    const float z = A.proj[t * A.PS + A.z_src[h * A.dv + j]];
    tp_put(A.gnorm[j] * (o[j] * rn) * tk_silu(z), A.x0, A.x1, t * A.VS + (int64_t)h * A.dv + j);
  }
}

void tp_gdn(cudaStream_t st, const tp_gdn_args &A, int n) {
  k_p_gdn_pre<<<n, 256, 0, st>>>(A);
  k_p_conv_state<<<(A.conv_dim + 255) / 256, 256, 0, st>>>(A, n);
  tg_recurrence(st, A, n);
  k_p_gdn_norm<<<dim3((unsigned)n, (unsigned)A.HV), 128, 0, st>>>(A);
}

// ---- gated attention ----

// grid (Nq, n), block 128: query head h of token t, (1 + w) RMSNorm and RoPE at its position
__global__ void k_p_queries(tp_attn_args A) {
  __shared__ float sh[32], qx[256];
  const int h = blockIdx.x, D = A.D;
  const int64_t t = blockIdx.y;
  tk_zcnorm(A.qg + t * A.QGS + (int64_t)h * 2 * D, A.qn, D, A.eps, qx, sh);
  __syncthreads();
  for (int j = threadIdx.x; j < A.rot / 2; j += blockDim.x) mtpq_rope_pair(qx, j, A.rot, A.pos0 + t, A.theta);
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) tp_put(qx[d], A.q0, A.q1, ((int64_t)h * A.C + t) * D + d);
}

void tp_queries(cudaStream_t st, const tp_attn_args &A, int n) {
  k_p_queries<<<dim3((unsigned)A.Nq, (unsigned)n), 128, 0, st>>>(A);
}

// grid (Nq, cb), block 256: query c0 + c of head h sees keys 0 .. pos0 + c0 + c; the rest of its row is zero
__global__ void k_p_softmax(tp_attn_args A, int64_t c0, int64_t L) {
  __shared__ float sh[32];
  const int64_t row = ((int64_t)blockIdx.x * gridDim.y + blockIdx.y) * L, n = A.pos0 + c0 + blockIdx.y + 1;
  const float *s = A.sc + row;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
  m = tk_block_max(m, sh);
  float l = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) l += expf(s[j] - m);
  l = tk_block_sum(l, sh);
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x) tp_put(j < n ? expf(s[j] - m) / l : 0.0f, A.p0, A.p1, row + j);
}

void tp_softmax(cudaStream_t st, const tp_attn_args &A, int64_t c0, int cb, int64_t L) {
  k_p_softmax<<<dim3((unsigned)A.Nq, (unsigned)cb), 256, 0, st>>>(A, c0, L);
}

__global__ void k_p_gate(tp_attn_args A) {
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < (int64_t)A.Nq * A.D; i += blockDim.x) {
    const int64_t h = i / A.D, d = i % A.D;
    const float g = A.qg[t * A.QGS + h * 2 * A.D + A.D + d];
    tp_put(A.att[t * A.ATS + i] * tk_sigm(g), A.x0, A.x1, t * A.ATS + i);
  }
}

void tp_gate(cudaStream_t st, const tp_attn_args &A, int n) { k_p_gate<<<n, 256, 0, st>>>(A); }

// grid (Nkv, n), block 128: token t's key (1 + w) normed and rotated, key and value to the BF16 cache at its
// position (to nearest even, as every forward caches them)
__global__ void k_p_kv(const float *kk, const float *vv, int64_t KVS, const float *kn, int Nkv, int D, int rot,
                       int64_t pos0, float theta, float eps, uint16_t *kc, uint16_t *vc) {
  __shared__ float sh[32], kx[256];
  const int g = blockIdx.x;
  const int64_t t = blockIdx.y, pos = pos0 + t, KV = (int64_t)Nkv * D;
  const float *k = kk + t * KVS + (int64_t)g * D, *v = vv + t * KVS + (int64_t)g * D;
  tk_zcnorm(k, kn, D, eps, kx, sh);
  __syncthreads();
  for (int j = threadIdx.x; j < rot / 2; j += blockDim.x) mtpq_rope_pair(kx, j, rot, pos, theta);
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    kc[pos * KV + (int64_t)g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(kx[d]));
    vc[pos * KV + (int64_t)g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(v[d]));
  }
}

void tp_kv(cudaStream_t st, const float *kk, const float *vv, int64_t KVS, const float *kn, int Nkv, int D, int rot,
           int64_t pos0, float theta, float eps, uint16_t *kc, uint16_t *vc, int n) {
  k_p_kv<<<dim3((unsigned)Nkv, (unsigned)n), 128, 0, st>>>(kk, vv, KVS, kn, Nkv, D, rot, pos0, theta, eps, kc, vc);
}
