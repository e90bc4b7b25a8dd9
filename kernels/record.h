/* Recording target traces: prompts in, greedy continuations out, in the
 * format bench-acceptance replays (kernels/traces.h).
 *
 * Prompts come from files:
 *   NAME.safetensors  a traces file: the first prompt_len tokens of each of
 *                     its traces, under the trace's own name
 *   NAME.jsonl        one prompt a line: the string field `text_field`
 *                     (default "text"), or with chat the "messages" array
 *                     ({"role", "content"} objects) rendered with Qwen's
 *                     ChatML ("<|im_start|>ROLE\nCONTENT<|im_end|>\n" each,
 *                     then "<|im_start|>assistant\n"); traces NAME.0, NAME.1..
 *   anything else     the whole file as one prompt, trace NAME.0
 * (NAME: the file's base name without its extension: the domain). Text is
 * tokenized with the target's tokenizer. A line without the field, a file
 * with no prompt, an empty prompt, or a token outside the target's
 * vocabulary is refused naming the file and line.
 */
#ifndef MTPQ_KERNELS_RECORD_H
#define MTPQ_KERNELS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"
#include "kernels/target.h"

struct mtpq_tokenizer;

struct mtpq_prompt {
  char name[128];
  int32_t *ids;
  int64_t n;
};
struct mtpq_prompts {
  struct mtpq_prompt *v;
  size_t n, cap;
};

/* Append the prompts of file path (tok: for text files; prompt_len: for a
 * traces file, 0: its metadata's, else 192). */
enum mtpq_status mtpq_prompts_read(const char *path, struct mtpq_tokenizer *tok, const char *text_field, int chat,
                                   int64_t prompt_len, struct mtpq_prompts *p, struct mtpq_err *err);
void mtpq_prompts_free(struct mtpq_prompts *p);
/* mtpq_prompts_read over n files; the tokenizer (tokenizer, else
 * TARGET_DIR/tokenizer.json) is loaded once, and only when a file holds
 * text. */
enum mtpq_status mtpq_prompts_read_files(const char *const *files, int n, const char *target_dir, const char *tokenizer,
                                         const char *text_field, int chat, int64_t prompt_len, struct mtpq_prompts *p,
                                         struct mtpq_err *err);

/* Greedy continuation of every prompt by n_new tokens; the traces file at
 * out (written whole and renamed into place: nothing half-written) holds
 * NAME.tokens (I32 [P + n_new]) and NAME.hidden (BF16 [P + n_new, H], the
 * final-norm hidden state at every position), metadata k (k), prompt_len
 * (when every prompt has one length) and how it was made. progress (may be
 * NULL) is called after each prompt. */
typedef void (*mtpq_record_progress_fn)(void *ctx, size_t done, size_t total, int64_t tokens);
enum mtpq_status mtpq_traces_record(struct mtpq_target *t, enum mtpq_backend be, const struct mtpq_prompts *p,
                                    int64_t n_new, int k, const char *out, mtpq_record_progress_fn progress, void *ctx,
                                    struct mtpq_err *err);

#endif
