/* Shared by the libFuzzer harnesses: libFuzzer's entry point, and the
 * input as a file for readers that take a path (each process writes its
 * own file under TMPDIR). */
#ifndef MTPQ_FUZZ_UTIL_H
#define MTPQ_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data[0, n) into TMPDIR/mtpq-fuzz-PID-NAME; the path (static storage), NULL if it cannot be written */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t n) {
  static char path[512];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/mtpq-fuzz-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), name);
  FILE *f = fopen(path, "wb");
  if (!f) return NULL;
  const size_t w = n ? fwrite(data, 1, n, f) : 0;
  if (fclose(f) != 0 || w != n) return NULL;
  return path;
}

#endif
