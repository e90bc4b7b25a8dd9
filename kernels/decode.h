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
#include "kernels/target.h"

/* out[0, P + n_new): the prompt, then n_new greedy tokens. drafter NULL: no
 * speculation (the target alone, a token a step). st (may be NULL):
 * rounds, drafted and accepted tokens per position, as bench-acceptance
 * counts them; target_s / draft_s (may be NULL): seconds in each. */
enum mtpq_status mtpq_decode_greedy(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                    const int32_t *prompt, int64_t P, int64_t n_new, int k, int32_t *out,
                                    struct mtpq_accept_stats *st, double *target_s, double *draft_s,
                                    struct mtpq_err *err);

#endif
