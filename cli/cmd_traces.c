/* mtpq traces: greedy continuations of prompts by the target model, written
 * as the traces file bench-acceptance replays. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/record.h"
#include "kernels/target.h"

const struct cli_opt traces_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (config.json, safetensors; required)"},
    {"prompts", 'p', OPT_STR, OPT_MULTI, "FILE",
     "prompts: a traces .safetensors, .jsonl, or a text file "
     "(repeatable; the file's name is the domain)"},
    {"new-tokens", 'n', OPT_UINT, 0, "N", "tokens to generate after each prompt (default 96)"},
    {"prompt-len", 0, OPT_UINT, 0, "N", "prompt tokens taken from a traces file (default: its metadata, else 192)"},
    {"text-field", 0, OPT_STR, 0, "NAME", "the JSONL field holding a prompt (default text)"},
    {"chat", 0, OPT_FLAG, 0, NULL, "JSONL prompts are chats (\"messages\"), rendered with Qwen's ChatML"},
    {"tokenizer", 't', OPT_STR, 0, "FILE", "tokenizer.json for text prompts (default: the target's)"},
    {"k", 'k', OPT_UINT, 0, "N", "draft tokens a round, the k recorded for bench-acceptance (default 3)"},
    {"out", 'o', OPT_STR, 0, "FILE", "the traces file to write (required)"},
    {"force", 'f', OPT_FLAG, 0, NULL, "replace --out if it exists"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {"json", 0, OPT_FLAG, 0, NULL, "print a JSON summary"},
    {NULL, 0, 0, 0, NULL, NULL},
};

static void progress(void *ctx, size_t done, size_t total, int64_t tokens) {
  (void)ctx;
  if (cli_verbosity >= 1 && isatty(2))
    fprintf(stderr, "\rtraces: %zu/%zu prompts, %lld tokens", done, total, (long long)tokens);
  if (cli_verbosity >= 1 && isatty(2) && done == total) fputc('\n', stderr);
}

int cmd_traces(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "traces";
  if (cli_parse(cmd, traces_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *target = cli_str(traces_opts, &a, "target"), *out = cli_str(traces_opts, &a, "out");
  const int ip = cli_opt_index(traces_opts, "prompts");
  if (!target || !out || !a.set[ip] || a.npos)
    return cli_usage_error(cmd, "--target, --prompts and --out are required");
  const int64_t n_new = (int64_t)cli_uint(traces_opts, &a, "new-tokens", 96);
  const int k = (int)cli_uint(traces_opts, &a, "k", 3);
  if (n_new < 1 || n_new > 1000000) return cli_usage_error(cmd, "--new-tokens must be 1..1000000");
  if (k < 1 || k > 16) return cli_usage_error(cmd, "-k must be 1..16");
  enum mtpq_backend be;
  int brc = cli_backend(cmd, cli_str(traces_opts, &a, "backend"), &be);
  if (brc) return brc;
  if (!*out) return cli_usage_error(cmd, "--out is empty");
  if (!cli_out_dir_ok(out)) { /* before the target runs */
    cli_error("%s: cannot write there (its directory is missing or not writable)", out);
    return MTPQ_EXIT_IO;
  }
  struct stat sb;
  if (!cli_has(traces_opts, &a, "force") && stat(out, &sb) == 0) {
    cli_error("%s exists; pass --force to replace it", out);
    return MTPQ_EXIT_EXISTS;
  }
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  enum mtpq_status st = mtpq_target_open(target, &t, &err);
  if (st) return cli_fail(st, &err);
  struct mtpq_prompts p = {0};
  const char *field = cli_str(traces_opts, &a, "text-field");
  st = mtpq_prompts_read_files(a.multi[ip], a.set[ip], target, cli_str(traces_opts, &a, "tokenizer"),
                               field ? field : "text", cli_has(traces_opts, &a, "chat"),
                               (int64_t)cli_uint(traces_opts, &a, "prompt-len", 0), &p, &err);
  double t0 = cli_now_s();
  if (!st) st = mtpq_traces_record(t, be, &p, n_new, k, out, progress, NULL, &err);
  double sec = cli_now_s() - t0;
  int rc = st ? cli_fail(st, &err) : 0;
  if (!rc) {
    int64_t tokens = 0;
    for (size_t i = 0; i < p.n; i++) tokens += p.v[i].n + n_new;
    if (cli_has(traces_opts, &a, "json")) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "out", out);
      cJSON_AddNumberToObject(o, "traces", (double)p.n);
      cJSON_AddNumberToObject(o, "tokens", (double)tokens);
      cJSON_AddNumberToObject(o, "new_tokens", (double)n_new);
      cJSON_AddNumberToObject(o, "seconds", sec);
      cJSON_AddStringToObject(o, "backend", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu");
      char *s = cJSON_Print(o);
      puts(s);
      free(s);
      cJSON_Delete(o);
    } else {
      printf("%s: %zu traces, %lld tokens (%lld generated each), %.1f s on the %s backend\n", out, p.n,
             (long long)tokens, (long long)n_new, sec, be == MTPQ_BACKEND_CUDA ? "CUDA" : "CPU reference");
    }
  }
  mtpq_prompts_free(&p);
  mtpq_target_close(t);
  return rc;
}
