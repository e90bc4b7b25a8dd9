/* The live draft/verify loop, greedy (issue 49's core; mtp-architecture.md
 * 2.7): the target model itself verifies the drafter's proposals.
 *
 * Per round, with c tokens committed and x[c] the target's next token (not
 * yet run through it): the drafter catches up on the slots (h[t], x[t+1])
 * the target produced since its last round, proposes d1..dk (k drafts,
 * fewer near the end), the target verifies [x[c], d1..dk] in one call
 * (mtpq_target_verify), the longest prefix of drafts equal to the target's
 * own argmax is accepted plus the target's next token, and the target keeps
 * the state slot of the last accepted token (mtpq_target_accept). Greedy
 * speculative output equals plain greedy output token for token: the
 * accepted tokens are the target's own argmax at every position.
 */
#ifndef MTPQ_KERNELS_DECODE_H
#define MTPQ_KERNELS_DECODE_H

#include <stdint.h>

#include "io/status.h"
#include "kernels/replay.h"
#include "kernels/runtime.h"
#include "kernels/sample.h"
#include "kernels/target.h"

/* Wall-clock seconds of one decode: the prompt's prefill, then the
 * generation (target: its verify or decode forwards; draft: the drafter's
 * catch-up and drafting; accept: the acceptance: greedy, the drafts
 * compared with the target's tokens on the host; sampled, every
 * distribution the loop samples from (the drafts' q, the target's p), the
 * rejection step and the draws, where the backend keeps the logits
 * (kernels/sampler.h); the state slot kept; the rest is the loop's own
 * work). */
struct mtpq_decode_times {
  double prefill_s, gen_s, target_s, draft_s, accept_s;
};

/* Benchmark hooks of the live loops (a NULL pointer: none).
 * context: the sequence starts at this position, the target made that long
 * with mtpq_target_seq_jump and the drafter's cache rows before it left as
 * opened (zeros): every step reads the bytes of a real context that long.
 * pattern: round i accepts min(pattern[cursor++ % npattern], drafts) drafts
 * instead of comparing them with the target's argmax (sampled: instead of
 * the rejection steps' count), then takes the target's token after them:
 * the work of a real round with that
 * acceptance, for targets whose weights never agree with the drafter's
 * (synthetic ones). The output is then not the target's greedy output.
 * rounds (may be NULL; cap entries): each round's accepted drafts appended
 * at nrounds, which a later run takes as its pattern. */
struct mtpq_decode_bench {
  int64_t context;
  const uint8_t *pattern;
  int64_t npattern, cursor;
  uint8_t *rounds;
  int64_t cap, nrounds;
};

/* out[0, P + n_new): the prompt, then n_new greedy tokens. drafter NULL: no
 * speculation (the target alone, a token a step). The prompt runs through
 * the target in forwards of up to 8 tokens. The drafter reads the target's
 * hidden states rounded to BF16, as a BF16 model hands them over. st (may be NULL): rounds,
 * drafted and accepted tokens per position, as bench-acceptance counts
 * them; tm (may be NULL): where the time went; bench (may be NULL): see
 * struct mtpq_decode_bench. k: 1..7 on the CUDA backend
 * (a verify of k + 1 <= 8 tokens), 1..MTPQ_MAX_K on the CPU. */
enum mtpq_status mtpq_decode_greedy(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                    const int32_t *prompt, int64_t P, int64_t n_new, int k, int32_t *out,
                                    struct mtpq_accept_stats *st, struct mtpq_decode_times *tm,
                                    struct mtpq_decode_bench *bench, struct mtpq_err *err);

/* B (1..MTPQ_MAX_SEQS) sequences decoded together, each as
 * mtpq_decode_greedy decodes it (prompts[b] of P[b] tokens into outs[b],
 * the same output token for token), with ragged acceptance: every round
 * each live sequence's drafter catches up on its own slots, the first
 * drafts come from the head, the k - 1 after them for all B sequences in
 * one drafter call (one batch on the CUDA backend), then the target
 * verifies the live sequences together (mtpq_target_verify_many: on the
 * CUDA backend as many sequences a forward as 8 tokens hold, all of them
 * at k = 1) and each keeps its own state slot; without a drafter the
 * target decodes the live sequences a token each in one forward; a finished sequence drafts on, unread, until all are
 * done. st (may be NULL): B entries, each sequence's acceptance; bench's
 * pattern is taken round by round, sequence by sequence. */
enum mtpq_status mtpq_decode_greedy_batch(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                          int B, const int32_t *const *prompts, const int64_t *P, int64_t n_new, int k,
                                          int32_t *const *outs, struct mtpq_accept_stats *st,
                                          struct mtpq_decode_times *tm, struct mtpq_decode_bench *bench,
                                          struct mtpq_err *err);

/* The same loop sampling (kernels/sample.h): the target's next token drawn
 * from its distribution (sp: temperature, top-k, top-p, as vLLM applies
 * them), the drafter's k tokens each drawn from its own distribution q
 * under the same settings, and each accepted with probability
 * min(1, p/q), a rejected one replaced by a draw from max(0, p - q)
 * normalised, a bonus token from p when all are accepted: the output is
 * distributed as the target's own sampling. drafter NULL: no speculation.
 * The random stream is (sp->seed, stream): the same pair, the same output
 * (on one backend). The distributions are made where the backend keeps
 * the logits (kernels/sampler.h: on the device on the CUDA backend). st
 * counts acceptance as the greedy loop does. */
enum mtpq_status mtpq_decode_sample(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                    const int32_t *prompt, int64_t P, int64_t n_new, int k,
                                    const struct mtpq_sampling *sp, uint64_t stream, int32_t *out,
                                    struct mtpq_accept_stats *st, struct mtpq_decode_times *tm, struct mtpq_err *err);

/* B (1..MTPQ_MAX_SEQS) sequences sampled together, sequence b exactly as
 * mtpq_decode_sample decodes it alone with stream + b (prompts[b] of P[b]
 * tokens into outs[b]; on one backend, the same output token for token):
 * every round each live sequence drafts on its own (its own cache in one
 * drafter session), then the target verifies the live sequences with the
 * same number of drafts together (mtpq_target_verify_many, logits kept),
 * and each accepts or rejects with its own random stream. st (may be NULL):
 * B entries. bench (may be NULL): as the greedy loop's, a pattern's count
 * taking the place of the rejection steps' (the token after the accepted
 * drafts is then the one the sampler drew where it stopped: the work of a
 * sampled round with that acceptance, not the target's sampling). */
enum mtpq_status mtpq_decode_sample_batch(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                          int B, const int32_t *const *prompts, const int64_t *P, int64_t n_new, int k,
                                          const struct mtpq_sampling *sp, uint64_t stream, int32_t *const *outs,
                                          struct mtpq_accept_stats *st, struct mtpq_decode_times *tm,
                                          struct mtpq_decode_bench *bench, struct mtpq_err *err);

#endif
