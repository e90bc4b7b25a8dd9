// The streamed one-token NVFP4 product (kernels/cuda/k_mvs.cu): the routed
// experts' gate/up (with the shared expert's) as k_mv computes it, the same
// sums in the same order, but with the weights copied into a ring of shared
// memory by the copy engine instead of loaded into registers.
//
// Why: from two tokens on the experts' gate/up is tens of one-token tasks,
// which k_mv runs as several waves of short blocks, each paying the task,
// routing and weight-table round trips before its first weight byte and
// holding only what its registers can in flight. Here one block an SM runs
// the whole launch: a producer thread issues bulk copies (cp.async.bulk,
// completing on an mbarrier) of units of RB rows into NS stages, so NS
// units (NS x 36 KB at 2,048 columns) are always requested ahead of the
// consumer warps, whatever they are doing; the block's tasks are resolved
// once, before the first copy. Where k_mv fits one wave (one token) it is
// faster, and so are the launches of several terms (the down): ledger 62.
//
// Layout: unit u of the launch is rows (u % upt) RB .. + RB of task u / upt
// (every task has the same rows, a multiple of RB, and one term); a block
// takes a contiguous range of units, so it switches task rarely. A stage
// holds the unit's RB rows of packed E2M1 (cols / 2 bytes a row) and then
// their E4M3 block scales (cols / 16 a row), both contiguous in the matrix.
// Consumer warp w takes rows RW w .. RW w + RW - 1 of each unit (whole
// gate/up pairs), a lane the 16 columns lane * 16 .. of each 512-column
// band, as k_mv does, and keeps its x of every band in registers while the
// task lasts.
#include "kernels/cuda/backend.cuh"

#define MVS_RB 32                  // rows a unit
#define MVS_CW 16                  // consumer warps
#define MVS_RW (MVS_RB / MVS_CW)   // rows a consumer warp takes of each unit (whole gate/up pairs)
#define MVS_NT (32 * (MVS_CW + 1)) // threads: the consumers and one producer warp
#define MVS_NS 4                   // stages
#define MVS_TMAX 64                // tasks a block may span
#define MVS_MAXB 4                 // 512-column bands (cols <= 2,048: x in registers)
static_assert(MVS_RW % 2 == 0 && MVS_RW * MVS_CW == MVS_RB, "whole row pairs a warp");

struct mvs_task { // a task as the block resolved it
  const uint8_t *w, *sc;
  const float *x;
  float *y;
  float wt0, wt1; // the term weight of even and odd rows, times 2^6 (rt_decode16's 2^-6 undone)
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

// grid: blocks <= units (one an SM); dynamic shared memory: MVS_NS stages of RB (cols / 2 + cols / 16) bytes.
// units = ntask x upt; glu: y[r / 2] = silu(row r) * row r + 1 (r even), else y[r] for each row.
__global__ void __launch_bounds__(MVS_NT, 1)
    k_mvs(const dlin *tab, const mv_task *tasks, const int *sel, int fl, int upt, int units, int cols, int glu) {
  RT_TL_START();
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t full[MVS_NS], empty[MVS_NS];
  __shared__ mvs_task tk[MVS_TMAX];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = (int)blockIdx.x, G = (int)gridDim.x;
  const int u0 = (int)((int64_t)units * b / G), u1 = (int)((int64_t)units * (b + 1) / G);
  const int t0 = u0 / upt, nt = u1 > u0 ? (u1 - 1) / upt - t0 + 1 : 0;
  const unsigned wrow = (unsigned)cols / 2, srow = (unsigned)cols / 16, wst = MVS_RB * wrow;
  const unsigned stage = wst + MVS_RB * srow;
  if (!(fl & RT_MV_LATE_TRIGGER)) rt_trigger();
  if (tid == 0) {
    for (int s = 0; s < MVS_NS; s++) mvs_bar_init(&full[s], 1), mvs_bar_init(&empty[s], MVS_CW);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // the block's tasks: the routed expert (sel) and its routing weight come from the kernels before
  rt_wait();
  if (fl & RT_MV_LATE_TRIGGER) rt_trigger();
  if (tid < nt) {
    const mv_task &T = tasks[t0 + tid];
    const mv_term m = T.t[0];
    const dlin L = tab[m.lin + (m.sel_k >= 0 ? sel[T.tok * RT_KST + m.sel_k] : 0)];
    const float w = (m.w ? *m.w : 1.0f) * 64.0f;
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
        const unsigned r0 = (unsigned)(u % upt) * MVS_RB;
        uint8_t *st = ring + (size_t)s * stage;
        mvs_arrive_tx(&full[s], stage);
        mvs_copy(st, T.w + (size_t)r0 * wrow, wst, &full[s], pol);
        mvs_copy(st + wst, T.sc + (size_t)r0 * srow, MVS_RB * srow, &full[s], pol);
      }
    }
    RT_TL_END();
    return;
  }
  // a consumer: rows RW warp .. + RW of each unit
  const int nband = (cols + 511) / 512;
  float xv[MVS_MAXB][16];
  int cur = -1;
  for (int u = u0; u < u1; u++) {
    const int i = u - u0, s = i % MVS_NS, t = u / upt - t0;
    const mvs_task &T = tk[t];
    if (t != cur) { // a new task: its x (written by the kernels before: rt_wait above)
      cur = t;
#pragma unroll
      for (int bd = 0; bd < MVS_MAXB; bd++) {
        const int c0 = bd * 512 + lane * 16;
        if (bd < nband && c0 < cols) rt_ld_x16(T.x + c0, xv[bd]);
      }
    }
    mvs_wait(&full[s], (unsigned)(i / MVS_NS) & 1);
    const uint8_t *st = ring + (size_t)s * stage;
    float acc[MVS_RW];
#pragma unroll
    for (int h = 0; h < MVS_RW; h++) acc[h] = 0.0f;
#pragma unroll
    for (int bd = 0; bd < MVS_MAXB; bd++) {
      const int c0 = bd * 512 + lane * 16;
      if (bd >= nband || c0 >= cols) continue;
#pragma unroll
      for (int h = 0; h < MVS_RW; h++) {
        const unsigned r = MVS_RW * warp + h;
        const uint2 v = *reinterpret_cast<const uint2 *>(st + r * wrow + bd * 256 + lane * 8);
        const uint8_t sb = st[wst + r * srow + bd * 32 + lane];
        const uint4 raw = make_uint4(v.x, v.y, 0, 0);
        float w[16];
        rt_decode16<2>(&raw, sb, w);
        acc[h] = fmaf(h & 1 ? T.wt1 : T.wt0, rt_dot16(w, xv[bd]), acc[h]);
      }
    }
    __syncwarp();
    if (lane == 0) mvs_arrive(&empty[s]); // the stage's bytes are read: the producer may refill it
#pragma unroll
    for (int h = 0; h < MVS_RW; h++) acc[h] = rt_warp_sum(acc[h]);
    if (lane == 0) {
      const int64_t r = (int64_t)(u % upt) * MVS_RB + MVS_RW * warp;
#pragma unroll
      for (int h = 0; h < MVS_RW; h += 2)
        if (glu) T.y[(r + h) / 2] = rt_silu_mul(acc[h], acc[h + 1]);
        else T.y[r + h] = acc[h], T.y[r + h + 1] = acc[h + 1];
    }
  }
  RT_TL_END();
}

// The launch on k_mvs, or false where it does not apply or is not chosen
// (tune mvs: -1, the default, where k_mv would take more than one wave:
// big; 1 wherever it applies): NVFP4, one token, one term a task, every
// task of the same rows (a multiple of RB) and cols (a multiple of 16 and
// at most 2,048), no argmax, at most MVS_TMAX tasks a block. The matrices
// start 256-byte aligned (arena_put, upload), so every unit's rows and
// scales are 16-byte aligned as the bulk copy needs.
bool mvs_launch(gpu_session *g, const mv_launch &m, bool big) {
  if (!g->set.tune.mvs || (g->set.tune.mvs < 0 && !big) || !g->set.fast || m.fmt != 2 || m.nbmax != 1 || m.best ||
      !m.unif || m.cols > 512 * MVS_MAXB || m.rows % MVS_RB || m.rows == 0)
    return false;
  const int upt = (int)(m.rows / MVS_RB), units = upt * m.ntask;
  const int G = units < g->sms ? units : g->sms;
  // a block's units span at most ceil((units / G) / upt) + 1 tasks
  if ((units + G - 1) / G / upt + 2 > MVS_TMAX) return false;
  const size_t smem = (size_t)MVS_NS * MVS_RB * (size_t)(m.cols / 2 + m.cols / 16);
  static size_t attr = 0; // the dynamic shared memory k_mvs is allowed (set before its first launch)
  if (attr < smem) {
    const size_t most = (size_t)MVS_NS * MVS_RB * (512 * MVS_MAXB / 2 + 512 * MVS_MAXB / 16);
    if (cudaFuncSetAttribute(k_mvs, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most) != cudaSuccess)
      return false;
    attr = most;
  }
  go(g, true, k_mvs, dim3((unsigned)G), dim3(MVS_NT), smem, (const dlin *)g->w.lins, (const mv_task *)m.dev,
     (const int *)g->x.sel, m.fl, upt, units, (int)m.cols, m.glu ? 1 : 0);
  return true;
}
