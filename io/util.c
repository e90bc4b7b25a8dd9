/* Internal helpers: strings, paths, whole-file reads, atomic writes. */
#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE   /* madvise(MADV_DONTNEED): glibc's posix_madvise ignores DONTNEED */
#include "io/util.h"

#include <ftw.h>
#include <errno.h>
#include <openssl/evp.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mtpq__ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void mtpq__rmtree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

void mtpq__buf_put(struct mtpq__buf *b, const void *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

enum mtpq_status mtpq__file_digest(const char *path, int git_blob_sha1, char *hex, uint64_t *size,
                                   struct mtpq_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  enum { CHUNK = 1 << 20 };
  unsigned char *buf = malloc(CHUNK);
  EVP_MD_CTX *m = EVP_MD_CTX_new();
  if (fstat(fileno(f), &sb) != 0 || !buf || !m) {
    fclose(f);
    free(buf);
    EVP_MD_CTX_free(m);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: cannot hash: out of memory or fstat failed", path);
  }
  EVP_DigestInit_ex(m, git_blob_sha1 ? EVP_sha1() : EVP_sha256(), NULL);
  if (git_blob_sha1) {
    char h[64];
    int n = snprintf(h, sizeof h, "blob %llu", (unsigned long long)sb.st_size);
    EVP_DigestUpdate(m, h, (size_t)n + 1); /* including the NUL */
  }
  size_t n;
  while ((n = fread(buf, 1, CHUNK, f)) > 0) EVP_DigestUpdate(m, buf, n);
  int bad = ferror(f);
  fclose(f);
  free(buf);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  EVP_DigestFinal_ex(m, d, &dl);
  EVP_MD_CTX_free(m);
  if (bad) return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: read error", path);
  for (unsigned i = 0; i < dl; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  if (size) *size = (uint64_t)sb.st_size;
  return MTPQ_OK;
}

char *mtpq__strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

char *mtpq__path_join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *p = malloc(na + nb + 2);
  if (!p) return NULL;
  memcpy(p, a, na);
  size_t k = na;
  if (na && a[na - 1] != '/') p[k++] = '/';
  memcpy(p + k, b, nb + 1);
  return p;
}

int mtpq__is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

long mtpq__utf8_bad_at(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    const unsigned c = u[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF; /* no overlongs, no surrogates */
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF; /* no overlongs, <= U+10FFFF */
    else
      return (long)i;
    if (i + len > n || u[i + 1] < lo || u[i + 1] > hi) return (long)i;
    for (size_t j = 2; j < len; j++)
      if (u[i + j] < 0x80 || u[i + j] > 0xBF) return (long)i;
    i += len;
  }
  return -1;
}

int mtpq__is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

enum mtpq_status mtpq__read_file(const char *path, size_t cap, char **out, size_t *len,
                                 struct mtpq_err *err) {
  *out = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp) return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(fp);
    return mtpq_err_set(err, MTPQ_E_IO_OPEN, "%s: not a regular file", path);
  }
  if ((uint64_t)sb.st_size > cap) {
    fclose(fp);
    return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: %lld bytes exceeds the %zu-byte limit", path,
                        (long long)sb.st_size, cap);
  }
  size_t n = (size_t)sb.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    fclose(fp);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  }
  if (n && fread(buf, 1, n, fp) != n) {
    free(buf);
    fclose(fp);
    return mtpq_err_set(err, MTPQ_E_IO_READ, "%s: short read", path);
  }
  fclose(fp);
  buf[n] = '\0';
  *out = buf;
  if (len) *len = n;
  return MTPQ_OK;
}

char *mtpq__tmp_name(const char *path) {
  size_t n = strlen(path) + 32;
  char *t = malloc(n);
  if (t) snprintf(t, n, "%s.tmp.%ld", path, (long)getpid());
  return t;
}

enum mtpq_status mtpq__write_file_atomic(const char *path, const void *bytes, size_t n,
                                         struct mtpq_err *err) {
  char *tmp = mtpq__tmp_name(path);
  if (!tmp) return mtpq_err_set(err, MTPQ_E_NOMEM, "%s: out of memory", path);
  enum mtpq_status st = MTPQ_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return st;
  }
  const char *p = bytes;
  size_t left = n;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: write failed: %s", tmp, strerror(errno));
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (!st && fsync(fd) != 0)
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: fsync failed: %s", tmp, strerror(errno));
  if (close(fd) != 0 && !st)
    st = mtpq_err_set(err, MTPQ_E_IO_WRITE, "%s: close failed: %s", tmp, strerror(errno));
  if (!st && rename(tmp, path) != 0)
    st = mtpq_err_set(err, MTPQ_E_IO_RENAME, "%s: cannot rename to %s: %s", tmp, path,
                      strerror(errno));
  if (st) unlink(tmp);
  free(tmp);
  return st;
}

void mtpq__release_pages(const void *p, size_t n) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps <= 0 || n < (size_t)ps) return;
  uintptr_t a = ((uintptr_t)p + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1);
  uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)ps - 1);
#ifdef MADV_DONTNEED
  if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
#else
  if (b > a) posix_madvise((void *)a, b - a, POSIX_MADV_DONTNEED);
#endif
}

double mtpq__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
