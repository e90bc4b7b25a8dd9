// The target's attention over its cached positions on the tensor cores
// (kernels/cuda/k_tattn.cu): k_t_attn_mma, the split kernel between k_t_kv
// (keys and values to the cache, the query heads normed and roped in place)
// and k_t_comb (the splits merged, the output gate), where MTPQ_CUDA_TUNE
// has tattn=1. It replaces k_t_attn (k_target.cu) once measured on a GPU
// (ledger 70: written and emulated, tests/bench/emu_tattn.py, not yet run).
//
// Why: a forward's T tokens of one sequence attend to the same cached rows.
// A block a (KV head, token, split) read every row once per token and took
// each score as a warp's sum of lanes' FFMA dots (a shuffle tree a row and
// head), so the splits grew with T, far above their K/V bytes (ledger 70
// has ledger 61's timeline figures). Here a block
// takes a (KV head, sequence, group of up to four tokens, split): the
// group's query rows (its tokens' G heads) against each cached row once, as
// m16n8k16 products, the scores as (position x query row) tiles and the
// values as (dimension x query row) tiles.
//
// Layout: the split's positions [lo, lo + n) go TQ_CH at a time through a
// ring of TQ_NS stages in shared memory, keys of step c in load 2c and
// values in load 2c + 1 (stage L % TQ_NS): the next step's keys copy while
// this step's values are used, and its values while its keys are. The rows
// earlier forwards cached are requested (cp.async) before the wait on the
// kernel before; the forward's own rows, which k_t_kv has just written,
// after it. Query row q of the block (32 a block, 4 tiles of 8) is head
// 8 (r % NG) + q % 8 of token r / NG of the group (r = q / 8, NG = ceil(G /
// 8) tiles a token); rows past G or the group are zero.
//
// Numbers: q (float32, as k_t_kv left it) and the softmax weights enter the
// MMAs as three bf16 pieces each, which add up to them exactly (rt_split3);
// the cached keys and values are bf16 already, so every product is exact in
// the float32 accumulators and only the order of the sums is the tensor
// core's. Each step's scores update a running maximum, sum and output per
// query row (online softmax), which the block leaves as its split's partial.
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/target.cuh"

#define TQ_NS 3  // ring stages, each TQ_CH rows of keys or of values
#define TQ_R 32  // query rows a block: 4 tiles of 8
#define TQ_RS (TQ_CH + 4) // a row of the scores' partials, floats (against bank conflicts)
#define TQ_PS (TQ_CH + 8) // a row of the softmax weights' pieces, halves

// halves a cached row takes in a stage or a query row in the pieces: D rounded up to whole k-steps of 16, then 8
// halves of padding (rows 16 bytes apart mod 128: ldmatrix's eight rows without bank conflicts)
__host__ __device__ inline int tq_dp(int D) { return (D + 15) / 16 * 16 + 8; }

// k_t_attn_mma's dynamic shared memory: the stages, q's pieces [3][TQ_R][dp], the scores' two halves
// [2][TQ_R][TQ_RS] floats, the weights' pieces [3][TQ_R][TQ_PS]
static size_t tq_smem(int D) {
  const size_t dp = (size_t)tq_dp(D);
  return (size_t)TQ_NS * TQ_CH * dp * 2 + 3 * (size_t)TQ_R * dp * 2 + 2 * (size_t)TQ_R * TQ_RS * 4 +
         3 * (size_t)TQ_R * TQ_PS * 2;
}

// acc[r] += A B for each row tile r < nr: a, the A fragment of k-step kk; B, the tile's 8 query rows' three
// bf16 pieces (piece pc of row q at pieces + (pc TQ_R + q) stride), all three into the one accumulator. Lane
// (g, t) gives B's k slots 2 t, 2 t + 1 and 2 t + 8, 2 t + 9 of column g (its 32-bit loads: conflict-free at
// strides of 4 words mod 32)
__device__ __forceinline__ void tq_mma_tiles(float (&acc)[4][4], const uint32_t (&a)[4], const __nv_bfloat16 *pieces,
                                             int stride, int kk, int g, int t, int nr) {
#pragma unroll
  for (int r = 0; r < 4; r++)
    if (r < nr)
#pragma unroll
      for (int pc = 0; pc < 3; pc++) {
        const __nv_bfloat16 *b = pieces + (pc * TQ_R + 8 * r + g) * stride + 16 * kk + 2 * t;
        rt_mma16816<true>(acc[r], a[0], a[1], a[2], a[3], *reinterpret_cast<const uint32_t *>(b),
                          *reinterpret_cast<const uint32_t *>(b + 8));
      }
}

// grid (Nkv, sequences x token groups, NS), block 256 (8 warps), one block an SM at D = 256. Warp w scores
// positions 16 (w % 4) .. + 15 of a step over half w / 4 of the k-steps (the halves added in the softmax, in
// order), and sums the values of dimensions 16 w .. + 15 and 16 (w + 8) .. + 15.
__global__ void __launch_bounds__(256, 1) k_t_attn_mma(tk_attn_args A) {
  extern __shared__ __align__(16) uint8_t smq[];
  __shared__ float mrun[TQ_R], lrun[TQ_R], arun[TQ_R]; // a query row's running max, sum and last rescale
  rt_trigger();
  RT_TL_START();
  const int D = A.D, G = A.Nq / A.Nkv, NG = (G + 7) / 8, TB = ta_tb(G);
  const int Dp = (D + 15) / 16 * 16, DP = Dp + 8, KS = Dp / 16;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
  const int kv = blockIdx.x, s = blockIdx.z, Tn = A.c.Tn, ngr = (Tn + TB - 1) / TB;
  const int call = (int)blockIdx.y / ngr, u0 = (int)blockIdx.y % ngr * TB;
  const int nu = Tn - u0 < TB ? Tn - u0 : TB, nr = nu * NG;
  const tcall &cl = A.c.c[call]; // (copied in before the forward's first kernel: read before the wait)
  const int64_t pos0 = cl.pos0, C = tk_split_len(A, cl, 0), lo = (int64_t)s * C, last = pos0 + u0 + nu - 1;
  if (lo > last) {
    RT_TL_END();
    return;
  }
  const int n = (int)((lo + C - 1 < last ? lo + C - 1 : last) - lo + 1), nch = (n + TQ_CH - 1) / TQ_CH;
  const uint16_t *kc = cl.kc[A.c.layer], *vc = cl.vc[A.c.layer];
  const int64_t KV = (int64_t)A.Nkv * D;
  uint16_t *stg = reinterpret_cast<uint16_t *>(smq);
  __nv_bfloat16 *qp = reinterpret_cast<__nv_bfloat16 *>(stg + TQ_NS * TQ_CH * DP);
  float *red = reinterpret_cast<float *>(qp + 3 * TQ_R * DP);
  __nv_bfloat16 *pp = reinterpret_cast<__nv_bfloat16 *>(red + 2 * TQ_R * TQ_RS);
  const int d8 = D / 8; // 16-byte pieces of a cached row
  // load L (keys of step L / 2 when L is even, its values when odd) into stage L % TQ_NS: part 1 the rows
  // earlier forwards cached (asynchronous copies: before the wait too), part 2 the forward's own rows (plain
  // loads, after the wait) and, for values, zeros past the step's rows (their weights are 0; stale bits there
  // could be NaN)
  auto fill = [&](int L, int parts) {
    const int c = L >> 1;
    if (c >= nch) return;
    const int64_t p0 = lo + (int64_t)c * TQ_CH;
    const int nc = n - c * TQ_CH < TQ_CH ? n - c * TQ_CH : TQ_CH;
    const int nf = pos0 <= p0 ? 0 : pos0 - p0 >= nc ? nc : (int)(pos0 - p0);
    const uint16_t *src = (L & 1 ? vc : kc) + p0 * KV + (int64_t)kv * D;
    uint16_t *dst = stg + (L % TQ_NS) * TQ_CH * DP;
    for (int i = tid; i < TQ_CH * d8; i += 256) {
      const int r = i / d8, j = i - r * d8;
      if (r < nf) {
        if (parts & 1) rt_cp16(dst + r * DP + 8 * j, src + r * KV + 8 * j);
      } else if (parts & 2) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < nc) v = *reinterpret_cast<const uint4 *>(src + r * KV + 8 * j);
        if (r < nc || (L & 1)) *reinterpret_cast<uint4 *>(dst + r * DP + 8 * j) = v;
      }
    }
  };
  if (D < Dp) // the k-step's columns past D (8 of them) stay zero in every stage
    for (int i = tid; i < TQ_NS * TQ_CH; i += 256) *reinterpret_cast<uint4 *>(stg + i * DP + D) = make_uint4(0, 0, 0, 0);
  for (int L = 0; L < TQ_NS; L++) fill(L, 1), rt_cp_commit();
  rt_wait(); // q (normed and roped), the forward's own cached rows
  for (int L = 0; L < TQ_NS; L++) fill(L, 2);
  // q's three pieces a query row of the tiles in use, a warp a row (zeros past G and D)
  for (int q = w; q < 8 * nr; q += 8) {
    const int r = q >> 3, ut = r / NG, h = r % NG * 8 + (q & 7);
    const bool ok = ut < nu && h < G;
    const float *src = A.qg + (int64_t)(call * Tn + u0 + ut) * A.QGS + (int64_t)(kv * G + h) * 2 * D;
    for (int d = lane; d < Dp; d += 32) {
      __nv_bfloat16 h0, h1, h2;
      rt_split3(ok && d < D ? src[d] : 0.0f, h0, h1, h2);
      qp[q * DP + d] = h0, qp[(TQ_R + q) * DP + d] = h1, qp[(2 * TQ_R + q) * DP + d] = h2;
    }
  }
  if (tid < TQ_R) mrun[tid] = -INFINITY, lrun[tid] = 0.0f, arun[tid] = 0.0f;
  const float scale = 1.0f / sqrtf((float)D);
  const int mt = w & 3, kh = w >> 2, KS2 = (KS + 1) / 2, k0 = kh * KS2, k1 = k0 + KS2 < KS ? k0 + KS2 : KS;
  const int MD = Dp / 16; // the values' m-tiles (16 dimensions each)
  float o[2][4][4] = {};  // the running output: dims 16 (w + 8 mi) + g (+ 8: e >= 2), query rows 8 r + 2 t + e % 2
  for (int c = 0; c < nch; c++) {
    const int64_t p0 = lo + (int64_t)c * TQ_CH;
    const int nc = n - c * TQ_CH < TQ_CH ? n - c * TQ_CH : TQ_CH;
    const uint16_t *ks = stg + (2 * c) % TQ_NS * TQ_CH * DP, *vs = stg + (2 * c + 1) % TQ_NS * TQ_CH * DP;
    rt_cp_wait_group<TQ_NS - 1>(); // the keys of step c (its values and the next keys may be in flight)
    __syncthreads();
    // scores: A the cached keys (rows: positions), B q's pieces (columns: a tile's 8 query rows), the three
    // pieces into one accumulator
    float sa[4][4] = {};
    if (16 * mt < nc)
      for (int kk = k0; kk < k1; kk++) {
        uint32_t a[4];
        rt_ldsm4<false>(a, ks + (16 * mt + (lane & 15)) * DP + 16 * kk + 8 * (lane >> 4));
        tq_mma_tiles(sa, a, qp, DP, kk, g, t, nr);
      }
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        red[(kh * TQ_R + 8 * r + 2 * t + (e & 1)) * TQ_RS + 16 * mt + g + 8 * (e >> 1)] = sa[r][e];
    __syncthreads();
    fill(2 * c + 3, 3); // the next step's values into this step's keys' stage
    rt_cp_commit();
    // the softmax step, a warp a query row, a lane positions lane and lane + 32: the running maximum, the
    // rescale of what came before, the weights' pieces
    for (int q = w; q < 8 * nr; q += 8) {
      const int r = q >> 3, h = r % NG * 8 + (q & 7);
      const int64_t qpos = pos0 + u0 + r / NG;
      float sv[2];
      bool on[2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int j = lane + 32 * i;
        on[i] = h < G && j < nc && p0 + j <= qpos;
        sv[i] = on[i] ? (red[q * TQ_RS + j] + red[(TQ_R + q) * TQ_RS + j]) * scale : -INFINITY;
      }
      float m = fmaxf(sv[0], sv[1]);
      for (int x = 16; x > 0; x >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, x));
      const float mo = mrun[q], mn = fmaxf(mo, m), al = mo == -INFINITY ? 0.0f : expf(mo - mn);
      float l = 0.0f;
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const float x = on[i] ? expf(sv[i] - mn) : 0.0f;
        l += x;
        __nv_bfloat16 x0, x1, x2;
        rt_split3(x, x0, x1, x2);
        const int j = lane + 32 * i;
        pp[q * TQ_PS + j] = x0, pp[(TQ_R + q) * TQ_PS + j] = x1, pp[(2 * TQ_R + q) * TQ_PS + j] = x2;
      }
      l = rt_warp_sum(l);
      if (lane == 0) mrun[q] = mn, lrun[q] = fmaf(lrun[q], al, l), arun[q] = al;
    }
    rt_cp_wait_group<TQ_NS - 1>(); // the values of step c (the next keys and values may be in flight)
    __syncthreads();
    // values: A the cached values transposed (rows: dimensions), B the weights' pieces (columns: query rows)
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
      const int md = w + 8 * mi;
      if (md >= MD) continue;
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[mi][r][e] *= arun[8 * r + 2 * t + (e & 1)];
      for (int kk = 0; kk < TQ_CH / 16 && 16 * kk < nc; kk++) {
        uint32_t a[4];
        rt_ldsm4<true>(a, vs + (16 * kk + (lane & 7) + 8 * (lane >> 4)) * DP + 16 * md + 8 * ((lane >> 3) & 1));
        tq_mma_tiles(o[mi], a, pp, TQ_PS, kk, g, t, nr);
      }
    }
    __syncthreads();
    fill(2 * c + 4, 3); // the keys two steps on into this step's values' stage
    rt_cp_commit();
  }
  // the split's partials [token][query head][split]: the unnormalised output, the maximum and the sum
  const int64_t tok0 = (int64_t)call * Tn + u0;
#pragma unroll
  for (int mi = 0; mi < 2; mi++) {
    const int md = w + 8 * mi;
    if (md >= MD) continue;
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int h = r % NG * 8 + 2 * t + (e & 1), d = 16 * md + g + 8 * (e >> 1);
        if (r < nr && h < G && d < D)
          A.pacc[(((tok0 + r / NG) * A.Nq + (int64_t)kv * G + h) * A.NS + s) * D + d] = o[mi][r][e];
      }
  }
  if (tid < 8 * nr) {
    const int r = tid >> 3, h = r % NG * 8 + (tid & 7);
    if (h < G) {
      const int64_t pi = ((tok0 + r / NG) * A.Nq + (int64_t)kv * G + h) * A.NS + s;
      A.pm[pi] = mrun[tid], A.pl[pi] = lrun[tid];
    }
  }
  RT_TL_END();
}

int t_attn_slots(gpu_session *g, int D) {
  const size_t sm = tq_smem(D);
  static size_t attr = 0; // the dynamic shared memory the kernel is allowed (raised before a launch needs more;
                          // where that fails, the launch fails and the forward reports it)
  if (attr < sm && cudaFuncSetAttribute(k_t_attn_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) == cudaSuccess)
    attr = sm;
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_t_attn_mma, 256, sm) != cudaSuccess || nb < 1)
    cudaGetLastError(), nb = 1;
  return nb * g->sms;
}

void t_attn_run(gpu_session *g, const tk_attn_args &aa, int n, int Tn) {
  const int TB = ta_tb(aa.Nq / aa.Nkv);
  go(g, true, k_t_attn_mma, dim3((unsigned)aa.Nkv, (unsigned)(n * ((Tn + TB - 1) / TB)), (unsigned)aa.NS), dim3(256),
     tq_smem(aa.D), aa);
}
