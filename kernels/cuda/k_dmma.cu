// The plain dense products at 2..8 tokens on tensor cores (fc, q/k/v, o,
// the router with the shared expert's gate, the shared expert's down).
//
// Why: on k_mv's FFMA path each weight is converted and multiplied once per
// token and each band of x is read once per token through L1, far below
// the DRAM rate at 8 tokens. A block takes 128 rows (8 warps, a 16-row tile
// each) of one 512-column slice, so it turns only its slice of x into
// pieces (a block over all columns lost: ledger 7), and the slices of a row
// block are one thread-block cluster (ceil(cols / 512) blocks, at most 8)
// whose partial sums meet through distributed shared memory, pushed to the
// owning block and added in slice order after one cluster barrier (the same
// result on every run; no atomics, no second launch). Ledger 13 has the
// figures and what lost (two barriers, half the weights before the wait).
//
// Exactness as in k_head.cu: FP8 weights are exact in f16, BF16 ones are
// bf16; x is P pieces of x * 2^s in that type (s per token and slice,
// putting the slice's largest |x| in [2^14, 2^15)), each product exact in
// the f32 accumulator: three (all of x), or FP8 at 8 tokens two f16 ones
// (x to 2^-23 of itself, one n-tile fewer; rt_split_p). The slice's sums
// are scaled back (ls * 2^-s, ls the FP8 tensor scale) before the slices
// are added; the order of the sums is the tensor core's, hence the gpu
// tests' tolerance.
#include <cooperative_groups.h>

#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"

#define RT_DM_SLICE 512 // columns a block's slice
#define RT_DM_ROWS 128  // rows a block: 8 warps x 16
#define RT_DM_KS 8      // the most slices (a portable cluster size)

// blockDim 256, grid (ks = ceil(cols / 512), fg.off[fg.n]), cluster (ks, 1,
// 1): blockIdx.x the slice, blockIdx.y a row block of task t for fg.off[t]
// <= y < fg.off[t + 1] (k_mv's flat grid, rows along y).
// Tasks: one term each, no routing, plain y (mv_launch::plain), cols % 64 ==
// 0, every task of one cols. F: 1 FP8, 0 BF16.
template <int F, int NB, int P = 3>
__global__ void __launch_bounds__(256, 2) k_dmma(const dlin *tab, const mv_task *tasks, mv_flat fg) {
  RT_TL_START();
  using H = typename std::conditional<F == 1, __half, __nv_bfloat16>::type;
  constexpr int NT = (P * NB + 7) / 8;  // n-tiles: column c is piece c % P of token c / P
  constexpr int NL = F == 1 ? 1 : 2;    // 16-byte loads a row and band
  constexpr int UH = F == 1 ? 4 : 2;    // bands a half-batch of loads (a slice is 8): two in registers, 64 a lane
  constexpr int PS = RT_DM_SLICE + 16;  // a plane's stride, halves (32 bytes of padding against bank conflicts)
  __shared__ __align__(16) H pc[P * NB * PS];
  __shared__ float sums[8][16][8 * NT + 1]; // a warp's tile sums, (row, column)
  __shared__ float recv[RT_DM_ROWS + RT_DM_KS][NB]; // the rows this block owns, every slice's scaled sums
  __shared__ float wmax[8][NB], post[NB]; // each warp's largest |x| a token
  __shared__ mv_task T;
  __shared__ dlin L;
  rt_trigger();
  __cluster_barrier_arrive_relaxed(); // waited before the first remote store: the whole cluster has started
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  int lo, hi;
  const int task = rt_flat_task(fg, (int)blockIdx.y, lo, hi);
  const int64_t row0 = (int64_t)((int)blockIdx.y - lo) * RT_DM_ROWS;
  rt_task_load(tasks + task, T);
  __syncthreads();
  if (tid == 0) L = tab[T.t[0].lin];
  __syncthreads();
  const int cols = (int)L.cols, ks = (int)gridDim.x, slice = (int)blockIdx.x;
  const int c0 = slice * RT_DM_SLICE, width = cols - c0 < RT_DM_SLICE ? cols - c0 : RT_DM_SLICE;
  const int bhi = width / 64; // the slice's 64-column bands
  const size_t bpw = F == 1 ? 1 : 2, rowb = (size_t)cols * bpw;
  const uint8_t *w = L.w + (size_t)c0 * bpw;
  const int64_t tl = row0 / 16 + warp; // the warp's 16-row tile
  // the weights are constant: the first two half-batches (a whole FP8
  // slice) are requested before the wait; half h goes to registers a when h
  // is even, b when odd, each requested as soon as the half two before it is
  // multiplied
  uint4 ra0[UH][NL], rb0[UH][NL], ra1[UH][NL], rb1[UH][NL];
  const int nh = (bhi + UH - 1) / UH;
  rt_head_load<F, UH, NL>(w, rowb, L.rows, tl, 0, bhi, g, t, ra0, rb0);
  rt_head_load<F, UH, NL>(w, rowb, L.rows, tl, UH, bhi, g, t, ra1, rb1);
  rt_wait();
  // the slice of x as pieces: each token's largest |x| over the slice, then
  // P pieces of x * 2^s a column (zeros past the slice and the tokens)
  const int nb = T.nb;
  float xv[NB][2], m[NB];
#pragma unroll
  for (int j = 0; j < NB; j++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = tid + 256 * h;
      xv[j][h] = j < nb && c < width ? __ldcg(T.t[0].x + (int64_t)j * T.xs + c0 + c) : 0.0f;
    }
#pragma unroll
  for (int j = 0; j < NB; j++) {
    m[j] = fmaxf(fabsf(xv[j][0]), fabsf(xv[j][1]));
    for (int o = 16; o > 0; o >>= 1) m[j] = fmaxf(m[j], __shfl_xor_sync(0xFFFFFFFFu, m[j], o));
    if (lane == 0) wmax[warp][j] = m[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < NB; j++) {
    float mm = 0.0f;
    for (int v = 0; v < 8; v++) mm = fmaxf(mm, wmax[v][j]);
    const int s = mm > 0.0f ? 14 - ilogbf(mm) : 0;
    H *q = pc + P * j * PS;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c = tid + 256 * h;
      rt_split_p<H, P>(ldexpf(xv[j][h], s), q + c, PS);
    }
    if (tid == 0) post[j] = ldexpf(F == 1 ? L.s : 1.0f, -s);
  }
  __syncthreads();
  RT_TL_MID(1, post[0]); // the slice's pieces are in shared memory
  // the tile's products: each band's four A fragments times every n-tile
  int plane[NT];
#pragma unroll
  for (int n = 0; n < NT; n++) plane[n] = 8 * n + g < P * nb ? 8 * n + g : -1;
  float acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // half hh's bands from its registers (ra, rb), then the half two ahead requested into them
  auto half = [&](int hh, uint4 (&ra)[UH][NL], uint4 (&rb)[UH][NL]) {
#pragma unroll
    for (int u = 0; u < UH; u++)
      if (hh * UH + u < bhi) rt_head_band<F, NT, NL, H>(ra[u], rb[u], pc, PS, plane, hh * UH + u, t, acc);
    if (hh + 2 < nh) rt_head_load<F, UH, NL>(w, rowb, L.rows, tl, (hh + 2) * UH, bhi, g, t, ra, rb);
  };
  for (int h = 0; h < nh; h += 2) { // each half's bands in order: registers a, then b
    half(h, ra0, rb0);
    if (h + 1 < nh) half(h + 1, ra1, rb1);
  }
  RT_TL_MID(2, acc[0][0] + acc[NT - 1][3]); // the warp's products done (its weights landed)
  // accumulator (row g or g + 8, column 2t or 2t + 1) of each n-tile to
  // sums, then each (row, token): its P pieces, scaled back
#pragma unroll
  for (int n = 0; n < NT; n++) {
    sums[warp][g][8 * n + 2 * t] = acc[n][0], sums[warp][g][8 * n + 2 * t + 1] = acc[n][1];
    sums[warp][g + 8][8 * n + 2 * t] = acc[n][2], sums[warp][g + 8][8 * n + 2 * t + 1] = acc[n][3];
  }
  __syncwarp();
  // the cluster's slices: block q owns rows q, q + ks, ... and receives
  // slice p's scaled sum of row r in recv[p * rrn + r / ks] (a remote store,
  // nothing waits for an answer); one barrier, then each owner adds its rows' slices in
  // order (the same sum on every run). A block leaves once its own rows are
  // written: nobody reads its shared memory after the barrier.
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  const int rrn = (RT_DM_ROWS + ks - 1) / ks;
  __cluster_barrier_wait();
  for (int i = lane; i < 16 * NB; i += 32) {
    const int r = warp * 16 + i / NB, j = i % NB;
    if (j >= nb) continue;
    cl.map_shared_rank(&recv[0][0], r % ks)[(slice * rrn + r / ks) * NB + j] =
        rt_piece_sum<P>(sums[warp][i / NB] + P * j) * post[j];
  }
  __cluster_barrier_arrive(); // release: this block's stores; the wait acquires every slice's
  __cluster_barrier_wait();
  for (int i = tid; i < rrn * NB; i += 256) {
    const int rr = i / NB, j = i % NB, r = rr * ks + slice;
    if (r >= RT_DM_ROWS || j >= nb || row0 + r >= L.rows) continue;
    float y = 0.0f;
    for (int p = 0; p < ks; p++) y += recv[p * rrn + rr][j];
    T.y[j * T.ys + row0 + r] = y;
  }
  RT_TL_END();
}

// ---- launches ----

// k_dmma for a plain dense FP8/BF16 launch at 2..8 tokens: a cluster of
// ceil(cols / 512) blocks per 128 rows of each task (ledger 13; tune
// dmma=0: k_mv). Why not the routed experts' NVFP4 products the same way:
// their weights can be requested only after the routing, and the pieces
// add two L2 trips and barriers before the first product (ledger 16).
template <int F, int NB, int P = 3> static void dmma_run(gpu_session *g, const mv_launch &m, int ks) {
  const mv_flat fg = flat_grid(m, RT_DM_ROWS);
  go_cl(g, true, (unsigned)ks, k_dmma<F, NB, P>, dim3((unsigned)ks, (unsigned)fg.off[m.ntask]), dim3(256), 0,
        (const dlin *)g->w.lins, (const mv_task *)m.dev, fg);
}

int64_t dmma_blocks(const mv_launch &m) {
  const mv_flat fg = flat_grid(m, RT_DM_ROWS);
  return (int64_t)fg.off[m.ntask] * ((m.cols + RT_DM_SLICE - 1) / RT_DM_SLICE);
}

bool dmma_launch(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax);
  const int64_t ks = (m.cols + RT_DM_SLICE - 1) / RT_DM_SLICE;
  if (!g->set.tune.dmma || !g->set.fast || NB < 2 || !m.plain || (m.fmt != 0 && m.fmt != 1) || m.ntask > RT_FLAT || m.cols % 64 ||
      ks > RT_DM_KS)
    return false;
  const int k = (int)ks, f = m.fmt;
  switch (NB) {
  case 2: f ? dmma_run<1, 2>(g, m, k) : dmma_run<0, 2>(g, m, k); break;
  case 4: f ? dmma_run<1, 4>(g, m, k) : dmma_run<0, 4>(g, m, k); break;
  default:
    if (!f)
      dmma_run<0, 8>(g, m, k);
    else
      mma_pieces(f, 8) == 2 ? dmma_run<1, 8, 2>(g, m, k) : dmma_run<1, 8>(g, m, k);
    break;
  }
  return true;
}
