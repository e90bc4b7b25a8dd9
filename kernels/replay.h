/* Greedy draft/verify replay over a recorded target trace (mtp-architecture.md
 * section 2.7 and 3): for greedy decoding the accepted prefix is always the
 * target's own output, so replaying the trace reproduces the live loop.
 *
 * With tokens x[0, N) (the first P the prompt) and the target's final-norm
 * hidden states h[t]: the committed length starts at c = P (x[P] is the
 * target's first generated token). Each round: a first drafter pass over the
 * slots not yet passed with real hidden states, slot t = (h[t], x[t+1]) at
 * position t, up to t = c - 1, whose output gives draft d1; steps 2..k feed
 * the drafter's own post-norm output and its previous draft at the next
 * position; drafts are compared with x[c+1], x[c+2], ... and accepted while
 * they match (k is cut at the end of the trace); c advances by accepted + 1.
 * Steps 2..k run as one mtpq_session_draft call (on the CUDA backend: the
 * on-device chain of CUDA graph replays, one synchronisation), the same
 * arithmetic as a step and a head per draft.
 */
#ifndef MTPQ_KERNELS_REPLAY_H
#define MTPQ_KERNELS_REPLAY_H

#include <stdint.h>

#include "kernels/runtime.h"
#include "kernels/traces.h"

#define MTPQ_MAX_K 16

struct mtpq_accept_stats {
  int k;
  uint64_t drafts;       /* rounds */
  uint64_t draft_tokens; /* drafted tokens (k, less at the trace end) */
  uint64_t accepted[MTPQ_MAX_K]; /* rounds whose draft i was accepted */
  uint64_t reached[MTPQ_MAX_K];  /* rounds whose draft i was compared (all before it accepted) */
  /* wall-clock seconds in the drafter, as the replay calls it: drafting
   * (the head on the last catch-up output, then steps 2..k) and catching up
   * (the first pass over the slots the target verified since the last round;
   * the prompt's pass, before the first round, is left out) */
  double draft_s, catchup_s;
  uint64_t catchups; /* rounds whose catch-up was timed */
};

/* Replay one trace with a fresh session (the caller opens it per trace). */
enum mtpq_status mtpq_replay_trace(struct mtpq_session *s, const int32_t *tokens, const void *hidden_bf16,
                                   int64_t n, int64_t prompt_len, int k, struct mtpq_accept_stats *st,
                                   struct mtpq_err *err);

/* a += b */
void mtpq_accept_add(struct mtpq_accept_stats *a, const struct mtpq_accept_stats *b);

/* Acceptance metrics (../shared/docs/speculative-decoding.md):
 *   mal      mean acceptance length, 1 + accepted drafts / rounds
 *   cond     P(draft i accepted | the drafts before it accepted)
 *   perpos   rounds whose draft i was accepted / rounds (vLLM's per-position rate)
 * and the drafter's wall time, microseconds:
 *   step_us     per drafted token while drafting
 *   catchup_us  per round catching up on the slots the target verified
 *   round_us    per round in all (what a verify step waits for)
 *   tokens_per_s  drafted tokens / drafter time
 * Each is 0 where its denominator is. */
double mtpq_accept_mal(const struct mtpq_accept_stats *s);
double mtpq_accept_cond(const struct mtpq_accept_stats *s, int i);
double mtpq_accept_perpos(const struct mtpq_accept_stats *s, int i);
double mtpq_accept_step_us(const struct mtpq_accept_stats *s);
double mtpq_accept_catchup_us(const struct mtpq_accept_stats *s);
double mtpq_accept_round_us(const struct mtpq_accept_stats *s);
double mtpq_accept_tokens_per_s(const struct mtpq_accept_stats *s);

/* Acceptance of one drafter over every trace of a file, per domain (in the
 * order domains first appear) and over all: a fresh session per trace. */
#define MTPQ_MAX_DOMAINS 32
struct mtpq_accept_report {
  int ndom;
  char dom[MTPQ_MAX_DOMAINS][MTPQ_TRACE_DOMAIN_MAX];
  struct mtpq_accept_stats st[MTPQ_MAX_DOMAINS];
  struct mtpq_accept_stats all;
  /* each trace's own counts, in file order, and its domain's index: the
   * units of the intervals (kernels/accept_ci.h) */
  size_t ntr;
  struct mtpq_accept_stats *tr;
  int *tr_dom;
};
void mtpq_accept_report_free(struct mtpq_accept_report *r);
/* Checks the traces against the model first (mtpq_traces_check); a file
 * with more than MTPQ_MAX_DOMAINS domains is refused. prompt_len > 0: every
 * trace's prompt length; 0: each trace's own (metadata prompt_len.NAME),
 * else the file's prompt_len, else 192. r is released with
 * mtpq_accept_report_free whatever the status. */
enum mtpq_status mtpq_replay_traces(struct mtpq_rt_model *m, enum mtpq_backend be, const struct mtpq_traces *t,
                                    int64_t prompt_len, int k, int window, struct mtpq_accept_report *r,
                                    struct mtpq_err *err);

/* The drafter's first draft at every position of every trace, teacher
 * forced: for each committed length c in [P, n - 1) the draft the replay's
 * round at c starts with (the head on the drafter's output of slot c - 1,
 * every slot run with the target's own hidden state and token), its guess of
 * x[c + 1]. Traces in file order, prompt lengths as mtpq_replay_traces takes
 * them; *drafts and *truth (x[c + 1]) get *count entries each (free()).
 * Compared between two drafters position by position, these are paired
 * samples: far more sensitive to a quantization change than acceptance. */
enum mtpq_status mtpq_first_drafts(struct mtpq_rt_model *m, enum mtpq_backend be, const struct mtpq_traces *t,
                                   int64_t prompt_len, int32_t **drafts, int32_t **truth, size_t *count,
                                   struct mtpq_err *err);

#endif
