/* The CLI's shared pieces: messages, option tables, command table.
 * Only cli/ includes this; the library never prints or exits. */
#ifndef MTPQ_CLI_H
#define MTPQ_CLI_H

#include <stdio.h>

#include "hub/hub.h"
#include "io/status.h"
#include "kernels/runtime.h" /* enum mtpq_backend */

/* ---- messages (cli/msg.c) ---- */
extern int cli_verbosity; /* 0 quiet, 1 normal, 2 verbose */
#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_warn(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_note(const char *fmt, ...) CLI_PRINTF(1, 2);
/* Print err's message (or the status text) and return the exit code. */
int cli_fail(enum mtpq_status st, const struct mtpq_err *err);
/* Print a usage error plus the "try" hint; returns MTPQ_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Human-readable byte count ("43.8 MB") into buf. */
const char *cli_bytes(unsigned long long n, char *buf, size_t cap);

/* ---- timing (cli/timing.c) ---- */
double cli_now_s(void); /* CLOCK_MONOTONIC seconds */
double cli_median(double *t, int n); /* sorts t */

/* ---- Hub targets (cli/hub_target.c) ---- */
/* TARGET as given if it is a local path; else a Hub repo id: fetch the
 * tensors `select` chooses (NULL: only the shards' headers, for inspect),
 * with a progress line on a terminal, and put the cached directory in dir.
 * Returns 0 or the exit code. */
int cli_hub_target(const char *cmd, const char *target, const char *rev, mtpq_tensor_select_fn select,
                   const char *selection, char *dir, size_t cap);
/* The CLI's hooks on a Hub environment: -v prints each retry and re-resolve. */
void cli_hub_hooks(struct mtpq_hub_env *env);

/* ---- options (cli/opts.c) ---- */
enum cli_opt_kind { OPT_FLAG, OPT_STR, OPT_UINT, OPT_REAL };
#define OPT_MULTI 1 /* may be given several times */

struct cli_opt {
  const char *name;  /* long name without "--" */
  char short_name;   /* 0 if none */
  enum cli_opt_kind kind;
  int flags;
  const char *arg;   /* placeholder in help ("DIR") */
  const char *help;
};

#define CLI_MAX_OPTS 32
#define CLI_MAX_MULTI 64
#define CLI_MAX_POS 16

struct cli_args {
  int set[CLI_MAX_OPTS];                      /* times given */
  const char *val[CLI_MAX_OPTS];              /* last value */
  const char *multi[CLI_MAX_OPTS][CLI_MAX_MULTI];
  int npos;
  const char *pos[CLI_MAX_POS];
};

/* Parse argv (after the command name) against tbl (terminated by a NULL
 * name). Returns 0, or prints a usage error and returns MTPQ_EXIT_USAGE; sets
 * *help when -h/--help was given. */
int cli_parse(const char *cmd, const struct cli_opt *tbl, int argc, char **argv,
              struct cli_args *a, int *help);
/* Index of option `name` in tbl (a programming error if absent). */
int cli_opt_index(const struct cli_opt *tbl, const char *name);
int cli_has(const struct cli_opt *tbl, const struct cli_args *a, const char *name);
const char *cli_str(const struct cli_opt *tbl, const struct cli_args *a, const char *name);
/* Value of an OPT_UINT option (validated by cli_parse), or dflt if absent. */
unsigned long long cli_uint(const struct cli_opt *tbl, const struct cli_args *a, const char *name,
                            unsigned long long dflt);
void cli_print_options(FILE *fp, const struct cli_opt *tbl);

/* ---- commands (cli/main.c) ---- */
struct cli_cmd {
  const char *name;
  const char *summary;
  const char *usage;     /* after "mtpq NAME " */
  const struct cli_opt *opts;
  int (*run)(int argc, char **argv);
  const char *details;   /* extra help text, may be NULL */
};

int cmd_inspect(int argc, char **argv);
extern const struct cli_opt inspect_opts[];
int cmd_verify(int argc, char **argv);
extern const struct cli_opt verify_opts[];
int cmd_bench_quant(int argc, char **argv);
int cmd_bench_step(int argc, char **argv);
int cmd_download(int argc, char **argv);
int cmd_upload(int argc, char **argv);
extern const struct cli_opt upload_opts[];
extern const struct cli_opt download_opts[];
extern const struct cli_opt bench_step_opts[];
extern const struct cli_opt bench_target_opts[];
extern const struct cli_opt bench_decode_opts[];
int cmd_bench_decode(int argc, char **argv);
int cmd_bench_target(int argc, char **argv);
/* cli/plot.c: the acceptance plot (SVG, written whole and renamed into
 * place; 0 or -1): each series' per-position acceptance with its 95%
 * bootstrap intervals and, with more than one series, each one's MAL
 * difference to series 0 (stock) over all units and per domain, with paired
 * intervals; whether the directory of path is writable (checked before the
 * work whose output goes there: a plot, build-vocab's PREFIX, a traces file) */
struct mtpq_accept_ci;
struct cli_plot_series {
  const char *name;
  const struct mtpq_accept_ci *all; /* over every unit; paired with series 0 (not for series 0 itself) */
  const struct mtpq_accept_ci *dom; /* ndom entries, paired with series 0 (NULL for series 0) */
};
int cli_acceptance_svg(const char *path, const char *title, const char *unit, const struct cli_plot_series *s, int n,
                       int k, const char *const *doms, int ndom);
int cli_out_dir_ok(const char *path);
/* [v[0], v[1]] as a JSON array: an interval of the bench reports' --json */
struct cJSON;
struct cJSON *cli_json_pair(const double v[2]);
/* --backend auto|cpu|cuda (cli/cmd_bench_step.c); 0 or an exit code. */
int cli_backend(const char *cmd, const char *name, enum mtpq_backend *be);
extern const struct cli_opt bench_accept_opts[];
int cmd_bench_accept(int argc, char **argv);
extern const struct cli_opt quantize_opts[];
int cmd_quantize(int argc, char **argv);
extern const struct cli_opt tokenize_opts[];
int cmd_tokenize(int argc, char **argv);
extern const struct cli_opt build_vocab_opts[];
int cmd_build_vocab(int argc, char **argv);
extern const struct cli_opt bench_quant_opts[];
extern const struct cli_opt traces_opts[];
int cmd_traces(int argc, char **argv);

#endif
