/* mtpq build-vocab: the frequency-selected draft vocabulary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "vocab/vocab.h"

const struct cli_opt build_vocab_opts[] = {
    {"tokenizer", 't', OPT_STR, 0, "FILE", "tokenizer.json of the target (required)"},
    {"counts", 'c', OPT_STR, OPT_MULTI, "FILE[:WEIGHT]", "token-count file (id<TAB>count, .zst ok), weight default 1"},
    {"text", 0, OPT_STR, OPT_MULTI, "FILE", "raw text or .jsonl (.zst ok), tokenized natively"},
    {"text-field", 0, OPT_STR, 0, "NAME", "JSONL field holding the text (default text)"},
    {"size", 'n', OPT_UINT, 0, "N", "ids to keep (default 98304)"},
    {"heldout", 0, OPT_STR, OPT_MULTI, "NAME=FILE", "held-out counts or text for a coverage report"},
    {"out", 'o', OPT_STR, 0, "PREFIX", "write PREFIX.safetensors, PREFIX.pt, PREFIX.json (required)"},
    {"force", 'f', OPT_FLAG, 0, NULL, "replace existing PREFIX.* files"},
    {"json", 0, OPT_FLAG, 0, NULL, "print the JSON report instead of a summary"},
    {NULL, 0, 0, 0, NULL, NULL},
};

/* "path:weight" when the text after the last ':' is a positive number. */
static int split_weight(const char *arg, char **path, double *weight) {
  const char *colon = strrchr(arg, ':');
  *weight = 1.0;
  if (colon && colon[1]) {
    char *end = NULL;
    double v = strtod(colon + 1, &end);
    if (end && *end == '\0') {
      if (!(v > 0) || !isfinite(v)) return -1;
      *weight = v;
      *path = malloc((size_t)(colon - arg) + 1);
      memcpy(*path, arg, (size_t)(colon - arg));
      (*path)[colon - arg] = '\0';
      return 0;
    }
  }
  *path = strdup(arg);
  return 0;
}

int cmd_build_vocab(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "build-vocab";
  if (cli_parse(cmd, build_vocab_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos) return cli_usage_error(cmd, "build-vocab takes no positional arguments");
  struct mtpq_vocab_params p = {0};
  p.tokenizer = cli_str(build_vocab_opts, &a, "tokenizer");
  p.out_prefix = cli_str(build_vocab_opts, &a, "out");
  p.text_field = cli_str(build_vocab_opts, &a, "text-field");
  p.size = (int64_t)cli_uint(build_vocab_opts, &a, "size", 98304);
  if (!p.tokenizer || !p.out_prefix) return cli_usage_error(cmd, "--tokenizer and --out are required");
  if (!*p.out_prefix) return cli_usage_error(cmd, "--out is empty");
  if (!cli_out_dir_ok(p.out_prefix)) { /* before the corpora are read */
    cli_error("%s: cannot write there (its directory is missing or not writable)", p.out_prefix);
    return MTPQ_EXIT_IO;
  }
  if (!cli_has(build_vocab_opts, &a, "force")) { /* before any work */
    static const char *ext[3] = {".safetensors", ".pt", ".json"};
    for (int i = 0; i < 3; i++) {
      char path[4096];
      struct stat sb;
      snprintf(path, sizeof path, "%s%s", p.out_prefix, ext[i]);
      if (stat(path, &sb) == 0) {
        cli_error("%s exists; pass --force to replace it", path);
        return MTPQ_EXIT_EXISTS;
      }
    }
  }
  int ic = cli_opt_index(build_vocab_opts, "counts"), it = cli_opt_index(build_vocab_opts, "text"),
      ih = cli_opt_index(build_vocab_opts, "heldout");
  if (a.set[ic] + a.set[it] == 0) return cli_usage_error(cmd, "give at least one --counts or --text");
  struct mtpq_vocab_input counts[CLI_MAX_MULTI], texts[CLI_MAX_MULTI];
  struct mtpq_vocab_heldout held[CLI_MAX_MULTI];
  char *owned[3 * CLI_MAX_MULTI];
  int nowned = 0, rc = 0;
  for (int i = 0; i < a.set[ic] && !rc; i++) {
    char *path = NULL;
    if (split_weight(a.multi[ic][i], &path, &counts[i].weight)) {
      rc = cli_usage_error(cmd, "--counts %s: the weight must be a positive number", a.multi[ic][i]);
      break;
    }
    counts[i].path = owned[nowned++] = path;
  }
  for (int i = 0; i < a.set[it]; i++) texts[i] = (struct mtpq_vocab_input){a.multi[it][i], 1.0};
  for (int i = 0; i < a.set[ih] && !rc; i++) {
    const char *eq = strchr(a.multi[ih][i], '=');
    if (!eq || eq == a.multi[ih][i] || !eq[1]) {
      rc = cli_usage_error(cmd, "--heldout wants NAME=FILE, got '%s'", a.multi[ih][i]);
      break;
    }
    char *name = strndup(a.multi[ih][i], (size_t)(eq - a.multi[ih][i]));
    held[i] = (struct mtpq_vocab_heldout){owned[nowned++] = name, eq + 1};
  }
  if (!rc) {
    p.counts = counts, p.n_counts = (size_t)a.set[ic];
    p.texts = texts, p.n_texts = (size_t)a.set[it];
    p.heldout = held, p.n_heldout = (size_t)a.set[ih];
    struct mtpq_vocab_summary s;
    struct mtpq_err err = {0};
    enum mtpq_status st = mtpq_vocab_build(&p, &s, &err);
    if (st) {
      rc = cli_fail(st, &err);
    } else {
      if (cli_has(build_vocab_opts, &a, "json")) {
        puts(s.report_json);
      } else {
        printf("%s.{safetensors,pt,json}: %lld of %d ids\n", p.out_prefix, (long long)s.size, s.vocab_size);
        printf("forced: %zu (added %zu, single-character strings %zu, single code points %zu)\n",
               s.forced_total, s.forced_added, s.forced_single_char, s.forced_single_unicode);
        printf("corpus: %llu tokens from %zu inputs\n", (unsigned long long)s.corpus_tokens,
               p.n_counts + p.n_texts);
        if (p.n_heldout) printf("held-out coverage: see %s.json (--json prints it)\n", p.out_prefix);
      }
      free(s.report_json);
    }
  }
  for (int i = 0; i < nowned; i++) free(owned[i]);
  return rc;
}
