// Matrix-vector kernels of the CUDA drafter runtime (kernels/cuda/k_mv.cu). A launch runs a list of tasks (blockIdx.y);
// a task computes y[j][r] = sum over its terms of w_term * dot(W_term[r], x_term[j])
// for nb tokens j sharing the weights, so
//   - q/k/v, router + shared_expert_gate, gate/up of every routed expert of
//     every token and the shared expert are one launch each;
//   - the MoE down projection sums the routed experts and the shared expert
//     with their routing weights inside the kernel (no atomics: the result
//     is the same on every run);
//   - the head keeps, per token, the largest logit as a 64-bit key and
//     publishes it with one atomicMax per block (the argmax fused with the
//     matrix-vector product).
// Weights stream once from HBM with 16-byte loads marked evict-first
// (__ldcs): a lane owns 16 consecutive columns of a row in each 512-column
// band (16 B of FP8, 32 B of BF16, 8 B of NVFP4 + its E4M3 block scale), a
// warp owns R whole rows and keeps U loads in flight per lane, so partial
// sums combine with shuffles only (no shared memory, no block barrier),
// except where S warps share R rows (k_mv's S, one token: see there). FP8 decodes through the
// hardware E4M3 -> half conversion (exact), NVFP4 by placing each nibble's
// bits in an E4M3 code, the same conversion, and one HMUL2 by the block
// scale per pair (exact: see rt_decode16; a shared-memory table before,
// about twice the instructions per weight). Accumulation is float32;
// the order of the sums differs from the CPU reference, hence the tolerance
// the tests state.
#include "kernels/cuda/backend.cuh"

// The terms of a row set (all of one format F and one shape): the lane's
// chunks are (term, band, row) triples, term then band major, issued UU at
// a time so that UU loads are in flight per lane before any is used (BF16
// chunks are two loads: half as many); a task of several terms (the MoE down
// projection: one per routed expert) keeps them in flight across terms.
// UU % R == 0 keeps the row index a compile-time constant, and x (read
// through L1, or shared memory) is loaded once per band and reused for the R
// rows: with one x load per weight chunk the L1 traffic for x was 4 to 8
// times the weight traffic and capped the FP8 head at about 1.5 TB/s.
//
// S > 1 (split over K): the warp takes groups part, part + S, ... of the
// row set's (term, band) groups; k_mv adds the S warps' sums.
template <int F, int NB, int R, int U, int S = 1>
__device__ __forceinline__ void rt_terms(const dlin *Ls, const float *Wt, const float *Wt2, const mv_term *tm,
                                         int nterm, int64_t r0,
                                         int64_t rows, int64_t xs, int nb, int lane,
                                         float (&acc)[R][NB], int part = 0) {
  constexpr int UU = F == 0 ? (U / 2 >= R ? U / 2 : R) : U;
  static_assert(UU % R == 0, "a batch holds whole bands");
  constexpr int B2 = F == 0 ? 4 : F == 1 ? 2 : 1; // bytes per weight, times 2
  const int cols = (int)Ls[0].cols;
  const int lb = (cols + 511) / 512, ng = nterm * lb; // (term, band) groups of R chunks
  // byte offsets of the lane's first chunk in each row (weights, NVFP4
  // block scales; a matrix is under 4 GiB: the session checks), computed
  // once per row set; bit i of rok: row r0 + i exists
  uint32_t wo[R], so[R], rok = 0;
#pragma unroll
  for (int i = 0; i < R; i++) {
    const bool ok = r0 + i < rows;
    const uint32_t r = (uint32_t)(ok ? r0 + i : r0);
    rok |= (uint32_t)ok << i;
    // (a row's bytes first: r * cols * B2 would overflow 32 bits for BF16 matrices of 2 GiB or more)
    wo[i] = r * (uint32_t)(cols * B2 / 2) + lane * 8 * B2, so[i] = r * (uint32_t)(cols / 16) + lane;
  }
  // the warp's groups: all (S == 1), or every S-th from part
  const int ngw = S == 1 ? ng : ng > part ? (ng - part + S - 1) / S : 0;
  int k0 = S == 1 ? 0 : part / lb, b0 = S == 1 ? 0 : part % lb; // the batch's first (term, band)
  for (int g0 = 0; g0 < ngw; g0 += UU / R) {
    uint4 raw[UU][F == 0 ? 2 : 1];
    uint8_t sb[UU];
    int kv[UU / R], bv[UU / R]; // each group's term and band
    {
      int k = k0, b = b0;
#pragma unroll
      for (int v = 0; v < UU / R; v++) {
        kv[v] = k < nterm ? k : nterm - 1, bv[v] = b;
        const bool ok = g0 + v < ngw && b * 512 + lane * 16 < cols;
        const uint8_t *w = Ls[kv[v]].w + (uint64_t)b * 256 * B2, *sc = F == 2 ? Ls[kv[v]].sc + b * 32 : nullptr;
#pragma unroll
        for (int i = 0; i < R; i++)
          if (ok && (rok >> i & 1)) rt_load16<F>(w + wo[i], sc + so[i], raw[v * R + i], &sb[v * R + i]);
        if constexpr (S == 1) {
          if (++b == lb) b = 0, ++k;
        } else {
          for (b += S; b >= lb; b -= lb) ++k;
        }
      }
      k0 = k, b0 = b;
    }
    // the weights are constant: a dense task's first batch is requested
    // before waiting for the kernel before (x comes from it); a no-op wait
    // once waited (and routed tasks waited in k_mv already, but for
    // RT_MV_SEL_EARLY ones)
    if (g0 == 0) rt_wait();
#pragma unroll
    for (int v = 0; v < UU / R; v++) {
      const int k = kv[v], c0 = bv[v] * 512 + lane * 16;
      if (!(g0 + v < ngw && c0 < cols)) continue;
      float xv[NB][16];
#pragma unroll
      for (int j = 0; j < NB; j++)
        if (j < nb) rt_ld_x16(tm[k].x + j * xs + c0, xv[j]);
      // the term weight of even and odd rows (the same but in a gate/up pair
      // matrix, whose row sets start even: R is even there); NVFP4: rt_decode16's 2^-6 undone
      const float wt0 = F == 2 ? Wt[k] * 64.0f : Wt[k], wt1 = F == 2 ? Wt2[k] * 64.0f : Wt2[k];
#pragma unroll
      for (int i = 0; i < R; i++) {
        if (!(rok >> i & 1)) continue;
        float w[16];
        rt_decode16<F>(raw[v * R + i], sb[v * R + i], w);
#pragma unroll
        for (int j = 0; j < NB; j++)
          if (j < nb) acc[i][j] = fmaf(i & 1 ? wt1 : wt0, rt_dot16(w, xv[j]), acc[i][j]);
      }
    }
  }
}

// blockDim 256 (8 warps, each its own R rows); grid (row blocks, tasks) or flat (fg).
// Every lin's cols % 16 == 0; the terms of a task share one shape. FMT: the format of every term (0 BF16, 1 FP8,
// 2 NVFP4), or 3 for a mix chosen per term (the MoE down projection: NVFP4
// experts + an FP8 shared expert); one format per kernel keeps the register
// count (and so the blocks per SM) of that format alone.
//
// S > 1 (plain y: no argmax, no gate/up pairs, one format; S | R: R = S at
// one token, R = S or 2S for dense products at 2..8 tokens):
// S warps share each set of R rows, each summing every S-th (term, band)
// group, and the first adds the others' sums (from shared memory, in part
// order). A block covers the rows it would without sharing, with each
// warp's weight loads as many, but a band of x loaded by a warp serves R
// rows instead of one: at one row per warp fc and o (K = 4,096) read 4 bytes
// of x per byte of FP8 weights and the routed experts' down (10 terms of
// 512 columns) 7 per byte of NVFP4, from L2 (ledger 8).
//
// fl (RT_MV_*): LATE_TRIGGER lets the next launch start only after this one's
// wait, so once it starts every launch before this one is complete;
// SEL_EARLY (a launch after such a one, two or more after the routing) reads
// sel and the routing weights before its wait, from L2 (not L1, which may
// hold an earlier step's), so its routed weights are requested before the
// wait as a dense task's are (ledger 9).
template <int NB, int R, int U, int FMT, int S = 1>
__global__ void __launch_bounds__(256, FMT == 3 || NB > 2 ? 1 : 2)
    k_mv(const dlin *tab, const mv_task *tasks, const int *sel, int fl, mv_flat fg) {
  RT_TL_START();
  static_assert(S == 1 || (FMT != 3 && 8 % S == 0 && R % S == 0), "split rows: one format, S | R");
  constexpr int WB = 8 / S; // row sets a block
  __shared__ float red[S > 1 ? 8 : 1][R][NB];
  __shared__ mv_task T;
  __shared__ dlin Ls[RT_TMAX];
  __shared__ float Wt[RT_TMAX], Wt2[RT_TMAX];
  __shared__ unsigned long long bbest[8][NB];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool early = fl & RT_MV_SEL_EARLY;
  if (!(fl & RT_MV_LATE_TRIGGER)) rt_trigger();
  // this block's task, its index among the task's row blocks and their count
  // (unrolled selects: a parameter indexed at run time would go to local
  // memory); dense FP8/BF16 only: the NVFP4 instances' tasks are of one
  // shape, and the selects cost them registers (spills in three)
  int task = (int)blockIdx.y, bx = (int)blockIdx.x, nbx = (int)gridDim.x;
  if (RT_MV_FLAT(FMT) && fg.n) {
    int lo, hi;
    task = rt_flat_task(fg, bx, lo, hi);
    bx -= lo, nbx = hi - lo;
  }
  rt_task_load(tasks + task, T);
  __syncthreads();
  // a routed term's weights depend on sel and its weight on the routing, so
  // such tasks wait here (unless early); a dense task's table entry and
  // scale are the plan's, and rt_terms requests its first weights before it
  // waits
  bool dep = false;
  for (int k = 0; k < T.nterm; k++) dep = dep || T.t[k].sel_k >= 0 || T.t[k].w != nullptr;
  if (dep && !early) rt_wait();
  if (fl & RT_MV_LATE_TRIGGER) {
    rt_wait(); // (a no-op if waited above)
    rt_trigger();
  }
  if (tid < T.nterm) {
    const mv_term &m = T.t[tid];
    int li = m.lin;
    if (m.sel_k >= 0) {
      const int *sp = sel + T.tok * RT_KST + m.sel_k;
      li += early ? __ldcg(sp) : *sp;
    }
    Ls[tid] = tab[li];
    const float w = m.w ? (early ? __ldcg(m.w) : *m.w) : 1.0f; // the routing weight (1 for a dense term)
    Wt[tid] = w * (Ls[tid].f == 0 ? 1.0f : Ls[tid].s);
    Wt2[tid] = w * (Ls[tid].f == 0 ? 1.0f : Ls[tid].s2);
  }
  if (tid < 8 * NB) bbest[tid / NB][tid % NB] = 0;
  __syncthreads();
  const int64_t rows = Ls[0].rows;
  const int nb = T.nb, nterm = T.nterm;
  unsigned long long mybest[NB];
#pragma unroll
  for (int j = 0; j < NB; j++) mybest[j] = 0;
  const int part = warp % S;
  for (int64_t r0 = ((int64_t)bx * WB + warp / S) * R; r0 < rows; r0 += (int64_t)nbx * WB * R) {
    float acc[R][NB];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int j = 0; j < NB; j++) acc[i][j] = 0.0f;
    if constexpr (FMT != 3) {
      rt_terms<FMT, NB, R, U, S>(Ls, Wt, Wt2, T.t, nterm, r0, rows, T.xs, nb, lane, acc, part);
    } else {
      for (int k = 0; k < nterm; k++) {
        if (Ls[k].f == 1) rt_terms<1, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
        else if (Ls[k].f == 0) rt_terms<0, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
        else rt_terms<2, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
      }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int j = 0; j < NB; j++) acc[i][j] = rt_warp_sum(acc[i][j]);
    if constexpr (S > 1) { // the row set's S warps meet at barrier 1 + warp / S (all run the same row sets)
      if (lane == 0 && part)
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
          for (int j = 0; j < NB; j++) red[warp][i][j] = acc[i][j];
      asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / S), "r"(32 * S) : "memory");
      if (lane == 0 && !part)
#pragma unroll
        for (int p = 1; p < S; p++)
#pragma unroll
          for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < NB; j++) acc[i][j] += red[warp + p][i][j];
      asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / S), "r"(32 * S) : "memory"); // red read before rewritten
      if (part) continue;
    }
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < R; i++) {
        const int64_t r = r0 + i;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < NB; j++) {
          if (j >= nb) continue;
          if (T.best) {
            unsigned long long key = rt_argmax_key(acc[i][j], (uint32_t)r);
            mybest[j] = key > mybest[j] ? key : mybest[j];
            if (T.logits) T.logits[j * T.ys + r] = acc[i][j];
          } else if (T.glu) { // (k_swiglu's arithmetic, so the same act)
            if (!(i & 1) && i + 1 < R) T.y[j * T.ys + r / 2] = rt_silu_mul(acc[i][j], acc[i + 1][j]);
          } else {
            T.y[j * T.ys + r] = acc[i][j];
          }
        }
      }
    }
  }
  rt_wait(); // (warps without rows have not waited) nothing below runs before the kernel before is done
  if (T.best) {
    if (lane == 0)
#pragma unroll
      for (int j = 0; j < NB; j++) bbest[warp][j] = mybest[j];
    __syncthreads();
    rt_block_best(bbest, nb, T.best);
  }
  RT_TL_END();
}

// Any shape (cols % 16 != 0 somewhere): warp per row, one element per lane
// per step; the same tasks and results, slower.
__device__ __forceinline__ float rt_elem(const dlin &L, int64_t r, int64_t c) {
  if (L.f == 0) return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t *>(L.w)[r * L.cols + c] << 16);
  if (L.f == 1) return rt_e4m3(L.w[r * L.cols + c]);
  uint8_t byte = L.w[(r * L.cols + c) / 2];
  return rt_e2m1((c & 1) ? byte >> 4 : byte & 15) * rt_e4m3(L.sc[(r * L.cols + c) / 16]);
}

__global__ void __launch_bounds__(256) k_mv_any(const dlin *tab, const mv_task *tasks, const int *sel) {
  RT_TL_START();
  __shared__ mv_task T;
  rt_trigger();
  rt_task_load(tasks + blockIdx.y, T);
  rt_wait();
  __syncthreads();
  const int lane = threadIdx.x & 31;
  int li0 = T.t[0].lin + (T.t[0].sel_k >= 0 ? sel[T.tok * RT_KST + T.t[0].sel_k] : 0);
  const int64_t rows = tab[li0].rows;
  const int pair = T.glu ? 2 : 1; // a gate/up pair matrix: a warp takes both rows of a pair
  for (int64_t r = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * pair; r < rows; r += (int64_t)gridDim.x * 8 * pair) {
    for (int j = 0; j < T.nb; j++) {
      float a0 = 0.0f, a1 = 0.0f; // the pair's rows (one row: a0)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (h >= pair) break;
        float acc = 0.0f;
        for (int k = 0; k < T.nterm; k++) {
          const mv_term &m = T.t[k];
          const dlin L = tab[m.lin + (m.sel_k >= 0 ? sel[T.tok * RT_KST + m.sel_k] : 0)];
          float p = 0.0f;
          for (int64_t c = lane; c < L.cols; c += 32) p += rt_elem(L, r + h, c) * m.x[j * T.xs + c];
          acc += (m.w ? *m.w : 1.0f) * (L.f == 0 ? 1.0f : (r + h) & 1 ? L.s2 : L.s) * p;
        }
        acc = rt_warp_sum(acc);
        if (h) a1 = acc;
        else a0 = acc;
      }
      if (lane == 0) {
        if (T.best) {
          atomicMax(T.best + j, rt_argmax_key(a0, (uint32_t)r));
          if (T.logits) T.logits[j * T.ys + r] = a0;
        } else if (T.glu) {
          T.y[j * T.ys + r / 2] = rt_silu_mul(a0, a1);
        } else {
          T.y[j * T.ys + r] = a0;
        }
      }
    }
  }
  RT_TL_END();
}

// ---- launches ----

template <int NB, int R, int U, int F, int S = 1> static void mv_run(gpu_session *g, const mv_launch &m) {
  static int cap = 0; // per instantiation
  if (!cap) cap = resident(k_mv<NB, R, U, F, S>);
  const int64_t rb = 8 / S * R, bx = (m.rows + rb - 1) / rb;
  mv_flat fg = {};
  if (RT_MV_FLAT(F) && m.ntask > 1 && m.ntask <= RT_FLAT) {
    fg = flat_grid(m, rb);
    const int64_t tot = fg.off[m.ntask];
    fg.n = tot < bx * m.ntask && tot <= cap ? m.ntask : 0;
  }
  const dim3 grid = fg.n ? dim3((unsigned)fg.off[fg.n]) : dim3((unsigned)(bx < cap ? bx : cap), (unsigned)m.ntask);
  go(g, true, k_mv<NB, R, U, F, S>, grid, dim3(256), 0, (const dlin *)g->w.lins, (const mv_task *)m.dev,
     (const int *)g->x.sel, m.fl, fg);
}

// One token, one row per warp by the wave rule, plain y (fc, o, the routed
// experts' down, the router, the shared expert's gate/up): instead, sets of
// S rows, each shared by S warps (k_mv's S = R): the same blocks and the
// same weight loads per warp, but each band of x a warp loads serves S rows.
// S: 4 or 2, the most that leaves no warp without a (term, band) group
// (8 was slower: ledger 8); false where this does not apply.
template <int NB, int R, int S> static void mv_split_run(gpu_session *g, const mv_launch &m) {
  if constexpr (NB == 1) {
    switch (m.fmt) {
    case 0: mv_run<1, R, 8, 0, S>(g, m); break;
    case 1: mv_run<1, R, 8, 1, S>(g, m); break;
    default: mv_run<1, R, 8, 2, S>(g, m); break;
    }
  } else { // dense FP8/BF16 only (routed tasks are one token each); U: a multiple of R
    constexpr int U = NB >= 4 ? (R > 4 ? R : 4) : 8;
    m.fmt == 1 ? mv_run<NB, R, U, 1, S>(g, m) : mv_run<NB, R, U, 0, S>(g, m);
  }
}

// r: the rows per warp the wave rule chose (1, or 2 at 2..8 tokens); the
// launch runs as sets of R = r x S rows, each shared by S warps (the same
// blocks); instances: those ptxas fits without spills (ledger 8)
template <int NB> static bool mv_split(gpu_session *g, const mv_launch &m, int r) {
  if (m.best || m.glu || m.fmt < 0 || m.fmt > (NB == 1 ? 2 : 1)) return false;
  for (int S : {4, 2}) {
    if (m.groups < S) continue;
    if constexpr (NB == 1) {
      if (r != 1) return false;
      return S == 4 ? mv_split_run<1, 4, 4>(g, m) : mv_split_run<1, 2, 2>(g, m), true;
    } else {
      if (r == 1) return S == 4 ? mv_split_run<NB, 4, 4>(g, m) : mv_split_run<NB, 2, 2>(g, m), true;
      if (r == 2 && S == 2) return mv_split_run<NB, 4, 2>(g, m), true;
    }
  }
  return false;
}

// U: loads in flight per lane: 128 bytes of weights at one token (NVFP4
// chunks are 8 bytes, FP8 16, BF16 32 in two loads), less from 2 tokens on
// (their registers go to the activations; more spills); NVFP4 at one token
// 16 a lane at 8 rows a warp, 8 below (ledger 10)
template <int NB, int R> static void mv_go(gpu_session *g, const mv_launch &m) {
  constexpr int U = R == 5 ? 10 : R == 6 ? 12 : NB >= 4 ? 4 : 8; // (5, 6 rows: two bands a batch)
  switch (m.fmt) {
  case 0: mv_run<NB, R, U, 0>(g, m); break;
  case 1: mv_run<NB, R, U, 1>(g, m); break;
  case 2:
    if constexpr (NB == 1 && (R == 5 || R == 6)) mv_run<1, R, U, 2>(g, m);
    else if constexpr (NB == 1)
      R < 8 ? mv_run<1, R, 8, 2>(g, m) : mv_run<1, R, 16, 2>(g, m);
    else mv_run<NB, R, 8, 2>(g, m);
    break;
  default: mv_run<NB, R, U, 3>(g, m); break;
  }
}

// Blocks a launch needs with R rows per warp
static int64_t mv_blocks(const mv_launch &m, int R) {
  int64_t b = 0;
  for (int64_t r : m.trows) b += (r + 8 * R - 1) / (8 * R);
  return b;
}

// A dense FP8/BF16 launch at 2..8 tokens too large for one wave even at 8
// rows per warp (the head): 8 rows per warp, so each band of x loaded
// serves 8 rows (at the wave rule's 2 rows a warp the 2-token head loaded 4
// bytes of x through L1 per byte of FP8 weights).
template <int NB> static void mv_big(gpu_session *g, const mv_launch &m) {
  // rows per warp, FP8 and BF16: the most ptxas fits without spilling (BF16 at 8 tokens: 40 bytes)
  constexpr int R1 = NB <= 4 ? 8 : 4, R0 = NB == 4 ? 8 : 4;
  m.fmt == 1 ? mv_run<NB, R1, 8, 1>(g, m) : mv_run<NB, R0, 8, 0>(g, m);
}

// 2..8 tokens in one wave: 1 or 2 rows per warp, as row sets shared by
// warps where mv_split applies
template <int NB> static void mv_nb(gpu_session *g, const mv_launch &m, int64_t wave) {
  const int r = mv_blocks(m, 1) <= wave ? 1 : 2;
  if (!mv_split<NB>(g, m, r)) r == 1 ? mv_go<NB, 1>(g, m) : mv_go<NB, 2>(g, m);
}

void mv_ffma_launch(gpu_session *g, const mv_launch &m) {
  const int NB = nb_slots(m.nbmax);
  if (!g->set.fast) {
    int64_t bx = (m.rows + 7) / 8;
    go(g, true, k_mv_any, dim3((unsigned)(bx < 4096 ? bx : 4096), (unsigned)m.ntask), dim3(256), 0,
       (const dlin *)g->w.lins, (const mv_task *)m.dev, (const int *)g->x.sel);
    return;
  }
  // the fewest rows per warp (a warp's loads all in flight at once) that
  // still fit the launch in one wave of resident blocks; beyond that the
  // grid is persistent and each warp loops over row sets (a quarter over the
  // wave left a short second wave; at one token 5 rows a warp put the 80B
  // shape's q/k/v in one wave where 4 left a second: ledger 11)
  const int64_t wave = (int64_t)g->sms * (NB <= 2 && m.fmt != 3 ? 2 : 1);
  if (NB > 1 && (m.fmt == 0 || m.fmt == 1) && mv_blocks(m, 8) > wave) {
    NB == 2 ? mv_big<2>(g, m) : NB == 4 ? mv_big<4>(g, m) : mv_big<8>(g, m);
    return;
  }
  // the experts' one-token NVFP4 products from two tokens on stream through k_mvs (ledgers 62, 65)
  if (NB == 1 && mvs_launch(g, m, mv_blocks(m, 8) > wave)) return;
  if (m.glu && NB == 1) { // row pairs (routed gate/up, one token a task): the fewest even rows per warp in one wave
    const int r = mv_blocks(m, 2) <= wave ? 2 : mv_blocks(m, 4) <= wave ? 4 : mv_blocks(m, 6) <= wave ? 6 : 8;
    r == 2 ? mv_go<1, 2>(g, m) : r == 4 ? mv_go<1, 4>(g, m) : r == 6 ? mv_go<1, 6>(g, m) : mv_go<1, 8>(g, m);
    return;
  }
  switch (NB) {
  case 1: {
    const int r = mv_blocks(m, 1) <= wave ? 1 : mv_blocks(m, 4) <= wave ? 4 : mv_blocks(m, 5) <= wave ? 5 : 8;
    if (r == 1 && mv_split<1>(g, m, 1)) break;
    r == 1 ? mv_go<1, 1>(g, m) : r == 4 ? mv_go<1, 4>(g, m) : r == 5 ? mv_go<1, 5>(g, m) : mv_go<1, 8>(g, m);
    break;
  }
  case 2: mv_nb<2>(g, m, wave); break;
  case 4: mv_nb<4>(g, m, wave); break;
  default: mv_nb<8>(g, m, wave); break;
  }
}
