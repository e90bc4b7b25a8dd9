// The CUDA backend's step: the kernels of one draft step in order
// (backend.cuh has the map), captured as a CUDA graph per token count, the
// draft chain (step + head + feedback, k times, one synchronisation), and
// the backend's entry points (kernels/runtime_cuda.h).
#include "kernels/cuda/backend.cuh"

// the kernels of one step for n tokens (inputs in g->io.tok/pos/seqa, hidden in
// g->x.out). k_prep starts a step without programmatic dependence: the kernels
// after it read positions and cached rows before they wait, which is safe
// only once the previous step has finished. chain: a head follows (where it
// goes through cuBLASLt, k_final also writes its x pieces)
static void enqueue_step(gpu_session *g, int n, bool chain) {
  const struct mtpq_rt_model *d = g->d;
  const plan &p = g->plans[n];
  mark(g, "start");
  g->on = g->st;
  ops_prep(g, n);
  mark(g, "embed+norms");
  launch_mv(g, p.fc);
  mark(g, "fc");
  ops_norm(g, n);
  mark(g, "input norm");
  launch_mv(g, p.qkv);
  mark(g, "q,k,v");
  attn_launch(g, n); // (marks its two kernels)
  launch_mv(g, p.o);
  mark(g, "o_proj");
  ops_add_norm(g, n);
  mark(g, "residual+norm");
  // the shared expert (gate/up, SwiGLU, down into m2) on a second stream
  // beside the router, routing and routed experts: it needs y2 only (ledger 24)
  const bool side = d->moe && d->sg.w && !g->prof.on;
  if (side) {
    cudaEventRecord(g->fork, g->st);
    cudaStreamWaitEvent(g->st2, g->fork, 0);
    g->on = g->st2;
  }
  launch_mv(g, p.gus);
  mark(g, "shared expert gate/up");
  if (d->sg.w) ops_swiglu(g, n, g->K, 1, 16);
  mark(g, "shared expert swiglu");
  launch_mv(g, p.downs);
  mark(g, "shared expert down");
  if (side) {
    cudaEventRecord(g->join, g->st2);
    g->on = g->st;
  }
  if (d->moe) {
    launch_mv(g, p.rs);
    mark(g, "router+shared gate");
    ops_route(g, n);
    mark(g, "softmax+top-k");
    launch_mv(g, p.gu);
    mark(g, "experts gate/up");
    if (!g->set.glu) {
      ops_swiglu(g, n, 0, g->K, 64);
      mark(g, "experts swiglu");
    }
    launch_mv(g, p.down);
    mark(g, "experts down (weighted sum)");
  }
  if (side) cudaStreamWaitEvent(g->st, g->join, 0);
  ops_final(g, n, !side, chain && p.lt.on ? g->lt.b : nullptr);
  mark(g, "final norm");
}

static void enqueue_chain_step(gpu_session *g, int n) {
  enqueue_step(g, n, true);
  if (g->plans[n].lt.on) lt_run(g, n);
  else launch_mv(g, g->plans[n].head);
  mark(g, "head+argmax");
  ops_next(g, n);
  mark(g, "feedback");
}

static enum mtpq_status ensure(gpu_session *g, int n, bool chain, struct mtpq_err *err) {
  plan &p = g->plans[n];
  if (!p.built) {
    enum mtpq_status st = build_plan(g, n, err);
    if (st) return st;
  }
  cudaGraphExec_t &ex = chain ? p.chain : p.step;
  if (!g->set.tune.graphs || ex) return MTPQ_OK;
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal));
  if (chain) enqueue_chain_step(g, n);
  else enqueue_step(g, n, false);
  CK(cudaStreamEndCapture(g->st, &gr));
  cudaError_t e = cudaGraphInstantiate(&ex, gr, 0);
  cudaGraphDestroy(gr);
  CK(e);
  return MTPQ_OK;
}

static enum mtpq_status run(gpu_session *g, int n, bool chain, struct mtpq_err *err) {
  cudaGraphExec_t ex = chain ? g->plans[n].chain : g->plans[n].step;
  if (g->set.tune.graphs) CK(cudaGraphLaunch(ex, g->st));
  else if (chain) enqueue_chain_step(g, n);
  else enqueue_step(g, n, false);
  CK(cudaGetLastError());
  return MTPQ_OK;
}

// token ids, sequences, positions, the step counter (0) and the hidden
// states of n slots (none: n = 0) to the device: one copy of the staging
// block's first bytes, marked by io.staged
static enum mtpq_status stage(gpu_session *g, int n, struct mtpq_err *err) {
  CK(cudaMemcpyAsync(g->io.dev, g->io.host, ST_HID + (size_t)(n * g->d->H) * 4, cudaMemcpyHostToDevice, g->st));
  CK(cudaEventRecord(g->io.staged, g->st));
  return MTPQ_OK;
}

// before the host writes the pinned staging block: its last copy (which
// may still be queued behind a step that did not wait) has read it
static enum mtpq_status staging(gpu_session *g, struct mtpq_err *err) {
  CK(cudaEventSynchronize(g->io.staged));
  return MTPQ_OK;
}

// count floats from src (device memory) into dst, each rounded to BF16
// (to nearest even) when bf16: a BF16 target's hidden states as it hands
// them over
static __global__ void k_hid_in(const float *src, float *dst, int64_t count, int bf16) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = bf16 ? __bfloat162float(__float2bfloat16_rn(src[i])) : src[i];
}

static enum mtpq_status check_slot(const gpu_session *g, int32_t tok, int64_t pos, struct mtpq_err *err) {
  if (pos < 0 || pos >= g->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld outside the %lld-position cache", (long long)pos,
                        (long long)g->max_pos);
  if (tok < 0 || tok >= g->d->embed_rows)
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tok,
                        (long long)g->d->embed_rows);
  return MTPQ_OK;
}

// a chunk of the next n slots: up to 8 at strictly increasing positions (each sees the earlier ones)
static int chunk(const int64_t *positions, int n) {
  int c = 1;
  while (c < n && c < RT_NMAX && positions[c] > positions[c - 1]) c++;
  return c;
}

static enum mtpq_status chain(gpu_session *g, int n, int steps, int drafts, int32_t *out_tokens,
                              struct mtpq_err *err);

extern "C" enum mtpq_status mtpq__cuda_step(void *p, int n, const int32_t *tokens, const void *hidden,
                                            int hidden_bf16, const int64_t *positions, float *out_hidden,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  enum mtpq_status st0 = staging(g, err);
  if (st0) return st0;
  for (int i = 0; i < n;) {
    int c = chunk(positions + i, n - i);
    for (int j = 0; j < c; j++) {
      enum mtpq_status st = check_slot(g, tokens[i + j], positions[i + j], err);
      if (st) return st;
      g->io.h_tok[j] = tokens[i + j], g->io.h_pos[j] = positions[i + j], g->io.h_seq[j] = g->cur;
      if (hidden_bf16)
        for (int64_t k = 0; k < H; k++) {
          uint16_t b;
          memcpy(&b, (const unsigned char *)hidden + ((size_t)(i + j) * H + k) * 2, 2);
          g->io.h_hid[j * H + k] = mtpq_bf16_to_f32(b);
        }
      else
        memcpy(g->io.h_hid + j * H, (const float *)hidden + (size_t)(i + j) * H, (size_t)H * 4);
    }
    enum mtpq_status st = ensure(g, c, false, err);
    if (!st) st = stage(g, c, err);
    if (!st) st = run(g, c, false, err);
    if (st) return st;
    CK(cudaMemcpyAsync(g->io.h_hid, g->x.out, (size_t)(c * H) * 4, cudaMemcpyDeviceToHost, g->st));
    CK(cudaStreamSynchronize(g->st));
    memcpy(out_hidden + (size_t)i * H, g->io.h_hid, (size_t)(c * H) * 4);
    i += c;
  }
  return MTPQ_OK;
}

// a reduced head's rows into full-vocabulary logits in device memory (-inf where it has no row)
static __global__ void k_head_ninf(float *out, int64_t V) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < V) out[i] = -INFINITY;
}
static __global__ void k_head_scatter(const float *small, const int64_t *ids, int64_t rows, float *out) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows) out[ids[i]] = small[i];
}

extern "C" enum mtpq_status mtpq__cuda_head(void *p, const float *hidden, int32_t *tok, float *logits, int on_device,
                                            struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const struct mtpq_rt_model *d = g->d;
  if (!g->plans[1].built) {
    enum mtpq_status st = build_plan(g, 1, err);
    if (st) return st;
  }
  CK(cudaMemcpyAsync(g->x.out, hidden, (size_t)d->H * 4, cudaMemcpyDefault, g->st)); // (host or device memory)
  CK(cudaMemsetAsync(g->x.best, 0, sizeof(unsigned long long), g->st));
  const int pdl = g->set.pdl; // after a memset: nothing to overlap
  g->set.pdl = 0;
  launch_mv(g, logits ? g->plans[1].head_logits : g->plans[1].head);
  g->set.pdl = pdl;
  CK(cudaGetLastError());
  if (logits && on_device) { // (a sampler's row: it stays on the device)
    const int64_t R = d->head.rows;
    if (d->reduced) {
      k_head_ninf<<<(unsigned)((d->full_vocab + 255) / 256), 256, 0, g->st>>>(logits, d->full_vocab);
      k_head_scatter<<<(unsigned)((R + 255) / 256), 256, 0, g->st>>>(g->x.logits, g->w.ids, R, logits);
      CK(cudaGetLastError());
    } else {
      CK(cudaMemcpyAsync(logits, g->x.logits, (size_t)R * 4, cudaMemcpyDeviceToDevice, g->st));
    }
  }
  CK(cudaMemcpyAsync(g->io.h_best, g->x.best, sizeof(unsigned long long), cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
  int64_t row = (int64_t)(0xFFFFFFFFu - (uint32_t)(g->io.h_best[0] & 0xFFFFFFFFu));
  *tok = (int32_t)(d->reduced ? d->ids[row] : row);
  if (logits && !on_device) {
    std::vector<float> small((size_t)d->head.rows);
    CK(cudaMemcpy(small.data(), g->x.logits, small.size() * 4, cudaMemcpyDeviceToHost));
    if (d->reduced) {
      for (int64_t v = 0; v < d->full_vocab; v++) logits[v] = -INFINITY;
      for (int64_t k = 0; k < d->head.rows; k++) logits[d->ids[k]] = small[(size_t)k];
    } else {
      memcpy(logits, small.data(), small.size() * 4);
    }
  }
  return MTPQ_OK;
}

extern "C" enum mtpq_status mtpq__cuda_draft(void *p, int n, const int32_t *tokens, const float *hidden,
                                             const int64_t *positions, int steps, int32_t *out_tokens,
                                             struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  if (n < 1 || n > g->nseq)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences in a session of %d", n, g->nseq);
  if (steps < 1 || steps > RT_MAXSTEPS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d draft steps: 1..%d", steps, RT_MAXSTEPS);
  for (int j = 0; j < n; j++) {
    enum mtpq_status st = check_slot(g, tokens[j], positions[j] + steps - 1, err);
    if (!st) st = check_slot(g, tokens[j], positions[j], err);
    if (st) return st;
  }
  enum mtpq_status st0 = staging(g, err);
  if (st0) return st0;
  for (int j = 0; j < n; j++) g->io.h_tok[j] = tokens[j], g->io.h_pos[j] = positions[j], g->io.h_seq[j] = j;
  memcpy(g->io.h_hid, hidden, (size_t)(n * H) * 4);
  enum mtpq_status st = ensure(g, n, true, err);
  if (!st) st = stage(g, n, err);
  if (st) return st;
#ifdef MTPQ_TIMELINE
  tl_reset(g);
#endif
  CK(cudaEventRecord(g->prof.t0, g->st));
  return chain(g, n, steps, steps, out_tokens, err);
}

// the chain's last part: `steps` chain steps for n sequences, then the
// call's `drafts` ids a sequence (rec, in k_next's order) to the host, the
// one wait, and the device time since prof.t0
static enum mtpq_status chain(gpu_session *g, int n, int steps, int drafts, int32_t *out_tokens,
                              struct mtpq_err *err) {
  enum mtpq_status st = MTPQ_OK;
  for (int s = 0; s < steps && !st; s++) st = run(g, n, true, err);
  CK(cudaEventRecord(g->prof.t1, g->st));
  if (st) return st;
  CK(cudaMemcpyAsync(g->io.h_rec, g->io.rec, (size_t)(drafts * n) * sizeof(int), cudaMemcpyDeviceToHost, g->st));
  CK(cudaStreamSynchronize(g->st));
  memcpy(out_tokens, g->io.h_rec, (size_t)(drafts * n) * sizeof(int32_t));
  float ms = 0;
  g->prof.draft_us = cudaEventElapsedTime(&ms, g->prof.t0, g->prof.t1) == cudaSuccess ? ms * 1e3 : -1;
#ifdef MTPQ_TIMELINE
  tl_write(nullptr, nullptr);
#endif
  return MTPQ_OK;
}

extern "C" void *mtpq__cuda_alloc(size_t bytes) {
  void *p = nullptr;
  return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : nullptr;
}

extern "C" void mtpq__cuda_free(void *p) {
  if (p) cudaFree(p);
}

extern "C" enum mtpq_status mtpq__cuda_copy(void *dst, const void *src, size_t bytes, struct mtpq_err *err) {
  CK(cudaDeviceSynchronize()); // (the sessions' streams do not block the legacy stream)
  CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  return MTPQ_OK;
}

// the slots' ids to the staging block, their hidden rows from device memory
// into the step's input (rounded where bf16), the step, its outputs copied
// out: all queued, no wait (the staging block is waited for before it is
// written again)
extern "C" enum mtpq_status mtpq__cuda_step_at(void *p, int n, const int32_t *tokens, const float *hidden, int bf16,
                                               const int64_t *positions, float *out_hidden, struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  for (int i = 0; i < n;) {
    const int c = chunk(positions + i, n - i);
    for (int j = 0; j < c; j++) {
      enum mtpq_status st = check_slot(g, tokens[i + j], positions[i + j], err);
      if (st) return st;
    }
    enum mtpq_status st = staging(g, err);
    if (st) return st;
    for (int j = 0; j < c; j++)
      g->io.h_tok[j] = tokens[i + j], g->io.h_pos[j] = positions[i + j], g->io.h_seq[j] = g->cur;
    st = ensure(g, c, false, err);
    if (!st) st = stage(g, 0, err);
    if (st) return st;
    const int64_t cnt = (int64_t)c * H;
    k_hid_in<<<(unsigned)((cnt + 255) / 256 < 264 ? (cnt + 255) / 256 : 264), 256, 0, g->st>>>(
        hidden + (size_t)i * H, g->x.out, cnt, bf16);
    CK(cudaGetLastError());
    st = run(g, c, false, err);
    if (st) return st;
    CK(cudaMemcpyAsync(out_hidden + (size_t)i * H, g->x.out, (size_t)cnt * 4, cudaMemcpyDeviceToDevice, g->st));
    i += c;
  }
  return MTPQ_OK;
}

// the heads on the n rows (the step's input rows: x.out), k_next feeding
// their argmax in as the chain's tokens at positions[j] (staged one lower:
// k_next moves them on) and recording it as the first draft, then the
// chain's steps - 1 steps: the host waits once, for the drafts
extern "C" enum mtpq_status mtpq__cuda_draft_at(void *p, int n, const float *const *hidden, const int64_t *positions,
                                                int steps, int32_t *out_tokens, struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  const int64_t H = g->d->H;
  if (n < 1 || n > g->nseq) return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences in a session of %d", n, g->nseq);
  if (steps < 1 || steps > RT_MAXSTEPS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d draft steps: 1..%d", steps, RT_MAXSTEPS);
  for (int j = 0; j < n; j++) {
    enum mtpq_status st = check_slot(g, 0, positions[j], err);
    if (!st && steps > 1) st = check_slot(g, 0, positions[j] + steps - 2, err);
    if (st) return st;
  }
  enum mtpq_status st = staging(g, err);
  if (st) return st;
  for (int j = 0; j < n; j++) g->io.h_tok[j] = 0, g->io.h_pos[j] = positions[j] - 1, g->io.h_seq[j] = j;
  st = ensure(g, n, true, err);
  if (!st) st = stage(g, 0, err);
  if (st) return st;
#ifdef MTPQ_TIMELINE
  tl_reset(g);
#endif
  CK(cudaEventRecord(g->prof.t0, g->st));
  for (int j = 0; j < n; j++)
    if (hidden[j])
      CK(cudaMemcpyAsync(g->x.out + j * H, hidden[j], (size_t)H * 4, cudaMemcpyDeviceToDevice, g->st));
    else
      CK(cudaMemsetAsync(g->x.out + j * H, 0, (size_t)H * 4, g->st));
  CK(cudaMemsetAsync(g->x.best, 0, (size_t)n * sizeof(unsigned long long), g->st));
  const int pdl = g->set.pdl; // after a memset: nothing to overlap
  g->set.pdl = 0;
  g->on = g->st;
  launch_mv(g, g->plans[n].head);
  g->set.pdl = pdl;
  ops_next(g, n);
  CK(cudaGetLastError());
  return chain(g, n, steps - 1, steps, out_tokens, err);
}

extern "C" enum mtpq_status mtpq__cuda_flush_l2(void *p, struct mtpq_err *err) {
  return sweep_flush_l2(static_cast<gpu_session *>(p), err);
}

extern "C" double mtpq__cuda_draft_device_us(void *p) { return static_cast<gpu_session *>(p)->prof.draft_us; }

extern "C" int mtpq__cuda_profile(void *p, int n, const char **names, double *us, int max, struct mtpq_err *err) {
  gpu_session *g = static_cast<gpu_session *>(p);
  if (n < 1 || n > RT_NMAX || !g->plans[n].built) {
    mtpq_err_set(err, MTPQ_E_INVAL, "profile: run a %d-sequence draft first", n);
    return -1;
  }
  g->prof.ev.assign(64, nullptr); // created before the step: creating them between launches would stall it
  for (cudaEvent_t &e : g->prof.ev) cudaEventCreate(&e);
  g->prof.on = true;
  enqueue_chain_step(g, n); // the positions move on by one, as in a draft step
  g->prof.on = false;
  int k = 0;
  if (cudaStreamSynchronize(g->st) == cudaSuccess)
    for (size_t i = 1; i < g->prof.names.size() && k < max; i++, k++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, g->prof.ev[i - 1], g->prof.ev[i]);
      names[k] = g->prof.names[i], us[k] = ms * 1e3;
    }
  for (cudaEvent_t e : g->prof.ev) cudaEventDestroy(e);
  g->prof.ev.clear(), g->prof.names.clear();
  return k;
}
