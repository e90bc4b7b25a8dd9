// The draft step's small kernels: embedding + the two input norms (k_prep),
// the input norm (k_norm), residual + norm (k_add_norm), routing (softmax +
// top-k, k_route), SwiGLU (k_swiglu), the final residual + norm (k_final)
// and the feedback of the argmax into the next step (k_next). Each takes
// the tokens of one launch (blockIdx over tokens) and reads token ids and
// positions from device memory, so a CUDA graph of the step does not depend
// on them.
#include <cuda_bf16.h>

#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/mma.cuh"

// The norm kernels (k_prep, k_norm, k_add_norm, k_final) are templates on
// NX: n == NX exactly (a multiple of 256; the host launches such an
// instance for the 80B shape's 2,048) or any n up to 256 * RT_NQ (NX 0).
// With NX the bounds checks fold away and a thread keeps NX / 256 values:
// the general instances' loads, each followed by its own bounds select,
// reached the SASS as a load, a use, a load... and a warp issues in order,
// so k_final's three inputs landed in seven L2 trips one after another
// (per-block timeline; ledger 20)
#define RT_NQX(NX) ((NX) ? (NX) / 256 : RT_NQ)
// Their launch bounds: blockDim 256 (without, ptxas plans for 1,024 threads
// and 64 registers, and the exact instance reused registers between loads as
// above), at least 2 blocks an SM for the general ones (at most 128
// registers; they would take 255 and so an SM of their own)
#define RT_NORM_MINB(NX) ((NX) ? 1 : 2)

// A norm kernel's n: NX where the instance has one; and blockDim 256, so
// that with n == NX the bounds checks fold
template <int NX> __device__ __forceinline__ int rt_norm_n(int n) {
  __builtin_assume(threadIdx.x < 256);
  return NX ? NX : n;
}


// v[q] = x[tid + 256 q] for the n values (0 past n), x float or BF16 bits;
// the addresses clamped and the values selected after all the loads, so
// that with n a constant (NX) there is nothing but the loads between them
template <int NQ, typename T> __device__ __forceinline__ void rt_ld_row(const T *x, int n, float (&v)[NQ]) {
#pragma unroll
  for (int q = 0; q < NQ; q++) v[q] = rt_f32(x[min((int)threadIdx.x + 256 * q, n - 1)]);
#pragma unroll
  for (int q = 0; q < NQ; q++) v[q] = (int)threadIdx.x + 256 * q < n ? v[q] : 0.0f;
}

// w1[q] = 1 + w[tid + 256 q]: a norm's weights, constant, so its kernel
// loads them before waiting for the kernel before (one memory latency less
// after the wait; the same 1 + w as computed after it before)
template <int NQ> __device__ __forceinline__ void rt_norm_w(const float *w, int n, float (&w1)[NQ]) {
#pragma unroll
  for (int q = 0; q < NQ; q++) {
    const int i = threadIdx.x + 256 * q;
    w1[q] = i < n ? 1.0f + w[i] : 0.0f;
  }
}

// y = v / rms(v) * w1 (w1 from rt_norm_w) for the block's n values, thread
// tid holding v[q] = value tid + 256 q: the values were loaded all at once
// (one memory latency, not one per element)
template <int NQ>
__device__ void rt_zcnorm_regs(const float (&v)[NQ], const float (&w1)[NQ], int n, float eps, float *y,
                               __nv_bfloat16 *pb = nullptr) {
  float ss = 0;
#pragma unroll
  for (int q = 0; q < NQ; q++) ss += v[q] * v[q];
  const float r = rsqrtf(rt_block_sum(ss) / n + eps);
#pragma unroll
  for (int q = 0; q < NQ; q++) {
    const int i = threadIdx.x + 256 * q;
    if (i < n) {
      const float o = v[q] * r * w1[q];
      y[i] = o;
      if (pb) rt_split3<__nv_bfloat16>(o, pb[i], pb[n + i], pb[2 * n + i]); // (pb: see k_final)
    }
  }
}

// y = x / rms(x) * w1, one block of 256 (y may be x)
template <int NQ> __device__ void rt_zcnorm(const float *x, const float (&w1)[NQ], int n, float eps, float *y) {
  float v[NQ];
  rt_ld_row(x, n, v);
  rt_zcnorm_regs(v, w1, n, eps, y);
}

// Blocks (t, 0) and (t, 1), t < n: c[t] = [norm(embed[tok]), norm(hidden)],
// and the argmax key cleared.
template <int NX>
__global__ void __launch_bounds__(256, RT_NORM_MINB(NX))
    k_prep(const uint8_t *embed, const int *tok, const float *hid, int H, const float *ne, const float *nh, float eps,
           float *c, unsigned long long *best, int n) {
  RT_TL_START();
  rt_trigger();
  constexpr int NQ = RT_NQX(NX);
  H = rt_norm_n<NX>(H);
  float w1[NQ]; // this block's norm weights (block y 0: the embedding's, 1: the hidden state's)
  rt_norm_w(blockIdx.y ? nh : ne, blockIdx.x < n ? H : 0, w1);
  rt_wait(); // tok, pos and hid may come from the previous step's last kernel
  const int t = blockIdx.x;
  if (t >= n) { RT_TL_END(); return; }
  if (blockIdx.y == 1) { // the two norms in two blocks: neither waits for the other
    rt_zcnorm(hid + (int64_t)t * H, w1, H, eps, c + (int64_t)t * 2 * H + H);
    RT_TL_END();
    return;
  }
  const uint16_t *e = reinterpret_cast<const uint16_t *>(embed) + (int64_t)tok[t] * H;
  float v[NQ];
  rt_ld_row(e, H, v);
  RT_TL_MID(1, rt_tl_dep(v)); // the embedding row landed
  rt_zcnorm_regs(v, w1, H, eps, c + (int64_t)t * 2 * H);
  if (threadIdx.x == 0) best[t] = 0;
  RT_TL_END();
}

template <int NX>
__global__ void __launch_bounds__(256, RT_NORM_MINB(NX))
    k_norm(const float *x, const float *w, int n, float eps, float *y) {
  RT_TL_START();
  rt_trigger();
  constexpr int NQ = RT_NQX(NX);
  n = rt_norm_n<NX>(n);
  float w1[NQ];
  rt_norm_w(w, n, w1);
  rt_wait();
  rt_zcnorm(x + (int64_t)blockIdx.x * n, w1, n, eps, y + (int64_t)blockIdx.x * n);
  RT_TL_END();
}

// y += x0; y2 = norm(y)
template <int NX> __global__ void __launch_bounds__(256, RT_NORM_MINB(NX))
    k_add_norm(float *y, const float *x0, const float *w, int n, float eps, float *y2) {
  RT_TL_START();
  rt_trigger();
  constexpr int NQ = RT_NQX(NX);
  n = rt_norm_n<NX>(n);
  float w1[NQ];
  rt_norm_w(w, n, w1);
  rt_wait();
  const int64_t o = (int64_t)blockIdx.x * n;
  // every load before the first store: with a store between them each load
  // waited for the one before (y and x0 may alias as far as the compiler
  // knows), eight L2 trips one after another (ledger 20); through
  // rt_ld_row the SASS keeps that order too (tests/bench/ldchain.py checks
  // that no load comes after a store)
  float v[NQ], v2[NQ];
  rt_ld_row(y + o, n, v);
  rt_ld_row(x0 + o, n, v2);
#pragma unroll
  for (int q = 0; q < NQ; q++) v[q] += v2[q];
  RT_TL_MID(1, rt_tl_dep(v) + rt_tl_dep(w1)); // its inputs and norm weights landed
#pragma unroll
  for (int q = 0; q < NQ; q++) {
    const int i = threadIdx.x + 256 * q;
    if (i < n) y[o + i] = v[q];
  }
  rt_zcnorm_regs(v, w1, n, eps, y2 + o);
  RT_TL_END();
}

#define RT_RPT 16 // router logits per thread in k_route (E <= RT_RPT * 256)
static_assert(RT_EMAX <= RT_RPT * 256, "k_route: RT_EMAX experts in at most 8 warps");

// a[] sorted largest first in place (bitonic network: N a power of two,
// every index fixed at compile time so that a stays in registers)
template <int N> __device__ __forceinline__ void rt_sort_desc(unsigned long long (&a)[N]) {
#pragma unroll
  for (int k = 2; k <= N; k <<= 1)
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1)
#pragma unroll
      for (int i = 0; i < N; i++) {
        const int l = i ^ j;
        if (l > i) {
          const unsigned long long x = a[i], y = a[l];
          const bool sw = (i & k) == 0 ? x < y : x > y; // runs of k: largest first where i & k is 0
          a[i] = sw ? y : x, a[l] = sw ? x : y;
        }
      }
}

// grid (blocks, tokens), 32 * ceil(E / 512) threads: softmax over E router
// logits, top-K (ties to the lower expert), optional renormalisation; slot K
// gets sigmoid(shared_expert_gate). A thread keeps logits e = tid + nt * i
// in registers (at E <= 512 one warp); each of the K picks is a maximum of
// 64-bit keys (numerator, expert) over the warp's sorted lists (one warp),
// or over the thread's registers and the block (E > 512). Why not spread the
// selection over 16 warps, a key a thread: no faster (ledger 21). The chosen
// numerator comes back out of the key (p >= 0). One block a token.
__global__ void k_route(const float *logits, const float *z, int E, int K, int renorm, int have_shared, int *sel,
                        float *wsel) {
  RT_TL_START();
  __shared__ int chosen[RT_TMAX];
  __shared__ float cval[RT_TMAX];
  __shared__ float fsh[9];
  __shared__ unsigned long long ksh[8];
  rt_trigger();
  rt_wait();
  const int t = blockIdx.y, tid = threadIdx.x, nt = blockDim.x, nw = nt >> 5;
  const float *l = logits + (int64_t)t * E;
  float p[RT_RPT];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < RT_RPT; i++) {
    const int e = tid + nt * i;
    p[i] = e < E ? l[e] : -INFINITY;
    m = fmaxf(m, p[i]);
  }
  m = rt_block_reduce(m, 0, nw, fsh);
  RT_TL_MID(1, m); // the logits landed, their maximum
  // the numerators without a branch per logit (the disassembly had one
  // around each exponential and each division, so a lane's 16 ran one
  // after another): a logit past E is
  // -inf, its exponential 0, and adding it changes no sum
  float s = 0;
#pragma unroll
  for (int i = 0; i < RT_RPT; i++) s += (p[i] = expf(p[i] - m));
  s = rt_block_reduce(s, 1, nw, fsh);
  // keys of the numerators, not of the probabilities p / s: one division by
  // s > 0 keeps their order, so only the K chosen are divided (after the
  // picks; the same quotients). The one difference: two numerators whose
  // quotients are equal after rounding are taken by size, not by index
  unsigned long long key[RT_RPT];
#pragma unroll
  for (int i = 0; i < RT_RPT; i++) {
    const int e = tid + nt * i;
    const unsigned long long k = rt_argmax_key(p[i], (uint32_t)e);
    key[i] = e < E ? k : 0;
  }
  RT_TL_MID(2, __uint_as_float((uint32_t)(key[0] >> 32))); // the softmax and its keys
  if (nw == 1) {
    // One warp (E <= 512): each lane's keys sorted once, largest first, so
    // a pick is one maximum over the lanes' first keys and a shift in the
    // lane that held it, ~45 instructions where a tree over the lane's 16
    // keys, two dependent warp reductions and a clear took ~145 (the step
    // was no faster for it: ledger 21; kept as the form the whole gpu suite
    // ran). Only where two
    // lanes' first keys share the high word (equal numerators) is the low
    // word (the lower expert) reduced too. The same choice.
    rt_sort_desc(key);
    const int lane = tid & 31;
    for (int k = 0; k < K; k++) {
      const uint32_t h = (uint32_t)(key[0] >> 32), hi = __reduce_max_sync(0xFFFFFFFFu, h);
      unsigned ball = __ballot_sync(0xFFFFFFFFu, h == hi);
      if (ball & (ball - 1)) {
        const uint32_t lo = __reduce_max_sync(0xFFFFFFFFu, h == hi ? (uint32_t)key[0] : 0u);
        ball = __ballot_sync(0xFFFFFFFFu, h == hi && (uint32_t)key[0] == lo);
      }
      const bool win = lane == __ffs(ball) - 1; // (one lane)
      if (win) chosen[k] = (int)(0xFFFFFFFFu - (uint32_t)key[0]), cval[k] = __uint_as_float(h & 0x7FFFFFFFu);
#pragma unroll
      for (int i = 0; i < RT_RPT - 1; i++) key[i] = win ? key[i + 1] : key[i]; // (selects, no branch)
      key[RT_RPT - 1] = win ? 0 : key[RT_RPT - 1];
    }
  } else
    for (int k = 0; k < K; k++) { // (E > 512)
      // the thread's largest key as a tree (a chain of 16 before), then the
      // warp's as two single-instruction reductions of the key's halves
      // (rt_warp_max_key; five shuffle steps of two shuffles before)
      unsigned long long t8[RT_RPT / 2];
#pragma unroll
      for (int i = 0; i < RT_RPT / 2; i++) t8[i] = key[2 * i] > key[2 * i + 1] ? key[2 * i] : key[2 * i + 1];
#pragma unroll
      for (int h = RT_RPT / 4; h > 0; h >>= 1)
#pragma unroll
        for (int i = 0; i < h; i++) t8[i] = t8[i] > t8[i + h] ? t8[i] : t8[i + h];
      unsigned long long best = rt_warp_max_key(t8[0]);
      __syncthreads(); // (several warps: E > 512)
      if ((tid & 31) == 0) ksh[tid >> 5] = best;
      __syncthreads();
      for (int w = 0; w < nw; w++) best = ksh[w] > best ? ksh[w] : best;
      const int e = (int)(0xFFFFFFFFu - (uint32_t)(best & 0xFFFFFFFFu));
      const float v = __uint_as_float((uint32_t)(best >> 32) & 0x7FFFFFFFu); // the key of p >= 0
#pragma unroll
      for (int i = 0; i < RT_RPT; i++)
        if (tid + nt * i == e) key[i] = 0;
      if (tid == 0) chosen[k] = e, cval[k] = v;
    }
  // the chosen probabilities, K divisions in parallel; their sum in the
  // order chosen
  __syncthreads();
  if (tid < K) cval[tid] = cval[tid] / s;
  __syncthreads();
  float tot = 0;
  for (int k = 0; k < K; k++) tot += cval[k];
  // the choice written once, K threads in parallel, the same quotients v /
  // tot
  if (tid < K) {
    sel[t * RT_KST + tid] = chosen[tid];
    wsel[t * RT_KST + tid] = renorm ? cval[tid] / tot : cval[tid];
  }
  if (tid == 0) wsel[t * RT_KST + K] = have_shared ? 1.0f / (1.0f + expf(-z[t])) : 1.0f;
  RT_TL_END();
}

// act = silu(g) * u for slots slot0 .. slot0 + nslot - 1 of each of n
// tokens (S slots a token, len elements of a slot, slot stride st)
__global__ void k_swiglu(const float *g, const float *u, float *act, int n, int slot0, int nslot, int S, int len,
                         int64_t st) {
  RT_TL_START();
  rt_trigger();
  rt_wait();
  for (int64_t i = threadIdx.x + (int64_t)blockIdx.x * blockDim.x; i < (int64_t)n * nslot * len;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / len, c = i % len, o = ((r / nslot) * S + slot0 + r % nslot) * st + c;
    act[o] = rt_silu_mul(g[o], u[o]);
  }
  RT_TL_END();
}

// out = norm(m + w m2 + r2) (routed experts, shared expert weighted by
// w[t * RT_KST] (sigmoid(shared_expert_gate); 1 when w is NULL), residual),
// one block per token; with pb, also each output as three BF16 pieces, the
// cuBLASLt head's x (kernels/rt_lt.cuh: token t's at pb + 3 t n, piece p n
// values after piece p - 1)
template <int NX>
__global__ void __launch_bounds__(256, RT_NORM_MINB(NX))
    k_final(const float *m, const float *m2, const float *r2, const float *w2, const float *w, int n, float eps,
            float *out, __nv_bfloat16 *pb) {
  RT_TL_START();
  rt_trigger();
  constexpr int NQ = RT_NQX(NX);
  n = rt_norm_n<NX>(n);
  float w1[NQ];
  rt_norm_w(w, n, w1);
  rt_wait();
  const int64_t o = (int64_t)blockIdx.x * n;
  const float sw = w2 ? w2[blockIdx.x * RT_KST] : 1.0f;
  float v[NQ], v2[NQ], v3[NQ];
  rt_ld_row(m + o, n, v);
  rt_ld_row(m2 + o, n, v2);
  rt_ld_row(r2 + o, n, v3);
#pragma unroll
  for (int q = 0; q < NQ; q++) v[q] = v[q] + sw * v2[q] + v3[q];
  RT_TL_MID(1, rt_tl_dep(v) + rt_tl_dep(w1)); // its inputs and norm weights landed
  rt_zcnorm_regs(v, w1, n, eps, out + o, pb ? pb + 3 * o : nullptr);
  RT_TL_END();
}

// after the head: token ids for the next draft step, positions + 1, the
// drafted ids recorded at rec[step * n + t] (step counted on the device)
__global__ void k_next(const unsigned long long *best, const int64_t *ids, int *tok, int64_t *pos, int *rec,
                       int *step, int n) {
  RT_TL_START();
  rt_trigger();
  rt_wait();
  const int t = threadIdx.x;
  const int s = *step;
  __syncthreads();
  if (t < n) {
    const int64_t row = (int64_t)(0xFFFFFFFFu - (uint32_t)(best[t] & 0xFFFFFFFFu));
    const int id = (int)(ids ? ids[row] : row);
    tok[t] = id;
    pos[t] += 1;
    rec[s * n + t] = id;
  }
  if (t == 0) *step = s + 1;
  RT_TL_END();
}

// ---- launches ----

// the norm kernels' instance for exactly 2,048 values where H is (RT_NQX)
static bool nx(const gpu_session *g) { return g->d->H == 2048; }

void ops_prep(gpu_session *g, int n) {
  const struct mtpq_rt_model *d = g->d;
  go(g, false, nx(g) ? k_prep<2048> : k_prep<0>, dim3(n, 2), dim3(256), 0, (const uint8_t *)g->w.embed,
     (const int *)g->io.tok, (const float *)g->x.out, (int)d->H, (const float *)g->w.nrm[0], (const float *)g->w.nrm[1], d->eps,
     g->x.c, g->x.best, n);
}

void ops_norm(gpu_session *g, int n) {
  go(g, true, nx(g) ? k_norm<2048> : k_norm<0>, dim3(n), dim3(256), 0, (const float *)g->x.x0,
     (const float *)g->w.nrm[2], (int)g->d->H, g->d->eps, g->x.a);
}

void ops_add_norm(gpu_session *g, int n) {
  go(g, true, nx(g) ? k_add_norm<2048> : k_add_norm<0>, dim3(n), dim3(256), 0, g->x.y, (const float *)g->x.x0,
     (const float *)g->w.nrm[3], (int)g->d->H, g->d->eps, g->x.y2);
}

// slots slot0 .. slot0 + nslot - 1 of each of the n tokens' K + 1 slots
void ops_swiglu(gpu_session *g, int n, int slot0, int nslot, int blocks) {
  go(g, true, k_swiglu, dim3((unsigned)blocks), dim3(256), 0, (const float *)g->x.gb, (const float *)g->x.ub, g->x.act, n,
     slot0, nslot, g->K + 1, (int)g->IM, g->IM);
}

void ops_route_rows(gpu_session *g, bool pdl, int n, const float *logits, const float *z, int E, int K, int norm,
                    int *sel, float *wsel) {
  go(g, pdl, k_route, dim3(1, n), dim3(32 * (unsigned)((E + 32 * RT_RPT - 1) / (32 * RT_RPT))), 0, logits, z, E, K,
     norm, z != nullptr ? 1 : 0, sel, wsel);
}

void ops_route(gpu_session *g, int n) {
  const struct mtpq_rt_model *d = g->d;
  ops_route_rows(g, true, n, g->x.pr, d->seg.w != nullptr ? g->x.z : nullptr, (int)d->E, g->K, d->norm_topk, g->x.sel,
                 g->x.wsel);
}

// pieces: the cuBLASLt head's x (its three BF16 pieces), or NULL
void ops_final(gpu_session *g, int n, bool pdl, __nv_bfloat16 *pieces) {
  const struct mtpq_rt_model *d = g->d;
  go(g, pdl, nx(g) ? k_final<2048> : k_final<0>, dim3(n), dim3(256), 0, g->x.m, (const float *)g->x.m2,
     (const float *)g->x.y, (const float *)(d->moe ? g->x.wsel + g->K : nullptr), (const float *)g->w.nrm[6], (int)d->H,
     d->eps, g->x.out, pieces);
}

void ops_next(gpu_session *g, int n) {
  go(g, true, k_next, dim3(1), dim3(32), 0, (const unsigned long long *)g->x.best, (const int64_t *)g->w.ids, g->io.tok,
     g->io.pos, g->io.rec, g->io.stepc, n);
}
