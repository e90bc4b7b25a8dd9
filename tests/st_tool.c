/* st_tool: drive io/ from the interop tests.
 *   st_tool write OUT SEED   write random tensors of every dtype; print
 *                            "name dtype shape sha256" of what was written
 *   st_tool dump PATH        read a file or repo; print the same lines
 * Shapes print as comma-separated dims ("-" for a scalar). */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/repo.h"
#include "io/safetensors.h"

static void sha256_hex(const void *p, size_t n, char out[65]) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

static void print_line(const char *name, enum mtpq_dtype dt, int rank, const int64_t *shape,
                       const void *p, size_t n) {
  char hex[65];
  sha256_hex(p, n, hex);
  printf("%s %s ", name, mtpq_dtype_name(dt));
  if (rank == 0) printf("-");
  for (int k = 0; k < rank; k++) printf("%s%lld", k ? "," : "", (long long)shape[k]);
  printf(" %s\n", hex);
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

int main(int argc, char **argv) {
  struct mtpq_err err = {0};
  if (argc == 4 && strcmp(argv[1], "write") == 0) {
    uint64_t s = strtoull(argv[3], NULL, 10) * 7919 + 1;
    struct mtpq_st_writer *w = NULL;
    if (mtpq_stw_init(argv[2], &w, &err)) goto fail;
    if (mtpq_stw_metadata(w, "format", "pt", &err)) goto fail;
    if (mtpq_stw_metadata(w, "writer", "mtpq st_tool", &err)) goto fail;
    struct {
      char name[64];
      enum mtpq_dtype dt;
      int rank;
      int64_t shape[3];
      size_t n;
      unsigned char *b;
    } t[MTPQ_DTYPE_COUNT * 3];
    int nt = 0;
    for (int d = 0; d < MTPQ_DTYPE_COUNT; d++)
      for (int r = 0; r < 3; r++) {
        snprintf(t[nt].name, sizeof t[nt].name, "layer.%d.%s.r%d", nt, mtpq_dtype_name(d), r);
        t[nt].dt = (enum mtpq_dtype)d;
        t[nt].rank = r == 0 ? 0 : (int)(1 + rnd(&s) % 3);
        size_t numel = 1;
        for (int k = 0; k < t[nt].rank; k++) {
          t[nt].shape[k] = (int64_t)(1 + rnd(&s) % 9);
          numel *= (size_t)t[nt].shape[k];
        }
        t[nt].n = numel * mtpq_dtype_size(t[nt].dt);
        t[nt].b = malloc(t[nt].n);
        for (size_t i = 0; i < t[nt].n; i++) t[nt].b[i] = (unsigned char)(rnd(&s) >> 56);
        if (t[nt].dt == MTPQ_DTYPE_BOOL)
          for (size_t i = 0; i < t[nt].n; i++) t[nt].b[i] &= 1;
        if (mtpq_stw_add(w, t[nt].name, t[nt].dt, t[nt].rank, t[nt].shape, &err)) goto fail;
        nt++;
      }
    if (mtpq_stw_begin(w, &err)) goto fail;
    for (int i = 0; i < nt; i++) {
      if (mtpq_stw_write_all(w, t[i].name, t[i].b, t[i].n, &err)) goto fail;
      print_line(t[i].name, t[i].dt, t[i].rank, t[i].shape, t[i].b, t[i].n);
      free(t[i].b);
    }
    if (mtpq_stw_commit(w, &err)) goto fail;
    mtpq_stw_free(w);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "dump") == 0) {
    struct mtpq_repo *r = NULL;
    if (mtpq_repo_open(argv[2], &r, &err)) goto fail;
    for (size_t i = 0; i < mtpq_repo_count(r); i++) {
      const struct mtpq_tensor *t = mtpq_repo_at(r, i);
      print_line(t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes);
    }
    mtpq_repo_close(r);
    return 0;
  }
  fprintf(stderr, "usage: st_tool write OUT SEED | st_tool dump PATH\n");
  return 2;
fail:
  fprintf(stderr, "st_tool: %s (%s)\n", err.msg, mtpq_status_name(err.status));
  return mtpq_status_exit_code(err.status);
}
