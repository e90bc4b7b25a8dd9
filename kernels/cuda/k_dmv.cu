// Plain dense products of few rows at 2..8 tokens, a warp a row
// (kernels/cuda/k_dmv.cu): k_dmv, a candidate where MTPQ_CUDA_TUNE has
// dmv=1, for the launches k_dmma would run on a fraction of the SMs (the
// router with the shared expert's gate: 513 rows of 2,048 columns, 5
// clusters of 4 blocks). It replaces k_dmma there once measured on a GPU
// (ledger 71: written, not yet run).
//
// Why: k_dmma's block takes 128 rows of a 512-column slice, so the router's
// 2 MB go through 20 blocks, most SMs idle, each block's loads a long chain
// (ledger 71 has the timeline's figures). Here a block takes 8
// rows (a warp each, 65 blocks for the router), each lane requests its 16-byte
// pieces of the row before the wait, the tokens' x go to shared memory after
// it, and the lane sums its columns for every token with FFMAs (float32, as
// k_mv; the sum's order is the lane's columns, then the warp's butterfly).
#include "kernels/cuda/backend.cuh"

#define DMV_ROWS 8   // rows a block: a warp each
#define DMV_PIECES 8 // 16-byte pieces a lane at most (BF16: 2,048 columns, FP8: 4,096)

// blockDim 256, grid fg.off[fg.n] (a block 8 rows of task t for fg.off[t] <= x < fg.off[t + 1]), dynamic shared
// memory NB x cols floats. Tasks: one unrouted term each, plain y, every task of one cols, cols a multiple of
// 32 x EL and at most DMV_PIECES x 32 x EL. F: 1 FP8 (the tensor scale after the sum), 0 BF16.
template <int F, int NB> __global__ void __launch_bounds__(256) k_dmv(const dlin *tab, const mv_task *tasks, mv_flat fg) {
  RT_TL_START();
  constexpr int EL = F == 1 ? 16 : 8; // columns a 16-byte piece
  extern __shared__ __align__(16) float xsh[];
  __shared__ mv_task T;
  __shared__ dlin L;
  rt_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int lo, hi;
  const int task = rt_flat_task(fg, (int)blockIdx.x, lo, hi);
  rt_task_load(tasks + task, T);
  __syncthreads();
  if (tid == 0) L = tab[T.t[0].lin];
  __syncthreads();
  const int cols = (int)L.cols, np = cols / (32 * EL);
  const int64_t row = (int64_t)((int)blockIdx.x - lo) * DMV_ROWS + warp;
  const bool on = row < L.rows;
  // the lane's pieces lane + 32 i of its row, streamed once (evict-first), before the wait: weights are constant
  uint4 wv[DMV_PIECES];
  const uint4 *wr = reinterpret_cast<const uint4 *>(L.w + (size_t)row * (size_t)cols * (F == 1 ? 1 : 2));
#pragma unroll
  for (int i = 0; i < DMV_PIECES; i++) wv[i] = on && i < np ? __ldcs(wr + lane + 32 * i) : make_uint4(0, 0, 0, 0);
  rt_wait();
  const int nb = T.nb;
  for (int j = 0; j < nb; j++)
    for (int c = tid; c < cols; c += 256) xsh[j * cols + c] = __ldcg(T.t[0].x + (int64_t)j * T.xs + c);
  __syncthreads();
  if (!on) {
    RT_TL_END();
    return;
  }
  float acc[NB];
#pragma unroll
  for (int j = 0; j < NB; j++) acc[j] = 0.0f;
#pragma unroll
  for (int i = 0; i < DMV_PIECES; i++) {
    if (i >= np) break;
    float w[EL];
    if constexpr (F == 1) {
      rt_decode16<1>(&wv[i], 0, w);
    } else {
      const uint32_t u[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = rt_bf16x2(u[k]);
        w[2 * k] = f.x, w[2 * k + 1] = f.y;
      }
    }
    const int c0 = (lane + 32 * i) * EL;
#pragma unroll
    for (int j = 0; j < NB; j++) {
      if (j >= nb) break;
      const float4 *xp = reinterpret_cast<const float4 *>(xsh + j * cols + c0);
#pragma unroll
      for (int e = 0; e < EL / 4; e++) {
        const float4 x = xp[e];
        acc[j] = fmaf(w[4 * e], x.x, acc[j]), acc[j] = fmaf(w[4 * e + 1], x.y, acc[j]);
        acc[j] = fmaf(w[4 * e + 2], x.z, acc[j]), acc[j] = fmaf(w[4 * e + 3], x.w, acc[j]);
      }
    }
  }
  const float s = F == 1 ? L.s : 1.0f;
#pragma unroll
  for (int j = 0; j < NB; j++) {
    const float v = rt_warp_sum(acc[j]);
    if (lane == 0 && j < nb) T.y[j * T.ys + row] = v * s;
  }
  RT_TL_END();
}

template <int F, int NB> static void dmv_run(gpu_session *g, const mv_launch &m) {
  const mv_flat fg = flat_grid(m, DMV_ROWS);
  const size_t sm = (size_t)NB * (size_t)m.cols * 4;
  static size_t attr = 0; // the dynamic shared memory this instance is allowed (raised before a launch needs
                          // more; where that fails, the launch fails and the step reports it)
  if (attr < sm && cudaFuncSetAttribute(k_dmv<F, NB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) == cudaSuccess)
    attr = sm;
  go(g, true, k_dmv<F, NB>, dim3((unsigned)fg.off[m.ntask]), dim3(256), sm, (const dlin *)g->w.lins,
     (const mv_task *)m.dev, fg);
}

// k_dmv for a plain dense FP8/BF16 launch at 2..8 tokens where dmv=1 and k_dmma's clusters would cover under
// half the SMs; false where it does not apply
bool dmv_launch(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax), el = m.fmt == 1 ? 16 : 8;
  if (!g->set.tune.dmv || !g->set.fast || NB < 2 || !m.plain || (m.fmt != 0 && m.fmt != 1) || m.ntask > RT_FLAT ||
      m.cols % (32 * el) || m.cols > DMV_PIECES * 32 * el)
    return false;
  if (2 * dmma_blocks(m) >= g->sms) return false;
  const bool f = m.fmt == 1;
  switch (NB) {
  case 2: f ? dmv_run<1, 2>(g, m) : dmv_run<0, 2>(g, m); break;
  case 4: f ? dmv_run<1, 4>(g, m) : dmv_run<0, 4>(g, m); break;
  default: f ? dmv_run<1, 8>(g, m) : dmv_run<0, 8>(g, m); break;
  }
  return true;
}
