/* mtpq verify-bitexact: byte equality of two repos, or of a reference with
 * mtpq's own requantization of a source. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "quant/verify.h"

const struct cli_opt verify_opts[] = {
    {"requantize", 0, OPT_FLAG, 0, NULL, "A is a BF16 SOURCE: quantize it and compare with B"},
    {"arith", 0, OPT_STR, 0, "cuda|cpu",
     "torch arithmetic to reproduce (default: the reference's mtpq_manifest.json, else cuda)"},
    {"fp8-recipe", 0, OPT_STR, 0, "RECIPE",
     "f32, modelopt-qtensor or modelopt-export (default: the reference's mtpq_manifest.json, else f32)"},
    {"gpu", 0, OPT_FLAG, 0, NULL, "requantize with the CUDA kernels"},
    {"threads", 'j', OPT_UINT, 0, "N", "CPU threads for requantization (default: all cores)"},
    {"json", 0, OPT_FLAG, 0, NULL, "print one JSON report"},
    {"show", 0, OPT_UINT, 0, "N", "first mismatches to print per tensor (default 5, max 8)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

static void fmt_val(char *buf, size_t cap, double v) {
  if (isnan(v)) snprintf(buf, cap, "nan");
  else snprintf(buf, cap, "%.9g", v);
}

static const char *recipe_name(enum mtpq_format f) {
  return f == MTPQ_FMT_FP8_MODELOPT_QTENSOR  ? "modelopt-qtensor"
         : f == MTPQ_FMT_FP8_MODELOPT_EXPORT ? "modelopt-export"
                                             : "f32";
}

static int print_json(const struct mtpq_verify_report *r, const char *a, const char *b, int requant,
                      const struct mtpq_verify_opts *vo, const char *from) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "mode", requant ? "requantize" : "compare");
  if (requant) {
    cJSON *rc = cJSON_AddObjectToObject(o, "recipe");
    cJSON_AddStringToObject(rc, "arith", vo->arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(rc, "fp8_recipe", recipe_name(vo->fp8_format));
    cJSON_AddStringToObject(rc, "from", from);
  }
  cJSON_AddStringToObject(o, requant ? "source" : "a", a);
  cJSON_AddStringToObject(o, requant ? "reference" : "b", b);
  int ok = r->differ == 0 && r->missing == 0 && r->layout == 0;
  cJSON_AddBoolToObject(o, "identical", ok);
  cJSON *s = cJSON_AddObjectToObject(o, "summary");
  cJSON_AddNumberToObject(s, "tensors", (double)r->n);
  cJSON_AddNumberToObject(s, "identical", (double)r->identical);
  cJSON_AddNumberToObject(s, "differ", (double)r->differ);
  cJSON_AddNumberToObject(s, "missing", (double)r->missing);
  cJSON_AddNumberToObject(s, "layout", (double)r->layout);
  cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
  for (size_t i = 0; i < r->n; i++) {
    const struct mtpq_verify_tensor *t = &r->t[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", t->name);
    cJSON_AddStringToObject(x, "kind", t->kind);
    cJSON_AddStringToObject(x, "result", mtpq_verify_result_name(t->result));
    cJSON_AddNumberToObject(x, "bytes", (double)t->bytes);
    cJSON_AddNumberToObject(x, "bytes_differ", (double)t->bytes_differ);
    cJSON_AddNumberToObject(x, "elements", (double)t->elements);
    cJSON_AddNumberToObject(x, "elements_differ", (double)t->elements_differ);
    cJSON_AddNumberToObject(x, "max_code_distance", t->max_code_distance);
    if (t->note[0]) cJSON_AddStringToObject(x, "note", t->note);
    cJSON *fm = cJSON_AddArrayToObject(x, "first_mismatches");
    for (size_t k = 0; k < t->n_first; k++) {
      const struct mtpq_mismatch *m = &t->first[k];
      cJSON *y = cJSON_CreateObject();
      cJSON_AddStringToObject(y, "part", m->part);
      cJSON_AddNumberToObject(y, "index", (double)m->index);
      if (m->row >= 0) {
        cJSON_AddNumberToObject(y, "row", (double)m->row);
        cJSON_AddNumberToObject(y, "col", (double)m->col);
      }
      cJSON_AddNumberToObject(y, "a_bits", (double)m->a_bits);
      cJSON_AddNumberToObject(y, "b_bits", (double)m->b_bits);
      if (!isnan(m->a_val)) cJSON_AddNumberToObject(y, "a_value", m->a_val);
      if (!isnan(m->b_val)) cJSON_AddNumberToObject(y, "b_value", m->b_val);
      cJSON_AddItemToArray(fm, y);
    }
    cJSON_AddItemToArray(arr, x);
  }
  char *txt = cJSON_Print(o);
  cJSON_Delete(o);
  if (!txt) return -1;
  puts(txt);
  free(txt);
  return 0;
}

static void print_text(const struct mtpq_verify_report *r, int show, const char *la,
                       const char *lb) {
  for (size_t i = 0; i < r->n; i++) {
    const struct mtpq_verify_tensor *t = &r->t[i];
    if (t->result == MTPQ_VERIFY_IDENTICAL) {
      printf("identical  %-60s %-10s %llu bytes\n", t->name, t->kind, (unsigned long long)t->bytes);
      continue;
    }
    if (t->result != MTPQ_VERIFY_DIFFERS) {
      printf("%-10s %-60s %-10s %s\n", t->result == MTPQ_VERIFY_LAYOUT ? "LAYOUT" : "MISSING",
             t->name, t->kind, t->note);
      continue;
    }
    printf("DIFFERS    %-60s %-10s %llu of %llu bytes, %llu of %llu elements, max code distance %d\n",
           t->name, t->kind, (unsigned long long)t->bytes_differ, (unsigned long long)t->bytes,
           (unsigned long long)t->elements_differ, (unsigned long long)t->elements,
           t->max_code_distance);
    for (size_t k = 0; k < t->n_first && (int)k < show; k++) {
      const struct mtpq_mismatch *m = &t->first[k];
      char va[40], vb[40], where[80];
      fmt_val(va, sizeof va, m->a_val);
      fmt_val(vb, sizeof vb, m->b_val);
      if (m->row >= 0) snprintf(where, sizeof where, "[%lld, %lld]", (long long)m->row, (long long)m->col);
      else snprintf(where, sizeof where, "[%llu]", (unsigned long long)m->index);
      printf("           %s%s%s: %s 0x%llx (%s) vs %s 0x%llx (%s)\n", m->part, m->part[0] ? " " : "",
             where, la, (unsigned long long)m->a_bits, va, lb, (unsigned long long)m->b_bits, vb);
    }
  }
  printf("summary: %zu tensors, %zu identical, %zu differ, %zu missing, %zu layout mismatches\n",
         r->n, r->identical, r->differ, r->missing, r->layout);
}

int cmd_verify(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "verify-bitexact";
  if (cli_parse(cmd, verify_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos != 2) return cli_usage_error(cmd, "verify-bitexact needs two paths");
  struct mtpq_verify_opts o = mtpq_verify_default_opts();
  const char *arith = cli_str(verify_opts, &a, "arith");
  if (arith && strcmp(arith, "cuda") == 0) o.arith = MTPQ_ARITH_CUDA;
  else if (arith && strcmp(arith, "cpu") == 0) o.arith = MTPQ_ARITH_CPU;
  else if (arith) return cli_usage_error(cmd, "--arith must be cuda or cpu, not '%s'", arith);
  const char *rec = cli_str(verify_opts, &a, "fp8-recipe");
  if (rec) {
    if (strcmp(rec, "f32") == 0) o.fp8_format = MTPQ_FMT_FP8;
    else if (strcmp(rec, "modelopt-qtensor") == 0) o.fp8_format = MTPQ_FMT_FP8_MODELOPT_QTENSOR;
    else if (strcmp(rec, "modelopt-export") == 0) o.fp8_format = MTPQ_FMT_FP8_MODELOPT_EXPORT;
    else return cli_usage_error(cmd, "--fp8-recipe must be f32, modelopt-qtensor or modelopt-export");
  }
  int requant = cli_has(verify_opts, &a, "requantize");
  if (!requant && (arith || rec || cli_has(verify_opts, &a, "gpu")))
    return cli_usage_error(cmd, "--arith, --fp8-recipe and --gpu need --requantize");
  o.use_gpu = cli_has(verify_opts, &a, "gpu");
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  o.threads = (int)cli_uint(verify_opts, &a, "threads", nproc > 0 ? (unsigned long long)nproc : 1);
  if (o.threads < 1 || o.threads > 256) return cli_usage_error(cmd, "--threads must be 1..256");
  int show = (int)cli_uint(verify_opts, &a, "show", 5);

  struct mtpq_verify_report *r = NULL;
  struct mtpq_err err = {0};
  /* an mtpq reference says how it was made: what the options leave open comes from its manifest */
  char from[4200] = "defaults (no mtpq_manifest.json in the reference)";
  if (requant) {
    struct mtpq_verify_opts m = o;
    int found = 0;
    enum mtpq_status ms = mtpq_verify_manifest_recipe(a.pos[1], &m, &found, &err);
    if (ms) return cli_fail(ms, &err);
    if (found) {
      if (!arith) o.arith = m.arith;
      if (!rec) o.fp8_format = m.fp8_format;
      snprintf(from, sizeof from, "%s/mtpq_manifest.json%s", a.pos[1], arith || rec ? " and the options given" : "");
      if ((arith && m.arith != o.arith) || (rec && m.fp8_format != o.fp8_format))
        cli_warn("the options differ from the recipe %s/mtpq_manifest.json records (arith %s, fp8 recipe %s)", a.pos[1],
                 m.arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu", recipe_name(m.fp8_format));
    } else if (arith || rec) {
      snprintf(from, sizeof from, "the options given");
    }
  }
  enum mtpq_status st = requant ? mtpq_verify_requantize(a.pos[0], a.pos[1], &o, &r, &err)
                                : mtpq_verify_compare(a.pos[0], a.pos[1], &o, &r, &err);
  if (st) return cli_fail(st, &err);
  if (cli_has(verify_opts, &a, "json")) {
    if (print_json(r, a.pos[0], a.pos[1], requant, &o, from)) {
      mtpq_verify_report_free(r);
      cli_error("out of memory");
      return MTPQ_EXIT_FAILURE;
    }
  } else {
    if (requant)
      printf("recipe: arith %s, fp8 recipe %s (from %s)\n", o.arith == MTPQ_ARITH_CUDA ? "cuda" : "cpu",
             recipe_name(o.fp8_format), from);
    print_text(r, show, requant ? "mtpq" : "A", requant ? "reference" : "B");
  }
  int ok = r->differ == 0 && r->missing == 0 && r->layout == 0;
  mtpq_verify_report_free(r);
  fflush(stdout);
  return ok ? 0 : mtpq_status_exit_code(MTPQ_E_DIFFERS);
}
