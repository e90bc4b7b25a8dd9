/* libFuzzer: a sharded repo's model.safetensors.index.json (io/repo.c): the
 * input is the index of an otherwise empty directory. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "io/repo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[512];
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mtpq-fuzz-index-%ld", t && *t ? t : "/tmp", (long)getpid());
    mkdir(dir, 0700);
  }
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  struct mtpq_repo *r = NULL;
  struct mtpq_err err = {0};
  if (mtpq_repo_open(dir, &r, &err) == MTPQ_OK) mtpq_repo_close(r);
  return 0;
}
