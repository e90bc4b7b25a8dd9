// Attention of the draft step over the drafter's KV cache, split over the
// context (flash-decoding): k_attn scores a split's cached K/V rows (copied
// to shared memory asynchronously) against the query heads, after norming
// and roping the launch's own keys and writing them and their values to
// the cache; k_attn_combine merges the splits' partials and applies the
// output gate. Every kernel reads positions and sequences from device
// memory, so a CUDA graph of the step does not depend on them.
#include <cuda_bf16.h>

#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"
extern "C" {
#include "kernels/rope.h"
}

// A head norm's constants for one lane: its weights (columns lane + 32 q)
// and the RoPE cosine and sine of its rotated pairs (lane + 32 q) at one
// position. Positions change between steps only, so kernels load these
// before waiting for the kernel before (one memory latency less after it).
struct rt_head_consts {
  float w[16];
  float2 cs[8];
};

__device__ __forceinline__ void rt_head_load(const float *w, int D, int rot, const float2 *cs, rt_head_consts &k) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < 16; q++) k.w[q] = lane + 32 * q < D ? w[lane + 32 * q] : 0.0f;
#pragma unroll
  for (int q = 0; q < 8; q++) k.cs[q] = lane + 32 * q < rot / 2 ? cs[lane + 32 * q] : make_float2(0.0f, 0.0f);
}

// zero-centred RMSNorm of one head (D <= 512 values at src) by one warp into
// dst (shared), then RoPE of its first rot dims (k: rt_head_load's, for the
// same D and rot)
__device__ void rt_head_norm_rope(const float *src, const rt_head_consts &k, int D, float eps, int rot, float *dst) {
  const int lane = threadIdx.x & 31;
  float v[16], sq = 0.0f;
#pragma unroll
  for (int q = 0; q < 16; q++) {
    const int j = lane + 32 * q;
    v[q] = j < D ? src[j] : 0.0f;
    sq += v[q] * v[q];
  }
  const float r = rsqrtf(rt_warp_sum(sq) / D + eps);
#pragma unroll
  for (int q = 0; q < 16; q++) {
    const int j = lane + 32 * q;
    if (j < D) dst[j] = v[q] * r * (1.0f + k.w[q]);
  }
  __syncwarp();
#pragma unroll
  for (int q = 0; q < 8; q++)
    if (lane + 32 * q < rot / 2) mtpq_rope_apply(dst, lane + 32 * q, rot / 2, k.cs[q].x, k.cs[q].y);
  __syncwarp();
}

// rt_cp16 (kernels/cuda/dev.cuh) with an L2 cache hint (pol: createpolicy's 64-bit policy)
__device__ __forceinline__ void rt_cp16h(void *dst, const void *src, uint64_t pol) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "l"(pol) : "memory");
}

// an L2 policy that marks every line it is used on evict-first
__device__ __forceinline__ uint64_t rt_l2_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// k_attn's arguments: the launch's queries (q|gate interleaved per head),
// keys and values, the norm weights of q and k, the RoPE table, positions
// and sequences of its n_tok tokens, the caches, and the partials it writes
// (po: outputs, pm: maxima, pl: sums, [token, head, split]); merge: the
// ring's block merges its splits into one partial; ef_pos: see kvef
struct attn_args {
  const float *qg;
  int Nq, Nkv, D, rot;
  const float2 *rcs;
  const int64_t *pos;
  const int *seq;
  int n_tok;
  int64_t max_pos;
  int window;
  const float *nq, *nk;
  float eps;
  const float *kk, *vv;
  uint16_t *kc, *vc;
  int nsplit;
  float *po, *pm, *pl;
  int merge;
  int64_t ef_pos;
};

// k_attn_combine's: the partials and the gates (qg) in, att out
struct combine_args {
  const float *qg, *po, *pm, *pl;
  int Nq, D;
  const int64_t *pos;
  int window;
  float *att;
};

// grid (X, Nkv, tokens), 256 threads, rt_attn_smem floats of shared memory,
// D % 8 == 0: the G = Nq/Nkv query heads of KV head g over the positions of
// split s, [s*CS, s*CS+CS) ∩ [lo, pos]: partial max, sum and unnormalised
// output per head (flash-decoding; k_attn_combine merges the splits). RING
// 0: X covers the splits, a block scores split blockIdx.x. RING 2 (the
// default): two blocks an SM, each scoring splits blockIdx.x, + X, + 2X, ...
// of those the token attends to, one after another, with one split's room:
// the next split's keys copy while it weights this one's values, and the
// next split's values while it scores those keys (at long contexts a block
// per split left its SM without loads in flight while it scored; a ring of
// 3 splits on one block an SM was latency-bound instead: ledger 12). Each
// split's scores are the same arithmetic; with merge its partials join the
// block's running ones (below). The block copies the K and V rows earlier
// launches cached to shared memory asynchronously (its first split's) before
// it waits on the kernels before it (earlier steps wrote them). After the
// wait its warps norm and rope the query heads and the rows of this launch
// (from the first position of the token's sequence in it: a chunk of a
// sequence's positions sees its own earlier tokens), keys from k (norm +
// RoPE, as the cache holds them) and values from v, and the block of the
// row's own token writes them to the cache for later steps (the separate
// k_kv kernel before did; the same function, so the same bits). A thread
// then scores one (head, row) pair (k_attn<8, 256>: a warp a part of the
// head dimension, see there), and one output column of every head.
// GT, DT: G and D as compile-time constants (0: read from the arguments);
// the constant instantiation has its loops unrolled and its per-head tests
// and divisions folded away, and (RING 0) is held to 3 blocks per SM (as
// many as its shared memory allows at D = 256; it fits 80 registers without
// spills).
// MMA (RING 2 at G = 8, D = 256 only): the scores and the weighted values on
// tensor cores (bf16 m16n8k16; q and the softmax weights as three bf16
// pieces that add up to them exactly, so every product is exact and only
// the order of the sums differs from FFMA's). Why: at long contexts the
// FFMA form's blocks waited on their own shared-memory broadcasts of q and
// of the weights, not on HBM (ledger 17; two splits' room a block lost too).
template <int GT, int DT, int RING, int MMA>
__global__ void __launch_bounds__(256, RING ? 2 : GT ? 3 : 1)
    k_attn(const attn_args A) {
  const float *qg = A.qg, *nq = A.nq, *nk = A.nk, *kk = A.kk, *vv = A.vv;
  const int Nq = A.Nq, Nkv = A.Nkv, Darg = A.D, rot = A.rot, n_tok = A.n_tok, window = A.window, merge = A.merge,
            nsplit = A.nsplit;
  const float2 *rcs = A.rcs;
  const int64_t *pos = A.pos, max_pos = A.max_pos, ef_pos = A.ef_pos;
  const int *seq = A.seq;
  const float eps = A.eps;
  uint16_t *kc = A.kc, *vc = A.vc;
  float *po = A.po, *pm = A.pm, *pl = A.pl;
  RT_TL_START();
  extern __shared__ __align__(16) float sm[];
  rt_trigger();
  static_assert(RING == 0 || RING == 2, "k_attn: RING 0 or 2");
  static_assert(!MMA || (GT == 8 && DT == 256 && RING == 2), "k_attn: the MMA path is RING 2 at the 80B shape");
  const int G = GT ? GT : Nq / Nkv, D = DT ? DT : Darg, g = blockIdx.y, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, DP = D + 8; // (K/V rows: BF16 values)
  constexpr bool RED = RING && GT == 8 && DT == 256; // the partial scores' own place
  float *qs = sm, *red = RED ? qs + G * D : qs;
  uint16_t *ks = reinterpret_cast<uint16_t *>(RED ? red + 2048 : qs + G * D), *vs = ks + RT_CS * DP;
  float *ss = reinterpret_cast<float *>(vs + RT_CS * DP), *fr = ss + G * RT_CS + warp * D; // fr: the warp's float row
  // RING 2, merge: the block's running maximum, sum and rescale factor per
  // head, and its running output (a thread's own columns)
  float *mrun = ss + G * RT_CS + 8 * D, *lrun = mrun + G, *arun = lrun + G, *orun = arun + 2 * G;
  // RING 2: the keys' norm weights and RoPE row at p, lane-wise as
  // rt_head_consts holds them (in registers through the loop they pushed it
  // past its 128 registers into spills)
  float *kws = orun + G * D;
  // MMA: the softmax weights' three bf16 pieces, [piece][head][row] (rows
  // padded to 40 against bank conflicts), in orun's place (MMA keeps its
  // running output in registers)
  __nv_bfloat16 *pp = reinterpret_cast<__nv_bfloat16 *>(orun);
  const int g8 = lane >> 2, t8 = lane & 3; // (MMA: the lane's place in its fragments)
  const int64_t p = pos[t], KV = (int64_t)Nkv * D; // pos and seq change between steps only
  const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
  // this block's splits: first, first + X, ... up to the split of p
  const int X = gridDim.x, s_lo = (int)(lo / RT_CS), s_hi = (int)(p / RT_CS);
  int first = blockIdx.x, count = 1;
  if (RING) {
    if (first < s_lo) first += (s_lo - first + X - 1) / X * X;
    count = first <= s_hi ? (s_hi - first) / X + 1 : 0;
  } else if (first < s_lo || first > s_hi) {
    RT_TL_END();
    return;
  }
  if (count == 0) { RT_TL_END(); return; }
  const int sq_ = seq[t];
  int64_t fresh = p; // the first position of this sequence written by this launch
  for (int u = 0; u < n_tok; u++)
    if (seq[u] == sq_ && pos[u] < fresh) fresh = pos[u];
  const int64_t cbase = (int64_t)sq_ * max_pos * KV + (int64_t)g * D;
  const int d8 = D / 8; // 16-byte chunks of a BF16 row
  // The cached rows are copied evict-first where the launch's tokens attend
  // to more than ef_pos positions in all (the host sizes it at half of L2).
  // Each row is read once a step, and at 32K the 117 MB of them otherwise
  // pushed everything else out of L2, the code of the kernels after this one
  // included; at short contexts the hint costs a little, probably because
  // the rows partly stay in L2 from one step to the next (ledger 18)
  const bool kvef = (p + 1) * (int64_t)n_tok > ef_pos;
  const uint64_t pol = kvef ? rt_l2_evict_first() : 0;
  // split i's positions [p0, p0 + n); rows [0, nf) were written by earlier
  // launches (copied to shared memory), rows [nf, n) by this one
  auto span = [&](int i, int64_t &p0, int &n, int &nf) {
    p0 = (int64_t)(first + i * X) * RT_CS;
    int64_t p1 = p0 + RT_CS;
    if (p0 < lo) p0 = lo;
    if (p1 > p + 1) p1 = p + 1;
    n = (int)(p1 - p0);
    nf = fresh <= p0 ? 0 : fresh - p0 >= n ? n : (int)(fresh - p0);
  };
  // split i's cached rows (parts: 1 keys, 2 values, 3 both) into shared
  // memory; a thread's chunk c is (row c / d8, column c % d8), stepped by 256
  // chunks = cq rows and cr columns (no division in the loop)
  auto fetch = [&](int i, int parts) {
    int64_t p0;
    int n, nf;
    span(i, p0, n, nf);
    const int cq = 256 / d8, cr = 256 - cq * d8;
    int c = tid, r = c / d8, j = c - r * d8;
    for (; c < nf * d8; c += 256) {
      if (kvef) {
        if (parts & 1) rt_cp16h(ks + r * DP + 8 * j, kc + cbase + (p0 + r) * KV + 8 * j, pol);
        if (parts & 2) rt_cp16h(vs + r * DP + 8 * j, vc + cbase + (p0 + r) * KV + 8 * j, pol);
      } else {
        if (parts & 1) rt_cp16(ks + r * DP + 8 * j, kc + cbase + (p0 + r) * KV + 8 * j);
        if (parts & 2) rt_cp16(vs + r * DP + 8 * j, vc + cbase + (p0 + r) * KV + 8 * j);
      }
      r += cq, j += cr;
      if (j >= d8) j -= d8, r++;
    }
  };
  // the norm weights of the query heads and of the keys, and the RoPE row
  // at p (this token's own row), before the wait
  rt_head_consts hk, kw;
  if (warp < G) rt_head_load(nq, D, rot, rcs + p * (rot / 2), hk);
  {
    int64_t p0;
    int n, nf;
    span(count - 1, p0, n, nf); // (this launch's rows lie in the block's last split if in any)
    if (nf < n) {
      rt_head_load(nk, D, rot, rcs + p * (rot / 2), kw);
      if (RING == 2 && warp == 0) {
#pragma unroll
        for (int q = 0; q < 16; q++) kws[lane + 32 * q] = kw.w[q];
#pragma unroll
        for (int q = 0; q < 8; q++) reinterpret_cast<float2 *>(kws + 512)[lane + 32 * q] = kw.cs[q];
      }
    }
  }
  if (RING) { // the first split's keys, then its values: a group each
    fetch(0, 1);
    rt_cp_commit();
    fetch(0, 2);
    rt_cp_commit();
  } else
    fetch(0, 3);
  rt_wait(); // q, k, v of this step
  for (int h = warp; h < G; h += 8)
    rt_head_norm_rope(qg + (int64_t)t * 2 * Nq * D + (int64_t)(g * G + h) * 2 * D, hk, D, eps, rot, qs + h * D);
  const float scale = rsqrtf((float)D);
  uint32_t bq[4][3][2]; // MMA: q's pieces as B fragments (set at the first split)
  float om[2][4] = {};  // MMA, merge: the running output at the lane's (dim, head) places
  for (int it = 0; it < count; it++) {
    int64_t p0;
    int n, nf;
    span(it, p0, n, nf);
    const int sp = first + it * X;
    if (RING == 2 && it == 0) __syncthreads(); // (kws)
    for (int i = nf + warp; i < n; i += 8) { // this launch's rows, a warp each
      const int64_t q = p0 + i, at = cbase + q * KV;
      int u = -1; // the token of this sequence at position q (none: a gap in the chunk's positions, cached before)
      for (int x = 0; x < n_tok; x++)
        if (seq[x] == sq_ && pos[x] == q) u = x;
      if (u < 0) {
        for (int j = lane; j < D; j += 32) ks[i * DP + j] = kc[at + j], vs[i * DP + j] = vc[at + j]; // (BF16 bits)
        continue;
      }
      rt_head_consts kq;
      if (q != p) rt_head_load(nk, D, rot, rcs + q * (rot / 2), kq);
      else if (RING == 2) {
#pragma unroll
        for (int q = 0; q < 16; q++) kq.w[q] = kws[lane + 32 * q];
#pragma unroll
        for (int q = 0; q < 8; q++) kq.cs[q] = reinterpret_cast<const float2 *>(kws + 512)[lane + 32 * q];
      } else
        kq = kw;
      const int64_t src = (int64_t)u * KV + (int64_t)g * D;
      rt_head_norm_rope(kk + src, kq, D, eps, rot, fr); // (then rounded to BF16 as the cache holds it)
      // the value row's loads all issued before its stores (a load, two
      // stores, a load...: vv may alias the cache as far as the compiler
      // knows, so each load waited for the stores before it, 8 L2 trips one
      // after another in the block that holds the token's own row; SASS)
      float vr[16]; // D <= 512 (rt_head_consts)
#pragma unroll
      for (int q = 0; q < 16; q++) vr[q] = lane + 32 * q < D ? vv[src + lane + 32 * q] : 0.0f;
#pragma unroll
      for (int q = 0; q < 16; q++) {
        const int j = lane + 32 * q;
        if (j >= D) break;
        const uint16_t kb = mtpq_f32_to_bf16(fr[j]), vb = mtpq_f32_to_bf16(vr[q]);
        ks[i * DP + j] = kb, vs[i * DP + j] = vb;
        if (u == t) kc[at + j] = kb, vc[at + j] = vb;
      }
      __syncwarp(); // (fr read before the warp's next row)
    }
    // the keys of split it (RING 2's groups: keys and values of split 0, then
    // the keys and values of each next split, committed as this one's are
    // read)
    if (RING) rt_cp_wait_group<1>();
    else rt_cp_wait();
    __syncthreads();
    if constexpr (MMA) {
      // on tensor cores (bf16 m16n8k16, f32 accumulate; kernels/rt_mma.cuh):
      // warp (mt, kq) = (warp % 2, warp / 2) multiplies rows 16 mt .. + 15
      // over dims 64 kq .. + 63 (A: the BF16 keys as cached, by ldmatrix) by
      // q's three bf16 pieces (n-tile p: piece p of the 8 heads, column =
      // head; their sum is q exactly, and each product is exact in f32),
      // adds the pieces in its registers, and the 4 quarters of the dims
      // meet in red (rows of 36 against bank conflicts). The sums' order is
      // the tensor core's, hence the gpu tests' tolerance.
      const int mt = warp & 1, kq = warp >> 1;
      if (it == 0) // (qs complete: the barrier above)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
          for (int e = 0; e < 2; e++) { // k slots 2 t8, + 1 (e = 0) and 2 t8 + 8, + 9 (e = 1) of head g8
            const float *qr = qs + g8 * 256 + 64 * kq + 16 * kk + 2 * t8 + 8 * e;
            __nv_bfloat16 u[3], v[3];
            rt_split3(qr[0], u[0], u[1], u[2]);
            rt_split3(qr[1], v[0], v[1], v[2]);
#pragma unroll
            for (int pc = 0; pc < 3; pc++) bq[kk][pc][e] = rt_bf16pair(u[pc], v[pc]);
          }
      float acc[3][4] = {};
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4];
        rt_ldsm4<false>(a, ks + (16 * mt + (lane & 15)) * DP + 64 * kq + 16 * kk + 8 * (lane >> 4));
#pragma unroll
        for (int pc = 0; pc < 3; pc++) rt_mma16816<true>(acc[pc], a[0], a[1], a[2], a[3], bq[kk][pc][0], bq[kk][pc][1]);
      }
#pragma unroll
      for (int e = 0; e < 4; e++) // lane (g8, t8): rows 16 mt + g8 (+ 8 for e >= 2), heads 2 t8 + e % 2
        red[(kq * 8 + 2 * t8 + (e & 1)) * 36 + 16 * mt + g8 + 8 * (e >> 1)] = acc[0][e] + acc[1][e] + acc[2][e];
      __syncthreads();
      const int h = warp; // thread (h, lane): head h, row lane
      if (lane < n)
        ss[h * RT_CS + lane] = (red[h * 36 + lane] + red[(8 + h) * 36 + lane] + red[(16 + h) * 36 + lane] +
                                red[(24 + h) * 36 + lane]) * scale;
    } else if constexpr (GT == 8 && DT == 256) {
      // the 80B shape: lane = row, warp w sums columns [32 w, 32 w + 32) of
      // all 8 heads, so each 16-byte chunk of K (8 BF16 keys) is loaded once
      // for 8 heads (the q chunks are broadcasts): 68 shared loads a thread
      // (72 with float keys) where a thread per (head, row) took 128, and a
      // third of the shared-memory wavefronts (ncu, float keys: k_attn
      // shared-memory bound, MIO throttle). The 8
      // partial sums meet in red (not RING: qs, free once every warp has
      // read it) and are added in warp order.
      float a[8];
#pragma unroll
      for (int h = 0; h < 8; h++) a[h] = 0.0f;
      if (lane < n) {
        const uint4 *kv = reinterpret_cast<const uint4 *>(ks + lane * DP) + 4 * warp; // 8 BF16 keys a load
        const float4 *qv = reinterpret_cast<const float4 *>(qs) + 8 * warp;
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
          const uint4 kb = kv[jj];
#pragma unroll
          for (int hf = 0; hf < 2; hf++) { // the load's two halves of 4 keys (each head's columns in order)
            const float2 k01 = rt_bf16x2(hf ? kb.z : kb.x), k23 = rt_bf16x2(hf ? kb.w : kb.y);
            const float4 k = make_float4(k01.x, k01.y, k23.x, k23.y);
#pragma unroll
            for (int h = 0; h < 8; h++) {
              const float4 x = qv[h * 64 + 2 * jj + hf];
              a[h] = fmaf(x.x, k.x, a[h]), a[h] = fmaf(x.y, k.y, a[h]), a[h] = fmaf(x.z, k.z, a[h]);
              a[h] = fmaf(x.w, k.w, a[h]);
            }
          }
        }
      }
      if (!RED) __syncthreads(); // qs read by every warp
#pragma unroll
      for (int h = 0; h < 8; h++) red[(warp * 8 + h) * 32 + lane] = a[h];
      __syncthreads();
      const int h = warp; // thread (h, lane): head h, row lane
      if (lane < n) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) v += red[(w * 8 + h) * 32 + lane];
        ss[h * RT_CS + lane] = v * scale;
      }
    } else {
      for (int e = tid; e < G * n; e += 256) { // (head, row) pairs, rows fastest
        const int h = e / n, i = e - h * n;
        const float4 *qv = reinterpret_cast<const float4 *>(qs + h * D);
        const uint4 *kv = reinterpret_cast<const uint4 *>(ks + i * DP); // 8 BF16 keys a load
        float a0 = 0.0f, a1 = 0.0f;
        for (int j = 0; j < d8; j++) { // (the sums of the float4 pairs as before: a0 even quads, a1 odd)
          const uint4 kb = kv[j];
          const float4 x = qv[2 * j], y = qv[2 * j + 1];
          const float2 k0 = rt_bf16x2(kb.x), k1 = rt_bf16x2(kb.y), k2 = rt_bf16x2(kb.z), k3 = rt_bf16x2(kb.w);
          a0 = fmaf(x.x, k0.x, a0), a0 = fmaf(x.y, k0.y, a0), a0 = fmaf(x.z, k1.x, a0), a0 = fmaf(x.w, k1.y, a0);
          a1 = fmaf(y.x, k2.x, a1), a1 = fmaf(y.y, k2.y, a1), a1 = fmaf(y.z, k3.x, a1), a1 = fmaf(y.w, k3.y, a1);
        }
        ss[h * RT_CS + i] = (a0 + a1) * scale;
      }
    }
    __syncthreads();
    if (RING == 2) { // the keys read: the next split's into their place
      if (it + 1 < count) fetch(it + 1, 1);
      rt_cp_commit();
    }
    // merged (RING 2, merge): the block's splits as one partial, written at
    // its first split's index once the last is done (online softmax: the
    // running output and sum rescaled by exp(old max - new max) at each
    // split), so that the combine reads one partial a block where it read
    // one a split (32K: 132 against 1,025 a head)
    const bool mg = RING == 2 && merge, last = it + 1 == count;
    const int64_t pi = ((int64_t)t * Nq + (int64_t)g * G) * nsplit + (mg ? first : sp); // (t, head g*G, split)
    for (int h = warp; h < G; h += 8) { // one warp per head: max, exp, sum
      const float v = lane < n ? ss[h * RT_CS + lane] : -INFINITY;
      float m = v;
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
      const float mo = mg && it ? mrun[h] : -INFINITY, mn = fmaxf(mo, m), al = expf(mo - mn); // (al = 0 at the first)
      const float x = lane < n ? expf(v - mn) : 0.0f;
      ss[h * RT_CS + lane] = x; // 0 past n: the output loop below reads whole quads
      if constexpr (MMA) { // x's pieces: the B operand of the values' MMA (n-tile p, column h, k = row)
        __nv_bfloat16 x0, x1, x2;
        rt_split3(x, x0, x1, x2);
        pp[h * 40 + lane] = x0, pp[(8 + h) * 40 + lane] = x1, pp[(16 + h) * 40 + lane] = x2;
      }
      float l = rt_warp_sum(x);
      if (mg && it) l = fmaf(lrun[h], al, l);
      if (lane == 0 && mg) mrun[h] = mn, lrun[h] = l, arun[h] = al;
      if (lane == 0 && (!mg || last)) pm[pi + (int64_t)h * nsplit] = mn, pl[pi + (int64_t)h * nsplit] = l;
    }
    if constexpr (MMA) // the rows past n as zeros (their weights are 0; stale bits there could be NaN)
      for (int c = tid; c < (RT_CS - n) * 32; c += 256)
        reinterpret_cast<uint4 *>(vs + (n + (c >> 5)) * DP)[c & 31] = make_uint4(0, 0, 0, 0);
    if (RING == 2) rt_cp_wait_group<1>(); // this split's values (the next keys may be in flight)
    __syncthreads();
    if constexpr (MMA) {
      // warp w: output dims 32 w .. + 31 (two m-tiles of V transposed, by
      // ldmatrix.trans) over the split's 32 rows (two k-steps) times the
      // weights' three pieces (n-tile p, column = head), the pieces added in
      // registers; lane (g8, t8) holds dims 32 w + 16 mt + g8 (+ 8 for
      // e >= 2) of heads 2 t8 + e % 2
      uint32_t b[2][3][2];
#pragma unroll
      for (int kk = 0; kk < 2; kk++)
#pragma unroll
        for (int pc = 0; pc < 3; pc++) {
          const __nv_bfloat16 *pr = pp + (pc * 8 + g8) * 40 + 16 * kk + 2 * t8;
          b[kk][pc][0] = *reinterpret_cast<const uint32_t *>(pr);
          b[kk][pc][1] = *reinterpret_cast<const uint32_t *>(pr + 8);
        }
      const float al0 = mg && it ? arun[2 * t8] : 0.0f, al1 = mg && it ? arun[2 * t8 + 1] : 0.0f;
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        float acc[3][4] = {};
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
          uint32_t a[4];
          rt_ldsm4<true>(a, vs + (16 * kk + (lane & 7) + 8 * (lane >> 4)) * DP + 32 * warp + 16 * mt +
                                8 * ((lane >> 3) & 1));
#pragma unroll
          for (int pc = 0; pc < 3; pc++)
            rt_mma16816<true>(acc[pc], a[0], a[1], a[2], a[3], b[kk][pc][0], b[kk][pc][1]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float o = acc[0][e] + acc[1][e] + acc[2][e];
          if (mg && it) o = fmaf(om[mt][e], e & 1 ? al1 : al0, o);
          if (!mg || last)
            po[(pi + (int64_t)(2 * t8 + (e & 1)) * nsplit) * D + 32 * warp + 16 * mt + g8 + 8 * (e >> 1)] = o;
          else
            om[mt][e] = o;
        }
      }
    } else {
      for (int j = tid; j < D; j += 256) {
        float o[16];
#pragma unroll
        for (int h = 0; h < 16; h++) o[h] = 0.0f;
        // rows in quads: one 16-byte load of each head's weights per quad (a
        // load per weight before); rows past n add 0 * 0 (the same sums)
        for (int i0 = 0; i0 < n; i0 += 4) {
          float v[4];
#pragma unroll
          for (int q = 0; q < 4; q++) v[q] = i0 + q < n ? rt_f32(vs[(i0 + q) * DP + j]) : 0.0f;
#pragma unroll
          for (int h = 0; h < 16; h++)
            if (h < G) {
              const float4 w4 = *reinterpret_cast<const float4 *>(ss + h * RT_CS + i0);
              o[h] = fmaf(w4.x, v[0], o[h]), o[h] = fmaf(w4.y, v[1], o[h]);
              o[h] = fmaf(w4.z, v[2], o[h]), o[h] = fmaf(w4.w, v[3], o[h]);
            }
        }
#pragma unroll
        for (int h = 0; h < 16; h++)
          if (h < G) {
            if (mg && it) o[h] = fmaf(orun[h * D + j], arun[h], o[h]);
            if (!mg || last) po[(pi + (int64_t)h * nsplit) * D + j] = o[h];
            else orun[h * D + j] = o[h]; // (a thread's own column: no barrier)
          }
      }
    }
    if (RING) {
      __syncthreads(); // the stage (RING 2: the values), the scores and red free again
      if (it + 1 < count) fetch(it + 1, 2);
      rt_cp_commit();
    }
  }
  RT_TL_END();
}

// grid (Nq, tokens, ceil(D / 32)), 256 threads, nsplit floats of shared
// memory: combine the splits of one head for 32 of its output columns (each
// split's max and sum loaded by one thread of the block; then warp w sums
// splits w, w + 8, ... for the lane's column), normalise, apply
// sigmoid(gate). The sums run in the order of a one-block-per-head kernel
// (a chain of dependent loads on few SMs), so the results are the same
// bits as that simpler form's.
// RR: groups of 256 splits (8K positions) whose loads are issued at once
// (k_attn_combine<4> where a context reaches past 8K: 32K in one pass, where
// each 256 splits' maxima and sums were an L2 trip in turn; <1> elsewhere,
// whose 63 registers let 4 blocks share an SM at 8 tokens).
// cap: at most this many partials a head (k_attn RING 2 merged: a block's
// splits in one partial at its first split's index, so the first cap).
template <int RR>
__global__ void __launch_bounds__(256) k_attn_combine(const combine_args A, int nsplit, int cap) {
  const float *qg = A.qg, *po = A.po, *pm = A.pm, *pl = A.pl;
  const int Nq = A.Nq, D = A.D, window = A.window;
  const int64_t *pos = A.pos;
  float *att = A.att;
  RT_TL_START();
  extern __shared__ float wsp[]; // a weight per split
  __shared__ float red[8][32];
  rt_trigger();
  const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = blockIdx.z * 32 + lane;
  const int64_t p = pos[t]; // (positions change between steps only: read before the wait)
  rt_wait();
  const float gv = warp == 0 && c < D ? qg[(int64_t)t * 2 * Nq * D + (int64_t)h * 2 * D + D + c] : 0.0f;
  const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
  const int s0 = (int)(lo / RT_CS), ns0 = (int)(p / RT_CS) - s0 + 1, ns = ns0 < cap ? ns0 : cap;
  const int64_t base = ((int64_t)t * Nq + h) * nsplit + s0;
  // the splits in passes of RR groups of 256; a pass's loads are all issued
  // before its sums, the first pass's before the reductions. Each warp sums
  // splits warp, warp + 8, ... in that order in every case, so a context of
  // any length makes the sums of the one-block-per-head kernel (a strided
  // loop of dependent loads was slower past 8K: ledger 19)
  const float *src = po + base * D + c;
  constexpr int P = 256 * RR; // splits a pass
  float pv[32 * RR];
#pragma unroll
  for (int i = 0; i < 32 * RR; i++) pv[i] = c < D && warp + 8 * i < ns ? src[(int64_t)(warp + 8 * i) * D] : 0.0f;
  // the first pass's maxima and sums with the partial outputs' loads (each
  // loop's load waited for the block's reduction before: one L2 trip more
  // after the wait); fmaxf(-inf, x) = x, so the same maximum and sums
  float pmk[RR], plk[RR];
#pragma unroll
  for (int k = 0; k < RR; k++) {
    const int s = tid + 256 * k;
    pmk[k] = s < ns ? pm[base + s] : -INFINITY, plk[k] = s < ns ? pl[base + s] : 0.0f;
  }
  float m = pmk[0];
#pragma unroll
  for (int k = 1; k < RR; k++) m = fmaxf(m, pmk[k]);
  for (int s = tid + P; s < ns; s += 256) m = fmaxf(m, pm[base + s]);
  const float M = rt_block_max(m);
  float l = 0.0f;
#pragma unroll
  for (int k = 0; k < RR; k++) {
    const int s = tid + 256 * k;
    if (s < ns) {
      const float w = expf(pmk[k] - M);
      wsp[s] = w, l += plk[k] * w;
    }
  }
  for (int s = tid + P; s < ns; s += 256) {
    const float w = expf(pm[base + s] - M);
    wsp[s] = w, l += pl[base + s] * w;
  }
  const float L = rt_block_sum(l); // (its barriers publish wsp)
  float o = 0.0f;
  for (int r = 0; c < D;) { // r: the pass's first split
#pragma unroll
    for (int i = 0; i < 32 * RR; i++)
      if (r + warp + 8 * i < ns) o = fmaf(pv[i], wsp[r + warp + 8 * i], o);
    if ((r += P) >= ns) break;
#pragma unroll
    for (int i = 0; i < 32 * RR; i++) pv[i] = r + warp + 8 * i < ns ? src[(int64_t)(r + warp + 8 * i) * D] : 0.0f;
  }
  red[warp][lane] = o;
  __syncthreads();
  if (warp == 0 && c < D) {
    float v = 0;
    for (int w = 0; w < 8; w++) v += red[w][lane];
    att[((int64_t)t * Nq + h) * D + c] = v / L * (1.0f / (1.0f + expf(-gv)));
  }
  RT_TL_END();
}


// ---- launches ----

// k_attn's instance for a launch at RING 0 or 2: the 80B shape's own (G =
// 8, D = 256; at RING 2 on tensor cores) or the generic one; attn_ring_grid
// sizes the grid for the one the step launches
static decltype(&k_attn<0, 0, 0, 0>) attn_kernel(const gpu_session *g, int ring) {
  const bool a8 = g->d->Nq / g->d->Nkv == 8 && g->d->D == 256;
  if (ring) return a8 ? k_attn<8, 256, 2, 1> : k_attn<0, 0, 2, 0>;
  return a8 ? k_attn<8, 256, 0, 0> : k_attn<0, 0, 0, 0>;
}

// k_attn's blocks (RING 2) where their shared memory fits: attn_x
// blocks per (KV head, token), so that one token's blocks fill the SMs once
// (a launch of n tokens runs n of those); else RING 0
static void attn_ring_grid(gpu_session *g, int dev) {
  const struct mtpq_rt_model *d = g->d;
  const int G = (int)(d->Nq / d->Nkv), D = (int)d->D, smem = (int)(rt_attn_smem(G, D, 2) * 4);
  auto *k = attn_kernel(g, 2);
  int room = 0, per = 0;
  if (cudaDeviceGetAttribute(&room, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || smem > room ||
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, 256, smem) != cudaSuccess || per < 1) {
    cudaGetLastError(); // (no room: the kernel of a block per split)
    return;
  }
  const int force = g->set.tune.attn_x; // (tests: a few blocks, each over many splits)
  const int64_t x = force > 0 ? force : ((int64_t)g->sms * per + d->Nkv - 1) / d->Nkv;
  g->set.attn_x = (int)(x < g->nsplit ? x : g->nsplit);
  g->set.attn_per = per;
}

// RING 2's blocks per (KV head, token) at a launch of n tokens: attn_x (a
// wave per token), and at 2..8 tokens one wave for the launch, each block
// over several splits (a wave per token made a launch of n tokens n waves;
// ledger 12)
static int attn_blocks(const gpu_session *g, int n) {
  if (n < 2 || !g->set.attn_x) return g->set.attn_x;
  const int64_t x = (int64_t)g->sms * g->set.attn_per / ((int64_t)g->d->Nkv * n);
  return (int)(x < 1 ? 1 : x < g->set.attn_x ? x : g->set.attn_x);
}


// Shared memory for the block-per-split instances, then the ring's grid
// where its shared memory fits (tune attn_ring=0: never), and which
// k_attn_combine instance the partials need
enum mtpq_status attn_setup(gpu_session *g, int dev, struct mtpq_err *err) {
  const struct mtpq_rt_model *d = g->d;
  const int attn_smem = (int)(rt_attn_smem((int)(d->Nq / d->Nkv), (int)d->D, 0) * 4);
  if (cudaFuncSetAttribute(k_attn<0, 0, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem) != cudaSuccess ||
      cudaFuncSetAttribute(k_attn<8, 256, 0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, attn_smem) != cudaSuccess)
    return mtpq_err_set(err, MTPQ_E_GPU, "cannot give the attention kernel its shared memory");
  g->set.attn_x = 0;
  if (g->set.tune.attn_ring) attn_ring_grid(g, dev); // (0: a block per split)
  // the ring merges a block's splits into one partial: at most attn_x a head
  g->set.comb4 = (g->set.attn_x ? g->set.attn_x : g->nsplit) > 256;
  return MTPQ_OK;
}

void attn_launch(gpu_session *g, int n) {
  const struct mtpq_rt_model *d = g->d;
  const int Nq = (int)d->Nq, Nkv = (int)d->Nkv, D = (int)d->D, G = Nq / Nkv;
  const int ring = g->set.attn_x ? 2 : 0, X = attn_blocks(g, n);
  const attn_args a = {g->x.qg,     Nq,         Nkv,       D,       (int)d->rot, g->x.rcs, g->io.pos,
                       g->io.seq,   n,          g->max_pos, g->window, g->w.nrm[4], g->w.nrm[5], d->eps,
                       g->x.kk,     g->x.vv,    g->kv.kc,  g->kv.vc, g->nsplit,  g->x.po,  g->x.pm,
                       g->x.pl,     ring,       g->set.kv_ef_pos};
  go(g, true, attn_kernel(g, ring), dim3(ring ? X : g->nsplit, Nkv, n), dim3(256),
     (size_t)rt_attn_smem(G, D, ring) * 4, a);
  mark(g, "q, k norm+rope, KV write, attention (splits)");
  go(g, true, g->set.comb4 ? k_attn_combine<4> : k_attn_combine<1>, dim3(Nq, n, (D + 31) / 32), dim3(256),
     (size_t)g->nsplit * 4, combine_args{g->x.qg, g->x.po, g->x.pm, g->x.pl, Nq, D, g->io.pos, g->window, g->x.att},
     g->nsplit, ring ? X : g->nsplit);
  mark(g, "attention combine+gate");
}
