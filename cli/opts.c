/* Table-driven option parsing for every subcommand. -h/--help, -q/--quiet and
 * -v/--verbose are accepted by all commands. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_opt_index(const struct cli_opt *tbl, const char *name) {
  for (int i = 0; tbl[i].name; i++)
    if (strcmp(tbl[i].name, name) == 0) return i;
  return -1;
}

int cli_has(const struct cli_opt *tbl, const struct cli_args *a, const char *name) {
  int i = cli_opt_index(tbl, name);
  return i >= 0 && a->set[i] > 0;
}

const char *cli_str(const struct cli_opt *tbl, const struct cli_args *a, const char *name) {
  int i = cli_opt_index(tbl, name);
  return i >= 0 ? a->val[i] : NULL;
}

unsigned long long cli_uint(const struct cli_opt *tbl, const struct cli_args *a, const char *name,
                            unsigned long long dflt) {
  const char *v = cli_str(tbl, a, name);
  return v ? strtoull(v, NULL, 10) : dflt;
}

static int check_value(const char *cmd, const struct cli_opt *o, const char *v) {
  char *end = NULL;
  errno = 0;
  if (o->kind == OPT_UINT) {
    if (v[0] == '-' || v[0] == '+' || v[0] == '\0')
      return cli_usage_error(cmd, "--%s: '%s' is not a non-negative integer", o->name, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x > (1ULL << 62))
      return cli_usage_error(cmd, "--%s: '%s' is not a non-negative integer", o->name, v);
  } else if (o->kind == OPT_REAL) {
    double x = strtod(v, &end);
    if (errno || *end || end == v || !isfinite(x))
      return cli_usage_error(cmd, "--%s: '%s' is not a finite number", o->name, v);
  }
  return 0;
}

static int store(const char *cmd, const struct cli_opt *tbl, int i, const char *v,
                 struct cli_args *a) {
  const struct cli_opt *o = &tbl[i];
  if (a->set[i] && !(o->flags & OPT_MULTI))
    return cli_usage_error(cmd, "option --%s given more than once", o->name);
  if (v && check_value(cmd, o, v)) return MTPQ_EXIT_USAGE;
  if ((o->flags & OPT_MULTI) && a->set[i] >= CLI_MAX_MULTI)
    return cli_usage_error(cmd, "option --%s given more than %d times", o->name, CLI_MAX_MULTI);
  if (o->flags & OPT_MULTI) a->multi[i][a->set[i]] = v;
  a->set[i]++;
  a->val[i] = v;
  return 0;
}

int cli_parse(const char *cmd, const struct cli_opt *tbl, int argc, char **argv,
              struct cli_args *a, int *help) {
  memset(a, 0, sizeof *a);
  *help = 0;
  int only_pos = 0;
  for (int k = 0; k < argc; k++) {
    const char *s = argv[k];
    if (only_pos || s[0] != '-' || s[1] == '\0') {
      if (a->npos >= CLI_MAX_POS) return cli_usage_error(cmd, "too many arguments");
      a->pos[a->npos++] = s;
      continue;
    }
    if (strcmp(s, "--") == 0) {
      only_pos = 1;
      continue;
    }
    if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
      *help = 1;
      return 0;
    }
    if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0) {
      cli_verbosity = 0;
      continue;
    }
    if (strcmp(s, "-v") == 0 || strcmp(s, "--verbose") == 0) {
      cli_verbosity = 2;
      continue;
    }
    int i = -1;
    const char *inline_val = NULL;
    if (s[1] == '-') {
      const char *name = s + 2;
      const char *eq = strchr(name, '=');
      size_t nl = eq ? (size_t)(eq - name) : strlen(name);
      for (int j = 0; tbl[j].name; j++)
        if (strlen(tbl[j].name) == nl && strncmp(tbl[j].name, name, nl) == 0) i = j;
      if (i < 0) return cli_usage_error(cmd, "unknown option '%.*s'", (int)(nl + 2), s);
      if (eq) inline_val = eq + 1;
    } else {
      for (int j = 0; tbl[j].name; j++)
        if (tbl[j].short_name == s[1]) i = j;
      if (i < 0 || s[2] != '\0') return cli_usage_error(cmd, "unknown option '%s'", s);
    }
    const struct cli_opt *o = &tbl[i];
    const char *v = NULL;
    if (o->kind == OPT_FLAG) {
      if (inline_val) return cli_usage_error(cmd, "option --%s takes no value", o->name);
    } else if (inline_val) {
      v = inline_val;
    } else {
      if (k + 1 >= argc) return cli_usage_error(cmd, "option --%s needs a value (%s)", o->name, o->arg);
      v = argv[++k];
    }
    if (store(cmd, tbl, i, v, a)) return MTPQ_EXIT_USAGE;
  }
  return 0;
}

void cli_print_options(FILE *fp, const struct cli_opt *tbl) {
  for (int i = 0; tbl[i].name; i++) {
    char left[64];
    if (tbl[i].short_name)
      snprintf(left, sizeof left, "-%c, --%s%s%s", tbl[i].short_name, tbl[i].name,
               tbl[i].arg ? " " : "", tbl[i].arg ? tbl[i].arg : "");
    else
      snprintf(left, sizeof left, "    --%s%s%s", tbl[i].name, tbl[i].arg ? " " : "",
               tbl[i].arg ? tbl[i].arg : "");
    fprintf(fp, "  %-30s %s\n", left, tbl[i].help);
  }
  fprintf(fp, "  %-30s %s\n", "-q, --quiet", "only errors on stderr");
  fprintf(fp, "  %-30s %s\n", "-v, --verbose", "more detail on stderr");
  fprintf(fp, "  %-30s %s\n", "-h, --help", "show this help");
}
