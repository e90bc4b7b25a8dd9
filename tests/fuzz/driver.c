/* The harnesses without libFuzzer: each file named (or each file in a
 * directory named) goes once through LLVMFuzzerTestOneInput. The default
 * suite runs every harness over its corpus and its regressions (crashes
 * once found) this way, under ASan + UBSan in the sanitizer pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return perror(path), 1;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0, k;
  do {
    if (n == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 65536))) return fclose(f), 1;
    k = fread(buf + n, 1, cap - n, f);
    n += k;
  } while (k > 0);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) continue; /* (a regression folder not made yet) */
    if (!S_ISDIR(sb.st_mode)) {
      bad |= run_file(argv[i]), files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    for (struct dirent *e; d && (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      bad |= run_file(p), files++;
    }
    if (d) closedir(d);
  }
  printf("%d inputs\n", files);
  return bad || files == 0;
}
