// The FP8 and BF16 heads at 1..8 tokens on tensor cores (included by
// kernels/runtime_cuda.cu after rt_ops.cuh). Why: the FFMA head (k_mv<1, 8,
// 8, 1>) spends ~2.5 instructions per weight (E4M3 pair -> half pair, half
// -> float, FFMA) and issues 0.58 per cycle per scheduler at 75% of DRAM
// (tests/bench/RESULTS.md); here a warp's 16 rows x 16 columns take 4
// conversions and one mma.sync, ~0.08 instructions per weight.
//
// Exactness: E4M3 is exact in f16 (FP8 heads: f16 MMA), BF16 weights are
// bf16 (BF16 heads: bf16 MMA). x (float) is carried as three pieces hi +
// mid + lo of x * 2^s in the same half type (s: a power of two putting the
// block's largest |x| in [2^14, 2^15), so nothing overflows in f16 and the
// pieces keep x to 2^-24 of that largest |x|; three bf16 pieces hold all 24
// bits), placed in the MMA's columns 3j, 3j + 1, 3j + 2 for token j; each product of a
// weight and a piece is exact in the f32 accumulator. FP8 at 8 tokens
// (P = 2, the host's choice): two f16 pieces hi + lo in columns 2j, 2j + 1,
// x to 2^-23 of itself, one n-tile fewer (rt_split_p). The sums' order is
// the tensor core's, not k_mv's, hence the gpu tests' tolerance and argmax
// comparisons.
//
// Layout (PTX m16n8k16, f16 in, f32 accumulate): lane (g = lane / 4, t =
// lane % 4) holds A rows g and g + 8 at k slots 2t, 2t + 1, 2t + 8, 2t + 9
// and B column g at the same slots. A dot product does not care which
// column a k slot stands for, so slot order is chosen to match the loads:
// lane (g, t) loads columns c = 64 b + 16 t .. c + 15 of rows g and g + 8
// for band b (16 bytes of FP8, 32 of BF16), and its MMA j of the band takes
// columns c + 4j .. c + 4j + 3 (FP8: word j; BF16: words 2j, 2j + 1); the B
// piece n is then x's columns c + 4j .. c + 4j + 3 too, read by lane (n, t)
// from shared memory in natural order. tests/bench/emu_head_mma.py checks
// this assembly against the PTX layout.
#pragma once
#include <cuda_bf16.h>
#include <type_traits>
#include "kernels/rt_mma.cuh"

// two E4M3 bytes (the low one first) as an f16 pair, exact
__device__ __forceinline__ uint32_t rt_e4m3x2_h2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xFFFF), __NV_E4M3);
  return (uint32_t)h.x | (uint32_t)h.y << 16;
}

// The lane's (g = lane / 4, t = lane % 4) weights of bands b0 .. b0 + U - 1
// of tile tl (16 rows), those below bhi: rows g and g + 8, columns 64 b +
// 16 t .. + 15, NL 16-byte loads a row and band (FP8 1, BF16 2); zeros past
// the rows and bands
template <int F, int U, int NL>
__device__ __forceinline__ void rt_head_load(const uint8_t *w, size_t rowb, int64_t rows, int64_t tl, int b0, int bhi,
                                             int g, int t, uint4 (&ra)[U][NL], uint4 (&rb)[U][NL]) {
  const int64_t r = tl * 16 + g;
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int b = b0 + u;
    const uint4 *p = reinterpret_cast<const uint4 *>(w + (size_t)(b * 64 + t * 16) * (F == 1 ? 1 : 2));
#pragma unroll
    for (int h = 0; h < NL; h++) {
      ra[u][h] = b < bhi && r < rows ? __ldcs(p + (size_t)r * rowb / 16 + h) : make_uint4(0, 0, 0, 0);
      rb[u][h] = b < bhi && r + 8 < rows ? __ldcs(p + (size_t)(r + 8) * rowb / 16 + h) : make_uint4(0, 0, 0, 0);
    }
  }
}

// One band's products: the lane's weights ra, rb (rows g, g + 8, as
// rt_head_load left them) as the band's four A fragments, each multiplied
// by the B pieces of every n-tile (plane[n]: this lane's x plane, -1 none;
// pc: the planes, ps halves apart) into acc[n]
template <int F, int NT, int NL, typename H>
__device__ __forceinline__ void rt_head_band(const uint4 (&ra)[NL], const uint4 (&rb)[NL], const H *pc, int ps,
                                             const int (&plane)[NT], int band, int t, float (&acc)[NT][4]) {
  uint32_t a[4][4]; // the band's four A fragments (rows g, g + 8; k slots as the loads)
  if constexpr (F == 1) {
    const uint32_t wa[4] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w}, wb[4] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      a[j][0] = rt_e4m3x2_h2(wa[j]), a[j][1] = rt_e4m3x2_h2(wb[j]), a[j][2] = rt_e4m3x2_h2(wa[j] >> 16),
      a[j][3] = rt_e4m3x2_h2(wb[j] >> 16);
  } else { // a BF16 word is a column pair already
    const uint32_t wa[8] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w, ra[1].x, ra[1].y, ra[1].z, ra[1].w};
    const uint32_t wb[8] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w, rb[1].x, rb[1].y, rb[1].z, rb[1].w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      a[j][0] = wa[2 * j], a[j][1] = wb[2 * j], a[j][2] = wa[2 * j + 1], a[j][3] = wb[2 * j + 1];
  }
#pragma unroll
  for (int n = 0; n < NT; n++) {
    uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
    if (plane[n] >= 0) { // the plane's x columns c .. c + 15
      const uint4 *p = reinterpret_cast<const uint4 *>(pc + plane[n] * ps + band * 64 + t * 16);
      q0 = p[0], q1 = p[1];
    }
    const uint32_t xb[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      rt_mma16816<F == 0>(acc[n], a[j][0], a[j][1], a[j][2], a[j][3], xb[2 * j], xb[2 * j + 1]);
  }
}

// At one token: the warp's sums of its rows g (s0) and g + 8 (s8) in lane
// (g, 0), from the MMA's accumulators (column 0 and 1 in lane (g, 0),
// column 2 in lane (g, 1): token 0's three pieces)
__device__ __forceinline__ void rt_head_rowsums(const float (&acc)[4], int t, float &s0, float &s8) {
  const float v0 = t == 0 ? acc[0] + acc[1] : acc[0], v8 = t == 0 ? acc[2] + acc[3] : acc[2];
  s0 = v0 + __shfl_down_sync(0xFFFFFFFFu, v0, 1), s8 = v8 + __shfl_down_sync(0xFFFFFFFFu, v8, 1);
}

// Each of the task's nb tokens' x as P pieces of x * 2^s in shared
// memory (pc: P nb planes of cols + 16 halves; s per token, so that the
// largest |x| lies in [2^14, 2^15)), and post[j] = ls * 2^-s, the factor of
// token j's row sums (ls: the FP8 tensor scale, 1 for BF16); after rt_wait,
// all of the block's threads; ends with a barrier
template <typename H, int P = 3>
__device__ __forceinline__ void rt_head_pieces(const mv_task &T, float ls, int cols, H *pc, float *post, float *fsh) {
  const int ps = cols + 16;
  for (int j = 0; j < T.nb; j++) {
    const float *x = T.t[0].x + (int64_t)j * T.xs;
    float m = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) m = fmaxf(m, fabsf(x[c]));
    m = rt_block_reduce(m, 0, 8, fsh);
    const int s = m > 0.0f ? 14 - ilogbf(m) : 0;
    H *q = pc + (size_t)P * j * ps;
    for (int c = threadIdx.x; c < cols; c += 256) rt_split_p<H, P>(ldexpf(x[c], s), q + c, ps);
    if (threadIdx.x == 0) post[j] = ldexpf(ls, -s);
  }
  __syncthreads();
}

// blockDim 256, one task (the head: T.best, optionally T.logits) of nb <=
// NB tokens, F = 1 (FP8) or 0 (BF16), cols % 64 == 0; dynamic shared memory:
// P NB x (cols + 16) halves (each token's P pieces, rows padded by 32
// bytes against bank conflicts). The MMA's 8 columns per n-tile hold the
// pieces of ceil(P NB / 8) tiles: column c of the launch is piece c % P of
// token c / P; each weight fragment serves every n-tile (converted once).
// At NB == 1 the row sums come from the accumulators by one shuffle; above,
// each warp stages its tile's 16 x 8 NT sums in shared memory and lane
// (half, row) adds token (half + 2 i)'s P pieces.
template <int F, int NB, int P = 3>
__global__ void __launch_bounds__(256, 2) k_head_mma(const dlin *tab, const mv_task *tasks, const int *sel) {
  RT_TL_START();
  using H = typename std::conditional<F == 1, __half, __nv_bfloat16>::type;
  constexpr int U = F == 1 ? 4 : 2;  // bands of loads in flight: 8 x 16 bytes per lane, as k_mv's head
  constexpr int NL = F == 1 ? 1 : 2; // 16-byte loads per row and band
  constexpr int NT = (P * NB + 7) / 8; // n-tiles
  constexpr int PL = NB == 1 ? 1 : NB / 2; // (row, token) sums a lane forms per tile (NB > 1)
  extern __shared__ __align__(16) unsigned char rt_hsm[];
  __shared__ mv_task T;
  __shared__ unsigned long long bbest[8][NB];
  __shared__ float fsh[9], post[NB];
  __shared__ float stage[NB > 1 ? 8 : 1][16][NB > 1 ? 8 * NT + 1 : 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  rt_trigger();
  rt_task_load(tasks, T);
  if (tid < 8 * NB) bbest[tid / NB][tid % NB] = 0;
  __syncthreads();
  const dlin L = tab[T.t[0].lin];
  const int cols = (int)L.cols, nband = cols / 64, ps = cols + 16, nb = T.nb;
  const int64_t rows = L.rows, ntile = (rows + 15) / 16;
  H *pc = reinterpret_cast<H *>(rt_hsm);
  // the first tile's first batch of weights before the wait (they are constant)
  int64_t tile = (int64_t)blockIdx.x * 8 + warp;
  uint4 ra[U][NL], rb[U][NL];
  const size_t rowb = (size_t)cols * (F == 1 ? 1 : 2); // bytes a row
  rt_head_load<F, U, NL>(L.w, rowb, rows, tile, 0, nband, g, t, ra, rb);
  rt_wait();
  rt_head_pieces<H, P>(T, F == 1 ? L.s : 1.0f, cols, pc, post, fsh);
  // this lane's B column in each n-tile: the plane of piece c % P of token c / P, or -1 past the tokens
  int plane[NT];
#pragma unroll
  for (int n = 0; n < NT; n++) plane[n] = (8 * n + g) / P < nb ? 8 * n + g : -1;
  unsigned long long mybest[PL];
#pragma unroll
  for (int i = 0; i < PL; i++) mybest[i] = 0;
  for (; tile < ntile; tile += (int64_t)gridDim.x * 8) {
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int b0 = 0; b0 < nband; b0 += U) {
      if (b0) rt_head_load<F, U, NL>(L.w, rowb, rows, tile, b0, nband, g, t, ra, rb);
#pragma unroll
      for (int u = 0; u < U; u++)
        if (b0 + u < nband) rt_head_band<F, NT, NL>(ra[u], rb[u], pc, ps, plane, b0 + u, t, acc);
    }
    if constexpr (NB == 1) {
      float y0, y8;
      rt_head_rowsums(acc[0], t, y0, y8);
      y0 *= post[0], y8 *= post[0];
      if (t == 0) {
        const int64_t r = tile * 16 + g;
        if (r < rows) {
          const unsigned long long k = rt_argmax_key(y0, (uint32_t)r);
          mybest[0] = k > mybest[0] ? k : mybest[0];
          if (T.logits) T.logits[r] = y0;
        }
        if (r + 8 < rows) {
          const unsigned long long k = rt_argmax_key(y8, (uint32_t)(r + 8));
          mybest[0] = k > mybest[0] ? k : mybest[0];
          if (T.logits) T.logits[r + 8] = y8;
        }
      }
    } else {
      // lane (g, t) holds rows g and g + 8 at columns 8n + 2t, 8n + 2t + 1
#pragma unroll
      for (int n = 0; n < NT; n++) {
        stage[warp][g][8 * n + 2 * t] = acc[n][0], stage[warp][g][8 * n + 2 * t + 1] = acc[n][1];
        stage[warp][g + 8][8 * n + 2 * t] = acc[n][2], stage[warp][g + 8][8 * n + 2 * t + 1] = acc[n][3];
      }
      __syncwarp();
      const int row = lane & 15;
      const int64_t r = tile * 16 + row;
#pragma unroll
      for (int i = 0; i < PL; i++) {
        const int j = (lane >> 4) + 2 * i; // this lane's token
        if (j < nb && r < rows) {
          const float y = rt_piece_sum<P>(stage[warp][row] + P * j) * post[j];
          const unsigned long long k = rt_argmax_key(y, (uint32_t)r);
          mybest[i] = k > mybest[i] ? k : mybest[i];
          if (T.logits) T.logits[j * T.ys + r] = y;
        }
      }
      __syncwarp(); // stage read before the next tile writes it
    }
    if (tile + (int64_t)gridDim.x * 8 < ntile)
      rt_head_load<F, U, NL>(L.w, rowb, rows, tile + (int64_t)gridDim.x * 8, 0, nband, g, t, ra, rb);
  }
  // each token's largest key: over the lanes holding it (NB == 1: all 32;
  // above: the 16 of one half), the warps, then the launch
#pragma unroll
  for (int i = 0; i < PL; i++)
    for (int o = NB == 1 ? 16 : 8; o > 0; o >>= 1) {
      const unsigned long long k = __shfl_xor_sync(0xFFFFFFFFu, mybest[i], o);
      mybest[i] = k > mybest[i] ? k : mybest[i];
    }
  if (NB == 1 ? lane == 0 : (lane & 15) == 0)
#pragma unroll
    for (int i = 0; i < PL; i++) {
      bbest[warp][NB == 1 ? 0 : (lane >> 4) + 2 * i] = mybest[i]; // (token < NB always)
    }
  __syncthreads();
  rt_block_best(bbest, nb, T.best);
  RT_TL_END();
}

// The head at one token with its tiles dealt at run time (the default at
// one token; MTPQ_CUDA_HEAD_DYN=0: k_head_mma). Why: k_head_mma deals each
// warp a fixed set of whole 16-row tiles (~30 us of one warp's share of
// HBM each for the stock drafter's BF16 head). The SMs' shares differ, so
// even with equal work its blocks ended 137-147 us after their wait, while
// k_read's rate puts the stock head's 622 MB at 141 (tests/bench/RESULTS.md,
// eighteenth round). Here a block takes one tile of 16 MT rows at a time,
// each warp a fixed share of its bands (split over K: a tile is ~4 us of a
// block's share), and the block adds the warps' row sums in warp order
// through shared memory (the same sums whichever block takes a tile, so the
// same result on every run). A block's first two tiles are fixed (the
// first's loads go before the wait); the rest come from q[0], a counter
// that only this kernel touches: q[1] counts the blocks done, and the last
// one puts both back to 0 for the next launch. An SM that streams faster
// takes more tiles, so the blocks end within about a tile of each other.
// The block's warps meet once a tile: MT (m-tiles a tile) sets how many
// batches of loads a warp has between meetings, so that one slow batch
// does not hold seven warps each time (the host gives FP8 MT = 2: a warp
// then has two batches a tile, as at BF16 with MT = 1). Same layout,
// pieces and sums as k_head_mma (NB == 1). H200, 4K batch 1, dev us a
// step (RESULTS.md, nineteenth round): stock 220.0-223.1 -> 213.2-216.6
// (its head 147.6 -> 136.0-136.8 us after the wait, 4.55 TB/s); mtpq
// 120.0-121.0 -> 119.9-120.7 at MT = 2, but 125.3-126.3 at MT = 1 (one
// batch a warp between meetings, and 3 blocks an SM where MT = 2 has 2:
// which of the two cost it was not separated).
template <int F, int MT>
__global__ void __launch_bounds__(256, 2) k_head_dyn(const dlin *tab, const mv_task *tasks, unsigned *q) {
  RT_TL_START();
  using H = typename std::conditional<F == 1, __half, __nv_bfloat16>::type;
  constexpr int U = F == 1 ? 4 : 2, NL = F == 1 ? 1 : 2; // as k_head_mma
  extern __shared__ __align__(16) unsigned char rt_hsm[];
  __shared__ mv_task T;
  __shared__ unsigned long long bbest[8][1];
  __shared__ float fsh[9], post[1];
  __shared__ float red[2][8][16 * MT]; // each warp's row sums of the last two tiles
  __shared__ int nxs[2];               // the tile after the next, published with red
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  rt_trigger();
  rt_task_load(tasks, T);
  __syncthreads();
  const dlin L = tab[T.t[0].lin];
  const int cols = (int)L.cols, nband = cols / 64, ps = cols + 16;
  const int64_t rows = L.rows;
  const int ntile = (int)((rows + 16 * MT - 1) / (16 * MT)), G = (int)gridDim.x;
  const int blo = warp * nband / 8, bhi = (warp + 1) * nband / 8; // this warp's bands of every tile
  const size_t rowb = (size_t)cols * (F == 1 ? 1 : 2);
  H *pc = reinterpret_cast<H *>(rt_hsm);
  int cur = (int)blockIdx.x, nxt = cur + G; // this tile and the next
  uint4 ra[U][NL], rb[U][NL];
  // (rt_head_load takes 16-row tiles: tile c's m-tile m is c * MT + m; none past the rows)
  rt_head_load<F, U, NL>(L.w, rowb, rows, (int64_t)cur * MT, blo, bhi, g, t, ra, rb); // before the wait
  rt_wait();
  rt_head_pieces<H>(T, F == 1 ? L.s : 1.0f, cols, pc, post, fsh);
  const int plane[1] = {g < 3 ? g : -1}; // token 0's three pieces in columns 0..2
  unsigned long long mybest = 0;
  for (int k = 0; cur < ntile; k++) {
    unsigned tk = 0; // the ticket of the tile after the next (a block that has a next one takes one)
    if (tid == 0 && nxt < ntile) tk = atomicAdd(q, 1u);
#pragma unroll
    for (int m = 0; m < MT; m++) {
      float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      for (int b0 = blo; b0 < bhi; b0 += U) {
        if (m || b0 != blo) rt_head_load<F, U, NL>(L.w, rowb, rows, (int64_t)cur * MT + m, b0, bhi, g, t, ra, rb);
#pragma unroll
        for (int u = 0; u < U; u++)
          if (b0 + u < bhi) rt_head_band<F, 1, NL>(ra[u], rb[u], pc, ps, plane, b0 + u, t, acc);
      }
      float s0, s8; // the warp's sums of rows g and g + 8, for the block's sum
      rt_head_rowsums(acc[0], t, s0, s8);
      if (t == 0) red[k & 1][warp][16 * m + g] = s0, red[k & 1][warp][16 * m + g + 8] = s8;
    }
    // the next tile's first loads before the barrier, so that none of the block's warps waits in it idle
    rt_head_load<F, U, NL>(L.w, rowb, rows, (int64_t)(nxt < ntile ? nxt : ntile) * MT, blo, bhi, g, t, ra, rb);
    if (tid == 0) nxs[k & 1] = nxt < ntile && 2 * G + (int)tk < ntile ? 2 * G + (int)tk : ntile;
    __syncthreads();
    if (warp == (k & 7) && lane < 16 * MT) { // one warp a tile, in turn: the tile's rows
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; w++) s += red[k & 1][w][lane];
      const float y = s * post[0];
      const int64_t r = (int64_t)cur * 16 * MT + lane;
      if (r < rows) {
        const unsigned long long key = rt_argmax_key(y, (uint32_t)r);
        mybest = key > mybest ? key : mybest;
        if (T.logits) T.logits[r] = y;
      }
    }
    cur = nxt, nxt = nxs[k & 1];
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long k = __shfl_xor_sync(0xFFFFFFFFu, mybest, o);
    mybest = k > mybest ? k : mybest;
  }
  if (lane == 0) bbest[warp][0] = mybest;
  __syncthreads();
  rt_block_best(bbest, 1, T.best);
  if (tid == 0) { // after this block's last ticket: the last block done resets the counters
    __threadfence();
    if (atomicAdd(q + 1, 1u) == (unsigned)G - 1) atomicExch(q, 0u), atomicExch(q + 1, 0u);
  }
  RT_TL_END();
}
