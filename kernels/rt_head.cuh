// The FP8 head at one token on tensor cores (included by
// kernels/runtime_cuda.cu after rt_ops.cuh). Why: the FFMA head (k_mv<1, 8,
// 8, 1>) spends ~2.5 instructions per weight (E4M3 pair -> half pair, half
// -> float, FFMA) and issues 0.58 per cycle per scheduler at 75% of DRAM
// (tests/bench/RESULTS.md); here a warp's 16 rows x 16 columns take 4
// conversions and one mma.sync, ~0.08 instructions per weight.
//
// Exactness: E4M3 is exact in f16. x (float) is carried as three f16 pieces
// hi + mid + lo of x * 2^s (s: a power of two putting the block's largest
// |x| in [2^14, 2^15), so nothing overflows and the pieces keep x to 2^-24
// of that largest |x|), placed in the MMA's token columns 0, 1, 2; each
// product of an f16 weight and an f16 piece is exact in the f32
// accumulator. The sums' order is the tensor core's, not k_mv's, hence the
// gpu tests' tolerance and argmax comparisons.
//
// Layout (PTX m16n8k16, f16 in, f32 accumulate): lane (g = lane / 4, t =
// lane % 4) holds A rows g and g + 8 at k slots 2t, 2t + 1, 2t + 8, 2t + 9
// and B column g at the same slots. A dot product does not care which
// column a k slot stands for, so slot order is chosen to match the loads:
// lane (g, t) loads the 16 bytes at columns c = 64 b + 16 t of rows g and g
// + 8 for band b, and its MMA j of the band takes columns c + 4j .. c + 4j
// + 3 (word j of each load); the B piece n is then x's columns c + 4j ..
// c + 4j + 3 too, read by lane (n, t) from shared memory in natural order.
#pragma once

#define RT_HMMA_U 4 // bands (64 columns) of loads in flight per lane: 8 x 16 bytes, as k_mv's head

__device__ __forceinline__ void rt_mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// two E4M3 bytes (the low one first) as an f16 pair, exact
__device__ __forceinline__ uint32_t rt_e4m3x2_h2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xFFFF), __NV_E4M3);
  return (uint32_t)h.x | (uint32_t)h.y << 16;
}

// blockDim 256, one task (the head: T.best, optionally T.logits), FP8,
// cols % 64 == 0; dynamic shared memory: 3 x (cols + 16) halves (the pieces,
// rows padded by 32 bytes against bank conflicts)
__global__ void __launch_bounds__(256, 2) k_head_mma(const dlin *tab, const mv_task *tasks, const int *sel) {
  extern __shared__ __align__(16) unsigned char rt_hsm[];
  __shared__ mv_task T;
  __shared__ unsigned long long bbest[8];
  __shared__ float fsh[9];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  rt_trigger();
  {
    const int *src = reinterpret_cast<const int *>(tasks);
    int *dst = reinterpret_cast<int *>(&T);
    for (int i = tid; i < (int)(sizeof(mv_task) / 4); i += 256) dst[i] = src[i];
  }
  if (tid < 8) bbest[tid] = 0;
  __syncthreads();
  const dlin L = tab[T.t[0].lin];
  const int cols = (int)L.cols, nband = cols / 64, ps = cols + 16;
  const int64_t rows = L.rows, ntile = (rows + 15) / 16;
  __half *pc = reinterpret_cast<__half *>(rt_hsm);
  // the first tile's first batch of weights before the wait (they are constant)
  int64_t tile = (int64_t)blockIdx.x * 8 + warp;
  uint4 ra[RT_HMMA_U], rb[RT_HMMA_U];
  auto load = [&](int64_t tl, int b0) {
    const int64_t r = tl * 16 + g;
#pragma unroll
    for (int u = 0; u < RT_HMMA_U; u++) {
      const int b = b0 + u;
      const bool okb = tl < ntile && b < nband;
      const uint8_t *p = L.w + (size_t)b * 64 + t * 16;
      ra[u] = okb && r < rows ? __ldcs(reinterpret_cast<const uint4 *>(p + (size_t)r * cols)) : make_uint4(0, 0, 0, 0);
      rb[u] = okb && r + 8 < rows ? __ldcs(reinterpret_cast<const uint4 *>(p + (size_t)(r + 8) * cols))
                                  : make_uint4(0, 0, 0, 0);
    }
  };
  load(tile, 0);
  rt_wait();
  // x -> three f16 pieces of x * 2^s in shared memory
  const float *x = T.t[0].x;
  float m = 0.0f;
  for (int c = tid; c < cols; c += 256) m = fmaxf(m, fabsf(x[c]));
  m = rt_block_reduce(m, 0, 8, fsh);
  const int s = m > 0.0f ? 14 - ilogbf(m) : 0; // m * 2^s in [2^14, 2^15)
  for (int c = tid; c < cols; c += 256) {
    const float v = ldexpf(x[c], s);
    const __half h = __float2half_rn(v);
    const float r1 = v - __half2float(h); // exact (v and h agree above h's last bit)
    const __half mid = __float2half_rn(r1);
    const __half lo = __float2half_rn(r1 - __half2float(mid));
    pc[c] = h, pc[ps + c] = mid, pc[2 * ps + c] = lo;
  }
  __syncthreads();
  const float post = ldexpf(L.s, -s); // the FP8 tensor scale and 2^-s, applied to each row's sum
  unsigned long long mybest = 0;
  for (; tile < ntile; tile += (int64_t)gridDim.x * 8) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b0 = 0; b0 < nband; b0 += RT_HMMA_U) {
      if (b0) load(tile, b0);
#pragma unroll
      for (int u = 0; u < RT_HMMA_U; u++) {
        if (b0 + u >= nband) continue;
        uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
        if (g < 3) { // piece g of x's columns c .. c + 15
          const uint4 *p = reinterpret_cast<const uint4 *>(pc + g * ps + (b0 + u) * 64 + t * 16);
          q0 = p[0], q1 = p[1];
        }
        const uint32_t wa[4] = {ra[u].x, ra[u].y, ra[u].z, ra[u].w}, wb[4] = {rb[u].x, rb[u].y, rb[u].z, rb[u].w};
        const uint32_t xb[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
          rt_mma16816(acc, rt_e4m3x2_h2(wa[j]), rt_e4m3x2_h2(wb[j]), rt_e4m3x2_h2(wa[j] >> 16),
                      rt_e4m3x2_h2(wb[j] >> 16), xb[2 * j], xb[2 * j + 1]);
      }
    }
    // row g: columns 0 and 1 in lane (g, 0), column 2 in lane (g, 1) (acc[0], acc[1]); row g + 8: acc[2], acc[3]
    const float v0 = t == 0 ? acc[0] + acc[1] : acc[0], v8 = t == 0 ? acc[2] + acc[3] : acc[2];
    const float y0 = (v0 + __shfl_down_sync(0xFFFFFFFFu, v0, 1)) * post;
    const float y8 = (v8 + __shfl_down_sync(0xFFFFFFFFu, v8, 1)) * post;
    if (t == 0) {
      const int64_t r = tile * 16 + g;
      if (r < rows) {
        const unsigned long long k = rt_argmax_key(y0, (uint32_t)r);
        mybest = k > mybest ? k : mybest;
        if (T.logits) T.logits[r] = y0;
      }
      if (r + 8 < rows) {
        const unsigned long long k = rt_argmax_key(y8, (uint32_t)(r + 8));
        mybest = k > mybest ? k : mybest;
        if (T.logits) T.logits[r + 8] = y8;
      }
    }
    if (tile + (int64_t)gridDim.x * 8 < ntile) load(tile + (int64_t)gridDim.x * 8, 0);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long k = __shfl_xor_sync(0xFFFFFFFFu, mybest, o);
    mybest = k > mybest ? k : mybest;
  }
  if (lane == 0) bbest[warp] = mybest;
  __syncthreads();
  if (tid == 0) {
    unsigned long long mm = 0;
    for (int w = 0; w < 8; w++) mm = bbest[w] > mm ? bbest[w] : mm;
    if (mm) atomicMax(T.best, mm);
  }
}
