// The target model's own kernels (the map is in kernels/cuda/target.cuh)
// and t_enqueue, which launches one forward. float32 arithmetic as the CPU
// reference (kernels/target.c) computes it; sums run in another order
// (trees over threads), and the K/V cache is BF16 (as vLLM caches a BF16
// model; the CPU reference keeps float32), hence the tolerance the GPU tests
// state. Every kernel lets the next one launch at once (rt_trigger) and
// waits for its predecessor (rt_wait) before it reads activations or
// writes anything.
#include <cooperative_groups.h>

#include "kernels/cuda/target.cuh"
extern "C" {
#include "kernels/rope.h"
}

// grid T: the embedding row of each token, its argmax key cleared, layer 0's input norm
__global__ void k_t_embed(tk_calls c, const uint8_t *emb, int f32, int64_t H, int64_t HS, const float *w,
                          float eps, float *h, float *a, unsigned long long *best) {
  __shared__ float sh[32];
  rt_trigger();
  RT_TL_START();
  rt_wait();
  const int t = blockIdx.x;
  const int64_t tok = c.c[t / c.Tn].tok[t % c.Tn];
  float *ht = h + t * HS;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    ht[j] = f32 ? reinterpret_cast<const float *>(emb)[tok * H + j]
                : rt_f32(reinterpret_cast<const uint16_t *>(emb)[tok * H + j]);
  if (threadIdx.x == 0) best[t] = 0;
  __syncthreads();
  tk_zcnorm(ht, w, (int)H, eps, a + t * HS, sh);
  RT_TL_END();
}

// grid T, block 256: h += y (+ s y2), then out = (1 + w) RMSNorm(h) (tk_zcnorm's sums, in its order). PART:
// y of token t is instead the sum of np partials y[t ys + p ps], p = 0 .. np - 1, added in that order, and
// there is no y2 (the experts' down from two tokens on: one a (token, expert), ledger 69). A thread's NPT
// elements (j = tid + 256 i, NPT >= H / 256) of h, y and y2 (or of h and up to PR partials at a time) are all
// loaded into registers before anything is added or stored (loads and stores interleaved, each load waited for
// the store before it: NPT L2 round trips one after another), the norm's weights before the wait.
template <int NPT, bool PART>
__global__ void __launch_bounds__(256) k_t_addnorm(const float *y, int np, int64_t ps, const float *y2,
                                                   const float *s2, int64_t ys, float *h, int64_t H, int64_t HS,
                                                   const float *w, float eps, float *out, int64_t os) {
  constexpr int PR = NPT >= 16 ? 64 / NPT : 12; // partials loaded at once (within the registers)
  __shared__ float sh[32];
  rt_trigger();
  RT_TL_START();
  const int t = blockIdx.x, tid = threadIdx.x;
  float wv[NPT], v[NPT], hv[NPT];
#pragma unroll
  for (int i = 0; i < NPT; i++) wv[i] = tid + 256 * i < H ? w[tid + 256 * i] : 0.0f;
  rt_wait();
  float *ht = h + t * HS;
  const float *yt = y + t * ys;
  if constexpr (PART) {
    for (int p0 = 0; p0 < np; p0 += PR) {
      float u[PR][NPT];
#pragma unroll
      for (int p = 0; p < PR; p++)
#pragma unroll
        for (int i = 0; i < NPT; i++) {
          const int64_t j = tid + 256 * i;
          u[p][i] = j < H && p0 + p < np ? yt[(p0 + p) * ps + j] : 0.0f;
        }
      if (p0 == 0) {
#pragma unroll
        for (int i = 0; i < NPT; i++) hv[i] = tid + 256 * i < H ? ht[tid + 256 * i] : 0.0f, v[i] = u[0][i];
      }
#pragma unroll
      for (int p = 0; p < PR; p++)
        if ((p0 > 0 || p > 0) && p0 + p < np)
#pragma unroll
          for (int i = 0; i < NPT; i++) v[i] += u[p][i];
    }
  } else {
    const float *y2t = y2 ? y2 + t * ys : nullptr;
    const float s = y2 ? s2[t * RT_KST] : 0.0f;
#pragma unroll
    for (int i = 0; i < NPT; i++) {
      const int64_t j = tid + 256 * i;
      v[i] = j < H ? (y2t ? yt[j] + s * y2t[j] : yt[j]) : 0.0f;
      hv[i] = j < H ? ht[j] : 0.0f;
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < NPT; i++) {
    if (tid + 256 * i >= H) continue;
    v[i] = hv[i] + v[i];
    ht[tid + 256 * i] = v[i];
    ss += v[i] * v[i];
  }
  const float r = 1.0f / sqrtf(tk_block_sum(ss, sh) / (float)H + eps);
#pragma unroll
  for (int i = 0; i < NPT; i++)
    if (tid + 256 * i < H) out[t * os + tid + 256 * i] = v[i] * r * (1.0f + wv[i]);
  RT_TL_END();
}

// k_t_addnorm's launch with the smallest NPT that covers H (H <= TK_HMAX: the load checks); y one array a
// token (np = 1) or the sum of np partials ps apart (no y2 then)
template <bool PART>
static void t_addnorm_go(gpu_session *g, int T, int64_t H, const float *y, int np, int64_t ps, const float *y2,
                         const float *s2, int64_t ys, float *h, int64_t HS, const float *w, float eps, float *out,
                         int64_t os) {
  const int64_t n = (H + 255) / 256;
  auto k = n <= 1    ? k_t_addnorm<1, PART>
           : n <= 2  ? k_t_addnorm<2, PART>
           : n <= 4  ? k_t_addnorm<4, PART>
           : n <= 8  ? k_t_addnorm<8, PART>
           : n <= 16 ? k_t_addnorm<16, PART>
                     : k_t_addnorm<32, PART>;
  go(g, true, k, dim3((unsigned)T), dim3(256), 0, y, np, ps, y2, s2, ys, h, H, HS, w, eps, out, os);
}
static void t_addnorm(gpu_session *g, int T, const float *y, int np, int64_t ps, const float *y2, const float *s2,
                      int64_t ys, float *h, int64_t H, int64_t HS, const float *w, float eps, float *out,
                      int64_t os) {
  if (np > 1) t_addnorm_go<true>(g, T, H, y, np, ps, nullptr, nullptr, ys, h, HS, w, eps, out, os);
  else t_addnorm_go<false>(g, T, H, y, 1, 0, y2, s2, ys, h, HS, w, eps, out, os);
}

// grid (Nkv, T), block 128: token t's key normed and rotated, key and value to its sequence's cache at the
// token's position (BF16, to nearest even), and with mma the G query heads of KV head g normed ((1 + w)
// RMSNorm) and rotated in place in qg, a warp a head, for k_t_attn_mma (k_t_attn norms its own). The RoPE
// pairs' cosines and sines at the position are made once (before the wait: the position is known).
__global__ void k_t_kv(tk_attn_args A) {
  __shared__ float sh[32];
  extern __shared__ float kx[]; // [D] the key, [4][D] the warps' query heads, [rot / 2] float2 the RoPE pairs
  rt_trigger();
  RT_TL_START();
  const int g = blockIdx.x, t = blockIdx.y, D = A.D, G = A.Nq / A.Nkv, lane = threadIdx.x & 31;
  const tcall &cl = A.c.c[t / A.c.Tn]; // (copied in before the forward's first kernel: read before the wait)
  uint16_t *const kc = cl.kc[A.c.layer], *const vc = cl.vc[A.c.layer];
  const int64_t pos = cl.pos0 + t % A.c.Tn, KV = (int64_t)A.Nkv * D;
  float *qx = kx + D * (1 + (threadIdx.x >> 5));
  float2 *cs = reinterpret_cast<float2 *>(kx + 5 * D);
  for (int j = threadIdx.x; j < A.rot / 2; j += blockDim.x) mtpq_rope_cs(j, A.rot, pos, A.theta, &cs[j].x, &cs[j].y);
  rt_wait();
  const float *k = A.kk + t * A.KVS + g * D, *v = A.vv + t * A.KVS + g * D;
  tk_zcnorm(k, A.kn, D, A.eps, kx, sh); // (its barriers publish cs)
  __syncthreads();
  for (int j = threadIdx.x; j < A.rot / 2; j += blockDim.x) mtpq_rope_apply(kx, j, A.rot / 2, cs[j].x, cs[j].y);
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    kc[pos * KV + g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(kx[d]));
    vc[pos * KV + g * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(v[d]));
  }
  for (int h = threadIdx.x >> 5; A.mma && h < G; h += blockDim.x >> 5) {
    float *q = A.qg + t * A.QGS + (int64_t)(g * G + h) * 2 * D;
    tk_head_norm(q, A.qn, D, A.eps, qx);
    __syncwarp();
    for (int j = lane; j < A.rot / 2; j += 32) mtpq_rope_apply(qx, j, A.rot / 2, cs[j].x, cs[j].y);
    __syncwarp();
    for (int d = lane; d < D; d += 32) q[d] = qx[d];
    __syncwarp();
  }
  RT_TL_END();
}

// grid (Nkv, T, NS), block 256: the G = Nq / Nkv query heads of KV head kv,
// token t, over its sequence's cached positions [s C, (s + 1) C) (C: ta_run
// of the sequence's length after the call) up to its own, so each cached row
// is read once for all of them: each head's split maximum, sum of exponentials
// and unnormalised output. A lane holds 8 consecutive elements of every head's
// query (D <= 256, D % 8 == 0: the load checks) and reads the key row 16 bytes
// at a time; scores go to shared memory; thread d sums column d of the values
// for the G heads.
template <int G> __global__ void __launch_bounds__(256) k_t_attn(tk_attn_args A) {
  __shared__ float sc[G][TA_C];
  __shared__ float qs[G][256];
  __shared__ float mx[G], sm[G];
  rt_trigger();
  RT_TL_START();
  const int kv = blockIdx.x, t = blockIdx.y, s = blockIdx.z, D = A.D;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const tcall &cl = A.c.c[t / A.c.Tn]; // (copied in before the forward's first kernel: read before the wait)
  const uint16_t *kc = cl.kc[A.c.layer], *vc = cl.vc[A.c.layer];
  const int64_t C = tk_split_len(A, cl, gridDim.y), pos = cl.pos0 + t % A.c.Tn, lo = (int64_t)s * C;
  if (lo > pos) {
    RT_TL_END();
    return;
  }
  rt_wait();
  const int n = (int)((lo + C - 1 < pos ? lo + C - 1 : pos) - lo + 1);
  const int64_t KV = (int64_t)A.Nkv * D;
  // the queries: (1 + w) RMSNorm and RoPE, a warp per head
  for (int g = w; g < G; g += 8) {
    tk_head_norm(A.qg + t * A.QGS + (int64_t)(kv * G + g) * 2 * D, A.qn, D, A.eps, qs[g]);
    __syncwarp();
    for (int j = lane; j < A.rot / 2; j += 32) mtpq_rope_pair(qs[g], j, A.rot, pos, A.theta);
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf((float)D);
  const bool on = lane * 8 < D;
  float qr[G][8];
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int e = 0; e < 8; e++) qr[g][e] = on ? qs[g][lane * 8 + e] : 0.0f;
  // the warp's rows w, w + 8, ...: TA_KR of them a step, their keys loaded before any is used (one memory
  // round trip a step, not one a row)
  for (int i0 = w; i0 < n; i0 += 8 * TA_KR) {
    uint4 u[TA_KR];
#pragma unroll
    for (int r = 0; r < TA_KR; r++) {
      const int i = i0 + 8 * r;
      u[r] = on && i < n ? *reinterpret_cast<const uint4 *>(kc + (lo + i) * KV + (int64_t)kv * D + lane * 8)
                         : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < TA_KR; r++) {
      const int i = i0 + 8 * r;
      if (i >= n) break;
      float kx[8];
      const uint32_t uu[4] = {u[r].x, u[r].y, u[r].z, u[r].w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 f = rt_bf16x2(uu[e]);
        kx[2 * e] = f.x, kx[2 * e + 1] = f.y;
      }
#pragma unroll
      for (int g = 0; g < G; g++) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) dot += qr[g][e] * kx[e];
        dot = rt_warp_sum(dot);
        if (lane == 0) sc[g][i] = dot * scale;
      }
    }
  }
  __syncthreads();
  for (int g = w; g < G; g += 8) { // each head's maximum and sum of exponentials, a warp per head
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, sc[g][i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    float l = 0.0f;
    for (int i = lane; i < n; i += 32) l += (sc[g][i] = expf(sc[g][i] - m));
    l = rt_warp_sum(l);
    if (lane == 0) mx[g] = m, sm[g] = l;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; g++) acc[g] = 0.0f;
    const uint16_t *vp = vc + lo * KV + (int64_t)kv * D + d;
    int i = 0;
    for (; i + TA_VR <= n; i += TA_VR) { // TA_VR rows' loads in flight before their sums
      float v[TA_VR];
#pragma unroll
      for (int u = 0; u < TA_VR; u++) v[u] = rt_f32(vp[(int64_t)(i + u) * KV]);
#pragma unroll
      for (int u = 0; u < TA_VR; u++)
#pragma unroll
        for (int g = 0; g < G; g++) acc[g] += sc[g][i + u] * v[u];
    }
    for (; i < n; i++) {
      const float v = rt_f32(vp[(int64_t)i * KV]);
#pragma unroll
      for (int g = 0; g < G; g++) acc[g] += sc[g][i] * v;
    }
#pragma unroll
    for (int g = 0; g < G; g++) A.pacc[(((int64_t)(t * A.Nq + kv * G + g)) * A.NS + s) * D + d] = acc[g];
  }
  if (threadIdx.x < G) {
    const int64_t o = ((int64_t)(t * A.Nq + kv * G + threadIdx.x)) * A.NS + s;
    A.pm[o] = mx[threadIdx.x], A.pl[o] = sm[threadIdx.x];
  }
  RT_TL_END();
}

// the attention of a forward: k_t_attn for the query heads per KV head (1, 2, 4, 8 or 16: the load checks)
static decltype(&k_t_attn<1>) attn_kernel(int G) {
  return G == 1 ? k_t_attn<1> : G == 2 ? k_t_attn<2> : G == 4 ? k_t_attn<4> : G == 8 ? k_t_attn<8> : k_t_attn<16>;
}
static void attn_run(gpu_session *g, const tk_attn_args &aa, int T, int NS) {
  go(g, true, attn_kernel(aa.Nq / aa.Nkv), dim3((unsigned)aa.Nkv, T, (unsigned)NS), dim3(256), 0, aa);
}
// k_t_attn's block slots: its blocks an SM times the SMs
static int attn_slots(gpu_session *g, int G) {
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, attn_kernel(G), 256, 0) != cudaSuccess || nb < 1)
    cudaGetLastError(), nb = 1;
  return nb * g->sms;
}

// grid (Nq, T), block 256, a thread a column d (D <= 256: the load checks): the splits of query head h, token t,
// merged (each split's factor exp(m_s - M) computed once into shared memory); x sigmoid(gate). Every load that
// waits on nothing is issued before the two reductions: the thread's split statistics (split tid; later splits
// in the reductions' loops), its column's gate and its column of the first TC_R splits' outputs, so the block
// waits on one memory round trip before its reductions instead of one a step after them. The sums run over the
// splits in order.
__global__ void __launch_bounds__(256) k_t_comb(tk_attn_args A) {
  __shared__ float sh[32];
  __shared__ float f[TA_NSMAX];
  rt_trigger();
  RT_TL_START();
  const int h = blockIdx.x, t = blockIdx.y, D = A.D, tid = threadIdx.x, nt = blockDim.x;
  const tcall &cl = A.c.c[t / A.c.Tn];
  const int n1 = (int)((cl.pos0 + t % A.c.Tn) / tk_split_len(A, cl, gridDim.y)) + 1, ns = n1 < A.NS ? n1 : A.NS;
  rt_wait();
  const int64_t o = ((int64_t)(t * A.Nq + h)) * A.NS;
  const bool on = tid < D;
  const float *pa = A.pacc + o * D + tid;
  float p[TC_R];
#pragma unroll
  for (int u = 0; u < TC_R; u++) p[u] = on && u < ns ? pa[(int64_t)u * D] : 0.0f;
  const float gate = on ? A.qg[t * A.QGS + (int64_t)h * 2 * D + D + tid] : 0.0f;
  const float m0 = tid < ns ? A.pm[o + tid] : -INFINITY, l0 = tid < ns ? A.pl[o + tid] : 0.0f;
  float M = m0;
  for (int s = tid + nt; s < ns; s += nt) M = fmaxf(M, A.pm[o + s]);
  M = tk_block_max(M, sh);
  float L = 0.0f;
  if (tid < ns) f[tid] = expf(m0 - M), L = l0 * f[tid];
  for (int s = tid + nt; s < ns; s += nt) f[s] = expf(A.pm[o + s] - M), L += A.pl[o + s] * f[s];
  L = tk_block_sum(L, sh); // (its barriers publish f)
  if (on) {
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < TC_R; u++)
      if (u < ns) acc += p[u] * f[u];
    int s = TC_R;
    for (; s + TA_VR <= ns; s += TA_VR) { // TA_VR splits' loads in flight before their sums (in order)
      float q[TA_VR];
#pragma unroll
      for (int u = 0; u < TA_VR; u++) q[u] = pa[(int64_t)(s + u) * D];
#pragma unroll
      for (int u = 0; u < TA_VR; u++) acc += q[u] * f[s + u];
    }
    for (; s < ns; s++) acc += pa[(int64_t)s * D] * f[s];
    A.att[t * A.ATS + (int64_t)h * D + tid] = acc / L * tk_sigm(gate);
  }
  RT_TL_END();
}

struct tk_gdn_args {
  tk_calls c;
  const float *proj, *conv_w, *A_log, *dt_bias, *gnorm;
  const int *chan_src, *z_src, *b_src, *a_src;
  float *o2;
  int HK, HV, dk, dv, Kc, conv_dim;
  int64_t PS, VS;
  float eps;
};

#define TK_RPT 16 // state rows a thread holds (dk <= 256: at most 16 warps)

// The conv of up to two channels a thread (2 dk + 32 <= 2 x blockDim): its
// weights and the last K - 1 inputs in registers, stepped a token at a time.
struct tk_chan {
  int c, src; // conv channel and its proj column; c < 0: none
  bool write; // this block stores the channel's state slots (each channel has one writer)
  float st[9], w[9];
};

// grid (ceil(dv / 32), HV, sequences) in clusters of ceil(dv / 32) (at most
// 8: dv <= TK_DVMAX), block 32 ceil(dk / TK_RPT): Gated DeltaNet's mixer for
// value head h = blockIdx.y, state columns 32 by (target-architecture.md 2),
// of sequence blockIdx.z (its tokens [z Tn, (z + 1) Tn) of the call, its own
// state): (1) the causal conv + SiLU of every token, of the channels the
// block reads (q and k of its key head, v of its columns; every block of a
// key head computes its q and k, and the block (first value head of the
// group, column block 0) stores their states; v has one block), the state
// after token i into conv slot (cur + 1 + i) % nbuf; (2) each token's q and
// k norms and gates, a warp a token; (3) token by token, the delta rule: S =
// S exp(g); u = S^T k; S += k (beta (v - u))^T; o = S^T q, q and k l2-normed
// (q also by dk^-0.5), the state after token i into slot (cur + 1 + i) %
// nbuf; (4) after the last token, the gated RMSNorm (plain w) x silu(z) over
// the head's dv outputs: the head's column blocks are one cluster, each keeps
// its outputs and its sums of squares in shared memory, and after one cluster
// barrier each adds the blocks' sums (in block order) and normalises its own
// columns. Why a cluster: the head's last block to finish (a global counter
// after a fence) normalising the whole head put a fence, an atomic and two
// loads from L2 one after another at the end of every GDN layer.
__global__ void __launch_bounds__(512) k_t_gdn(tk_gdn_args A) {
  // every token's conv outputs (q, k: dk <= 128, the load checks), norms and gates, so that the delta rule's
  // token loop has two barriers a token and no warp's serial section
  __shared__ float qs[MTPQ_TCUDA_MAX_T][128], ks[MTPQ_TCUDA_MAX_T][128], vs[MTPQ_TCUDA_MAX_T][32];
  __shared__ float scal[MTPQ_TCUDA_MAX_T][4], red[16][32], red2[16][32];
  __shared__ float sb[MTPQ_TCUDA_MAX_T], sa[MTPQ_TCUDA_MAX_T], hc[2]; // each token's b and a inputs; A_log, dt_bias
  __shared__ float bss[MTPQ_TCUDA_MAX_T];     // each token's sum of squares of this block's outputs
  __shared__ float os[MTPQ_TCUDA_MAX_T][32];  // and the outputs
  __shared__ float zsh[MTPQ_TCUDA_MAX_T][32]; // and their z
  rt_trigger();
  RT_TL_START();
  const int h = blockIdx.y, lane = threadIdx.x & 31, rg = threadIdx.x >> 5, RG = blockDim.x >> 5;
  const int r = A.HV / A.HK, j = blockIdx.x * 32 + lane, dk = A.dk, dv = A.dv, kh = h / r, kd = A.HK * dk;
  const tcall &cl = A.c.c[blockIdx.z];
  const int cur = cl.cur, nbuf = cl.nbuf, K1 = A.Kc - 1, NCB = gridDim.x, t0 = blockIdx.z * A.c.Tn;
  float *const conv = cl.conv[A.c.layer], *const rec = cl.rec[A.c.layer]; // nbuf slots each
  const int64_t slot = (int64_t)A.HV * dk * dv, hb = (int64_t)h * dk * dv, cslot = (int64_t)A.conv_dim * K1;
  tk_chan ch[2];
#pragma unroll
  for (int q = 0; q < 2; q++) {
    const int i = threadIdx.x + q * blockDim.x;
    tk_chan &x = ch[q];
    x.c = -1;
    if (i < 2 * dk) { // q (i < dk), then k, of key head kh
      x.c = i < dk ? kh * dk + i : kd + kh * dk + (i - dk);
      x.write = h % r == 0 && blockIdx.x == 0;
    } else if (i < 2 * dk + 32 && blockIdx.x * 32 + (i - 2 * dk) < dv) { // v of this block's columns
      x.c = 2 * kd + h * dv + blockIdx.x * 32 + (i - 2 * dk);
      x.write = true;
    }
    if (x.c < 0) continue;
    x.src = A.chan_src[x.c];
#pragma unroll
    for (int k = 0; k < 9; k++) { // (fixed bounds: the arrays stay in registers)
      if (k < K1) x.st[k] = conv[cur * cslot + (int64_t)x.c * K1 + k];
      if (k <= K1) x.w[k] = A.conv_w[(int64_t)x.c * A.Kc + k];
    }
  }
  float S[TK_RPT];
#pragma unroll
  for (int i = 0; i < TK_RPT; i++) {
    const int rr = rg * TK_RPT + i;
    S[i] = rr < dk && j < dv ? rec[cur * slot + hb + (int64_t)rr * dv + j] : 0.0f;
  }
  const int bsrc = A.b_src[h], asrc = A.a_src[h];
  if (threadIdx.x == 0) hc[0] = A.A_log[h], hc[1] = A.dt_bias[h];
  // the gated norm's weight of column j and where its z is (warp 0 normalises the block's columns)
  const float gw = rg == 0 && j < dv ? A.gnorm[j] : 0.0f;
  const int zsrc = rg == 0 && j < dv ? A.z_src[h * dv + j] : 0;
  // (the call block, the weights, the tables and the states of slot cur, which the forwards before wrote, are
  // read above while the in_proj product finishes; its output only after the wait)
  rt_wait();
  // every token's b and a inputs at once (the delta rule's warp reads them from shared memory), and each
  // channel's next input one token ahead: no token waits on a load it could have issued before
  if (threadIdx.x < A.c.Tn)
    sb[threadIdx.x] = A.proj[(t0 + threadIdx.x) * A.PS + bsrc], sa[threadIdx.x] = A.proj[(t0 + threadIdx.x) * A.PS + asrc];
  float nx[2];
#pragma unroll
  for (int q = 0; q < 2; q++) nx[q] = ch[q].c >= 0 ? A.proj[t0 * A.PS + ch[q].src] : 0.0f;
  if (rg == 0) // column j's z of every token (read by the same lane after the last token)
    for (int i = 0; i < A.c.Tn; i++) zsh[i][lane] = j < dv ? A.proj[(t0 + i) * A.PS + zsrc] : 0.0f;
  for (int t = t0; t < t0 + A.c.Tn; t++) { // (1) the conv of every token (t: the call's; its slot counts from t0)
    const float *p = A.proj + t * A.PS;
#pragma unroll
    for (int q = 0; q < 2; q++) {
      tk_chan &x = ch[q];
      if (x.c < 0) continue;
      const float in = nx[q];
      if (t + 1 < t0 + A.c.Tn) nx[q] = p[A.PS + x.src];
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < 9; k++) acc += k < K1 ? x.w[k] * x.st[k] : k == K1 ? x.w[k] * in : 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) x.st[k] = k + 1 < K1 ? x.st[k + 1] : k + 1 == K1 ? in : x.st[k];
      if (x.write) {
        float *d = conv + ((cur + 1 + t - t0) % nbuf) * cslot + (int64_t)x.c * K1;
#pragma unroll
        for (int k = 0; k < 8; k++)
          if (k < K1) d[k] = x.st[k];
      }
      const int i = threadIdx.x + q * blockDim.x;
      const float y = tk_silu(acc);
      if (i < dk) qs[t - t0][i] = y;
      else if (i < 2 * dk) ks[t - t0][i - dk] = y;
      else vs[t - t0][i - 2 * dk] = y;
    }
  }
  __syncthreads();
  for (int i = rg; i < A.c.Tn; i += RG) { // (2) each token's norms and gates, a warp a token
    float sq = 0.0f, sk = 0.0f;
    for (int e = lane; e < dk; e += 32) sq += qs[i][e] * qs[i][e], sk += ks[i][e] * ks[i][e];
    sq = rt_warp_sum(sq), sk = rt_warp_sum(sk);
    if (lane == 0) {
      scal[i][0] = 1.0f / sqrtf(sq + 1e-6f) / sqrtf((float)dk);
      scal[i][1] = 1.0f / sqrtf(sk + 1e-6f);
      scal[i][2] = tk_sigm(sb[i]);
      scal[i][3] = expf(-expf(hc[0]) * tk_softplus(sa[i] + hc[1]));
    }
  }
  __syncthreads();
  for (int i = 0; i < A.c.Tn; i++) { // (3) the delta rule, token after token (two barriers each)
    const float rq = scal[i][0], rk = scal[i][1], beta = scal[i][2], dec = scal[i][3];
    float u = 0.0f;
#pragma unroll
    for (int e = 0; e < TK_RPT; e++) {
      const int rr = rg * TK_RPT + e;
      S[e] *= dec;
      if (rr < dk) u += S[e] * (ks[i][rr] * rk);
    }
    red[rg][lane] = u; // (every thread read the token before's red before the barrier that ended it)
    __syncthreads();
    u = 0.0f;
    for (int g = 0; g < RG; g++) u += red[g][lane];
    const float v = j < dv ? vs[i][lane] : 0.0f, d = beta * (v - u);
    float o = 0.0f;
#pragma unroll
    for (int e = 0; e < TK_RPT; e++) {
      const int rr = rg * TK_RPT + e;
      if (rr < dk) S[e] += (ks[i][rr] * rk) * d, o += S[e] * (qs[i][rr] * rq);
    }
    red2[rg][lane] = o; // (warp 0 read the token before's red2 before this token's first barrier)
    __syncthreads();
    if (rg == 0) { // this block's outputs and their sum of squares (the gated norm's, after the last token)
      float s2 = 0.0f;
      for (int g = 0; g < RG; g++) s2 += red2[g][lane];
      os[i][lane] = s2;
      const float ss = rt_warp_sum(j < dv ? s2 * s2 : 0.0f);
      if (lane == 0) bss[i] = ss;
    }
    float *dst = rec + ((cur + 1 + i) % nbuf) * slot + hb;
#pragma unroll
    for (int e = 0; e < TK_RPT; e++) {
      const int rr = rg * TK_RPT + e;
      if (rr < dk && j < dv) dst[(int64_t)rr * dv + j] = S[e];
    }
  }
  // (4) the gated norm of every token: the cluster's blocks are the head's column blocks; the barrier's release
  // and acquire publish every block's sums (bss) to the others
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  if (rg == 0)
    for (int i = 0; i < A.c.Tn; i++) {
      float g[TK_DVMAX / 32]; // every block's sum, all loaded before they are added (in block order)
#pragma unroll
      for (int b = 0; b < TK_DVMAX / 32; b++) g[b] = b < NCB ? cluster.map_shared_rank(bss, b)[i] : 0.0f;
      float ss = 0.0f;
#pragma unroll
      for (int b = 0; b < TK_DVMAX / 32; b++)
        if (b < NCB) ss += g[b];
      const float rn = 1.0f / sqrtf(ss / (float)dv + A.eps);
      if (j < dv) A.o2[(t0 + i) * A.VS + (int64_t)h * dv + j] = gw * (os[i][lane] * rn) * tk_silu(zsh[i][lane]);
    }
  // no block leaves while another may still read its sums
  __cluster_barrier_arrive_relaxed();
  __cluster_barrier_wait();
  RT_TL_END();
}

__global__ void k_t_swiglu(const float *g, const float *u, float *a, int64_t n) {
  rt_trigger();
  RT_TL_START();
  rt_wait();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    a[i] = rt_silu_mul(g[i], u[i]);
  RT_TL_END();
}

void t_enqueue(tgpu *m, int n, int Tn, int head) {
  gpu_session *g = &m->ctx;
  const struct mtpq_target *t = m->t;
  const int T = n * Tn;
  const tplan &p = m->plans[T];
  const int64_t H = m->H, HS = m->HS;
  g->on = g->st;
  tk_calls cs = {m->calls, Tn, 0};
  go(g, false, k_t_embed, dim3(T), dim3(256), 0, cs, m->embed, t->embed_f32, H, HS, (const float *)m->L[0].in_norm,
     t->eps, m->h, m->a, g->x.best);
  mark(g, "embedding + norm");
  tk_attn_args aa = {};
  aa.c = cs, aa.qg = m->qg, aa.kk = m->kk, aa.vv = m->vv, aa.pm = m->pm, aa.pl = m->pl, aa.pacc = m->pacc;
  aa.att = m->att, aa.Nq = (int)t->Nq, aa.Nkv = (int)t->Nkv, aa.D = (int)t->D, aa.rot = (int)t->rot;
  aa.mma = g->set.tune.tattn;
  if (aa.mma) {
    aa.slots = g->set.tune.tattn_slots > 0 ? g->set.tune.tattn_slots : t->Nkv > 0 ? t_attn_slots(g, (int)t->D) : 1;
    aa.bps = t->Nkv > 0 ? t_attn_bps((int)t->Nkv, (int)(t->Nq / t->Nkv), n, Tn) : 1;
  } else {
    aa.slots = t->Nkv > 0 ? attn_slots(g, (int)(t->Nq / t->Nkv)) : 1;
  }
  aa.NS = (int)m->NSMAX, aa.QGS = m->QGS, aa.KVS = m->KVS, aa.ATS = m->ATS, aa.theta = t->theta, aa.eps = t->eps;
  tk_gdn_args ga = {};
  ga.c = cs, ga.proj = m->proj, ga.chan_src = m->chan_src, ga.z_src = m->z_src, ga.b_src = m->b_src;
  ga.a_src = m->a_src, ga.o2 = m->o2, ga.HK = (int)t->HK;
  ga.HV = (int)t->HV, ga.dk = (int)t->dk, ga.dv = (int)t->dv, ga.Kc = (int)t->Kc, ga.conv_dim = (int)t->conv_dim;
  ga.PS = m->PS, ga.VS = m->VS, ga.eps = t->eps;
  for (int64_t i = 0; i < t->L; i++) {
    const tlayer_dev &l = m->L[i];
    launch_mv(g, p.proj[i]);
    mark(g, l.kind == 'A' ? "attn q/k/v" : "gdn in_proj");
    if (l.kind == 'A') {
      aa.qn = l.qn, aa.kn = l.kn, aa.c.layer = (int)i;
      const size_t sm = (size_t)(5 * t->D + t->rot) * 4;
      go(g, true, k_t_kv, dim3((unsigned)t->Nkv, T), dim3(128), sm, aa);
      mark(g, "attn k norm+rope, cache");
      if (aa.mma) t_attn_run(g, aa, n, Tn);
      else attn_run(g, aa, T, (int)m->NSMAX);
      mark(g, "attn splits");
      go(g, true, k_t_comb, dim3((unsigned)t->Nq, T), dim3(256), 0, aa);
      mark(g, "attn combine + gate");
    } else {
      ga.conv_w = l.conv_w, ga.A_log = l.A_log, ga.dt_bias = l.dt_bias, ga.gnorm = l.gnorm;
      ga.c.layer = (int)i;
      const int rg = (int)((t->dk + TK_RPT - 1) / TK_RPT);
      const unsigned ncb = (unsigned)((t->dv + 31) / 32);
      go_cl(g, true, ncb, k_t_gdn, dim3(ncb, (unsigned)t->HV, (unsigned)n), dim3(32 * rg), 0, ga);
      mark(g, "gdn conv + recurrence + gated norm");
    }
    launch_mv(g, p.out[i]);
    mark(g, l.kind == 'A' ? "attn o_proj" : "gdn out_proj");
    t_addnorm(g, T, m->y, 1, 0, nullptr, nullptr, HS, m->h, H, HS, l.post_norm, t->eps, m->a, HS);
    mark(g, "residual + norm");
    const int64_t slots = (int64_t)T * m->S * m->IM;
    const unsigned sb = (unsigned)((slots + 255) / 256 < 1024 ? (slots + 255) / 256 : 1024);
    if (l.router >= 0) {
      launch_mv(g, p.rs[i]);
      mark(g, "router");
      ops_route_rows(g, true, T, m->pr, l.seg >= 0 ? m->sz : nullptr, (int)m->E, (int)m->K, t->layers[i].mlp.norm_topk,
                     g->x.sel, g->x.wsel);
      mark(g, "softmax + top-k");
    }
    launch_mv(g, p.gu[i]);
    mark(g, "mlp gate/up");
    if (!l.glu) { // (pairs: SwiGLU was in the gate/up product)
      go(g, true, k_t_swiglu, dim3(sb), dim3(256), 0, (const float *)m->gb, (const float *)m->ub, m->act, slots);
      mark(g, "mlp swiglu");
    }
    launch_mv(g, p.down[i]);
    mark(g, "mlp down");
    // the separate shared expert (when it cannot be the down launch's last term) went to y2, weighted by wsel[K]
    const bool sep = l.router >= 0 && l.sg >= 0 && !l.shared_term;
    const bool last = i + 1 == t->L;
    // the down's partials (a task a (token, expert) from two tokens on: build) are summed there too
    const int np = p.dnp[(size_t)i];
    t_addnorm(g, T, np > 1 ? m->ydp : m->y, np, HS, sep ? m->y2 : nullptr, g->x.wsel + m->K, np > 1 ? np * HS : HS,
              m->h, H, HS, last ? m->final_norm : m->L[i + 1].in_norm, t->eps, last ? m->hid : m->a, HS);
    mark(g, "residual + norm");
  }
  if (head == 1) launch_mv(g, p.head);
  if (head == 2) launch_mv(g, p.head_logits);
  mark(g, "head + argmax");
}
