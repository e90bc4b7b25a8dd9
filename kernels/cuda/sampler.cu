// The sampler's CUDA backend (kernels/sampler_cuda.h): the sampling
// distribution of a row of logits, draws by inverse CDF and the rejection
// step, one block of CS_T threads a row, on rows in device memory.
//
// The distribution is kernels/sample.c's definition computed another way.
// softmax(l / temperature) as the reference (float exp, a double sum); then
// the kept set without sorting: top-k keeps the tokens at or above the
// k-th largest probability (ties included), top-p the most probable ones
// of what top-k kept, in decreasing order with ties to the lower id, until
// their mass reaches top_p of it. Both thresholds are found by a radix
// search on the probability's bits (non-negative floats order as their
// bits): each pass counts the tokens and sums the mass of the current key
// range in CS_NB buckets (per-thread bins in shared memory: no atomics),
// keeps the bucket where the count (top-k) or the mass (top-p) from the
// top reaches the target, and narrows the range to it, CS_BITS bits a pass,
// until one key is left. The threshold's ties are taken in id order from a
// block-wide scan of their counts. Sums run in other orders than the
// reference's, so a token exactly at a boundary may fall the other way
// (the reference itself keeps a 1e-6 margin for its own orders).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "io/cuda_status.h"
}
#include "kernels/sampler_cuda.h"

#define CK(stmt) MTPQ_CUDA_TRY(stmt, err)

constexpr int CS_T = 512;                        // threads a row
constexpr int CS_BITS = 5, CS_NB = 1 << CS_BITS; // a search pass's buckets
constexpr size_t CS_SMEM = (size_t)CS_NB * CS_T * 12; // the per-thread bins: a count and a (double) mass each
constexpr uint32_t CS_ONE = 0x3F800001u;         // past the key of 1.0f: no probability reaches it
constexpr int CS_MAXS = 8, CS_MAXR = 8;          // sequences, rows a sequence

using BlockD = cub::BlockReduce<double, CS_T>;
using BlockF = cub::BlockReduce<float, CS_T>;
using BlockI = cub::BlockReduce<long long, CS_T>;
using ScanD = cub::BlockScan<double, CS_T>;
using ScanI = cub::BlockScan<int, CS_T>;

struct cs_shared {
  union {
    BlockD::TempStorage d;
    BlockF::TempStorage f;
    BlockI::TempStorage i;
    ScanD::TempStorage sd;
    ScanI::TempStorage si;
  } cub;
  long long bc[CS_NB];
  double bm[CS_NB];
  double dv;
  float fv;
  long long iv;
  int tok, last, seg;
  double segpre;
  // the search's state: the key range [lo, hi), what lies above hi, the kept bucket's count and mass
  uint32_t lo, hi;
  long long above_c, eq_c;
  double above_m, eq_m;
  int found;
};

struct cs_max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// the row's settings and where a kernel's rows are
struct cs_args {
  float *p, *q;   // target rows [nseq][rows][V], draft rows [nseq][qrows][V]
  long long V;
  int rows, qrows;
  float temp, top_p;
  int top_k;
  short rs[CS_MAXS * CS_MAXR][2]; // k_cs_probs: (sequence, target row) of each block
  int seq[CS_MAXS], keff[CS_MAXS];
  int d[CS_MAXS][CS_MAXR];
  double u[CS_MAXS][MTPQ_CSAMPLE_MAX_U];
};

// a sequence's outcome: accepted drafts, the next token, uniforms used
struct cs_out {
  int acc, next, used, pad;
};

__device__ __forceinline__ float *prow(const cs_args &a, int b, int r) {
  return a.p + ((long long)b * a.rows + r) * a.V;
}
__device__ __forceinline__ float *qrow(const cs_args &a, int b, int r) {
  return a.q + ((long long)b * a.qrows + r) * a.V;
}

// Every element of the row, each thread its strided share: 16-byte loads where the row allows them (V a
// multiple of 4: the rows then sit at 16-byte boundaries), a few in flight per thread (one block reads a
// row: its loads' latency, not the bytes, sets the time).
template <class F> __device__ __forceinline__ void cs_each(const float *row, long long V, F f) {
  if (!(V & 3)) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
#pragma unroll 4
    for (long long i = threadIdx.x; i < (V >> 2); i += CS_T) {
      const float4 x = r4[i];
      f(4 * i, x.x), f(4 * i + 1, x.y), f(4 * i + 2, x.z), f(4 * i + 3, x.w);
    }
  } else {
    for (long long v = threadIdx.x; v < V; v += CS_T) f(v, row[v]);
  }
}

// the same, each element replaced by f's value
template <class F> __device__ __forceinline__ void cs_map(float *row, long long V, F f) {
  if (!(V & 3)) {
    float4 *r4 = reinterpret_cast<float4 *>(row);
#pragma unroll 4
    for (long long i = threadIdx.x; i < (V >> 2); i += CS_T) {
      const float4 x = r4[i];
      r4[i] = make_float4(f(4 * i, x.x), f(4 * i + 1, x.y), f(4 * i + 2, x.z), f(4 * i + 3, x.w));
    }
  } else {
    for (long long v = threadIdx.x; v < V; v += CS_T) row[v] = f(v, row[v]);
  }
}

// Thread t's contiguous chunk [b, e) of the row (whole 16-byte groups where the row allows them): the
// passes in id order walk their chunks and order the threads by a block-wide scan.
__device__ __forceinline__ void cs_chunk(long long V, int t, long long *b, long long *e) {
  const long long g = (V & 3) ? 1 : 4, c = ((V / g + CS_T - 1) / CS_T) * g;
  *b = min(V, (long long)t * c), *e = min(V, *b + c);
}

// f(v, p[v], q[v]) over this thread's chunk in id order (q may be p)
template <class F> __device__ __forceinline__ void cs_span(const float *p, const float *q, long long V, F f) {
  long long b, e;
  cs_chunk(V, threadIdx.x, &b, &e);
  if (!(V & 3)) {
    for (long long i = b; i < e; i += 4) {
      const float4 x = *reinterpret_cast<const float4 *>(p + i), y = *reinterpret_cast<const float4 *>(q + i);
      f(i, x.x, y.x), f(i + 1, x.y, y.y), f(i + 2, x.z, y.z), f(i + 3, x.w, y.w);
    }
  } else {
    for (long long v = b; v < e; v++) f(v, p[v], q[v]);
  }
}

// The search's per-thread bins, bucket-major, in the dynamic shared memory (CS_SMEM bytes of the kernels
// that make distributions): the masses, then the counts.
extern __shared__ __align__(16) unsigned char cs_dyn[];
__device__ __forceinline__ double *cs_bm() { return reinterpret_cast<double *>(cs_dyn); }
__device__ __forceinline__ int *cs_bc() { return reinterpret_cast<int *>(cs_dyn + (size_t)CS_NB * CS_T * 8); }

// Among the keys in [lo, hi) of the row (above hi: nothing), the largest key t whose count (by_mass 0) or
// mass (1) of keys >= t reaches target; into sh: lo = t, above_c / above_m what lies above it, eq_c / eq_m
// what equals it, found 0 when even the whole range falls short (lo then stays the range's low end).
__device__ void cs_select(const float *row, long long V, uint32_t lo, uint32_t hi, int by_mass, double target,
                          cs_shared &sh) {
  const int t = threadIdx.x;
  int *bc = cs_bc();
  double *bm = cs_bm();
  if (t == 0) sh.lo = lo, sh.hi = hi, sh.above_c = 0, sh.above_m = 0, sh.found = 1;
  __syncthreads();
  do {
    const uint32_t l = sh.lo, h = sh.hi;
    int shift = 0;
    while (((h - l - 1) >> shift) >= (uint32_t)CS_NB) shift++;
    for (int b = 0; b < CS_NB; b++) bc[b * CS_T + t] = 0, bm[b * CS_T + t] = 0.0;
    cs_each(row, V, [&](long long, float x) {
      const uint32_t k = __float_as_uint(x);
      if (k >= l && k < h) {
        const int b = (int)((k - l) >> shift);
        bc[b * CS_T + t]++, bm[b * CS_T + t] += x;
      }
    });
    __syncthreads();
    // a warp a bucket at a time: its lanes' sums of the threads' bins
    const int w = t >> 5, lane = t & 31;
    for (int b = w; b < CS_NB; b += CS_T / 32) {
      long long c = 0;
      double m = 0;
      for (int i = lane; i < CS_T; i += 32) c += bc[b * CS_T + i], m += bm[b * CS_T + i];
      for (int o = 16; o; o >>= 1) c += __shfl_down_sync(0xFFFFFFFFu, c, o), m += __shfl_down_sync(0xFFFFFFFFu, m, o);
      if (lane == 0) sh.bc[b] = c, sh.bm[b] = m;
    }
    __syncthreads();
    if (t == 0) {
      int b = CS_NB - 1;
      for (; b >= 0; b--) {
        const double reach = by_mass ? sh.above_m + sh.bm[b] : (double)(sh.above_c + sh.bc[b]);
        if (sh.bc[b] && reach >= target) break;
        sh.above_c += sh.bc[b], sh.above_m += sh.bm[b];
      }
      if (b < 0) { // short of the target: the whole range
        sh.found = 0, sh.above_c = 0, sh.above_m = 0;
        sh.hi = l; // ends the search
      } else {
        const uint64_t nl = (uint64_t)l + ((uint64_t)b << shift), nh = nl + ((uint64_t)1 << shift);
        sh.lo = (uint32_t)nl, sh.hi = (uint32_t)(nh < h ? nh : h), sh.eq_c = sh.bc[b], sh.eq_m = sh.bm[b];
      }
    }
    __syncthreads();
  } while (sh.hi - sh.lo > 1 && sh.found);
}

// The row's logits (in place) into the sampling distribution, as mtpq_sample_probs.
__device__ void cs_probs(float *row, const cs_args &a, cs_shared &sh) {
  const long long V = a.V;
  const int t = threadIdx.x;
  float mx = -INFINITY;
  cs_each(row, V, [&](long long, float x) { mx = fmaxf(mx, x); });
  mx = BlockF(sh.cub.f).Reduce(mx, cs_max{});
  if (t == 0) sh.fv = mx;
  __syncthreads();
  mx = sh.fv;
  double s = 0;
  cs_map(row, V, [&](long long, float x) {
    const float e = x == -INFINITY ? 0.0f : expf((x - mx) / a.temp);
    s += e;
    return e;
  });
  s = BlockD(sh.cub.d).Sum(s);
  if (t == 0) sh.dv = s;
  __syncthreads();
  const double sum = sh.dv;
  double all = 0;
  long long npos = 0;
  cs_map(row, V, [&](long long, float x) {
    const float pv = (float)(x / sum);
    all += pv, npos += pv > 0;
    return pv;
  });
  const int topk = a.top_k > 0 && a.top_k < V, topp = a.top_p > 0 && a.top_p < 1;
  __syncthreads(); // (the walks after read the row in other threads' order)
  if (!topk && !topp) return;
  all = BlockD(sh.cub.d).Sum(all);
  __syncthreads();
  npos = BlockI(sh.cub.i).Sum(npos);
  if (t == 0) sh.iv = npos, sh.dv = all;
  __syncthreads();
  npos = sh.iv;
  // top-k: the k-th largest probability (every positive token when there are no more than k)
  uint32_t tk = 1;
  double tot = sh.dv; // the mass top-k keeps: all of it, or (below) that of the keys at or above the k-th
  if (topk && npos > a.top_k) {
    cs_select(row, V, 1, CS_ONE, 0, (double)a.top_k, sh);
    tk = sh.lo, tot = sh.above_m + sh.eq_m;
  }
  __syncthreads();
  // top-p over what top-k kept: the threshold key, and how many of its ties (in id order) reach the mass
  uint32_t tp = tk;
  long long m = -1; // -1: all the ties
  if (topp) {
    const double target = (double)a.top_p * tot;
    cs_select(row, V, tk, CS_ONE, 1, target, sh);
    if (sh.found) {
      tp = sh.lo;
      const double pv = (double)__uint_as_float(tp);
      long long need = (long long)ceil((target - sh.above_m) / pv);
      need = need < 1 ? 1 : need > sh.eq_c ? sh.eq_c : need;
      m = need;
    }
    __syncthreads();
  }
  // the kept tokens: keys above tp (and at or above tk), and the first m ties of tp in id order (ranked
  // by a scan of the threads' counts of them)
  const bool partial = m >= 0 && m < sh.eq_c;
  int r0 = 0;
  if (partial) {
    int ties = 0;
    cs_span(row, row, V, [&](long long, float x, float) { ties += __float_as_uint(x) == tp; });
    ScanI(sh.cub.si).ExclusiveSum(ties, r0);
    __syncthreads();
  }
  auto keep = [&](float x, int &r) {
    const uint32_t k = __float_as_uint(x);
    return k > tp || (k == tp && k >= 1 && (!partial || r++ < m));
  };
  double kept = 0;
  int r = r0;
  cs_span(row, row, V, [&](long long, float x, float) {
    if (keep(x, r)) kept += x;
  });
  kept = BlockD(sh.cub.d).Sum(kept);
  if (t == 0) sh.dv = kept;
  __syncthreads();
  kept = sh.dv;
  r = r0;
  auto norm = [&](float x) { return keep(x, r) ? (float)(x / kept) : 0.0f; };
  long long b0, e0;
  cs_chunk(V, t, &b0, &e0);
  if (!(V & 3)) {
    for (long long i = b0; i < e0; i += 4) {
      float4 *x4 = reinterpret_cast<float4 *>(row + i);
      const float4 x = *x4;
      const float y0 = norm(x.x), y1 = norm(x.y), y2 = norm(x.z), y3 = norm(x.w); // (in id order: the ranks)
      *x4 = make_float4(y0, y1, y2, y3);
    }
  } else {
    for (long long v = b0; v < e0; v++) row[v] = norm(row[v]);
  }
  __syncthreads();
}

// A draw by inverse CDF in id order over the weights w(v) (p, or max(0, p - q) with q), as the reference
// walks: the first token whose running sum exceeds u (u already scaled by the total); the last token with
// weight when u lies past the rounded total; -1 when nothing has weight. The threads sum their chunks, a
// scan finds the chunk u falls in, and warp 0 walks that chunk: a stretch a lane, a scan across the lanes,
// then the lane where u falls walks its stretch.
template <bool RES>
__device__ int cs_walk(const float *p, const float *q, long long V, double u, cs_shared &sh) {
  auto wt = [](float pv, float qv) -> double {
    return RES ? (pv > qv ? (double)pv - qv : 0.0) : (pv > 0 ? (double)pv : 0.0);
  };
  const int t = threadIdx.x, lane = t & 31;
  double s = 0;
  int last = -1;
  cs_span(p, RES ? q : p, V, [&](long long v, float pv, float qv) {
    const double x = wt(pv, qv);
    if (x > 0) s += x, last = (int)v;
  });
  double pre;
  ScanD(sh.cub.sd).ExclusiveSum(s, pre);
  if (t == 0) sh.seg = -1, sh.tok = -1, sh.last = -1;
  __syncthreads();
  if (last >= 0) atomicMax(&sh.last, last);
  if (s > 0 && u >= pre && u < pre + s) sh.seg = t, sh.segpre = pre;
  __syncthreads();
  if (t < 32 && sh.seg >= 0) {
    long long b, e;
    cs_chunk(V, sh.seg, &b, &e);
    const long long L = (e - b + 31) / 32, lb = min(e, b + lane * L), le = min(e, lb + L);
    double ls = 0;
    for (long long v = lb; v < le; v++) ls += wt(p[v], RES ? q[v] : p[v]);
    double exc = ls; // the lanes' stretches before this one
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xFFFFFFFFu, exc, o);
      if (lane >= o) exc += y;
    }
    exc -= ls;
    const double base = sh.segpre + exc;
    const unsigned m = __ballot_sync(0xFFFFFFFFu, ls > 0 && u < base + ls);
    if (m && lane == __ffs(m) - 1) {
      double acc = base;
      for (long long v = lb; v < le; v++) {
        const double x = wt(p[v], RES ? q[v] : p[v]);
        if (x <= 0) continue;
        acc += x;
        if (u < acc) {
          sh.tok = (int)v;
          break;
        }
      }
    }
  }
  __syncthreads();
  const int r = sh.tok >= 0 ? sh.tok : sh.last; // (-1 above: rounding put u past the walk: the last token)
  __syncthreads();
  return r;
}

// the sum over the row of max(0, p - q), block-wide
__device__ double cs_residual(const float *p, const float *q, long long V, cs_shared &sh) {
  double s = 0;
  cs_span(p, q, V, [&](long long, float pv, float qv) { s += pv > qv ? (double)pv - qv : 0.0; });
  s = BlockD(sh.cub.d).Sum(s);
  if (threadIdx.x == 0) sh.dv = s;
  __syncthreads();
  s = sh.dv;
  __syncthreads();
  return s;
}

// blocks: the rows a.rs lists, each into its distribution
__global__ void __launch_bounds__(CS_T) k_cs_probs(cs_args a) {
  __shared__ cs_shared sh;
  const int b = a.rs[blockIdx.x][0], r = a.rs[blockIdx.x][1];
  cs_probs(prow(a, b, r), a, sh);
}

// one block: draft row (seq[0], keff[0]) into q, a token drawn with u[0][0]
__global__ void __launch_bounds__(CS_T) k_cs_draft(cs_args a, cs_out *out) {
  __shared__ cs_shared sh;
  float *q = qrow(a, a.seq[0], a.keff[0]);
  cs_probs(q, a, sh);
  const int tok = cs_walk<false>(q, q, a.V, a.u[0][0], sh);
  if (threadIdx.x == 0) out[0] = cs_out{0, tok, 1, 0};
}

// a block a sequence: its rows already distributions (k_cs_probs); the rejection steps as
// mtpq_sample_reject, then the bonus draw as mtpq_sample_draw, taking the uniforms in the same order
__global__ void __launch_bounds__(CS_T) k_cs_accept(cs_args a, cs_out *out) {
  __shared__ cs_shared sh;
  const int i = blockIdx.x, b = a.seq[i], keff = a.keff[i];
  const double *u = a.u[i];
  int used = 0, j = 0, next = -1;
  for (; j < keff; j++) {
    const float *p = prow(a, b, j), *q = qrow(a, b, j);
    const int d = a.d[i][j];
    const double ut = u[used++];
    const float qd = q[d], pd = p[d];
    if (qd > 0 && ut * (double)qd < (double)pd) continue; // accepted
    const double tot = cs_residual(p, q, a.V, sh);
    const double w = u[used++] * tot;
    next = cs_walk<true>(p, q, a.V, w, sh);
    if (next < 0) next = cs_walk<false>(p, p, a.V, u[used++], sh); // nothing of p above q: p itself
    break;
  }
  if (j == keff) {
    const float *p = prow(a, b, keff);
    next = cs_walk<false>(p, p, a.V, u[used++], sh);
  }
  if (threadIdx.x == 0) out[i] = cs_out{j, next, used, 0};
}

struct csampler {
  long long V;
  int nseq, rows, qrows;
  float *p = nullptr, *q = nullptr;
  cs_out *out = nullptr, *h_out = nullptr;
  cudaStream_t st = nullptr;
};

extern "C" void mtpq__csample_close(void *c) {
  csampler *s = static_cast<csampler *>(c);
  if (!s) return;
  cudaFree(s->p), cudaFree(s->q), cudaFree(s->out);
  if (s->h_out) cudaFreeHost(s->h_out);
  if (s->st) cudaStreamDestroy(s->st);
  delete s;
}

static enum mtpq_status cs_alloc(csampler *s, struct mtpq_err *err) {
  const size_t rowb = (size_t)s->V * 4;
  CK(cudaMalloc(&s->p, rowb * (size_t)(s->nseq * s->rows)));
  CK(cudaMalloc(&s->q, rowb * (size_t)(s->nseq * s->qrows)));
  CK(cudaMalloc(&s->out, sizeof(cs_out) * CS_MAXS));
  CK(cudaMallocHost(&s->h_out, sizeof(cs_out) * CS_MAXS));
  CK(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking));
  CK(cudaFuncSetAttribute(k_cs_probs, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)CS_SMEM));
  CK(cudaFuncSetAttribute(k_cs_draft, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)CS_SMEM));
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__csample_open(int64_t V, int nseq, int rows, int64_t qrows, void **out, float **p,
                                               float **q, struct mtpq_err *err) {
  *out = nullptr;
  if (nseq > CS_MAXS || rows > CS_MAXR || V >= ((int64_t)1 << 31))
    return mtpq_err_set(err, MTPQ_E_INVAL, "a CUDA sampler of %d sequences x %d rows (1..%d x 1..%d), %lld tokens",
                        nseq, rows, CS_MAXS, CS_MAXR, (long long)V);
  csampler *s = new csampler;
  s->V = V, s->nseq = nseq, s->rows = rows, s->qrows = (int)qrows;
  enum mtpq_status rc = cs_alloc(s, err);
  if (rc) {
    mtpq__csample_close(s);
    return rc;
  }
  *out = s, *p = s->p, *q = s->q;
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__csample_copy(float *row, float *host, int64_t V, int to_dev, struct mtpq_err *err) {
  const cudaMemcpyKind kind = to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  CK(cudaMemcpy(to_dev ? row : host, to_dev ? host : row, (size_t)V * 4, kind));
  return MTPQ_OK;
}

static cs_args cs_base(const csampler *s, const struct mtpq_sampling *sp) {
  cs_args a;
  memset(&a, 0, sizeof a);
  a.p = s->p, a.q = s->q, a.V = s->V, a.rows = s->rows, a.qrows = s->qrows;
  a.temp = sp->temperature, a.top_p = sp->top_p, a.top_k = sp->top_k;
  return a;
}

extern "C" enum mtpq_status mtpq__csample_draft(void *c, int b, int r, const struct mtpq_sampling *sp, double u,
                                                int32_t *tok, struct mtpq_err *err) {
  csampler *s = static_cast<csampler *>(c);
  cs_args a = cs_base(s, sp);
  a.seq[0] = b, a.keff[0] = r, a.u[0][0] = u;
  k_cs_draft<<<1, CS_T, CS_SMEM, s->st>>>(a, s->out);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(s->h_out, s->out, sizeof(cs_out), cudaMemcpyDeviceToHost, s->st));
  CK(cudaStreamSynchronize(s->st));
  *tok = s->h_out[0].next;
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__csample_accept(void *c, int n, const int *seq, const int *keff,
                                                 const int32_t *const *d, const struct mtpq_sampling *sp,
                                                 const double *u, int *acc, int32_t *next, int *used,
                                                 struct mtpq_err *err) {
  csampler *s = static_cast<csampler *>(c);
  if (n < 1) return MTPQ_OK;
  cs_args a = cs_base(s, sp);
  int nr = 0;
  for (int i = 0; i < n; i++) {
    a.seq[i] = seq[i], a.keff[i] = keff[i];
    for (int j = 0; j < keff[i]; j++) a.d[i][j] = d[i][j]; // (checked by mtpq_sampler_accept)
    for (int k = 0; k < MTPQ_CSAMPLE_MAX_U; k++) a.u[i][k] = u[i * MTPQ_CSAMPLE_MAX_U + k];
    for (int r = 0; r <= keff[i]; r++) a.rs[nr][0] = (short)seq[i], a.rs[nr][1] = (short)r, nr++;
  }
  k_cs_probs<<<nr, CS_T, CS_SMEM, s->st>>>(a);
  CK(cudaGetLastError());
  k_cs_accept<<<n, CS_T, 0, s->st>>>(a, s->out);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(s->h_out, s->out, sizeof(cs_out) * (size_t)n, cudaMemcpyDeviceToHost, s->st));
  CK(cudaStreamSynchronize(s->st));
  for (int i = 0; i < n; i++) acc[i] = s->h_out[i].acc, next[i] = s->h_out[i].next, used[i] = s->h_out[i].used;
  return MTPQ_OK;
}
