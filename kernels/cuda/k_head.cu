// The FP8 and BF16 heads at 1..8 tokens on tensor cores, fused with the
// argmax. Why: the FFMA head (k_mv) spends ~2.5 instructions per weight
// (E4M3 pair -> half pair, half -> float, FFMA) and is issue-bound below
// the DRAM rate; here a warp's 16 rows x 16 columns take 4 conversions and
// one mma.sync, ~0.08 instructions per weight (ledger 14).
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
#include <type_traits>

#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"

// blockDim 256, one task (the head: T.best, optionally T.logits) of nb <=
// NB tokens, F = 1 (FP8) or 0 (BF16), cols % 64 == 0; dynamic shared memory:
// P NB x (cols + 16) halves (each token's P pieces, rows padded by 32
// bytes against bank conflicts). The MMA's 8 columns per n-tile hold the
// pieces of ceil(P NB / 8) tiles: column c of the launch is piece c % P of
// token c / P; each weight fragment serves every n-tile (converted once).
// Each warp stages its tile's 16 x 8 NT sums in shared memory and lane
// (half, row) adds token (half + 2 i)'s P pieces. 2..8 tokens: one token is
// k_head_dyn's.
template <int F, int NB, int P = 3>
__global__ void __launch_bounds__(256, 2) k_head_mma(const dlin *tab, const mv_task *tasks, const int *sel) {
  RT_TL_START();
  static_assert(NB >= 2, "k_head_mma: 2..8 tokens (one token: k_head_dyn)");
  using H = typename std::conditional<F == 1, __half, __nv_bfloat16>::type;
  constexpr int U = F == 1 ? 4 : 2;  // bands of loads in flight: 8 x 16 bytes per lane, as k_mv's head
  constexpr int NL = F == 1 ? 1 : 2; // 16-byte loads per row and band
  constexpr int NT = (P * NB + 7) / 8; // n-tiles
  constexpr int PL = NB / 2;           // (row, token) sums a lane forms per tile
  extern __shared__ __align__(16) unsigned char rt_hsm[];
  __shared__ mv_task T;
  __shared__ unsigned long long bbest[8][NB];
  __shared__ float fsh[9], post[NB];
  __shared__ float stage[8][16][8 * NT + 1];
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
    if (tile + (int64_t)gridDim.x * 8 < ntile)
      rt_head_load<F, U, NL>(L.w, rowb, rows, tile + (int64_t)gridDim.x * 8, 0, nband, g, t, ra, rb);
  }
  // each token's largest key: over the 16 lanes of one half holding it, the
  // warps, then the launch
#pragma unroll
  for (int i = 0; i < PL; i++)
    for (int o = 8; o > 0; o >>= 1) {
      const unsigned long long k = __shfl_xor_sync(0xFFFFFFFFu, mybest[i], o);
      mybest[i] = k > mybest[i] ? k : mybest[i];
    }
  if ((lane & 15) == 0)
#pragma unroll
    for (int i = 0; i < PL; i++) bbest[warp][(lane >> 4) + 2 * i] = mybest[i]; // (token < NB always)
  __syncthreads();
  rt_block_best(bbest, nb, T.best);
  RT_TL_END();
}

// The head at one token, its tiles dealt at run time. Why: k_head_mma deals
// each warp a fixed set of whole 16-row tiles, and the SMs' shares of HBM
// differ, so even with equal work its blocks ended far apart (ledger 15).
// Here a block takes one tile of 16 MT rows at a time, each warp a fixed
// share of its bands (split over K), and the block adds the warps' row sums in warp order
// through shared memory (the same sums whichever block takes a tile, so the
// same result on every run). A block's first two tiles are fixed (the
// first's loads go before the wait); the rest come from q[0], a counter
// that only this kernel touches: q[1] counts the blocks done, and the last
// one puts both back to 0 for the next launch. An SM that streams faster
// takes more tiles, so the blocks end within about a tile of each other.
// The block's warps meet once a tile: MT (m-tiles a tile) sets how many
// batches of loads a warp has between meetings, so that one slow batch
// does not hold seven warps each time (the host gives FP8 MT = 2: a warp
// then has two batches a tile, as at BF16 with MT = 1; ledger 15). Same
// layout and pieces as k_head_mma, the row sums from the accumulators by
// one shuffle (rt_head_rowsums).
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

// ---- launches ----

// The FP8 or BF16 head on tensor cores where it applies (k_head_mma: one
// task, cols % 64 == 0, its x pieces within RT_HEAD_SMEM bytes of shared
// memory): k_head_dyn at one token, k_head_mma at 2..8, where the FFMA
// head's instructions grow with the tokens (a conversion per weight, an FMA
// per weight and token, x per band and token from L1) and the MMA's do not
// until 3 tokens fill its 8 columns (ledger 14; tune head_mma=0: the FFMA
// head). Why not stream the weights through the bulk copy engine: no
// faster (ledger 14).
#define RT_HEAD_SMEM (110 * 1024)

// k_head_mma's dynamic shared memory: NB tokens' P pieces of cols (+ 16 padding) halves
static size_t head_mma_smem(int NB, int P, int64_t cols) { return (size_t)P * NB * (size_t)(cols + 16) * 2; }

// A head kernel's blocks a launch: as many as its tiles take, at most one
// wave at the occupancy of its shared memory smem. The attribute goes before
// the kernel's first launch of any size (a first launch under 48 KB and a
// later one above it failed at its launch when it was set only for the
// first); the occupancy is kept per size (without graphs every step
// launches). One hs per kernel instance.
struct head_state {
  bool attr = false;
  size_t smem = 0;
  int per = 0;
};
template <typename... A>
static unsigned head_blocks(gpu_session *g, head_state &hs, void (*k)(A...), size_t smem, int64_t blocks) {
  if (!hs.attr)
    hs.attr = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)RT_HEAD_SMEM) == cudaSuccess;
  if (!hs.per || hs.smem != smem) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&hs.per, k, 256, smem) != cudaSuccess || hs.per < 1) hs.per = 1;
    hs.smem = smem;
  }
  const int64_t cap = (int64_t)g->sms * hs.per;
  return (unsigned)(blocks < cap ? blocks : cap);
}

// k_head_dyn: a block a tile of 16 MT rows at a time (there: why, and what it gained)
template <int F, int MT> static void head_dyn_run(gpu_session *g, const mv_launch &m, size_t smem) {
  static head_state hs;
  const int64_t tiles = (m.rows + 16 * MT - 1) / (16 * MT);
  go(g, true, k_head_dyn<F, MT>, dim3(head_blocks(g, hs, k_head_dyn<F, MT>, smem, tiles)), dim3(256), smem,
     (const dlin *)g->w.lins, (const mv_task *)m.dev, g->x.hq);
}

template <int F, int NB, int P = 3> static void head_mma_run(gpu_session *g, const mv_launch &m, size_t smem) {
  if constexpr (NB == 1) { // k_head_dyn (FP8: two m-tiles, so that a warp has two batches a tile, as at BF16)
    F == 1 ? head_dyn_run<F, 2>(g, m, smem) : head_dyn_run<F, 1>(g, m, smem);
  } else {
    static head_state hs;
    const int64_t tiles = (m.rows + 15) / 16;
    const unsigned nblk = head_blocks(g, hs, k_head_mma<F, NB, P>, smem, (tiles + 7) / 8);
    go(g, true, k_head_mma<F, NB, P>, dim3(nblk), dim3(256), smem, (const dlin *)g->w.lins, (const mv_task *)m.dev,
       (const int *)g->x.sel);
  }
}

template <int NB> static void head_mma_nb(gpu_session *g, const mv_launch &m) {
  const int P = mma_pieces(m.fmt, NB);
  const size_t smem = head_mma_smem(NB, P, m.cols);
  if (m.fmt != 1)
    head_mma_run<0, NB>(g, m, smem);
  else if constexpr (NB == 8)
    P == 2 ? head_mma_run<1, NB, 2>(g, m, smem) : head_mma_run<1, NB>(g, m, smem);
  else
    head_mma_run<1, NB>(g, m, smem);
}

bool head_mma_launch(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax);
  if (!g->set.tune.head_mma || !g->set.fast || !m.best || (m.fmt != 0 && m.fmt != 1) || m.ntask != 1 || m.cols % 64 ||
      head_mma_smem(NB, mma_pieces(m.fmt, NB), m.cols) > RT_HEAD_SMEM)
    return false;
  switch (NB) {
  case 1: head_mma_nb<1>(g, m); break;
  case 2: head_mma_nb<2>(g, m); break;
  case 4: head_mma_nb<4>(g, m); break;
  default: head_mma_nb<8>(g, m); break;
  }
  return true;
}

