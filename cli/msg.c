/* Messages to stderr; the only place the program talks to the user besides
 * command output on stdout. */
#include <stdarg.h>
#include <stdio.h>

#include "cli/cli.h"

int cli_verbosity = 1;

CLI_PRINTF(2, 0) static void vmsg(const char *prefix, const char *fmt, va_list ap) {
  fputs("mtpq: ", stderr);
  fputs(prefix, stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg("", fmt, ap);
  va_end(ap);
}

void cli_warn(const char *fmt, ...) {
  if (cli_verbosity < 1) return;
  va_list ap;
  va_start(ap, fmt);
  vmsg("warning: ", fmt, ap);
  va_end(ap);
}

void cli_note(const char *fmt, ...) {
  if (cli_verbosity < 2) return;
  va_list ap;
  va_start(ap, fmt);
  vmsg("", fmt, ap);
  va_end(ap);
}

int cli_fail(enum mtpq_status st, const struct mtpq_err *err) {
  if (err && err->msg[0]) cli_error("%s [%s]", err->msg, mtpq_status_name(st));
  else cli_error("%s [%s]", mtpq_status_str(st), mtpq_status_name(st));
  return mtpq_status_exit_code(st);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg("", fmt, ap);
  va_end(ap);
  if (cmd) fprintf(stderr, "Try 'mtpq help %s' for more information.\n", cmd);
  else fputs("Try 'mtpq --help' for more information.\n", stderr);
  return MTPQ_EXIT_USAGE;
}

const char *cli_bytes(unsigned long long n, char *buf, size_t cap) {
  if (n < 1000) snprintf(buf, cap, "%llu B", n);
  else if (n < 1000000) snprintf(buf, cap, "%.1f kB", n / 1e3);
  else if (n < 1000000000ULL) snprintf(buf, cap, "%.1f MB", n / 1e6);
  else snprintf(buf, cap, "%.2f GB", n / 1e9);
  return buf;
}
