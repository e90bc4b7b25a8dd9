/* Status tables generated from MTPQ_STATUS_MAP, and the error record. */
#include "io/status.h"

#include <stdarg.h>
#include <stdio.h>

struct status_row {
  enum mtpq_status status;
  const char *name;
  int exit_code;
  const char *msg;
};

static const struct status_row status_rows[] = {
#define MTPQ_STATUS_ROW_(name, value, exitc, msg) {MTPQ_##name, #name, exitc, msg},
    MTPQ_STATUS_MAP(MTPQ_STATUS_ROW_)
#undef MTPQ_STATUS_ROW_
};

#define N_STATUS (sizeof status_rows / sizeof status_rows[0])

static const struct status_row *find_row(enum mtpq_status s) {
  for (size_t i = 0; i < N_STATUS; i++)
    if (status_rows[i].status == s) return &status_rows[i];
  return NULL;
}

const char *mtpq_status_str(enum mtpq_status s) {
  const struct status_row *r = find_row(s);
  return r ? r->msg : "unknown status";
}

const char *mtpq_status_name(enum mtpq_status s) {
  const struct status_row *r = find_row(s);
  return r ? r->name : "UNKNOWN";
}

int mtpq_status_exit_code(enum mtpq_status s) {
  const struct status_row *r = find_row(s);
  return r ? r->exit_code : MTPQ_EXIT_FAILURE;
}

size_t mtpq_status_count(void) { return N_STATUS; }

enum mtpq_status mtpq_status_at(size_t i) {
  return i < N_STATUS ? status_rows[i].status : MTPQ_E_INTERNAL;
}

enum mtpq_status mtpq_err_set(struct mtpq_err *err, enum mtpq_status s,
                              const char *fmt, ...) {
  if (err) {
    va_list ap;
    err->status = s;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return s;
}

void mtpq_err_clear(struct mtpq_err *err) {
  if (err) {
    err->status = MTPQ_OK;
    err->msg[0] = '\0';
  }
}
