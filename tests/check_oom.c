/* Allocation-failure injection (issue 52), in the style of libuv's OOM
 * tests: each scenario below (a library entry point over a small input) is
 * run once counting its allocations, then once for every N up to that
 * count with the Nth allocation failing. Every such run must return a
 * status (not MTPQ_OK, never a crash), leave no output file or temporary
 * behind, and, in the sanitizer build, leak nothing (LeakSanitizer at
 * exit). The library's own calls to malloc, calloc, realloc and strdup go
 * through this file's wrappers (linked with -Wl,--wrap=...); cJSON's go
 * through its hooks; the C library's and zstd's own allocations are not
 * failed. Usage: check_oom TESTDATA (testutil.h's helpers that assert are
 * not used: this runs outside Check's runner) */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "io/repo.h"
#include "io/safetensors.h"
#include "kernels/traces.h"
#include "quant/drafter.h"
#include "quant/verify.h"
#include "testutil.h"
#include "vocab/tokenizer.h"
#include "vocab/vocab.h"

/* ---- the failing allocator ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
static long count, fail_at; /* fail_at 0: never */
void check_oom_hit(void);   /* (a breakpoint for gdb: the failing allocation) */
__attribute__((noinline)) void check_oom_hit(void) { __asm__ volatile(""); }
static int fail_now(void) {
  if (++count != fail_at) return 0;
  check_oom_hit();
  return 1;
}
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
static void *cjson_malloc(size_t n) { return __wrap_malloc(n); }
/* fsync: a no-op here. The sweep is about allocation failures, and the
 * quantize scenario's 1,600 runs would otherwise spend minutes waiting on
 * the disk for files that are deleted at once. */
int __wrap_fsync(int fd);
int __wrap_fsync(int fd) {
  (void)fd;
  return 0;
}

static const char *T; /* testdata */
/* what a successful run produced (token ids, the output repo's manifest):
 * a run whose failed allocation was tolerated (an optional cache) must
 * produce exactly this */
static char fp[1 << 16];
static char *scratch; /* outputs go here; must be empty after every failed run */

/* ---- scenarios: MTPQ_OK on success, else the status of the first failure ---- */
static enum mtpq_status sc_safetensors(void) {
  struct mtpq_err err = {0};
  char p[4096];
  snprintf(p, sizeof p, "%s/target/hybrid-mtp/model.safetensors", T);
  struct mtpq_st_file *f = NULL;
  enum mtpq_status st = mtpq_st_open(p, &f, &err);
  mtpq_st_close(f);
  return st;
}

static enum mtpq_status sc_repo(void) {
  struct mtpq_err err = {0};
  char p[4096];
  snprintf(p, sizeof p, "%s/tiny-qwen3next/model", T);
  struct mtpq_repo *r = NULL;
  enum mtpq_status st = mtpq_repo_open(p, &r, &err);
  mtpq_repo_close(r);
  return st;
}

static enum mtpq_status sc_json(void) {
  static const char text[] = "{\"a\": [1, 2, {\"b\": \"c\"}], \"d\": {\"e\": null, \"f\": 1.5e3}}";
  struct mtpq_err err = {0};
  cJSON *j = mtpq__json_parse(text, sizeof text - 1, "json", MTPQ_E_BAD_VALUE, &err);
  cJSON_Delete(j);
  return j ? MTPQ_OK : err.status;
}

static enum mtpq_status sc_traces(void) {
  struct mtpq_err err = {0};
  char p[4096];
  snprintf(p, sizeof p, "%s/tiny-qwen3next/traces.safetensors", T);
  struct mtpq_traces *t = NULL;
  enum mtpq_status st = mtpq_traces_open(p, &t, &err);
  mtpq_traces_close(t);
  return st;
}

static enum mtpq_status sc_verify(void) {
  struct mtpq_err err = {0};
  char p[4096];
  snprintf(p, sizeof p, "%s/target/hybrid-mtp", T);
  struct mtpq_verify_report *r = NULL;
  enum mtpq_status st = mtpq_verify_compare(p, p, NULL, &r, &err);
  mtpq_verify_report_free(r);
  return st;
}

static void count_token(void *ctx, int32_t id) {
  (void)ctx;
  size_t l = strlen(fp);
  snprintf(fp + l, sizeof fp - l, "%d ", id);
}

static enum mtpq_status sc_tokenizer(void) {
  struct mtpq_err err = {0};
  struct mtpq_tokenizer *t = NULL;
  char p[4096];
  snprintf(p, sizeof p, "%s/oom/tokenizer-mini.json", T); /* (the real one's 151,669 entries: a quadratic sweep) */
  enum mtpq_status st = mtpq_tokenizer_load(p, &t, &err);
  static const char text[] = "def f(x):\n    return x + 1  # <|im_start|>";
  fp[0] = 0;
  if (!st) st = mtpq_tokenizer_encode(t, text, sizeof text - 1, count_token, NULL, &err);
  mtpq_tokenizer_free(t);
  return st;
}

static enum mtpq_status sc_quantize(void) {
  struct mtpq_err err = {0};
  char target[4096], ids[4200], out[4200];
  snprintf(target, sizeof target, "%s/target/hybrid-mtp", T);
  snprintf(ids, sizeof ids, "%s.ids.safetensors", scratch);
  snprintf(out, sizeof out, "%s/q", scratch);
  struct mtpq_drafter_params p = mtpq_drafter_default_params();
  p.target = target, p.vocab_ids = ids, p.out = out, p.expert_input_scale = 0.1667;
  struct mtpq_plan *pl = NULL;
  enum mtpq_status st = mtpq_drafter_plan(&p, &pl, &err);
  if (!st) st = mtpq_drafter_write(&p, pl, NULL, NULL, &err);
  mtpq_plan_free(pl);
  fp[0] = 0;
  if (!st) { /* the manifest: every file's sha256 */
    char m[4300];
    snprintf(m, sizeof m, "%s/mtpq_manifest.json", out);
    FILE *f = fopen(m, "rb");
    size_t n = f ? fread(fp, 1, sizeof fp - 1, f) : 0;
    fp[n] = 0;
    if (f) fclose(f);
  }
  return st;
}

/* build-vocab over the mini tokenizer: counts, a text file, a held-out
 * corpus; PREFIX.{safetensors,pt,json} under scratch */
static enum mtpq_status sc_vocab(void) {
  struct mtpq_err err = {0};
  char tok[4096], counts[4200], text[4200], prefix[4200];
  snprintf(tok, sizeof tok, "%s/oom/tokenizer-mini.json", T);
  snprintf(counts, sizeof counts, "%s.counts.tsv", scratch);
  snprintf(text, sizeof text, "%s.text.txt", scratch);
  snprintf(prefix, sizeof prefix, "%s/dv", scratch);
  const struct mtpq_vocab_input c[1] = {{counts, 1.0}}, x[1] = {{text, 2.0}};
  const struct mtpq_vocab_heldout h[1] = {{"held", text}};
  struct mtpq_vocab_params p = {0};
  p.tokenizer = tok, p.counts = c, p.n_counts = 1, p.texts = x, p.n_texts = 1, p.heldout = h, p.n_heldout = 1;
  p.size = 300, p.out_prefix = prefix;
  struct mtpq_vocab_summary sum = {0};
  enum mtpq_status st = mtpq_vocab_build(&p, &sum, &err);
  fp[0] = 0;
  if (!st) snprintf(fp, sizeof fp, "%s", sum.report_json ? sum.report_json : "(no report)");
  free(sum.report_json);
  return st;
}

static int dir_empty(const char *d) {
  DIR *x = opendir(d);
  if (!x) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(x)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(x);
  return n == 0;
}

struct scenario {
  const char *name;
  enum mtpq_status (*run)(void);
  int writes; /* its output goes under scratch: removed after a success, absent after a failure */
  int cjson;  /* cJSON's allocations fail too */
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: check_oom TESTDATA\n");
    return 2;
  }
  T = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *tmp = getenv("TMPDIR");
  char tmpl[512];
  snprintf(tmpl, sizeof tmpl, "%s/mtpq-oom-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(tmpl)) {
    perror("check_oom: mkdtemp");
    return 1;
  }
  scratch = __real_strdup(tmpl);
  cJSON_Hooks hooks = {cjson_malloc, free};
  { /* the ids file quantize reads: ids 0, 3, ..., 297 of the 300-token vocabulary */
    struct mtpq_err err = {0};
    char ids[4200];
    snprintf(ids, sizeof ids, "%s.ids.safetensors", scratch);
    int64_t v[100], shape[1] = {100};
    for (int i = 0; i < 100; i++) v[i] = 3 * i;
    struct mtpq_st_writer *w = NULL;
    if (mtpq_stw_init(ids, &w, &err) || mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, &err) ||
        mtpq_stw_begin(w, &err) || mtpq_stw_write_all(w, "ids", v, sizeof v, &err) || mtpq_stw_commit(w, &err)) {
      fprintf(stderr, "check_oom: %s\n", err.msg);
      return 1;
    }
    mtpq_stw_free(w);
  }
  { /* build-vocab's inputs: counts of the mini tokenizer's ids, and text */
    char path[4200];
    snprintf(path, sizeof path, "%s.counts.tsv", scratch);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 400; i += 3) fprintf(f, "%d\t%d\n", i, 1000 - 2 * i);
    fclose(f);
    snprintf(path, sizeof path, "%s.text.txt", scratch);
    f = fopen(path, "w");
    fputs("def f(x):\n    return x + 1\nThe quick brown fox jumps over the lazy dog.\n", f);
    fclose(f);
  }
  static const struct scenario sc[] = {
      {"safetensors", sc_safetensors, 0, 1}, {"repo", sc_repo, 0, 1},         {"json", sc_json, 0, 1},
      {"traces", sc_traces, 0, 1},           {"verify", sc_verify, 0, 1},     {"tokenizer", sc_tokenizer, 0, 1},
      {"quantize", sc_quantize, 1, 1},       {"build-vocab", sc_vocab, 1, 1},
  };
  cJSON_Hooks plain = {NULL, NULL};
  int bad = 0;
  const char *only = getenv("CHECK_OOM_ONLY"), *trace = getenv("CHECK_OOM_TRACE");
  for (size_t s = 0; s < sizeof sc / sizeof sc[0]; s++) {
    if (only && strcmp(only, sc[s].name)) continue;
    cJSON_InitHooks(sc[s].cjson ? &hooks : &plain);
    count = 0, fail_at = 0;
    enum mtpq_status st = sc[s].run();
    const long total = count;
    static char want[sizeof fp];
    memcpy(want, fp, sizeof fp);
    if (getenv("CHECK_OOM_COUNT")) { /* (how big each sweep is) */
      printf("oom %-12s %6ld allocations\n", sc[s].name, total);
      continue;
    }
    if (st) {
      printf("FAIL %s: the run without failures returned %s\n", sc[s].name, mtpq_status_name(st));
      bad++;
      continue;
    }
    if (sc[s].writes) tu_rmtree(scratch), mkdir(scratch, 0755);
    long silent = 0, partial = 0;
    const char *from = getenv("CHECK_OOM_FROM"); /* (to look at one failure: CHECK_OOM_FROM=N) */
    for (long n = from ? atol(from) : 1; n <= total; n++) {
      count = 0, fail_at = n;
      if (trace) printf("%s: failing allocation %ld\n", sc[s].name, n);
      st = sc[s].run();
      fail_at = 0;
      if (count < n) continue;                      /* (this run made fewer allocations: nothing failed) */
      if (st == MTPQ_OK && strcmp(fp, want) != 0) { /* tolerated only when nothing changed */
        if (!silent++)
          printf("FAIL %s: allocation %ld of %ld failed, the run returned MTPQ_OK with another result\n", sc[s].name, n,
                 total);
        bad++;
      }
      if (sc[s].writes && st == MTPQ_OK) tu_rmtree(scratch), mkdir(scratch, 0755);
      if (sc[s].writes && !dir_empty(scratch)) {
        if (!partial++)
          printf("FAIL %s: allocation %ld of %ld failed and left files in %s\n", sc[s].name, n, total, scratch);
        bad++;
        tu_rmtree(scratch), mkdir(scratch, 0755);
      }
    }
    printf("oom %-12s %6ld allocations, each failed once: %s\n", sc[s].name, total,
           silent || partial
               ? "FAILED"
               : "each run returned a status (or, a cache left unfilled, the same result), nothing left behind");
  }
  tu_rmtree(scratch);
  char p[4200];
  snprintf(p, sizeof p, "%s.ids.safetensors", scratch), remove(p);
  snprintf(p, sizeof p, "%s.counts.tsv", scratch), remove(p);
  snprintf(p, sizeof p, "%s.text.txt", scratch), remove(p);
  free(scratch);
  return bad ? 1 : 0;
}
