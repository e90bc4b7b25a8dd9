/* The target model in the runtime (../shared/docs/target-architecture.md):
 * the Qwen3-Next / Qwen3.5 trunk by config.layer_types (Gated DeltaNet
 * "linear_attention" layers and gated "full_attention" layers), MoE with a
 * gated shared expert or a dense MLP, (1 + w) norms, the final norm and the
 * LM head (tied or not). Weights are read as the checkpoint stores them,
 * per tensor (BF16, FP8 per tensor, NVFP4), mapped from the safetensors
 * files; per-expert or fused (BF16) experts; the Qwen3-Next layout
 * (model., interleaved in_proj_qkvz / in_proj_ba) or Qwen3.5's
 * (model.language_model. or model., separate in_proj_qkv / z / b / a).
 *
 * Two backends behind this API: the CPU reference (float32, a token at a
 * time; target.c), whose sequence holds a float32 K/V cache per
 * full-attention layer (BF16 with mtpq_target_seq_kv_bf16) and, per GDN
 * layer, the conv state (the last K - 1 inputs of every conv channel) and
 * the fp32 recurrent state [HV][dk][dv]; and the CUDA backend
 * (kernels/target_cuda.h, kernels/cuda/target*.cu*), which keeps the same
 * state on the device with a BF16 K/V cache. Synthetic targets
 * (mtpq_target_synth) have random weights and no files.
 */
#ifndef MTPQ_KERNELS_TARGET_H
#define MTPQ_KERNELS_TARGET_H

#include <stdint.h>

#include "io/status.h"
#include "kernels/runtime.h" /* enum mtpq_backend */

struct mtpq_target;
struct mtpq_target_seq;

enum mtpq_status mtpq_target_open(const char *dir, struct mtpq_target **out, struct mtpq_err *err);
void mtpq_target_close(struct mtpq_target *t); /* NULL-safe */
/* A target with random weights and no files, for benchmarks and for tests
 * of the backends' weight formats: the shape from config.json text
 * (config_json), the formats of formats (enum mtpq_synth_formats); every
 * product's weights are distinct (windows into a random pool). */
enum mtpq_synth_formats {
  MTPQ_SYNTH_BF16,   /* every product BF16 */
  MTPQ_SYNTH_NVIDIA, /* as NVIDIA's NVFP4 checkpoints: routed and shared experts and o_proj NVFP4; GDN
                      * projections, q/k/v, router, shared_expert_gate, dense MLP and head BF16 */
  MTPQ_SYNTH_FP8,    /* q/k/v/o, GDN projections and the shared expert FP8, routed experts NVFP4, head BF16 */
};
enum mtpq_status mtpq_target_synth(const char *config_json, enum mtpq_synth_formats formats, uint64_t seed,
                                   struct mtpq_target **out, struct mtpq_err *err);
/* config.json text of a named shape ("qwen3-next-80b": Qwen3-Next-80B-A3B), or NULL */
const char *mtpq_target_synth_config(const char *name);
int64_t mtpq_target_hidden(const struct mtpq_target *t);
int64_t mtpq_target_vocab(const struct mtpq_target *t); /* the head's rows */
int mtpq_target_layers(const struct mtpq_target *t);
/* 'A' full attention, 'L' linear attention (Gated DeltaNet) */
char mtpq_target_layer_type(const struct mtpq_target *t, int layer);

/* One sequence of up to max_pos tokens, empty, verifying up to max_verify
 * tokens at once (CPU: 1..MTPQ_TARGET_MAX_VERIFY; CUDA: 1..8), on backend
 * be. The CPU backend is the float32 reference; the CUDA backend keeps a
 * BF16 K/V cache and sums in another order (its results are within the
 * tolerance the GPU tests state). The first CUDA sequence of a target
 * copies its weights to the device (once; not thread-safe). */
#define MTPQ_TARGET_MAX_VERIFY 16
enum mtpq_status mtpq_target_seq_open(struct mtpq_target *t, enum mtpq_backend be, int64_t max_pos, int max_verify,
                                      struct mtpq_target_seq **out, struct mtpq_err *err);
void mtpq_target_seq_close(struct mtpq_target_seq *s); /* NULL-safe */
int64_t mtpq_target_seq_len(const struct mtpq_target_seq *s);
/* The CPU backend's routing margin at position pos: over the MoE layers, the
 * smallest (p_k - p_k+1) / p_k of the router's k-th and (k + 1)-th expert
 * probabilities, as the last forward through pos computed it; 1 where no
 * layer routes or every expert is chosen, -1 where pos was not computed
 * (or on the CUDA backend). A routing within float error of a tie can go
 * the other way in another implementation (the CUDA backend, another
 * engine), after which the two part by far more than float error. */
double mtpq_target_seq_route_margin(const struct mtpq_target_seq *s, int64_t pos);
/* A CPU sequence that gives FP8 and NVFP4 routed experts their inputs as
 * the CUDA prefill does (one FP16 piece, each row scaled by a power of two:
 * kernels/cuda/k_egemm.cu) instead of in float32 (on: nonzero), so that
 * the GPU tests hold that path to its stated numerics; a CUDA sequence
 * gives MTPQ_E_INVAL. */
enum mtpq_status mtpq_target_seq_fp16_experts(struct mtpq_target_seq *s, int on, struct mtpq_err *err);
/* Run the next token of the sequence (at position seq_len; the state
 * advances by one): the final-norm hidden state into hidden (float [H]) and
 * the head's logits into logits (float [V]), each when not NULL; *argmax
 * (when not NULL) the head's argmax, ties to the lower id. */
enum mtpq_status mtpq_target_step(struct mtpq_target_seq *s, int32_t token, float *hidden, float *logits,
                                  int32_t *argmax, struct mtpq_err *err);
/* Verify T (1..max_verify) tokens at positions len .. len + T - 1 in one
 * call, keeping the state after each (target-architecture.md 3: vLLM's
 * scheme): hidden [T][H] and argmax [T] out (either NULL). The length is
 * then len + T; mtpq_target_accept(s, j) makes it len + j + 1, the first
 * j + 1 tokens accepted, by selecting the state kept after token j (the
 * K/V rows past the new length are overwritten by the tokens that follow;
 * the GDN state is one of the slots, not a copy or a re-run). A step or a
 * verify after a verify without an accept keeps all of it. */
enum mtpq_status mtpq_target_verify(struct mtpq_target_seq *s, int T, const int32_t *tokens, float *hidden,
                                    int32_t *argmax, struct mtpq_err *err);
/* mtpq_target_verify with the head's logits of each token too: logits [T][V] (may be NULL). On the CUDA
 * backend hidden and logits may be device memory (the live loop's rows, mtpq_backend_alloc; a sampler's
 * rows, kernels/sampler.h). */
enum mtpq_status mtpq_target_verify_logits(struct mtpq_target_seq *s, int T, const int32_t *tokens, float *hidden,
                                           float *logits, int32_t *argmax, struct mtpq_err *err);
enum mtpq_status mtpq_target_accept(struct mtpq_target_seq *s, int j, struct mtpq_err *err);
/* n sequences of one target and backend (distinct), each verifying T
 * tokens: s[b] as mtpq_target_verify_logits(s[b], T, tokens[b],
 * hidden[b], logits[b], argmax[b]) (hidden, logits, argmax or their
 * entries may be NULL; on the CUDA backend hidden[b] and logits[b] may be
 * device memory, as there), each accepted on its own after. On the CUDA
 * backend the sequences go through the target
 * as few forwards as hold them (MTPQ_TCUDA_MAX_T tokens a forward: 8 / T
 * sequences), every weight read once a forward; the CPU reference verifies
 * them one after another. All or none: on an error no sequence has a
 * verify. */
enum mtpq_status mtpq_target_verify_many(struct mtpq_target_seq *const *s, int n, int T, const int32_t *const *tokens,
                                         float *const *hidden, float *const *logits, int32_t *const *argmax,
                                         struct mtpq_err *err);
/* A prompt: n tokens at the sequence's end, its state after the last one
 * kept (as n steps leave it; a pending verify is accepted whole first);
 * the final-norm hidden state of each into hidden [n][H] (may be NULL; on
 * the CUDA backend may be device memory, mtpq_backend_alloc's); no
 * head (step or verify the prompt's last token for its logits). The CPU
 * reference runs the tokens one by one; the CUDA backend runs chunks of up
 * to 4,096 tokens with every product a GEMM over the chunk and each
 * weight read once a chunk (kernels/cuda/prefill.cuh), to float
 * tolerance of the forwards, not bit for bit. On an error the tokens of
 * the chunks before it stay in the sequence. */
enum mtpq_status mtpq_target_prefill(struct mtpq_target_seq *s, int64_t n, const int32_t *tokens, float *hidden,
                                     struct mtpq_err *err);
/* CPU: cache K and V in BF16 (rounded to nearest even) as the CUDA backend
 * and vLLM cache a BF16 model, instead of float32; before the first token
 * (the CUDA backend always does). */
enum mtpq_status mtpq_target_seq_kv_bf16(struct mtpq_target_seq *s, struct mtpq_err *err);
/* Benchmarks: make the sequence len tokens long without running them (the
 * cached K/V rows are zeros where no token wrote them, and the GDN state is
 * what it holds: the kernels read as many bytes as for a real context); a
 * pending verify is dropped. */
enum mtpq_status mtpq_target_seq_jump(struct mtpq_target_seq *s, int64_t len, struct mtpq_err *err);
/* the last step or verify's device time in microseconds (CUDA: events
 * around its graph, without the host's copies and wait), -1 on the CPU */
double mtpq_target_seq_last_us(const struct mtpq_target_seq *s);
/* CUDA: the last step or verify again, each kernel launched alone between
 * two events: up to max kernel names and their microseconds summed over the
 * layers; returns the count, or -1 (err set; the CPU backend has none) */
int mtpq_target_seq_profile(struct mtpq_target_seq *s, int T, const char **names, double *us, int max,
                            struct mtpq_err *err);
/* Bytes one forward at context ctx reads at the least: every weight it
 * uses once (routed experts: top-k a layer, each once), the cached K/V of
 * ctx positions, the GDN states read and T written; the head when head. */
int64_t mtpq_target_step_bytes(const struct mtpq_target *t, int64_t ctx, int T, int head);

/* The GDN state of layer (a linear-attention layer) after the tokens so
 * far: conv [conv_dim][K - 1] (oldest first) and rec [HV][dk][dv]; sizes in
 * *conv_n and *rec_n. NULL for another layer. Borrowed (CUDA: a host copy,
 * valid until the next call). */
const float *mtpq_target_seq_gdn(struct mtpq_target_seq *s, int layer, const float **rec, int64_t *conv_n,
                                 int64_t *rec_n);

#endif
