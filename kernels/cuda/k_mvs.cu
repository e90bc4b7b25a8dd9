// The streamed one-token NVFP4 product (kernels/cuda/k_mvs.cu): the routed
// experts' gate/up (with the shared expert's) with the weights copied into a
// ring of shared memory by the copy engine and multiplied on the tensor
// cores, instead of loaded into registers and multiplied with FFMAs (k_mv).
//
// Why: from two tokens on the experts' gate/up is tens of one-token tasks,
// which k_mv runs as several waves of short blocks, each paying the task,
// routing and weight-table round trips before its first weight byte and
// holding only what its registers can in flight. Here one block an SM runs
// the whole launch: a producer thread issues bulk copies (cp.async.bulk,
// completing on an mbarrier) of units of rb rows into NS stages, so NS
// units (NS x 36 KB) are always requested ahead of the consumer warps,
// whatever they are doing; the block's tasks are resolved once, before the
// first copy. Where k_mv fits one wave (one token) it is faster (ledger
// 62). The target's experts' down from two tokens on comes here as one task
// a (token, expert), each leaving its own partial output, which the
// residual's kernel sums (ledger 69): a task of several terms (k_mv's down)
// would need its terms' sums met across the ring's consumer groups.
// With k_mv's FFMA decode the consumers alone took longer than the copies
// alone (ledger 65), so they multiply on the tensor cores: about half the
// instructions a weight.
//
// Layout: unit u of the launch is rows (u % upt) rb .. + rb of task u / upt
// (every task has the same rows, a multiple of rb, and one term); a block
// takes a contiguous range of units, so it switches task rarely. A stage
// holds the unit's rb rows of packed E2M1 (cols / 2 bytes a row) and then
// their E4M3 block scales (cols / 16 a row), both contiguous in the matrix.
// rb keeps a unit near 36 KB whatever the columns: 32 rows at more than
// 1,024 columns (each row split in two column halves between two warps),
// else 64 .. 256 rows of whole columns, each warp its 16-row tiles.
// Numbers: each weight goes in as its E2M1 value times 2^-6 (exact in
// f16), x as two f16 pieces (x to 2^-22 of itself, as the FP8 products' x
// at 8 tokens: mma.cuh); the tensor cores sum in float32, in their own
// order, the sums of a block scale's 16 columns, which are then scaled in
// float32: the results are k_mv's within float rounding, not its bits.
#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"

#define MVS_RB 32                  // rows a unit of more than 1,024 columns (CP = 2)
#define MVS_UB 36864               // a unit's bytes at most (1,024 columns x 64 rows, 2,048 x 32)
#define MVS_CW 16                  // consumer warps
#define MVS_NT (32 * (MVS_CW + 1)) // threads: the consumers and one producer warp
#define MVS_NS 4                   // stages
#define MVS_GW (MVS_CW / MVS_NS)   // consumer warps a stage: 2 tiles of 16 rows x 2 column halves
#define MVS_XT 3                   // tasks a block may span (x of each in shared memory: 4 bytes a column)
#define MVS_MAXC 2048              // columns at most
#define MVS_ZOFF 16                // the zero row's offset past x, in 32-bit words (64 bytes: other banks)
#define MVS_ZLEN (MVS_ZOFF + 128)  // the zero row with its offset, in 32-bit words (one chunk's B: 512 bytes)
#define MVS_XBAR 9                 // named barrier of the consumers (1 .. 8: the column halves' pairs)
static_assert(MVS_GW == 4, "a stage's warps: 2 tiles x 2 halves, or 4 tiles at a time");

struct mvs_task { // a task as the block resolved it
  const uint8_t *w, *sc;
  const float *x;
  float *y;
  float wt0, wt1; // the term weight of even and odd rows, times 2^(6 - s) (rt_e2m1_e4m3's 2^-6, x's 2^s undone)
};

__device__ __forceinline__ uint32_t mvs_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mvs_bar_init(uint64_t *b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mvs_sa(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mvs_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mvs_sa(b)) : "memory");
}
__device__ __forceinline__ void mvs_arrive_tx(uint64_t *b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mvs_sa(b)), "r"(bytes) : "memory");
}
// until the barrier's phase of parity ph has completed
__device__ __forceinline__ void mvs_wait(uint64_t *b, unsigned ph) {
  uint32_t done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(mvs_sa(b)), "r"(ph)
                 : "memory");
  } while (!done);
}
// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared, counted on barrier b; the
// weights are read once, so evict-first in L2 (as k_mv's __ldcs)
__device__ __forceinline__ void mvs_copy(void *dst, const void *src, unsigned bytes, uint64_t *b, uint64_t pol) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
               "[%3], %4;" ::"r"(mvs_sa(dst)),
               "l"(src), "r"(bytes), "r"(mvs_sa(b)), "l"(pol)
               : "memory");
}

// A 16-row tile's row sums over 128-column chunks kc0 .. kc1 - 1 of the stage's rows rw, scales rs (row g of
// the tile: rw, rs; row g + 8: 8 rows on), x's B fragments from xp (advancing xinc uint2 a chunk): this lane's
// n columns scaled, then the four lanes of a row added (every lane holds its rows' sums)
__device__ __forceinline__ void mvs_tile(const uint8_t *rw, const uint8_t *rs, unsigned wrow, unsigned srow,
                                         const uint2 *xp, int xinc, int kc0, int kc1, int t, float &r0v,
                                         float &r8v) {
  r0v = 0.0f, r8v = 0.0f;
  for (int kc = kc0; kc < kc1; kc++, xp += xinc) {
    const uint4 wg = *reinterpret_cast<const uint4 *>(rw + kc * 64 + t * 16);
    const uint4 w8 = *reinterpret_cast<const uint4 *>(rw + 8 * wrow + kc * 64 + t * 16);
    // the block scales of n columns 2t, 2t + 1 (lanes 2 (t & 1), + 1's words): bytes (lane, word pair)
    const uint32_t sg = *reinterpret_cast<const uint32_t *>(rs + kc * 8 + 4 * (t & 1));
    const uint32_t s8 = *reinterpret_cast<const uint32_t *>(rs + 8 * srow + kc * 8 + 4 * (t & 1));
    const float2 gA = rt_e4m3x2((uint16_t)sg), gB = rt_e4m3x2((uint16_t)(sg >> 16));
    const float2 eA = rt_e4m3x2((uint16_t)s8), eB = rt_e4m3x2((uint16_t)(s8 >> 16));
    const uint32_t qg[4] = {wg.x, wg.y, wg.z, wg.w}, q8[4] = {w8.x, w8.y, w8.z, w8.w};
#pragma unroll
    for (int wp = 0; wp < 2; wp++) { // word pairs: one block scale a lane
      float d[4] = {0, 0, 0, 0};
#pragma unroll
      for (int wi = 2 * wp; wi < 2 * wp + 2; wi++) {
        uint32_t evg, odg, ev8, od8;
        rt_e2m1_e4m3(qg[wi], evg, odg);
        rt_e2m1_e4m3(q8[wi], ev8, od8);
#pragma unroll
        for (int eo = 0; eo < 2; eo++) { // the even, then the odd columns
          const uint32_t rg = eo ? odg : evg, r8 = eo ? od8 : ev8;
          const uint2 xv = xp[16 * wi + 8 * eo];
          rt_mma16816<false>(d, rt_e4m3x2_h2(rg), rt_e4m3x2_h2(r8), rt_e4m3x2_h2(rg >> 16), rt_e4m3x2_h2(r8 >> 16),
                             xv.x, xv.y);
        }
      }
      r0v = __fmaf_rn(d[0], wp ? gA.y : gA.x, r0v), r0v = __fmaf_rn(d[1], wp ? gB.y : gB.x, r0v);
      r8v = __fmaf_rn(d[2], wp ? eA.y : eA.x, r8v), r8v = __fmaf_rn(d[3], wp ? eB.y : eB.x, r8v);
    }
  }
  r0v += __shfl_xor_sync(0xffffffffu, r0v, 1), r8v += __shfl_xor_sync(0xffffffffu, r8v, 1);
  r0v += __shfl_xor_sync(0xffffffffu, r0v, 2), r8v += __shfl_xor_sync(0xffffffffu, r8v, 2);
}

// rows r and r + 8 of task T's output from their sums (lane t == 0 writes; every lane of the warp calls)
__device__ __forceinline__ void mvs_out(const mvs_task &T, int64_t r, int g, int t, int glu, float r0v, float r8v) {
  const float wt = g & 1 ? T.wt1 : T.wt0;
  r0v *= wt, r8v *= wt;
  const float n0 = __shfl_down_sync(0xffffffffu, r0v, 4), n8 = __shfl_down_sync(0xffffffffu, r8v, 4);
  if (t == 0) {
    if (glu) {
      if (!(g & 1)) T.y[r / 2] = rt_silu_mul(r0v, n0), T.y[(r + 8) / 2] = rt_silu_mul(r8v, n8);
    } else {
      T.y[r] = r0v, T.y[r + 8] = r8v;
    }
  }
}

// grid: blocks <= units (one an SM); dynamic shared memory: MVS_NS stages of rb (cols / 2 + cols / 16) bytes,
// then MVS_XT x cols 4 bytes of x and MVS_ZLEN words of zeros. units = ntask x upt; glu: y[r / 2] = silu(row r)
// * row r + 1 (r even), else y[r] for each row. CP = 2: rb = MVS_RB rows of more than 1,024 columns, each
// row's two column halves in two warps; CP = 1: rb a multiple of 64, each warp its tiles' whole rows.
//
// The consumers on the tensor cores (m16n8k16, f16 in, f32 sums): stage q's units are taken by warps 4 q ..
// 4 q + 3; at CP = 2 a 16-row tile (h) by a column half (c) each, at CP = 1 tiles w, w + 4, ... by warp w
// of the four. A lane (g = lane / 4, t = lane % 4) reads 16 bytes of rows g and g + 8 of its tile a
// 128-column chunk (columns 32 t .. 32 t + 31 of it): each 32-bit word of 8 E2M1 values becomes four half
// pairs of E4M3 codes (rt_e2m1_e4m3: values times 2^-6, exact), the A fragments of an MMA on its even and
// one on its odd columns. The sum over k does not care in which order the columns come, so each lane's k
// slots are its own word's columns. B holds x of lane t's k slots in n column t (the hi piece) and t + 4
// (the lo piece), zero elsewhere, so each of D's 8 columns sums one lane's columns of one piece: in a pair
// of words (16 columns) one block scale, which multiplies the lane's two columns of D's sums (FFMA) after
// the pair's four MMAs. x was written once a launch into shared memory as hi + lo f16 pieces of x 2^s (s
// from the task's largest |x|, so every piece is in f16's range; each x to 2^-22 of itself, or to 2^-40 of
// that largest |x| where f16's subnormals take its pieces); a lane (g, t) with g % 4 == t reads its piece
// of its columns there (conflict-free), the others a row of zeros placed 64 bytes off the x array's banks.
// The four lanes of a row then add their sums (shuffles); at CP = 2 the half c = 1 leaves them in shared
// memory for c = 0.
//
// fl (RT_MV_*, as k_mv's): with SEL_EARLY the block resolves its tasks (sel and the routing weights, from
// L2) and its producer streams before the wait; only x, the launch before's output, waits.
template <int CP>
__global__ void __launch_bounds__(MVS_NT, 1) k_mvs(const dlin *tab, const mv_task *tasks, const int *sel, int fl,
                                                   int rb, int upt, int units, int cols, int glu) {
  RT_TL_START();
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t full[MVS_NS], empty[MVS_NS];
  __shared__ mvs_task tk[MVS_XT];
  __shared__ unsigned xmax[MVS_XT];
  __shared__ float part[MVS_NS][2][16]; // stage, tile: half 1's row sums (CP = 2)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = (int)blockIdx.x, G = (int)gridDim.x;
  const int u0 = (int)((int64_t)units * b / G), u1 = (int)((int64_t)units * (b + 1) / G);
  const int t0 = u0 / upt, nt = u1 > u0 ? (u1 - 1) / upt - t0 + 1 : 0;
  const bool early = fl & RT_MV_SEL_EARLY;
  const unsigned wrow = (unsigned)cols / 2, srow = (unsigned)cols / 16, wst = (unsigned)rb * wrow;
  const unsigned stage = wst + (unsigned)rb * srow;
  uint32_t *xs = reinterpret_cast<uint32_t *>(ring + (size_t)MVS_NS * stage); // [task][cols]: the B fragments
  if (!(fl & RT_MV_LATE_TRIGGER)) rt_trigger();
  if (tid == 0) {
    for (int s = 0; s < MVS_NS; s++) mvs_bar_init(&full[s], 1), mvs_bar_init(&empty[s], MVS_GW);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (tid < MVS_XT) xmax[tid] = 0;
  // the block's tasks: the routed expert (sel) and its routing weight come from the kernels before
  if (!early) rt_wait();
  if (fl & RT_MV_LATE_TRIGGER) rt_trigger();
  if (tid < nt) {
    const mv_task &T = tasks[t0 + tid];
    const mv_term m = T.t[0];
    int li = m.lin;
    if (m.sel_k >= 0) {
      const int *sp = sel + T.tok * RT_KST + m.sel_k;
      li += early ? __ldcg(sp) : *sp;
    }
    const dlin L = tab[li];
    const float w = (m.w ? (early ? __ldcg(m.w) : *m.w) : 1.0f) * 64.0f;
    tk[tid] = mvs_task{L.w, L.sc, m.x, T.y, w * L.s, w * L.s2};
  }
  __syncthreads();
  if (warp == MVS_CW) { // the producer
    if (lane == 0) {
      uint64_t pol;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
      for (int u = u0; u < u1; u++) {
        const int i = u - u0, s = i % MVS_NS;
        if (i >= MVS_NS) mvs_wait(&empty[s], (unsigned)(i / MVS_NS - 1) & 1);
        const mvs_task &T = tk[u / upt - t0];
        const unsigned r0 = (unsigned)(u % upt) * (unsigned)rb;
        uint8_t *st = ring + (size_t)s * stage;
        mvs_arrive_tx(&full[s], stage);
        mvs_copy(st, T.w + (size_t)r0 * wrow, wst, &full[s], pol);
        mvs_copy(st + wst, T.sc + (size_t)r0 * srow, (unsigned)rb * srow, &full[s], pol);
      }
    }
    RT_TL_END();
    return;
  }
  // the consumers: x of the block's tasks as B fragments, while the first copies are on their way
  if (early) rt_wait();
  for (int k = 0; k < nt; k++) {
    float m = 0.0f;
    for (int c = tid; c < cols; c += 32 * MVS_CW) m = fmaxf(m, fabsf(tk[k].x[c]));
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) atomicMax(&xmax[k], __float_as_uint(m)); // (non-negative floats order as their bits)
  }
  asm volatile("bar.sync %0, %1;" ::"r"(MVS_XBAR), "r"(32 * MVS_CW) : "memory");
  for (int k = 0; k < nt; k++) {
    int e;
    frexpf(__uint_as_float(xmax[k]), &e);
    const float sc = ldexpf(1.0f, 15 - e); // |x 2^s| < 2^15
    if (tid == 0) tk[k].wt0 = ldexpf(tk[k].wt0, e - 15), tk[k].wt1 = ldexpf(tk[k].wt1, e - 15);
    // u32 j of the task: chunk j / 128, word wi, odd columns eo, lane t, piece pc, register rg (the four
    // lanes' 16 bytes side by side: one conflict-free load); its two columns 128 chunk + 32 t + 8 wi + eo +
    // 4 rg (+ 2 for the high half)
    for (int j = tid; j < cols; j += 32 * MVS_CW) {
      const int rg = j & 1, pc = (j >> 1) & 1, t = (j >> 2) & 3, eo = (j >> 4) & 1, wi = (j >> 5) & 3;
      const int c = (j >> 7) * 128 + 32 * t + 8 * wi + eo + 4 * rg;
      const float v0 = tk[k].x[c] * sc, v1 = tk[k].x[c + 2] * sc;
      __half h0 = __float2half_rn(v0), h1 = __float2half_rn(v1);
      if (pc) h0 = __float2half_rn(v0 - __half2float(h0)), h1 = __float2half_rn(v1 - __half2float(h1));
      xs[(size_t)k * cols + j] = (uint32_t)__half_as_ushort(h0) | (uint32_t)__half_as_ushort(h1) << 16;
    }
  }
  if (tid < MVS_ZLEN) xs[(size_t)MVS_XT * cols + tid] = 0;
  asm volatile("bar.sync %0, %1;" ::"r"(MVS_XBAR), "r"(32 * MVS_CW) : "memory");
  const int q = warp / MVS_GW, wq = warp % MVS_GW, g = lane >> 2, t = lane & 3;
  // CP = 2: tile h = wq & 1, column half ch = wq >> 1; CP = 1: tiles wq, wq + 4, ... over all the columns
  const int h0 = CP == 2 ? wq & 1 : wq, ch = CP == 2 ? wq >> 1 : 0, nch = cols / (128 * CP); // chunks a part
  // B: x of lane t's k slots in n column t (hi piece) and t + 4 (lo), zeros elsewhere: a lane (g, t) with
  // g % 4 == t reads its piece (advancing a chunk at a time), the others the zero row (standing still)
  const bool xl = (g & 3) == t;
  const uint2 *zp = reinterpret_cast<const uint2 *>(xs + (size_t)MVS_XT * cols + MVS_ZOFF) + 2 * t + (g >> 2);
  const int xinc = xl ? 64 : 0;
  for (int i = q; i < u1 - u0; i += MVS_NS) {
    const int u = u0 + i, tt = u / upt - t0;
    const mvs_task &T = tk[tt];
    mvs_wait(&full[q], (unsigned)(i / MVS_NS) & 1);
    const uint8_t *st = ring + (size_t)q * stage;
    const uint32_t *xf = xs + (size_t)tt * cols;
    const uint2 *xp = xl ? reinterpret_cast<const uint2 *>(xf + ch * nch * 128) + 2 * t + (g >> 2) : zp;
    const int64_t ur = (int64_t)(u % upt) * rb;
    if constexpr (CP == 1) {
      for (int h = h0; h < rb / 16; h += MVS_GW) {
        float r0v, r8v;
        mvs_tile(st + (16 * h + g) * wrow, st + wst + (16 * h + g) * srow, wrow, srow, xp, xinc, 0, nch, t, r0v,
                 r8v);
        mvs_out(T, ur + 16 * h + g, g, t, glu, r0v, r8v);
      }
      __syncwarp();
      if (lane == 0) mvs_arrive(&empty[q]); // the stage's bytes are read: the producer may refill it
      continue;
    }
    float r0v, r8v; // rows g and g + 8: the tile's rows over this half's columns
    mvs_tile(st + (16 * h0 + g) * wrow, st + wst + (16 * h0 + g) * srow, wrow, srow, xp, xinc, ch * nch,
             (ch + 1) * nch, t, r0v, r8v);
    const int bar = 1 + 2 * q + h0;
    // half 1 leaves its sums and goes on; half 0 takes them and only then releases the stage, so half 1
    // cannot reach the pair's barrier (nor its sums) again before half 0 has left it: its next unit on
    // this stage waits for the refill, which waits for half 0
    if (ch) {
      if (t == 0) part[q][h0][g] = r0v, part[q][h0][g + 8] = r8v;
      __syncwarp();
      if (lane == 0) mvs_arrive(&empty[q]);
      asm volatile("bar.arrive %0, %1;" ::"r"(bar), "r"(64) : "memory");
      continue;
    }
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(64) : "memory");
    r0v += part[q][h0][g], r8v += part[q][h0][g + 8];
    __syncwarp();
    if (lane == 0) mvs_arrive(&empty[q]);
    mvs_out(T, ur + 16 * h0 + g, g, t, glu, r0v, r8v);
  }
  RT_TL_END();
}

// k_mvs's rows a unit at cols columns (0: none fits): MVS_RB past 1,024 columns, else the most rows of whole
// 64-row steps within MVS_UB bytes that divide rows
static int mvs_rows(int64_t rows, int64_t cols) {
  if (cols > 1024) return rows % MVS_RB ? 0 : MVS_RB;
  for (int64_t rb = MVS_UB / (cols * 9 / 16) / 64 * 64; rb >= 64; rb -= 64)
    if (rows % rb == 0) return (int)rb;
  return 0;
}

// k_mvs's dynamic shared memory at cols columns, rb rows a unit: the stages, then x of MVS_XT tasks and the
// zero row
static size_t mvs_smem(int64_t rb, int64_t cols) {
  return (size_t)MVS_NS * (size_t)rb * (size_t)(cols / 2 + cols / 16) +
         ((size_t)MVS_XT * (size_t)cols + MVS_ZLEN) * 4;
}

bool mvs_fits(const gpu_session *g, int fmt, int64_t rows, int64_t cols) {
  return g->set.tune.mvs && g->set.fast && fmt == 2 && cols <= MVS_MAXC && cols % 256 == 0 && rows > 0 &&
         mvs_rows(rows, cols) > 0;
}

// The launch on k_mvs, or false where it does not apply or is not chosen
// (tune mvs: -1, the default, where k_mv would take more than one wave:
// big; 1 wherever it applies): NVFP4, one token, one term a task, every
// task of the same rows and cols (a multiple of 256 and at most 2,048; the
// rows a multiple of the unit's: mvs_rows), no argmax, at most MVS_XT tasks
// a block. The matrices start 256-byte aligned (arena_put, upload), so
// every unit's rows and scales are 16-byte aligned as the bulk copy needs.
bool mvs_launch(gpu_session *g, const mv_launch &m, bool big) {
  if ((g->set.tune.mvs < 0 && !big) || !mvs_fits(g, m.fmt, m.rows, m.cols) || m.nbmax != 1 || m.best || !m.unif)
    return false;
  const int rb = mvs_rows(m.rows, m.cols), upt = (int)(m.rows / rb), units = upt * m.ntask;
  const int G = units < g->sms ? units : g->sms;
  // a block's units span at most ceil((units / G) / upt) + 1 tasks
  if ((units + G - 1) / G / upt + 2 > MVS_XT) return false;
  const size_t smem = mvs_smem(rb, m.cols);
  static size_t attr = 0; // the dynamic shared memory both instances are allowed (set before the first launch)
  if (attr < smem) {
    const size_t most = mvs_smem(MVS_RB, MVS_MAXC);
    if (cudaFuncSetAttribute(k_mvs<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most) != cudaSuccess ||
        cudaFuncSetAttribute(k_mvs<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most) != cudaSuccess)
      return false;
    attr = most;
  }
  go(g, true, m.cols > 1024 ? k_mvs<2> : k_mvs<1>, dim3((unsigned)G), dim3(MVS_NT), smem, (const dlin *)g->w.lins,
     (const mv_task *)m.dev, (const int *)g->x.sel, m.fl, rb, upt, units, (int)m.cols, m.glu ? 1 : 0);
  return true;
}
