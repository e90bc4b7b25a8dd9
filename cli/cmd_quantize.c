/* mtpq quantize: write the -mtpfp8 drafter repo of a target. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "cli/cli.h"
#include "io/config.h"
#include "quant/card.h"
#include "vocab/tokenizer.h"
#include "io/safetensors.h"
#include "hub/hub.h"
#include "quant/drafter.h"

const struct cli_opt quantize_opts[] = {
    {"vocab", 0, OPT_STR, 0, "IDS", "draft vocabulary ids (build-vocab's PREFIX.safetensors; required)"},
    {"out", 'o', OPT_STR, 0, "DIR", "output repo directory (required)"},
    {"expert-input-scale", 0, OPT_REAL, 0, "X", "NVFP4 expert input_scale (default: 2 x the target's last layer)"},
    {"fp8-input-scale", 0, OPT_REAL, 0, "X", "static input_scale of FP8 linears and head (default 1.0)"},
    {"arith", 0, OPT_STR, 0, "cuda|cpu", "torch arithmetic to reproduce (default cuda)"},
    {"fp8-recipe", 0, OPT_STR, 0, "RECIPE", "f32 (default), modelopt-qtensor or modelopt-export"},
    {"gpu", 0, OPT_FLAG, 0, NULL, "quantize with the CUDA kernels (identical bytes)"},
    {"force", 'f', OPT_FLAG, 0, NULL, "replace an existing output directory"},
    {"dry-run", 'n', OPT_FLAG, 0, NULL, "print the recipe and the plan; write nothing"},
    {"json", 0, OPT_FLAG, 0, NULL, "print a JSON summary"},
    {"threads", 'j', OPT_UINT, 0, "N", "CPU threads (default: all cores)"},
    {"max-shard-size", 0, OPT_UINT, 0, "BYTES", "shard model.safetensors above this (default 5 GiB)"},
    {"revision", 0, OPT_STR, 0, "REV", "with a Hub TARGET (org/name): branch, tag or commit (default main)"},
    {"base-model", 0, OPT_STR, 0, "ORG/NAME",
     "the card's base_model (default: the Hub TARGET, the Hub cache "
     "snapshot's repo, the config's _name_or_path, or the directory's name)"},
    {"repo-id", 0, OPT_STR, 0, "ORG/NAME",
     "the drafter's Hub id in the card's title and serve line (default: DIR's name; mtpq upload sets it)"},
    {"acceptance", 0, OPT_STR, 0, "REPORT.json",
     "the card's measured acceptance: a bench-acceptance or bench-decode --json report of this drafter (the repo "
     "this command writes, measured after an earlier run of it: the weights must be the same)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

/* The ids file's tokenizer against the target's (build-vocab records the
 * fingerprint of the vocabulary it tokenized with): a draft vocabulary
 * built for another tokenizer would quantize a head of the wrong rows. 0,
 * or an exit code with the error printed. */
static int check_vocab_tokenizer(const char *ids, const char *target) {
  struct mtpq_err err = {0};
  struct mtpq_st_file *f = NULL;
  if (mtpq_st_open(ids, &f, &err)) return 0; /* (quantize reports an unreadable ids file itself) */
  const char *fp = mtpq_st_metadata_get(f, "tokenizer_fingerprint"),
             *vs = mtpq_st_metadata_get(f, "tokenizer_vocab_size");
  char want[17] = "", wsize[24] = "";
  if (fp) snprintf(want, sizeof want, "%s", fp);
  if (vs) snprintf(wsize, sizeof wsize, "%s", vs);
  mtpq_st_close(f);
  char tj[4096];
  snprintf(tj, sizeof tj, "%s/tokenizer.json", target);
  struct stat sb;
  if (!want[0] || stat(tj, &sb) != 0) {
    if (cli_verbosity >= 1)
      fprintf(stderr, "mtpq: quantize: %s\n",
              !want[0] ? "the ids file does not say which tokenizer it was built with (made before mtpq recorded "
                         "it): its tokenizer is not checked against the target's"
                       : "the target has no tokenizer.json: the ids file's tokenizer is not checked");
    return 0;
  }
  struct mtpq_tokenizer *t = NULL;
  if (mtpq_tokenizer_load(tj, &t, &err)) return cli_fail(MTPQ_E_BAD_VALUE, &err);
  char got[17];
  mtpq_tokenizer_fingerprint(t, got);
  const int size = (int)mtpq_tokenizer_vocab_size(t);
  mtpq_tokenizer_free(t);
  if (strcmp(got, want)) {
    cli_error("%s was built with another tokenizer (%s tokens, fingerprint %s) than %s (%d tokens, fingerprint %s): "
              "build the draft vocabulary with the target's tokenizer.json",
              ids, wsize, want, tj, size, got);
    return MTPQ_EXIT_FORMAT;
  }
  return 0;
}

/* "mtpq quantize ARGS...", each argument quoted for a POSIX shell where it needs it
 * (the card shows the command that made the repo) */
static char *command_line(int argc, char **argv) {
  size_t cap = 16;
  for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
  char *s = malloc(cap), *o = s;
  if (!s) return NULL;
  o += sprintf(o, "mtpq quantize");
  for (int i = 0; i < argc; i++) {
    const char *x = argv[i];
    int plain = *x != 0;
    for (const char *c = x; *c; c++)
      plain &=
          (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("-_./=:,+@%", *c);
    *o++ = ' ';
    if (plain) {
      o += sprintf(o, "%s", x);
      continue;
    }
    *o++ = '\'';
    for (const char *c = x; *c; c++) {
      if (*c == '\'')
        o += sprintf(o, "'\\''");
      else
        *o++ = *c;
    }
    *o++ = '\'';
  }
  *o = 0;
  return s;
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) {
  got_signal = sig;
  mtpq_request_cancel();
}

static void progress(void *ctx, size_t done, size_t total, const char *name) {
  (void)ctx;
  if (cli_verbosity >= 1 && isatty(2) && (done % 64 == 0 || done + 1 == total))
    fprintf(stderr, "\rmtpq: quantizing %zu/%zu %-60.60s", done + 1, total, name);
}

/* For a Hub target: the tensors the recipe reads (mtpq_drafter_select),
 * with the head's tie taken from the fetched config.json. */
static enum mtpq_status drafter_select(void *ud, const char *config_json, const char *const *names, size_t n,
                                       unsigned char *keep, struct mtpq_err *err) {
  (void)ud, (void)err;
  struct mtpq_model_config cfg;
  struct mtpq_err ignored = {0}; /* a missing or bad config.json is quantize's own error, later */
  int tied = -1;
  if (mtpq_config_load(config_json, &cfg, &ignored) == MTPQ_OK) {
    tied = cfg.tie_word_embeddings;
    mtpq_config_free(&cfg);
  }
  mtpq_drafter_select(tied, names, n, keep);
  return MTPQ_OK;
}

static const char *kind_name(enum mtpq_item_kind k) {
  switch (k) {
  case MTPQ_ITEM_NVFP4: return "nvfp4";
  case MTPQ_ITEM_FP8: return "fp8";
  case MTPQ_ITEM_HEAD: return "fp8-head";
  default: return "bf16-copy";
  }
}

int cmd_quantize(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "quantize";
  if (cli_parse(cmd, quantize_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos != 1) return cli_usage_error(cmd, "quantize needs exactly one TARGET");
  struct mtpq_drafter_params p = mtpq_drafter_default_params();
  p.vocab_ids = cli_str(quantize_opts, &a, "vocab");
  p.out = cli_str(quantize_opts, &a, "out");
  if (!p.vocab_ids || !p.out) return cli_usage_error(cmd, "--vocab and --out are required");
  if (!*p.out) return cli_usage_error(cmd, "--out is empty");
  p.force = cli_has(quantize_opts, &a, "force");
  {
    struct mtpq_err oerr = {0}; /* before any work (a Hub fetch included) */
    enum mtpq_status ost = mtpq_drafter_check_out(p.out, p.force, &oerr);
    if (!ost && (p.acceptance = cli_str(quantize_opts, &a, "acceptance")))
      ost = mtpq_card_report_check(p.acceptance, &oerr);
    if (ost) return cli_fail(ost, &oerr);
  }
  static char *cmdline; /* (lives until exit) */
  free(cmdline);
  p.command = cmdline = command_line(argc, argv);
  static char target[2048];
  int hrc = cli_hub_target(cmd, a.pos[0], cli_str(quantize_opts, &a, "revision"), drafter_select, "drafter", target,
                           sizeof target);
  if (hrc) return hrc;
  p.target = target;
  p.base_model = cli_str(quantize_opts, &a, "base-model");
  p.repo_id = cli_str(quantize_opts, &a, "repo-id");
  int vrc = check_vocab_tokenizer(p.vocab_ids, target);
  if (vrc) return vrc;
  if (!p.base_model && strcmp(target, a.pos[0])) p.base_model = a.pos[0]; /* a Hub id, fetched into the cache */
  const char *v;
  if ((v = cli_str(quantize_opts, &a, "expert-input-scale"))) p.expert_input_scale = strtod(v, NULL);
  if ((v = cli_str(quantize_opts, &a, "fp8-input-scale"))) p.fp8_input_scale = strtod(v, NULL);
  if (cli_has(quantize_opts, &a, "expert-input-scale") && !(p.expert_input_scale > 0))
    return cli_usage_error(cmd, "--expert-input-scale must be positive");
  if (!(p.fp8_input_scale > 0)) return cli_usage_error(cmd, "--fp8-input-scale must be positive");
  if ((v = cli_str(quantize_opts, &a, "arith"))) {
    if (strcmp(v, "cuda") == 0) p.arith = MTPQ_ARITH_CUDA;
    else if (strcmp(v, "cpu") == 0) p.arith = MTPQ_ARITH_CPU;
    else return cli_usage_error(cmd, "--arith must be cuda or cpu, not '%s'", v);
  }
  if ((v = cli_str(quantize_opts, &a, "fp8-recipe"))) {
    if (strcmp(v, "f32") == 0) p.fp8_format = MTPQ_FMT_FP8;
    else if (strcmp(v, "modelopt-qtensor") == 0) p.fp8_format = MTPQ_FMT_FP8_MODELOPT_QTENSOR;
    else if (strcmp(v, "modelopt-export") == 0) p.fp8_format = MTPQ_FMT_FP8_MODELOPT_EXPORT;
    else return cli_usage_error(cmd, "--fp8-recipe must be f32, modelopt-qtensor or modelopt-export");
  }
  p.use_gpu = cli_has(quantize_opts, &a, "gpu");
  p.force = cli_has(quantize_opts, &a, "force");
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  p.threads = (int)cli_uint(quantize_opts, &a, "threads", nproc > 0 ? (unsigned long long)nproc : 1);
  if (p.threads < 1 || p.threads > 256) return cli_usage_error(cmd, "--threads must be 1..256");
  p.max_shard_bytes = cli_uint(quantize_opts, &a, "max-shard-size", p.max_shard_bytes);
  if (p.max_shard_bytes < 1) return cli_usage_error(cmd, "--max-shard-size must be positive");

  struct mtpq_err err = {0};
  struct mtpq_plan *pl = NULL;
  enum mtpq_status st = mtpq_drafter_plan(&p, &pl, &err);
  if (st) return cli_fail(st, &err);
  int dry = cli_has(quantize_opts, &a, "dry-run"), json = cli_has(quantize_opts, &a, "json");
  size_t counts[4] = {0};
  for (size_t i = 0; i < pl->n; i++) counts[pl->items[i].kind]++;
  if (dry && !json) {
    printf("recipe for %s (%s, %d MTP layer%s, %d experts) -> %s\n", p.target, pl->family, pl->layers,
           pl->layers == 1 ? "" : "s", pl->experts, p.out);
    printf("  experts:       NVFP4 per expert (%zu modules), gate/up share the global scale; "
           "input_scale gate/up %.6g, down %.6g (%s)\n",
           counts[MTPQ_ITEM_NVFP4], pl->expert_input_scale_gate_up, pl->expert_input_scale_down,
           pl->expert_input_scale_origin ? pl->expert_input_scale_origin : "no experts");
    printf("  draft linears: %s per tensor (%zu modules), static input_scale %g\n",
           p.fp8_format == MTPQ_FMT_FP8 ? "FP8 E4M3 (float32 recipe)" : mtpq_format_get(p.fp8_format)->name,
           counts[MTPQ_ITEM_FP8], p.fp8_input_scale);
    printf("  draft head:    FP8 E4M3 per tensor, %lld of %lld rows of %s\n", (long long)pl->head_rows,
           (long long)pl->vocab_rows, pl->head_source);
    printf("  kept BF16:     %zu tensors (router, shared_expert_gate, norms)\n", counts[MTPQ_ITEM_COPY]);
    printf("  arithmetic:    %s%s; %.1f MB in -> %.1f MB out\n", p.arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu",
           p.use_gpu ? " on the GPU" : "", (double)pl->in_bytes / 1e6, (double)pl->out_bytes / 1e6);
    for (size_t i = 0; i < pl->n; i++)
      printf("  %-10s %-56s [%lld, %lld] <- %s\n", kind_name(pl->items[i].kind), pl->items[i].name,
             (long long)pl->items[i].rows, (long long)pl->items[i].cols, pl->items[i].src_name);
    mtpq_plan_free(pl);
    return 0;
  }
  if (!dry) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    st = mtpq_drafter_write(&p, pl, progress, NULL, &err);
    if (isatty(2) && cli_verbosity >= 1) fputc('\n', stderr);
  }
  int rc = st ? cli_fail(st, &err) : 0;
  if (st == MTPQ_E_INTERRUPTED && got_signal) rc = 128 + got_signal;
  if (!st && json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "out", p.out);
    cJSON_AddBoolToObject(o, "dry_run", dry);
    cJSON_AddStringToObject(o, "family", pl->family);
    cJSON_AddNumberToObject(o, "nvfp4_modules", (double)counts[MTPQ_ITEM_NVFP4]);
    cJSON_AddNumberToObject(o, "fp8_modules", (double)counts[MTPQ_ITEM_FP8] + (double)counts[MTPQ_ITEM_HEAD]);
    cJSON_AddNumberToObject(o, "bf16_tensors", (double)counts[MTPQ_ITEM_COPY]);
    cJSON_AddNumberToObject(o, "head_rows", (double)pl->head_rows);
    cJSON_AddNumberToObject(o, "bytes_in", (double)pl->in_bytes);
    cJSON_AddNumberToObject(o, "bytes_out", (double)pl->out_bytes);
    cJSON_AddNumberToObject(o, "expert_input_scale_gate_up", pl->expert_input_scale_gate_up);
    cJSON_AddNumberToObject(o, "expert_input_scale_down", pl->expert_input_scale_down);
    char *t = cJSON_Print(o);
    puts(t);
    free(t);
    cJSON_Delete(o);
  } else if (!st) {
    printf("%s: %zu NVFP4 experts, %zu FP8 linears + FP8 head (%lld rows), %zu BF16 tensors; %.1f MB -> %.1f MB\n",
           p.out, counts[MTPQ_ITEM_NVFP4], counts[MTPQ_ITEM_FP8], (long long)pl->head_rows,
           counts[MTPQ_ITEM_COPY], (double)pl->in_bytes / 1e6, (double)pl->out_bytes / 1e6);
  }
  mtpq_plan_free(pl);
  return rc;
}
