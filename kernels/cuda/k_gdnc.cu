// The Gated DeltaNet recurrence of a prefill chunk in its chunked form, on
// the tensor cores (ledger 47). Owns k_p_gdnc_prep and k_p_gdnc_scan;
// tp_gdn (k_prefill.cu) runs them between the conv and the gated norm.
//
// The algebra (target-architecture.md 2, the delta rule; per value head,
// state S [dk][dv] before a chunk of TG_C tokens, g_t the running sum of the
// log decays inside the chunk, so the decay from token s to t is
// e^(g_t - g_s) and stays a ratio: no product of decays underflows):
//   L_ts = beta_t e^(g_t - g_s) k_t . k_s   (s < t),   T = (I + L)^-1
//   U = T diag(beta) V,   W = T diag(beta e^g) K
//   A_ts = e^(g_t - g_s) q_t . k_s   (s <= t)
//   D = U - W S     (row t: the token's d = beta (v - dec S^T k))
//   O = diag(e^g) Q S + A D
//   S' = e^(g_last) S + Kt^T D,   Kt_s = e^(g_last - g_s) k_s
// which is the token recurrence of k_t_gdn and the CPU reference
// (u = dec S^T k, d = beta (v - u), S' = dec S + k d^T, o = S'^T q) summed
// over the chunk. Everything but D, O and S' depends only on the chunk's
// own tokens: k_p_gdnc_prep makes it for every (head, chunk) at once
// (L and T in shared memory, W, e^g Q, Kt^T, A and U into the workspace);
// k_p_gdnc_scan then walks the chunks in order, a block a (value head,
// 32 state columns), S in its warps' accumulators.
//
// Numerics: every product runs as three TF32 MMAs (a_hi b_hi + a_hi b_lo +
// a_lo b_hi, hi the value rounded to TF32 and lo the rest rounded again),
// which carries float32 operands to about 2^-22; sums accumulate in
// float32. So the chunked form agrees with the token recurrence to float
// tolerance in another order of sums, not bit for bit.
//
// MMA operand layout: m16n8k8 TF32 fragments (a: rows g, g + 8, k slots
// q, q + 4; b: k slots q, q + 4, column g; g = lane / 4, q = lane % 4). A
// k16 group takes an A row's four floats at k = 4q .. 4q + 3 as one float4,
// the first k8 step's slots q, q + 4 being k = 4q, 4q + 1 and the second's
// 4q + 2, 4q + 3; the B operand takes its rows in the same order. Sums over
// k do not care which slot holds which k as long as A and B agree.
#include "kernels/cuda/prefill.cuh"

#define TG_C 64 // tokens a chunk of the chunked form

// shared-memory row strides (floats): an A operand's rows ≡ 16 mod 32, so a
// quarter warp's float4 loads (rows g, g + 1, columns 4q) hit 32 banks; a B
// operand's rows read as scalars four apart (rows 4q + e, column g) ≡ 2 mod
// 8, so 4 x stride ≡ 8 mod 32 and a warp's 32 loads hit 32 banks
#define TG_SA 80 // [64][64] A operands (T; A; Kt^T's 64 tokens)
#define TG_SB 34 // [rows][32] B operands (S's and D's 32 columns; a tile of diag(beta) V)
#define TG_SU 40 // U's 32 columns read in the accumulator layout (float2 at 2q of rows g): ≡ 8 mod 32

struct tg_a { // an m16n8k8 A fragment as hi and lo TF32 parts
  uint32_t h[4], l[4];
};
struct tg_b { // a k16 group's B fragments of one n-tile: [0], [1] the first k8 step's, [2], [3] the second's
  uint32_t h[4], l[4];
};

// v = hi + lo to about 2^-22 of v: hi rounded to TF32, lo what is left (exact in float32) rounded again
// (the mask: the float32 value of hi must be the TF32 value the MMA reads)
__device__ __forceinline__ void tg_split(float v, uint32_t &hi, uint32_t &lo) {
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(v));
  hi &= 0xFFFFE000u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(v - __uint_as_float(hi)));
}

// c += a b, m16n8k8, TF32 in, float32 accumulate
__device__ __forceinline__ void tg_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// a k16 group's two A fragments from rows g and g + 8's float4 at column 4q (the header's slot order)
__device__ __forceinline__ void tg_afrag(const float *r0, const float *r8, tg_a (&a)[2]) {
  const float4 x = *reinterpret_cast<const float4 *>(r0), y = *reinterpret_cast<const float4 *>(r8);
  tg_split(x.x, a[0].h[0], a[0].l[0]), tg_split(y.x, a[0].h[1], a[0].l[1]);
  tg_split(x.y, a[0].h[2], a[0].l[2]), tg_split(y.y, a[0].h[3], a[0].l[3]);
  tg_split(x.z, a[1].h[0], a[1].l[0]), tg_split(y.z, a[1].h[1], a[1].l[1]);
  tg_split(x.w, a[1].h[2], a[1].l[2]), tg_split(y.w, a[1].h[3], a[1].l[3]);
}

// a k16 group's B fragments of one n-tile: p at row 4q, column g of a matrix whose rows are the k index,
// stride st; or (bt) the four rows as one float4 of a matrix stored n-major (p at [g][4q])
__device__ __forceinline__ void tg_bfrag(const float *p, int st, tg_b &b) {
#pragma unroll
  for (int e = 0; e < 4; e++) tg_split(p[e * st], b.h[e], b.l[e]);
}
__device__ __forceinline__ void tg_bfrag4(const float *p, tg_b &b) {
  const float4 x = *reinterpret_cast<const float4 *>(p);
  tg_split(x.x, b.h[0], b.l[0]), tg_split(x.y, b.h[1], b.l[1]);
  tg_split(x.z, b.h[2], b.l[2]), tg_split(x.w, b.h[3], b.l[3]);
}

// c += a b over a k16 group, three TF32 MMAs a k8 step (the small terms first)
__device__ __forceinline__ void tg_mma16(float (&c)[4], const tg_a (&a)[2], const tg_b &b) {
#pragma unroll
  for (int s = 0; s < 2; s++) {
    tg_mma(c, a[s].l, b.h[2 * s], b.h[2 * s + 1]);
    tg_mma(c, a[s].h, b.l[2 * s], b.l[2 * s + 1]);
    tg_mma(c, a[s].h, b.h[2 * s], b.h[2 * s + 1]);
  }
}

// key rows padded: 32, 64 or 128 (dk <= 128: the load checks)
__host__ __device__ inline int tg_dkp(int dk) { return dk <= 32 ? 32 : dk <= 64 ? 64 : 128; }
__host__ __device__ inline int tg_dvp(int dv) { return (dv + 31) / 32 * 32; }

size_t tg_work_floats(int64_t C, int HV, int dk, int dv) {
  const int64_t nc = (C + TG_C - 1) / TG_C * HV, D = tg_dkp(dk);
  return (size_t)(nc * (TG_C * (3 * D + TG_C + tg_dvp(dv)) + 1));
}

template <int DKP> static size_t tg_prep_smem() { return (size_t)(2 * TG_C * (DKP + 16) + TG_C * TG_C + TG_C * TG_SA + 4 * TG_C) * 4; }

// grid (HV, chunks), block 256: chunk c of value head h. Its q and k (zero past dk and past the prompt's
// tokens, whose beta and log decay are zero too, so that padding leaves S as it is), g, then
// K K^T and Q K^T on the tensor cores (warp w: rows 16 (w % 4), columns 32 (w / 4)), L into shared memory
// and A, e^g Q, Kt^T out; T by forward substitution, a thread a column (T's columns are independent);
// W = T diag(beta e^g) K and U = T diag(beta) V (a 32-column tile of V at a time) on the tensor cores
template <int DKP> __global__ void __launch_bounds__(256) k_p_gdnc_prep(tp_gdn_args A, int n) {
  extern __shared__ float4 tg_sm4[];
  constexpr int SQ = DKP + 16, SB = DKP + 2;
  float *Qs = reinterpret_cast<float *>(tg_sm4), *Ks = Qs + TG_C * SQ, *Ls = Ks + TG_C * SQ, *Ts = Ls + TG_C * TG_C;
  float *gs = Ts + TG_C * TG_SA, *bs = gs + TG_C, *eg = bs + TG_C, *ek = eg + TG_C;
  const int h = blockIdx.x, c = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  const int dk = A.dk, kd = A.HK * dk, kh = h / (A.HV / A.HK), nch = (n + TG_C - 1) / TG_C, DVP = tg_dvp(A.dv);
  const int64_t t0 = (int64_t)c * TG_C, hc = (int64_t)h * nch + c;
  const int nv = n - t0 < TG_C ? (int)(n - t0) : TG_C;
  for (int i = tid; i < TG_C * DKP; i += 256) {
    const int t = i / DKP, k = i % DKP;
    const bool ok = t < nv && k < dk;
    const float *m = A.mix + (t0 + t) * A.conv_dim + kh * dk + k;
    Qs[t * SQ + k] = ok ? m[0] : 0.0f, Ks[t * SQ + k] = ok ? m[kd] : 0.0f;
  }
  if (tid < TG_C)
    gs[tid] = tid < nv ? A.lg[(t0 + tid) * A.HV + h] : 0.0f, bs[tid] = tid < nv ? A.beta[(t0 + tid) * A.HV + h] : 0.0f;
  __syncthreads();
  if (w == 0) { // g: the running sum of the log decays, two tokens a lane
    const float a0 = gs[2 * lane], a1 = a0 + gs[2 * lane + 1];
    float s = a1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xFFFFFFFFu, s, o);
      if (lane >= o) s += y;
    }
    __syncwarp();
    gs[2 * lane] = s - a1 + a0, gs[2 * lane + 1] = s;
    __syncwarp();
    const float gl = gs[TG_C - 1];
    for (int t = lane; t < TG_C; t += 32) eg[t] = expf(gs[t]), ek[t] = expf(gl - gs[t]);
    if (lane == 0) A.cgl[hc] = expf(gl);
  }
  __syncthreads();
  { // K K^T and Q K^T
    const int mt = w & 3, nh = w >> 2;
    float G1[4][4] = {}, G2[4][4] = {};
    for (int kb = 0; kb < DKP; kb += 16) {
      tg_a ak[2], aq[2];
      tg_afrag(Ks + (16 * mt + g) * SQ + kb + 4 * q, Ks + (16 * mt + g + 8) * SQ + kb + 4 * q, ak);
      tg_afrag(Qs + (16 * mt + g) * SQ + kb + 4 * q, Qs + (16 * mt + g + 8) * SQ + kb + 4 * q, aq);
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        if (32 * nh + 8 * nt > 16 * mt + 15) continue; // (every s past every t: stays zero)
        tg_b b;
        tg_bfrag4(Ks + (32 * nh + 8 * nt + g) * SQ + kb + 4 * q, b);
        tg_mma16(G1[nt], ak, b), tg_mma16(G2[nt], aq, b);
      }
    }
    float *Ao = A.ca + hc * TG_C * TG_C;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const int t = 16 * mt + g + 8 * hf, s = 32 * nh + 8 * nt + 2 * q;
        float l2[2], a2[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float d = s + e <= t ? expf(gs[t] - gs[s + e]) : 0.0f;
          l2[e] = s + e < t ? bs[t] * d * G1[nt][2 * hf + e] : 0.0f, a2[e] = d * G2[nt][2 * hf + e];
        }
        Ls[t * TG_C + s] = l2[0], Ls[t * TG_C + s + 1] = l2[1];
        *reinterpret_cast<float2 *>(Ao + t * TG_C + s) = make_float2(a2[0], a2[1]);
      }
  }
  float *Qo = A.cq + hc * TG_C * DKP, *Ko = A.ckt + hc * TG_C * DKP;
  for (int i = tid; i < TG_C * DKP; i += 256) {
    const int t = i / DKP, k = i % DKP, kk = i / TG_C, s = i % TG_C;
    Qo[i] = eg[t] * Qs[t * SQ + k], Ko[i] = ek[s] * Ks[s * SQ + kk];
  }
  __syncthreads();
  float *KB = Qs; // diag(beta e^g) K, W's B operand, stride SB
  if (w < 2) {    // T = (I + L)^-1: column cc, T[s][cc] = 0 for s < cc (so warp 1 starts at row 32)
    const int cc = tid;
    for (int t = 0; t < TG_C; t++) {
      float acc = 0.0f;
      for (int s = 32 * w; s < t; s++) acc += Ls[t * TG_C + s] * Ts[s * TG_SA + cc];
      Ts[t * TG_SA + cc] = t == cc ? 1.0f : t < cc ? 0.0f : -acc;
    }
  } else {
    for (int i = tid - 64; i < TG_C * DKP; i += 192) {
      const int s = i / DKP, k = i % DKP;
      KB[s * SB + k] = bs[s] * eg[s] * Ks[s * SQ + k];
    }
  }
  __syncthreads();
  const int mt = w & 3, nh = w >> 2;
  { // W: rows 16 mt, n-tiles nh DKP / 16 ..; T is lower triangular, so k groups up to the diagonal
    constexpr int NW = DKP / 16;
    float acc[NW][4] = {};
    for (int sb = 0; sb <= 16 * mt; sb += 16) {
      tg_a a[2];
      tg_afrag(Ts + (16 * mt + g) * TG_SA + sb + 4 * q, Ts + (16 * mt + g + 8) * TG_SA + sb + 4 * q, a);
#pragma unroll
      for (int j = 0; j < NW; j++) {
        tg_b b;
        tg_bfrag(KB + (sb + 4 * q) * SB + (nh * NW + j) * 8 + g, SB, b);
        tg_mma16(acc[j], a, b);
      }
    }
    float *Wo = A.cw + hc * TG_C * DKP;
#pragma unroll
    for (int j = 0; j < NW; j++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++)
        *reinterpret_cast<float2 *>(Wo + (16 * mt + g + 8 * hf) * DKP + (nh * NW + j) * 8 + 2 * q) =
            make_float2(acc[j][2 * hf], acc[j][2 * hf + 1]);
  }
  float *BV = Ks, *Uo = A.cu + hc * TG_C * DVP; // a tile of diag(beta) V, stride TG_SB
  for (int j0 = 0; j0 < DVP; j0 += 32) {
    for (int i = tid; i < TG_C * 32; i += 256) {
      const int s = i / 32, jj = j0 + i % 32;
      BV[s * TG_SB + i % 32] =
          s < nv && jj < A.dv ? bs[s] * A.mix[(t0 + s) * A.conv_dim + 2 * kd + (int64_t)h * A.dv + jj] : 0.0f;
    }
    __syncthreads();
    float acc[2][4] = {};
    for (int sb = 0; sb <= 16 * mt; sb += 16) {
      tg_a a[2];
      tg_afrag(Ts + (16 * mt + g) * TG_SA + sb + 4 * q, Ts + (16 * mt + g + 8) * TG_SA + sb + 4 * q, a);
#pragma unroll
      for (int j = 0; j < 2; j++) {
        tg_b b;
        tg_bfrag(BV + (sb + 4 * q) * TG_SB + (2 * nh + j) * 8 + g, TG_SB, b);
        tg_mma16(acc[j], a, b);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++)
        *reinterpret_cast<float2 *>(Uo + (16 * mt + g + 8 * hf) * DVP + j0 + (2 * nh + j) * 8 + 2 * q) =
            make_float2(acc[j][2 * hf], acc[j][2 * hf + 1]);
    __syncthreads();
  }
}

// a scan warp's share of S: R = DKP / 32 pairs of m-tiles; at R >= 2 warp w holds m-tiles w R / 2 .. and
// every n-tile, at R = 1 m-tile w / 2 and n-tiles 2 (w % 2), + 1
template <int DKP> struct tg_share {
  static constexpr int R = DKP / 32, MT = R >= 2 ? R / 2 : 1, NT = R >= 2 ? 4 : 2;
  static constexpr int SQ = DKP + 16;
  static constexpr int P1 = 2 * 16 * SQ + 16 * TG_SU, P2 = 16 * TG_SA + MT * 16 * TG_SA; // a warp's buffers
  // f(row, column, element) for every accumulator element of the share (the warp's first m-tile m0 and
  // n-tile n0, the lane's g and q, the block's first state column j0)
  template <typename F>
  static __device__ __forceinline__ void each(float (&S)[MT][NT][4], int m0, int n0, int j0, int g, int q, F f) {
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int ni = 0; ni < NT; ni++)
#pragma unroll
        for (int r = 0; r < 4; r++)
          f((m0 + mi) * 16 + g + (r >> 1) * 8, j0 + (n0 + ni) * 8 + 2 * q + (r & 1), S[mi][ni][r]);
  }
};

template <int DKP> static size_t tg_scan_smem() {
  using Z = tg_share<DKP>;
  return (size_t)(DKP * TG_SB + TG_C * TG_SB + 4 * (Z::P1 + Z::P2)) * 4;
}

// grid (HV, ceil(dv / 32)), block 128: value head h's state columns j0 .. j0 + 31 through the chunks in
// order. Warp w: tokens 16 w .. of a chunk for D and O; its tg_share of S, held in accumulators. A chunk:
// S into shared memory; D = U - W S and e^g Q S (both read S's fragments once); D into shared memory;
// O = e^g Q S + A D (k groups up to the diagonal) and S' = e^(g_last) S + Kt^T D. Each warp's operand rows
// are its own, so it copies them itself (cp.async), the next chunk's W, e^g Q and U during this chunk's
// second half and this chunk's A and Kt^T during its first; two block barriers a chunk (S and D).
template <int DKP> __global__ void __launch_bounds__(128) k_p_gdnc_scan(tp_gdn_args A, int n) {
  using Z = tg_share<DKP>;
  constexpr int SQ = Z::SQ, MT = Z::MT, NT = Z::NT;
  extern __shared__ float4 tg_sm4[];
  const int h = blockIdx.x, j0 = blockIdx.y * 32, lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2,
            q = lane & 3;
  float *Ss = reinterpret_cast<float *>(tg_sm4), *Ds = Ss + DKP * TG_SB, *Wb = Ds + TG_C * TG_SB + w * (Z::P1 + Z::P2);
  float *Qb = Wb + 16 * SQ, *Ub = Qb + 16 * SQ, *Ab = Wb + Z::P1, *Kb = Ab + 16 * TG_SA;
  const int dk = A.dk, dv = A.dv, DVP = tg_dvp(dv), nch = (n + TG_C - 1) / TG_C;
  const int m0 = Z::R >= 2 ? w * MT : w >> 1, n0 = Z::R >= 2 ? 0 : 2 * (w & 1);
  const int64_t hb = (int64_t)h * dk * dv;
  float S[MT][NT][4];
  Z::each(S, m0, n0, j0, g, q, [&](int row, int col, float &s) {
    s = row < dk && col < dv ? A.rec_old[hb + (int64_t)row * dv + col] : 0.0f;
  });
  auto load1 = [&](int c) { // chunk c's W, e^g Q and U rows of this warp
    const int64_t r0 = ((int64_t)h * nch + c) * TG_C + 16 * w;
    const float *W = A.cw + r0 * DKP, *Q = A.cq + r0 * DKP, *U = A.cu + r0 * DVP + j0;
    for (int i = lane; i < 16 * DKP / 4; i += 32) {
      const int r = i / (DKP / 4), k = 4 * (i % (DKP / 4));
      rt_cp16(Wb + r * SQ + k, W + r * DKP + k), rt_cp16(Qb + r * SQ + k, Q + r * DKP + k);
    }
    for (int i = lane; i < 16 * 8; i += 32) rt_cp16(Ub + (i / 8) * TG_SU + 4 * (i % 8), U + (i / 8) * DVP + 4 * (i % 8));
  };
  auto load2 = [&](int c) { // chunk c's A rows of this warp's tokens and Kt^T rows of its m-tiles
    const int64_t hc = (int64_t)h * nch + c;
    const float *Am = A.ca + (hc * TG_C + 16 * w) * TG_C, *Kt = A.ckt + (hc * DKP + m0 * 16) * TG_C;
    for (int i = lane; i < 16 * 16; i += 32) rt_cp16(Ab + (i / 16) * TG_SA + 4 * (i % 16), Am + (i / 16) * TG_C + 4 * (i % 16));
    for (int i = lane; i < MT * 16 * 16; i += 32)
      rt_cp16(Kb + (i / 16) * TG_SA + 4 * (i % 16), Kt + (i / 16) * TG_C + 4 * (i % 16));
  };
  load1(0);
  rt_cp_commit();
  for (int c = 0; c < nch; c++) {
    const int64_t t0 = (int64_t)c * TG_C;
    load2(c);
    rt_cp_commit();
    rt_cp_wait_group<1>(); // (chunk c's W, e^g Q, U)
    __syncwarp();
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int ni = 0; ni < NT; ni++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
          *reinterpret_cast<float2 *>(Ss + ((m0 + mi) * 16 + g + 8 * hf) * TG_SB + (n0 + ni) * 8 + 2 * q) =
              make_float2(S[mi][ni][2 * hf], S[mi][ni][2 * hf + 1]);
    __syncthreads();
    float D[4][4] = {}, O[4][4] = {};
    for (int kb = 0; kb < DKP; kb += 16) {
      tg_a aw[2], aq[2];
      tg_afrag(Wb + g * SQ + kb + 4 * q, Wb + (g + 8) * SQ + kb + 4 * q, aw);
      tg_afrag(Qb + g * SQ + kb + 4 * q, Qb + (g + 8) * SQ + kb + 4 * q, aq);
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        tg_b b;
        tg_bfrag(Ss + (kb + 4 * q) * TG_SB + 8 * nt + g, TG_SB, b);
        tg_mma16(D[nt], aw, b), tg_mma16(O[nt], aq, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const int t = g + 8 * hf, col = 8 * nt + 2 * q;
        const float2 u = *reinterpret_cast<const float2 *>(Ub + t * TG_SU + col);
        *reinterpret_cast<float2 *>(Ds + (16 * w + t) * TG_SB + col) =
            make_float2(u.x - D[nt][2 * hf], u.y - D[nt][2 * hf + 1]);
      }
    __syncthreads();
    if (c + 1 < nch) load1(c + 1);
    rt_cp_commit();
    rt_cp_wait_group<1>(); // (chunk c's A, Kt^T)
    __syncwarp();
    const float gl = A.cgl[(int64_t)h * nch + c];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
      for (int ni = 0; ni < NT; ni++)
#pragma unroll
        for (int r = 0; r < 4; r++) S[mi][ni][r] *= gl;
#pragma unroll
    for (int sb = 0; sb < TG_C; sb += 16) {
      tg_b b[4];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) tg_bfrag(Ds + (sb + 4 * q) * TG_SB + 8 * nt + g, TG_SB, b[nt]);
      if (sb <= 16 * w) {
        tg_a a[2];
        tg_afrag(Ab + g * TG_SA + sb + 4 * q, Ab + (g + 8) * TG_SA + sb + 4 * q, a);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) tg_mma16(O[nt], a, b[nt]);
      }
#pragma unroll
      for (int mi = 0; mi < MT; mi++) {
        tg_a a[2];
        tg_afrag(Kb + (mi * 16 + g) * TG_SA + sb + 4 * q, Kb + (mi * 16 + g + 8) * TG_SA + sb + 4 * q, a);
#pragma unroll
        for (int ni = 0; ni < NT; ni++) {
          if constexpr (Z::R >= 2) {
            tg_mma16(S[mi][ni], a, b[ni]);
          } else {
            const tg_b bb = (w & 1) ? b[2 + ni] : b[ni];
            tg_mma16(S[mi][ni], a, bb);
          }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const int64_t t = t0 + 16 * w + g + 8 * hf;
        const int col = j0 + 8 * nt + 2 * q;
        float *o = A.o + t * A.VS + (int64_t)h * dv + col;
        if (t < n && col < dv) o[0] = O[nt][2 * hf];
        if (t < n && col + 1 < dv) o[1] = O[nt][2 * hf + 1];
      }
  }
  rt_cp_wait();
  Z::each(S, m0, n0, j0, g, q, [&](int row, int col, float &s) {
    if (row < dk && col < dv) A.rec_new[hb + (int64_t)row * dv + col] = s;
  });
}

template <int DKP> static void tg_run(cudaStream_t st, const tp_gdn_args &A, int n) {
  const int nch = (n + TG_C - 1) / TG_C;
  const size_t sp = tg_prep_smem<DKP>(), ss = tg_scan_smem<DKP>();
  cudaFuncSetAttribute(k_p_gdnc_prep<DKP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sp);
  cudaFuncSetAttribute(k_p_gdnc_scan<DKP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss);
  k_p_gdnc_prep<DKP><<<dim3((unsigned)A.HV, (unsigned)nch), 256, sp, st>>>(A, n);
  k_p_gdnc_scan<DKP><<<dim3((unsigned)A.HV, (unsigned)(tg_dvp(A.dv) / 32)), 128, ss, st>>>(A, n);
}

void tg_recurrence(cudaStream_t st, const tp_gdn_args &A, int n) {
  switch (tg_dkp(A.dk)) {
  case 32: tg_run<32>(st, A, n); break;
  case 64: tg_run<64>(st, A, n); break;
  default: tg_run<128>(st, A, n); break;
  }
}

void tg_work_split(float *base, int64_t C, int HV, int dk, int dv, tp_gdn_args &A) {
  const int64_t nc = (C + TG_C - 1) / TG_C * HV, D = tg_dkp(dk);
  A.cw = base, A.cq = A.cw + nc * TG_C * D, A.ckt = A.cq + nc * TG_C * D, A.ca = A.ckt + nc * TG_C * D;
  A.cu = A.ca + nc * TG_C * TG_C, A.cgl = A.cu + nc * TG_C * tg_dvp(dv);
}
