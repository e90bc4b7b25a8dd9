/* The embedded drafter runtime (kernels/): one loaded model for the
 * Qwen3-Next / Qwen3.5 MTP drafter (struct mtpq_rt_model, kernels/rt_model.c)
 * and sessions over it (kernels/rt_session.c) run by the CPU reference
 * backend or the CUDA backend (kernels/cuda/), which implement the same
 * calls; the greedy replay and its metrics are in kernels/replay.h, the
 * trace file in kernels/traces.h.
 *
 * Forward pass (../shared/docs/mtp-architecture.md 2.2), per token slot with
 * inputs (token, hidden h_in, position):
 *   e = embed[token]; c = [ZCNorm(e; pre_fc_norm_embedding), ZCNorm(h_in;
 *   pre_fc_norm_hidden)]; x0 = fc(c)
 *   a = ZCNorm(x0; input_layernorm); q|gate interleaved per head from q_proj;
 *   k, v; per-head ZCNorm on q and k; partial NeoX RoPE (rotary dim =
 *   head_dim x partial_rotary_factor, theta from the config); k, v into the
 *   drafter's own KV cache at the position; causal GQA attention (scale
 *   head_dim^-0.5, optional sliding window); o = attn x sigmoid(gate); y =
 *   o_proj(o); r2 = y + x0; y2 = ZCNorm(r2; post_attention_layernorm)
 *   MoE: fp32 softmax over all experts, top-k, renormalised (norm_topk_prob),
 *   SiLU-gated experts, + sigmoid(shared_expert_gate(y2)) x shared(y2); or a
 *   dense SiLU MLP
 *   out = ZCNorm(m + r2; mtp.norm): the drafter output, fed back as h_in of
 *   the next step and projected by the head (the target's lm_head / tied
 *   embedding, or the FP8 draft head whose argmax maps through the ids).
 * ZCNorm(x; w) = x / sqrt(mean(x^2) + eps) * (1 + w). Weights are BF16, FP8
 * per tensor or NVFP4, dequantized on the fly; the CPU backend accumulates
 * in float32 and keeps activations in float32 (vLLM rounds activations to
 * bf16 between ops, so logits differ from it at bf16 ULP scale); the KV
 * cache holds K (normed, roped) and V rounded to BF16 as vLLM's does, so a
 * step reads the cache bytes vLLM's reads.
 */
#ifndef MTPQ_KERNELS_RUNTIME_H
#define MTPQ_KERNELS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

struct mtpq_rt_model;

/* Load the stock drafter (drafter_dir NULL: the target's own mtp.*) or an
 * mtpq -mtpfp8 repo, with the embedding (and, for the stock drafter, the
 * head) from the target. Refuses a drafter repo made from another target. */
enum mtpq_status mtpq_rt_model_open(const char *target_dir, const char *drafter_dir,
                                   struct mtpq_rt_model **out, struct mtpq_err *err);
void mtpq_rt_model_close(struct mtpq_rt_model *d); /* NULL-safe */

int64_t mtpq_rt_model_hidden(const struct mtpq_rt_model *d);
int64_t mtpq_rt_model_vocab(const struct mtpq_rt_model *d); /* head rows of the full vocabulary */
/* 1 when the head is a reduced draft head. */
int mtpq_rt_model_reduced_head(const struct mtpq_rt_model *d);

/* Bytes a batch-1 step reads at `context` cached positions: every dense
 * linear, top-k experts, the head, one embedding row, and the K/V cache at
 * kv_elem_bytes per element (2: both backends cache BF16). */
int64_t mtpq_rt_model_step_bytes(const struct mtpq_rt_model *d, int64_t context, int kv_elem_bytes);
/* The same for `batch` sequences drafting together: dense linears and head
 * once, embedding rows, experts and K/V per sequence (experts that two
 * sequences share counted twice: an upper bound, what the kernels read). */
int64_t mtpq_rt_model_step_bytes_batch(const struct mtpq_rt_model *d, int64_t context, int kv_elem_bytes, int batch);
/* Backends. */
enum mtpq_backend { MTPQ_BACKEND_CPU, MTPQ_BACKEND_CUDA };

struct mtpq_session; /* KV caches (1..MTPQ_MAX_SEQS sequences) + scratch */

enum mtpq_status mtpq_session_open(struct mtpq_rt_model *d, enum mtpq_backend be, int64_t max_pos,
                                   int window, struct mtpq_session **out, struct mtpq_err *err);
/* A session with nseq (1..MTPQ_MAX_SEQS) independent KV caches: the batch of
 * mtpq_session_draft. mtpq_session_open is nseq = 1. */
#define MTPQ_MAX_SEQS 8
#define MTPQ_MAX_DRAFT_STEPS 64
enum mtpq_status mtpq_session_open_batch(struct mtpq_rt_model *d, enum mtpq_backend be, int64_t max_pos, int window,
                                         int nseq, struct mtpq_session **out, struct mtpq_err *err);
void mtpq_session_close(struct mtpq_session *s);
/* The sequence (cache) that mtpq_session_step writes and reads; 0 at open. */
enum mtpq_status mtpq_session_select(struct mtpq_session *s, int seq, struct mtpq_err *err);
/* Draft `steps` tokens for sequences 0..n-1 at once: sequence i starts from
 * tokens[i] and hidden[i] (float32 [n, H]) at positions[i]; every step feeds
 * the drafter output and the head's argmax back (positions + 1).
 * out_tokens[k * n + i] is sequence i's k-th draft. The CUDA backend runs
 * the n sequences as one batch and synchronises once per call; the CPU
 * backend runs them one after the other. The selected sequence is kept. */
enum mtpq_status mtpq_session_draft(struct mtpq_session *s, int n, const int32_t *tokens, const float *hidden,
                                    const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err);

/* Run n slots: tokens[i], hidden[i] (float32 [n, H], or bf16 when
 * hidden_bf16 is set), positions[i]; the drafter outputs (after mtp.norm,
 * float32 [n, H]) go to out_hidden. Slots run in order, each writing its KV
 * entry and attending to cached positions <= its own. */
enum mtpq_status mtpq_session_step(struct mtpq_session *s, int n, const int32_t *tokens,
                                   const void *hidden, int hidden_bf16, const int64_t *positions,
                                   float *out_hidden, struct mtpq_err *err);
/* The head on one drafter output: argmax as a target vocabulary id (ties to
 * the lower id); out_logits (NULL or float32 [V]) gets the full-vocabulary
 * logits, -inf outside a reduced draft head. */
void mtpq_session_head(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *out_logits);
/* The same with the logits (float32 [V], not NULL) where the session's
 * backend keeps data: device memory on the CUDA backend (a sampler's draft
 * row, kernels/sampler.h), host memory on the CPU. On the CUDA backend both
 * heads also take hidden in device memory (mtpq_backend_alloc's). */
void mtpq_session_head_at(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *logits);

/* The live loop's hand-over (kernels/decode.c): the target's hidden states
 * and the drafter's outputs stay where the backend keeps data: device memory
 * on the CUDA backend, host memory on the CPU. mtpq_backend_alloc gives such
 * memory (NULL when out of memory or without the backend), mtpq_backend_free
 * takes it back (NULL: nothing). */
void *mtpq_backend_alloc(enum mtpq_backend be, size_t bytes);
void mtpq_backend_free(enum mtpq_backend be, void *p);
/* bytes from src to dst, each host memory or the backend's (CUDA: after
 * the work queued before it) */
enum mtpq_status mtpq_backend_copy(enum mtpq_backend be, void *dst, const void *src, size_t bytes,
                                   struct mtpq_err *err);
/* mtpq_session_step with hidden and out_hidden (float32 [n, H]) in the
 * session's backend memory; with bf16 set each hidden value is read rounded
 * to BF16 (to nearest even), as a BF16 target hands its hidden states over.
 * The CUDA backend does not wait for the step: the session's later calls
 * follow it, and mtpq_session_draft_at's wait covers it. */
enum mtpq_status mtpq_session_step_at(struct mtpq_session *s, int n, const int32_t *tokens, const float *hidden,
                                      int bf16, const int64_t *positions, float *out_hidden, struct mtpq_err *err);
/* Draft `steps` tokens for sequences 0..n-1 from drafter outputs alone:
 * sequence i's first draft is the head's argmax on hidden[i] (a row of H
 * floats in the session's backend memory; NULL: zeros, an unread place in
 * the batch), and the steps - 1 after it go as mtpq_session_draft's from
 * that token and row at positions[i]. out_tokens[k * n + i] as there. On the
 * CUDA backend the heads and the steps run without the host between them:
 * one wait a call, for the drafts. */
enum mtpq_status mtpq_session_draft_at(struct mtpq_session *s, int n, const float *const *hidden,
                                       const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err);

/* CUDA backend: time each kernel of one draft step (+ head) for the n
 * sequences of the last mtpq_session_draft, launched one by one with events
 * between them; names[i] and us[i] for up to max kernels; returns the count,
 * 0 on the CPU backend, -1 on error (err set). */
int mtpq_session_profile(struct mtpq_session *s, int n, const char **names, double *us, int max,
                         struct mtpq_err *err);

/* CUDA backend: the last mtpq_session_draft's device time in microseconds,
 * from its first step's first kernel to its last step's end (what its steps
 * took on the GPU, without staging the inputs, copying the drafts back and
 * the host's wait); -1 on the CPU backend or before any draft. */
double mtpq_session_draft_device_us(const struct mtpq_session *s);

/* CUDA backend: replace what the device's L2 holds (reads a buffer four
 * times its size), as the target's verify step between two draft calls
 * would, and wait for it; nothing on the CPU backend. bench-step runs it
 * before each timed call. */
enum mtpq_status mtpq_session_flush_l2(struct mtpq_session *s, struct mtpq_err *err);

/* Hidden size of the session's drafter. */
int64_t mtpq_session_hidden(const struct mtpq_session *s);


/* The CUDA backend's settings as the sessions of this process use them:
 * the kill switches MTPQ_CUDA_GRAPHS=0 and MTPQ_CUDA_PDL=0, and the tuning
 * string MTPQ_CUDA_TUNE (kernels/cuda/tune.c: keys, ranges, what each
 * does), read and checked once. Writes a one-line description ("graphs on,
 * pdl on, tune: default") into buf; an unknown key or a value out of range
 * is an error naming it (then every CUDA session open fails with it too). */
enum mtpq_status mtpq_cuda_settings(char *buf, size_t cap, struct mtpq_err *err);

/* Measured HBM read bandwidth of device 0 in GB/s (kernels/cuda/sweep.cu):
 * the best of 5 timed passes of a 16-byte-load streaming read over 4 GiB. */
enum mtpq_status mtpq_gpu_read_gbps(double *gbps, struct mtpq_err *err);

#endif
