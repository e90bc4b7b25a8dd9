// The prefill's routed experts (kernels/cuda/prefill.cuh): the routing
// sorted by expert on the device, and one grouped GEMM launch for every
// expert's gate/up (SwiGLU in its epilogue) and one for every expert's down,
// reading each weight as stored (BF16, FP8 or NVFP4) straight into the
// tensor cores' A fragments.
//
// Sort: each routed (token, k) takes a place in its expert by an atomic
// count (k_p_rcount), one block scans the counts into row and tile offsets
// (k_p_rscan), and the places become rows (k_p_rplace). The order of an
// expert's rows is whatever the atomics gave; a row's products depend only
// on its token and its expert, and the add-norm sums a token's experts in
// k order through inv, so the results do not depend on it.
//
// GEMM (k_p_egemm, block 128 threads): block x is one tile of up to TE_N
// rows of one expert (toff: the experts' first tiles; a block past the
// last tile returns at once), block y a slab of weight rows. Each warp
// holds two m16 tiles of weight rows and multiplies them by the tile's
// rows (the MMA's n, 8 at a time, only those holding rows). The k of a
// 64-wide chunk are dealt so that lane (g, t) holds elements 16 t .. 16 t
// + 15 of its rows (one NVFP4 block: one scale) and MMA j takes elements
// 16 t + 4 j .. + 3 as its k slots (2 t, 2 t + 1, 2 t + 8, 2 t + 9); the
// B fragments take the same k from the rows staged in shared memory, so
// the dot products are the true ones, summed in the tensor core's order.
// gate/up: MMA row g is feature f's gate row and row g + 8 its up row, so
// SwiGLU pairs sit in one lane's accumulators.
//
// Numerics: weights exact (BF16 as stored; E4M3 and E2M1 x E4M3 block
// scale, at most 5 significant bits and at most 2,688, in FP16), the tensor
// scale applied to the float32 sums. Activations: for BF16 weights two BF16
// pieces hi + lo (as the prefill's cuBLAS products), accumulated into one
// float32 sum; for FP8 and NVFP4 weights one FP16 piece, each row scaled by
// a power of two that puts its largest magnitude in [2^14, 2^15)
// (k_p_tof16), so every element is rounded once to 2^-11 of itself (values
// below 2^-24 of the row's largest excepted) and the scale comes back in
// the epilogue: one MMA where two pieces took two. SwiGLU's output feeds an
// FP16 down as float32, a BF16 down as pieces.
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/prefill.cuh"

#define TE_N 64            // rows (tokens) a tile
#define TE_KC 64           // k a chunk
#define TE_BS (TE_KC + 8)  // a staged row's stride in halves (16 bytes of padding: no bank conflicts)

// ---- the routing sorted by expert ----

// grid ceil(n K / 256): routed (token, k) i takes place slot[i] in its expert; an expert outside [0, E)
// (non-finite router logits) is recorded once in bad {layer, token, expert} and routes nowhere
__global__ void k_p_rcount(const int *sel, int n, int K, int E, int *cnt, int *slot, int *bad, int layer) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * K) return;
  const int t = i / K, e = sel[t * RT_KST + i % K];
  if (e < 0 || e >= E) {
    slot[i] = -1;
    if (atomicCAS(bad, -1, layer) == -1) bad[1] = t, bad[2] = e;
    return;
  }
  slot[i] = atomicAdd(cnt + e, 1);
}

// one block of 1024: off[e] = rows of experts before e, toff[e] = their tiles (E + 1 entries each)
__global__ void k_p_rscan(const int *cnt, int E, int *off, int *toff) {
  __shared__ int ws[2][32];
  const int per = (E + 1023) / 1024, e0 = threadIdx.x * per, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int r = 0, tl = 0;
  for (int e = e0; e < e0 + per && e < E; e++) r += cnt[e], tl += (cnt[e] + TE_N - 1) / TE_N;
  int ri = r, ti = tl; // inclusive scans within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xFFFFFFFFu, ri, o), b = __shfl_up_sync(0xFFFFFFFFu, ti, o);
    if (lane >= o) ri += a, ti += b;
  }
  if (lane == 31) ws[0][w] = ri, ws[1][w] = ti;
  __syncthreads();
  int rb = 0, tb = 0;
  for (int i = 0; i < w; i++) rb += ws[0][i], tb += ws[1][i];
  rb += ri - r, tb += ti - tl; // exclusive: rows and tiles before this thread's experts
  for (int e = e0; e < e0 + per && e < E; e++) {
    off[e] = rb, toff[e] = tb;
    rb += cnt[e], tb += (cnt[e] + TE_N - 1) / TE_N;
  }
  if (threadIdx.x == 1023) off[E] = rb, toff[E] = tb;
}

// grid ceil(n K / 256): perm[row] = token, inv[i] = row (-1 where routed nowhere)
__global__ void k_p_rplace(const int *sel, const int *slot, const int *off, int n, int K, int *perm, int *inv) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * K) return;
  const int t = i / K;
  if (slot[i] < 0) {
    inv[i] = -1;
    return;
  }
  const int r = off[sel[t * RT_KST + i % K]] + slot[i];
  perm[r] = t, inv[i] = r;
}

void tp_route_sort(cudaStream_t st, const int *sel, int n, int K, int E, int *cnt, int *slot, int *off, int *toff,
                   int *perm, int *inv, int *bad, int layer) {
  const unsigned b = (unsigned)((n * K + 255) / 256);
  cudaMemsetAsync(cnt, 0, (size_t)E * 4, st);
  k_p_rcount<<<b, 256, 0, st>>>(sel, n, K, E, cnt, slot, bad, layer);
  k_p_rscan<<<1, 1024, 0, st>>>(cnt, E, off, toff);
  k_p_rplace<<<b, 256, 0, st>>>(sel, slot, off, n, K, perm, inv);
}

// ---- the grouped GEMM ----

// F: LIN_BF16, LIN_FP8 or LIN_NVFP4; a lane's 16 weights of one row, raw (BF16 32 bytes, FP8 16, NVFP4 8 and
// the block's scale byte)
template <int F> struct te_raw {
  uint4 v[F == LIN_BF16 ? 2 : 1];
  uint32_t sc;
};

template <int F> __device__ __forceinline__ void te_load(const uint8_t *row, const uint8_t *srow, int64_t k, bool ok,
                                                         te_raw<F> &r) {
  if (!ok) {
#pragma unroll
    for (int i = 0; i < (F == LIN_BF16 ? 2 : 1); i++) r.v[i] = make_uint4(0, 0, 0, 0);
    r.sc = 0;
    return;
  }
  if constexpr (F == LIN_BF16) {
    const uint4 *p = reinterpret_cast<const uint4 *>(row + 2 * k);
    r.v[0] = __ldg(p), r.v[1] = __ldg(p + 1);
  } else if constexpr (F == LIN_FP8) {
    r.v[0] = __ldg(reinterpret_cast<const uint4 *>(row + k));
  } else {
    const uint2 u = __ldg(reinterpret_cast<const uint2 *>(row + k / 2));
    r.v[0] = make_uint4(u.x, u.y, 0, 0), r.sc = srow[k / 16];
  }
}

// four E2M1 bytes (eight codes, the lower k in each byte's low nibble) as E4M3 bytes in k order, two words:
// the codes of the values times 2^-6 (rt_e2m1_e4m3), even and odd codes interleaved back
__device__ __forceinline__ void te_e2m1_e4m3(uint32_t w, uint32_t &lo4, uint32_t &hi4) {
  uint32_t ea, eb; // codes 0, 2, 4, 6 and 1, 3, 5, 7
  rt_e2m1_e4m3(w, ea, eb);
  lo4 = __byte_perm(ea, eb, 0x5140), hi4 = __byte_perm(ea, eb, 0x7362);
}

// the raw weights as the A fragments' element pairs: p[q] = elements (2 q, 2 q + 1) (the lower k in the low
// half), exact: BF16 as stored; FP8 as FP16; NVFP4 as FP16 E2M1 x 2^-6 times the block scale x 2^6 (E4M3 times
// 64 is at most 28,672 and the product at most 2,688, both exact in FP16)
template <int F> __device__ __forceinline__ void te_pairs(const te_raw<F> &r, uint32_t (&p)[8]) {
  if constexpr (F == LIN_BF16) {
    const uint32_t w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w, r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
#pragma unroll
    for (int q = 0; q < 8; q++) p[q] = w[q];
  } else if constexpr (F == LIN_FP8) {
    const uint32_t w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
#pragma unroll
    for (int q = 0; q < 8; q++) p[q] = rt_e4m3x2_h2(w[q >> 1] >> (16 * (q & 1)));
  } else {
    const __half2 s = __float2half2_rn(64.0f * rt_e4m3((uint8_t)r.sc));
    uint32_t e[4];
    te_e2m1_e4m3(r.v[0].x, e[0], e[1]);
    te_e2m1_e4m3(r.v[0].y, e[2], e[3]);
#pragma unroll
    for (int q = 0; q < 8; q++) {
      const uint32_t h = rt_e4m3x2_h2(e[q >> 1] >> (16 * (q & 1)));
      const __half2 v = __hmul2(*reinterpret_cast<const __half2 *>(&h), s);
      p[q] = *reinterpret_cast<const uint32_t *>(&v);
    }
  }
}

// A chunk's products for the tile's first NTL n-tiles (8 rows each), two n-tiles at a time with their B
// fragments (every piece, all four k slices) in registers: the MMAs follow k slice by k slice and piece by
// piece over the four accumulators of the pair, so an accumulator's next MMA comes four MMAs after its last
// (a chain of dependent MMAs on one accumulator left the tensor pipe waiting on its latency). P pieces of
// BF16 (BF) or FP16 activations.
template <int NTL, int P, bool BF>
__device__ __forceinline__ void te_mma(float (&acc)[2][TE_N / 8][4], const uint32_t (&a)[2][4][4],
                                       const uint16_t *const (&b)[P], int g, int t) {
#pragma unroll
  for (int n0 = 0; n0 < NTL; n0 += 2) {
    uint32_t xb[2][P][8]; // [n-tile of the pair][piece][word: k slice j's two at 2 j, 2 j + 1]
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
      for (int pc = 0; pc < P; pc++) {
        if (n0 + u >= NTL) continue;
        const uint4 *bp = reinterpret_cast<const uint4 *>(b[pc] + ((n0 + u) * 8 + g) * TE_BS + 16 * t);
        const uint4 q0 = bp[0], q1 = bp[1];
        xb[u][pc][0] = q0.x, xb[u][pc][1] = q0.y, xb[u][pc][2] = q0.z, xb[u][pc][3] = q0.w;
        xb[u][pc][4] = q1.x, xb[u][pc][5] = q1.y, xb[u][pc][6] = q1.z, xb[u][pc][7] = q1.w;
      }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int pc = 0; pc < P; pc++)
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
          for (int mt = 0; mt < 2; mt++)
            if (n0 + u < NTL)
              rt_mma16816<BF>(acc[mt][n0 + u], a[mt][j][0], a[mt][j][1], a[mt][j][2], a[mt][j][3],
                              xb[u][pc][2 * j], xb[u][pc][2 * j + 1]);
  }
}

// GU: gate/up of every expert (features of a slab: 64, 16 a warp), SwiGLU into y (float32) or the pieces o0,
// o1; else down (weight rows of a slab: 128, 32 a warp) into y, times the down's tensor scale. BF16 weights
// take the activations as two BF16 pieces (x0, x1); FP8 and NVFP4 as one FP16 piece xh whose row r is the
// activations' row times 1 / xs[r], a power of two (k_p_tof16)
// (FP16 activations: 3 blocks an SM, at 168 registers with a few spilled; the measurement is in the ledger)
template <int F, bool GU>
__global__ void __launch_bounds__(128, F == LIN_BF16 ? 2 : 3) k_p_egemm(tp_eg_args A) {
  constexpr int P = F == LIN_BF16 ? 2 : 1;
  constexpr bool BF = F == LIN_BF16;
  __shared__ __align__(16) uint16_t bs[2][P][TE_N * TE_BS]; // [stage][piece][row slot][k]
  __shared__ int src[TE_N];
  __shared__ float rsc[TE_N]; // FP16 activations: each row slot's scale
  __shared__ int s_e, s_r0, s_n;
  __shared__ dlin Lg, Lu;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  if (tid == 0) { // the block's expert: the last e whose first tile is at or before blockIdx.x
    const int x = (int)blockIdx.x;
    s_e = -1;
    if (x < A.toff[A.E]) {
      int lo = 0, hi = A.E;
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (A.toff[mid] <= x) lo = mid;
        else hi = mid;
      }
      const int r0 = A.off[lo] + (x - A.toff[lo]) * TE_N, end = A.off[lo + 1];
      s_e = lo, s_r0 = r0, s_n = end - r0 < TE_N ? end - r0 : TE_N;
      Lg = A.tab[A.w0 + lo];
      Lu = A.u0 >= 0 ? A.tab[A.u0 + lo] : Lg;
    }
  }
  __syncthreads();
  if (s_e < 0) return;
  const int r0 = s_r0, nr = s_n;
  for (int s = tid; s < TE_N; s += 128) {
    src[s] = s < nr ? (A.perm ? A.perm[r0 + s] : r0 + s) : -1;
    if (!BF) rsc[s] = s < nr ? A.xs[src[s]] : 0.0f;
  }
  // the lane's four rows: m-tile mt's MMA rows g (q = 2 mt) and g + 8 (q = 2 mt + 1)
  const int64_t K = A.kdim, M = A.mdim;
  const bool pair = A.u0 < 0;
  const size_t rowb = F == LIN_BF16 ? (size_t)K * 2 : F == LIN_FP8 ? (size_t)K : (size_t)K / 2;
  const uint8_t *wr[4], *sr[4];
  bool on[4];
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const int mt = q >> 1, h = q & 1;
    int64_t row;
    const dlin *L = &Lg;
    if (GU) { // feature f: gate row (h 0), up row (h 1)
      row = (int64_t)blockIdx.y * 64 + warp * 16 + mt * 8 + g;
      on[q] = row < M;
      if (pair) row = 2 * row + h;
      else if (h) L = &Lu;
    } else {
      row = (int64_t)blockIdx.y * 128 + warp * 32 + mt * 16 + h * 8 + g;
      on[q] = row < M;
    }
    if (!on[q]) row = 0;
    wr[q] = L->w + (size_t)row * rowb;
    sr[q] = F == LIN_NVFP4 ? L->sc + (size_t)row * (size_t)(K / 16) : nullptr;
  }
  __syncthreads(); // (src)
  const int nc = (int)((K + TE_KC - 1) / TE_KC);
  const uint16_t *xp[2] = {BF ? reinterpret_cast<const uint16_t *>(A.x0) : reinterpret_cast<const uint16_t *>(A.xh),
                           reinterpret_cast<const uint16_t *>(A.x1)};
  auto stage = [&](int c, int buf) { // chunk c's rows, every piece, into bs[buf] (zeros past the rows and K)
    const int64_t k0 = (int64_t)c * TE_KC;
#pragma unroll
    for (int pc = 0; pc < P; pc++)
#pragma unroll
      for (int m = 0; m < (TE_N * TE_KC / 8) / 128; m++) {
        const int i = tid + 128 * m, s = i / (TE_KC / 8), sg = i % (TE_KC / 8);
        const int64_t k = k0 + sg * 8;
        const bool ok = src[s] >= 0 && k < K;
        const uint16_t *x = xp[pc];
        rt_cp16z(&bs[buf][pc][s * TE_BS + sg * 8], ok ? x + (int64_t)src[s] * A.ldx + k : x, ok);
      }
    rt_cp_commit();
  };
  float acc[2][TE_N / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < TE_N / 8; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
  te_raw<F> raw[4];
  stage(0, 0);
#pragma unroll
  for (int q = 0; q < 4; q++) te_load<F>(wr[q], sr[q], 16 * t, on[q] && 16 * t < K, raw[q]);
  const int ntl = (nr + 7) / 8; // n-tiles holding rows
  for (int c = 0; c < nc; c++) {
    if (c + 1 < nc) stage(c + 1, (c + 1) & 1);
    else rt_cp_commit(); // (an empty group: the wait below always leaves one)
    uint32_t a[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      uint32_t p0[8], p1[8]; // rows g and g + 8
      te_pairs<F>(raw[2 * mt], p0);
      te_pairs<F>(raw[2 * mt + 1], p1);
#pragma unroll
      for (int j = 0; j < 4; j++)
        a[mt][j][0] = p0[2 * j], a[mt][j][1] = p1[2 * j], a[mt][j][2] = p0[2 * j + 1], a[mt][j][3] = p1[2 * j + 1];
    }
    if (c + 1 < nc) {
      const int64_t k = (int64_t)(c + 1) * TE_KC + 16 * t;
#pragma unroll
      for (int q = 0; q < 4; q++) te_load<F>(wr[q], sr[q], k, on[q] && k < K, raw[q]);
    }
    rt_cp_wait_group<1>();
    __syncthreads();
    const uint16_t *b[P];
#pragma unroll
    for (int pc = 0; pc < P; pc++) b[pc] = bs[c & 1][pc];
    switch (ntl) { // (a straight-line product for each count of n-tiles holding rows)
    case 1: te_mma<1, P, BF>(acc, a, b, g, t); break;
    case 2: te_mma<2, P, BF>(acc, a, b, g, t); break;
    case 3: te_mma<3, P, BF>(acc, a, b, g, t); break;
    case 4: te_mma<4, P, BF>(acc, a, b, g, t); break;
#if TE_N > 32
    case 5: te_mma<5, P, BF>(acc, a, b, g, t); break;
    case 6: te_mma<6, P, BF>(acc, a, b, g, t); break;
    case 7: te_mma<7, P, BF>(acc, a, b, g, t); break;
    default: te_mma<8, P, BF>(acc, a, b, g, t); break;
#endif
    }
    __syncthreads(); // (the stage is read before the next chunk's copies overwrite it)
  }
  // the epilogue: accumulator i of (mt, nt) is MMA row g (i < 2) or g + 8, row slot nt 8 + 2 t + (i & 1)
  if (GU) {
    const float sg = tp_scale(Lg, false), su = pair ? tp_scale(Lg, true) : tp_scale(Lu, false);
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      const int64_t f = (int64_t)blockIdx.y * 64 + warp * 16 + mt * 8 + g;
      if (f >= M) continue;
#pragma unroll
      for (int nt = 0; nt < TE_N / 8; nt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
          const int s = nt * 8 + 2 * t + i;
          if (s >= nr) continue;
          const float r = BF ? 1.0f : rsc[s], gv = acc[mt][nt][i] * (sg * r), uv = acc[mt][nt][2 + i] * (su * r);
          const float v = tk_silu(gv) * uv;
          if (A.y) A.y[(int64_t)(r0 + s) * A.ldy + f] = v;
          else tp_put(v, A.o0, A.o1, (int64_t)(r0 + s) * A.ldo + f);
        }
    }
  } else {
    const float sd = tp_scale(Lg, false);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t row = (int64_t)blockIdx.y * 128 + warp * 32 + mt * 16 + h * 8 + g;
        if (row >= M) continue;
#pragma unroll
        for (int nt = 0; nt < TE_N / 8; nt++)
#pragma unroll
          for (int i = 0; i < 2; i++) {
            const int s = nt * 8 + 2 * t + i;
            if (s < nr) A.y[(int64_t)(r0 + s) * A.ldy + row] = acc[mt][nt][2 * h + i] * (sd * (BF ? 1.0f : rsc[s]));
          }
      }
  }
}

// grid ceil(n / 8), block 256 (a warp a row): row r of x (two BF16 pieces x0 + x1, or float32 xf) [n][ldx],
// k < K, as FP16 xh [n][ldh] times 2^-e (e: the row's largest magnitude's exponent less 14, so that it lands
// in [2^14, 2^15) and nothing overflows; within [-112, 113]), xs[r] = 2^e; a row of zeros gets e = 0
__global__ void k_p_tof16(const bf16 *x0, const bf16 *x1, const float *xf, int64_t ldx, int64_t K, __half *xh,
                          int64_t ldh, float *xs, int n) {
  const int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= n) return;
  auto at = [&](int64_t k) {
    const int64_t i = r * ldx + k;
    return xf ? xf[i] : __bfloat162float(x0[i]) + __bfloat162float(x1[i]);
  };
  float mx = 0.0f;
  for (int64_t k = lane; k < K; k += 32) mx = fmaxf(mx, fabsf(at(k)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  const int e = mtpq_f16_row_exp(mx); // (kernels/rt_cpu.c's rt_round_f16_row takes the same)
  const float inv = ldexpf(1.0f, -e);
  for (int64_t k = lane; k < K; k += 32) xh[r * ldh + k] = __float2half_rn(at(k) * inv);
  if (lane == 0) xs[r] = ldexpf(1.0f, e);
}

void tp_tof16(cudaStream_t st, const bf16 *x0, const bf16 *x1, const float *xf, int64_t ldx, int64_t K, __half *xh,
              int64_t ldh, float *xs, int n) {
  if (n > 0) k_p_tof16<<<(unsigned)((n + 7) / 8), 256, 0, st>>>(x0, x1, xf, ldx, K, xh, ldh, xs, n);
}

template <bool GU> static void te_run(cudaStream_t st, int f, const tp_eg_args &A, unsigned tiles) {
  const unsigned slabs = (unsigned)(GU ? (A.mdim + 63) / 64 : (A.mdim + 127) / 128);
  const dim3 grid(tiles, slabs);
  if (f == LIN_NVFP4) k_p_egemm<LIN_NVFP4, GU><<<grid, 128, 0, st>>>(A);
  else if (f == LIN_FP8) k_p_egemm<LIN_FP8, GU><<<grid, 128, 0, st>>>(A);
  else k_p_egemm<LIN_BF16, GU><<<grid, 128, 0, st>>>(A);
}

void tp_egemm(cudaStream_t st, int f, bool gu, const tp_eg_args &A, int rows) {
  if (rows < 1) return;
  const unsigned tiles = (unsigned)((rows + TE_N - 1) / TE_N + A.E); // at most: a partial tile an expert
  if (gu) te_run<true>(st, f, A, tiles);
  else te_run<false>(st, f, A, tiles);
}
