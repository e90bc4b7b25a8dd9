/* mtpq tokenize: ids of text files under a tokenizer.json (what build-vocab
 * counts), for checking against other tokenizers and for timing. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "vocab/corpus.h"

const struct cli_opt tokenize_opts[] = {
    {"tokenizer", 't', OPT_STR, 0, "FILE", "tokenizer.json (required)"},
    {"text-field", 0, OPT_STR, 0, "NAME", "JSONL field holding the text (default text)"},
    {"count-only", 0, OPT_FLAG, 0, NULL, "print only counts and speed, not the ids"},
    {NULL, 0, 0, 0, NULL, NULL},
};

struct out_ctx {
  char buf[1 << 16];
  size_t n;
  uint64_t tokens;
  int print;
};

static void flush_out(struct out_ctx *o) {
  fwrite(o->buf, 1, o->n, stdout);
  o->n = 0;
}

static void emit_id(void *vctx, int32_t id) {
  struct out_ctx *o = vctx;
  o->tokens++;
  if (!o->print) return;
  if (o->n > sizeof o->buf - 16) flush_out(o);
  o->n += (size_t)snprintf(o->buf + o->n, 16, o->tokens > 1 ? " %d" : "%d", id);
}

int cmd_tokenize(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "tokenize";
  if (cli_parse(cmd, tokenize_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *tok = cli_str(tokenize_opts, &a, "tokenizer");
  if (!tok) return cli_usage_error(cmd, "--tokenizer is required");
  if (a.npos < 1) return cli_usage_error(cmd, "tokenize needs at least one text FILE");
  struct mtpq_err err = {0};
  struct mtpq_tokenizer *t = NULL;
  enum mtpq_status st = mtpq_tokenizer_load(tok, &t, &err);
  if (st) return cli_fail(st, &err);
  int rc = 0;
  struct out_ctx *o = calloc(1, sizeof *o);
  if (!o) {
    mtpq_tokenizer_free(t);
    cli_error("out of memory");
    return MTPQ_EXIT_FAILURE;
  }
  o->print = !cli_has(tokenize_opts, &a, "count-only");
  for (int i = 0; i < a.npos && !rc; i++) {
    struct mtpq_text_stats ts = {0};
    o->tokens = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = mtpq_text_tokenize(t, a.pos[i], cli_str(tokenize_opts, &a, "text-field"), emit_id, o, &ts, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st) {
      rc = cli_fail(st, &err);
      break;
    }
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (o->print) {
      flush_out(o);
      fputc('\n', stdout);
    } else {
      printf("%s: %llu bytes, %llu tokens, %.3f s, %.0f tokens/s\n", a.pos[i],
             (unsigned long long)ts.bytes, (unsigned long long)o->tokens, sec,
             sec > 0 ? (double)o->tokens / sec : 0.0);
    }
  }
  free(o);
  mtpq_tokenizer_free(t);
  return rc;
}
