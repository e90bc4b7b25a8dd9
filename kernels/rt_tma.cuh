// The FP8 and BF16 products at one token whose weights are streamed by the
// bulk copy engine (included by kernels/runtime_cuda.cu after rt_head.cuh):
// the head (with the argmax) and, opt-in, the dense products of the step
// (fc, q/k/v, o, router, the shared expert).
//
// Why: k_head_mma and k_mv keep their loads in flight in registers (8 x 16
// bytes per lane) and can request only that much before they wait for the
// kernel before them; a k_mv block takes so many registers that the next
// launch's blocks cannot be resident beside it. Here one block per SM keeps
// nstage 16-row tiles in flight in shared memory through cp.async.bulk,
// refilled by a producer warp as soon as the 8 consumer warps release a
// tile, and requests all nstage before the wait: a dense product whose
// tiles all fit has all its weights requested before its input exists.
//
// Arithmetic: the same as k_head_mma<F, 1> (rt_head.cuh): x as three f16 or
// bf16 pieces of x * 2^s, m16n8k16 MMAs with f32 accumulators, the same
// fragment assembly (lane (g, t) takes columns 64 b + 16 t .. + 15 of rows
// g and g + 8 for band b), read from shared memory instead of global. The
// bands are split over the 8 warps (warp w: bands w, w + 8, ...) and the
// warps' row sums are added in warp order, so only the order of the f32
// sums differs from k_head_mma and k_mv (the gpu tests' tolerance and argmax
// checks).
//
// Shared memory: a tile's rows at a stride of the row's bytes + 64 (FP8) or
// + 16 (BF16), so that the two rows a quarter-warp reads with 16-byte loads
// fall in different banks.
#pragma once

#define RT_TMA_SMEM (220 * 1024) // dynamic shared memory a block of k_tma may take
#define RT_TMA_MAXST 16          // the most tiles in flight
#define RT_TMA_MAXT 4            // the most tasks of a product launch

__device__ __forceinline__ uint32_t rt_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void rt_mbar_init(uint64_t *b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(rt_smem_addr(b)), "r"(count) : "memory");
}

__device__ __forceinline__ void rt_mbar_expect(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(rt_smem_addr(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void rt_mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(rt_smem_addr(b)) : "memory");
}

__device__ __forceinline__ void rt_mbar_wait(uint64_t *b, uint32_t parity) {
  uint32_t ok = 0;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(rt_smem_addr(b)), "r"(parity)
                 : "memory");
  } while (!ok);
}

// bytes (% 16 == 0) from global src to shared dst (both 16-byte aligned),
// completing on mbarrier b; streamed once, so evict-first in L2
__device__ __forceinline__ void rt_bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *b, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
               "%4;" ::"r"(rt_smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(rt_smem_addr(b)), "l"(pol)
               : "memory");
#endif
}

// the bytes a k_head_tma tile takes in shared memory (16 padded rows)
__host__ __device__ __forceinline__ int rt_tma_row_stride(int F, int64_t cols) {
  return (int)(cols * (F == 1 ? 1 : 2)) + (F == 1 ? 64 : 16);
}

// blockDim 288 (8 consumer warps, then the producer warp), one block per
// SM; one token; F = 1 (FP8) or 0 (BF16), cols % 64 == 0. HEAD: one task,
// the head (T.best, optionally T.logits). Else ntask <= RT_TMA_MAXT tasks
// of one plain term each (no routing), all of one x and one width, y[r] of
// each written; their 16-row tiles are numbered task after task. nstage
// tiles (1..RT_TMA_MAXST; 1 only where no block has two) of 16 x
// rt_tma_row_stride bytes, then x's three pieces (3 x (cols + 16) halves)
// in dynamic shared memory.
template <int F, bool HEAD>
__global__ void __launch_bounds__(288, 1) k_tma(const dlin *tab, const mv_task *tasks, int ntask, int nstage) {
  using H = typename std::conditional<F == 1, __half, __nv_bfloat16>::type;
  constexpr int NL = F == 1 ? 1 : 2; // 16-byte loads per row and band
  extern __shared__ __align__(128) unsigned char rt_tsm[];
  __shared__ dlin Ls[RT_TMA_MAXT];
  __shared__ float *ys[RT_TMA_MAXT];
  __shared__ int64_t t0[RT_TMA_MAXT + 1]; // the first tile of each task
  __shared__ const float *xp;
  __shared__ unsigned long long *bestp;
  __shared__ float *logp;
  __shared__ __align__(8) uint64_t full[RT_TMA_MAXST], empty[RT_TMA_MAXST];
  __shared__ float red[2][8][16], fsh[9];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  rt_trigger();
  if (tid < ntask) {
    const mv_task *T = tasks + tid;
    Ls[tid] = tab[T->t[0].lin];
    ys[tid] = T->y;
    if (tid == 0) xp = T->t[0].x, bestp = T->best, logp = T->logits;
  }
  if (tid == 0) {
    for (int s = 0; s < nstage; s++) rt_mbar_init(&full[s], 1), rt_mbar_init(&empty[s], 8);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    t0[0] = 0;
    for (int k = 0; k < ntask; k++) t0[k + 1] = t0[k] + (Ls[k].rows + 15) / 16;
  }
  __syncthreads();
  const int cols = (int)Ls[0].cols, nband = cols / 64, ps = cols + 16, RS = rt_tma_row_stride(F, cols);
  const uint32_t rowb = (uint32_t)cols * (F == 1 ? 1 : 2);
  const int64_t ntile = t0[ntask];
  unsigned char *tiles = rt_tsm;
  H *pc = reinterpret_cast<H *>(rt_tsm + (size_t)nstage * 16 * RS);
  // global tile tl: its task and first row
  auto locate = [&](int64_t tl, int &task, int64_t &r0) {
    task = 0;
    while (task + 1 < ntask && tl >= t0[task + 1]) task++;
    r0 = (tl - t0[task]) * 16;
  };
  // the producer: tile k of this block (global tile blockIdx.x + k gridDim.x) into stage k % nstage
  uint64_t pol = 0;
  auto issue = [&](int64_t k) {
    int task;
    int64_t r0;
    locate(blockIdx.x + k * gridDim.x, task, r0);
    const int s = (int)(k % nstage);
    const int64_t rows = Ls[task].rows;
    const int nr = (int)(rows - r0 < 16 ? rows - r0 : 16);
    if (lane == 0) rt_mbar_expect(&full[s], (uint32_t)nr * rowb);
    __syncwarp();
    if (lane < nr)
      rt_bulk_copy(tiles + (size_t)s * 16 * RS + (size_t)lane * RS, Ls[task].w + (size_t)(r0 + lane) * rowb, rowb,
                   &full[s], pol);
  };
  const int64_t mine = blockIdx.x < ntile ? (ntile - 1 - blockIdx.x) / gridDim.x + 1 : 0; // this block's tiles
  if (warp == 8) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int64_t k = 0; k < mine && k < nstage; k++) issue(k); // constant weights: before the wait
  }
  rt_wait();
  // x -> three pieces of x * 2^s in shared memory (k_head_mma's arithmetic)
  const float *x = xp;
  float m = 0.0f;
  if (tid < 256)
    for (int c = tid; c < cols; c += 256) m = fmaxf(m, fabsf(x[c]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  if (lane == 0 && warp < 8) fsh[warp] = m;
  __syncthreads();
  m = 0.0f;
  for (int w = 0; w < 8; w++) m = fmaxf(m, fsh[w]);
  const int sx = m > 0.0f ? 14 - ilogbf(m) : 0; // m * 2^sx in [2^14, 2^15)
  if (tid < 256)
    for (int c = tid; c < cols; c += 256) rt_split3<H>(ldexpf(x[c], sx), pc[c], pc[ps + c], pc[2 * ps + c]);
  __syncthreads();
  if (warp == 8) { // refill each stage once the 8 consumer warps have released it
    for (int64_t k = nstage; k < mine; k++) {
      rt_mbar_wait(&empty[k % nstage], (uint32_t)((k / nstage - 1) & 1));
      issue(k);
    }
    return;
  }
  unsigned long long best = 0;
  for (int64_t k = 0; k < mine; k++) {
    const int s = (int)(k % nstage);
    rt_mbar_wait(&full[s], (uint32_t)((k / nstage) & 1));
    const unsigned char *st = tiles + (size_t)s * 16 * RS;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = warp; b < nband; b += 8) {
      const int c = b * 64 + t * 16; // the lane's first column in this band
      uint4 ra[NL], rb[NL];
#pragma unroll
      for (int h = 0; h < NL; h++) {
        ra[h] = *reinterpret_cast<const uint4 *>(st + (size_t)g * RS + (size_t)c * (F == 1 ? 1 : 2) + 16 * h);
        rb[h] = *reinterpret_cast<const uint4 *>(st + (size_t)(g + 8) * RS + (size_t)c * (F == 1 ? 1 : 2) + 16 * h);
      }
      uint32_t a[4][4];
      if constexpr (F == 1) {
        const uint32_t wa[4] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w}, wb[4] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w};
#pragma unroll
        for (int j = 0; j < 4; j++)
          a[j][0] = rt_e4m3x2_h2(wa[j]), a[j][1] = rt_e4m3x2_h2(wb[j]), a[j][2] = rt_e4m3x2_h2(wa[j] >> 16),
          a[j][3] = rt_e4m3x2_h2(wb[j] >> 16);
      } else {
        const uint32_t wa[8] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w, ra[NL - 1].x, ra[NL - 1].y, ra[NL - 1].z, ra[NL - 1].w};
        const uint32_t wb[8] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w, rb[NL - 1].x, rb[NL - 1].y, rb[NL - 1].z, rb[NL - 1].w};
#pragma unroll
        for (int j = 0; j < 4; j++) a[j][0] = wa[2 * j], a[j][1] = wb[2 * j], a[j][2] = wa[2 * j + 1], a[j][3] = wb[2 * j + 1];
      }
      uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
      if (g < 3) { // B column g: piece g of the token (columns 3..7 zero)
        const uint4 *p = reinterpret_cast<const uint4 *>(pc + g * ps + c);
        q0 = p[0], q1 = p[1];
      }
      const uint32_t xb[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
      for (int j = 0; j < 4; j++) rt_mma16816<F == 0>(acc, a[j][0], a[j][1], a[j][2], a[j][3], xb[2 * j], xb[2 * j + 1]);
    }
    __syncwarp(); // every lane's reads of the stage are done (the MMAs took them)
    if (lane == 0) rt_mbar_arrive(&empty[s]);
    // this warp's row sums: row g from columns 0, 1 (lane (g, 0)) and 2 (lane (g, 1)); row g + 8 likewise
    const float v0 = t == 0 ? acc[0] + acc[1] : acc[0], v8 = t == 0 ? acc[2] + acc[3] : acc[2];
    const float y0 = v0 + __shfl_down_sync(0xFFFFFFFFu, v0, 1), y8 = v8 + __shfl_down_sync(0xFFFFFFFFu, v8, 1);
    if (t == 0) red[k & 1][warp][g] = y0, red[k & 1][warp][g + 8] = y8;
    // the 8 warps' sums of tile k are in red[k & 1]; the buffer is written
    // again for tile k + 2, after every consumer has passed this barrier
    // once more (for tile k + 1), so after these reads
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (tid < 16) {
      int task;
      int64_t r0;
      locate(blockIdx.x + k * gridDim.x, task, r0);
      float y = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; w++) y += red[k & 1][w][tid];
      y *= ldexpf(F == 1 ? Ls[task].s : 1.0f, -sx); // the FP8 tensor scale and 2^-s
      const int64_t r = r0 + tid;
      if (r < Ls[task].rows) {
        if constexpr (HEAD) {
          const unsigned long long key = rt_argmax_key(y, (uint32_t)r);
          best = key > best ? key : best;
          if (logp) logp[r] = y;
        } else {
          ys[task][r] = y;
        }
      }
    }
  }
  if (HEAD && warp == 0) {
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long q = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      best = q > best ? q : best;
    }
    if (lane == 0 && best) atomicMax(bestp, best);
  }
}
