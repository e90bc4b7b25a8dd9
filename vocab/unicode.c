/* UTF-8, character classes and NFC (Unicode UAX #15) over generated tables. */
#include "vocab/unicode.h"

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

int mtpq__uni_is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) - 'a' < 26;
  return in_ranges(mtpq__uni_letter, mtpq__uni_letter_n, cp);
}

int mtpq__uni_is_number(uint32_t cp) {
  if (cp < 0x80) return cp - '0' < 10;
  return in_ranges(mtpq__uni_number, mtpq__uni_number_n, cp);
}

int mtpq__uni_is_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 9 && cp <= 13);
  return in_ranges(mtpq__uni_space, mtpq__uni_space_n, cp);
}

int mtpq__uni_ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  size_t lo = 0, hi = mtpq__uni_ccc_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < mtpq__uni_ccc[mid][0]) hi = mid;
    else if (cp > mtpq__uni_ccc[mid][1]) lo = mid + 1;
    else return (int)mtpq__uni_ccc[mid][2];
  }
  return 0;
}

size_t mtpq__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (len == 0 || len > n || c > 0xF4) goto bad;
  uint32_t v = c & (0x3F >> (len - 1));
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) goto bad;
    v = (v << 6) | (s[i] & 0x3F);
  }
  /* reject overlong forms, surrogates and values above U+10FFFF */
  if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) ||
      (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
    goto bad;
  *cp = v;
  return len;
bad:
  *cp = 0xFFFD;
  return 1;
}

size_t mtpq__utf8_encode(uint32_t cp, unsigned char *o) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---- NFC ------------------------------------------------------------------- */

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19,
       VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static const uint32_t *find_decomp(uint32_t cp) {
  size_t lo = 0, hi = mtpq__uni_decomp_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < mtpq__uni_decomp[mid][0]) hi = mid;
    else if (cp > mtpq__uni_decomp[mid][0]) lo = mid + 1;
    else return mtpq__uni_decomp[mid];
  }
  return 0;
}

static size_t decompose(uint32_t cp, uint32_t *out) {
  if (cp >= SBASE && cp < SBASE + SCOUNT) {
    uint32_t s = cp - SBASE;
    size_t k = 0;
    out[k++] = LBASE + s / NCOUNT;
    out[k++] = VBASE + (s % NCOUNT) / TCOUNT;
    if (s % TCOUNT) out[k++] = TBASE + s % TCOUNT;
    return k;
  }
  const uint32_t *d = cp >= 0xC0 ? find_decomp(cp) : 0;
  if (!d) {
    out[0] = cp;
    return 1;
  }
  size_t k = decompose(d[1], out);
  if (d[2]) k += decompose(d[2], out + k);
  return k;
}

static uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
    return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
  if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
      b < TBASE + TCOUNT)
    return a + (b - TBASE);
  size_t lo = 0, hi = mtpq__uni_comp_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *c = mtpq__uni_comp[mid];
    if (a < c[0] || (a == c[0] && b < c[1])) hi = mid;
    else if (a > c[0] || b > c[1]) lo = mid + 1;
    else return c[2];
  }
  return 0;
}

size_t mtpq__nfc(const uint32_t *in, size_t n, uint32_t *out) {
  /* 1. full canonical decomposition */
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m += decompose(in[i], out + m);
  /* 2. canonical ordering: stable sort of each run of non-starters */
  for (size_t i = 1; i < m; i++) {
    int c = mtpq__uni_ccc_of(out[i]);
    if (c == 0) continue;
    size_t j = i;
    while (j > 0) {
      int p = mtpq__uni_ccc_of(out[j - 1]);
      if (p <= c) break;
      uint32_t t = out[j - 1];
      out[j - 1] = out[j];
      out[j] = t;
      j--;
    }
  }
  /* 3. canonical composition */
  size_t k = 0;
  long starter = -1;
  int prev_cc = 0;
  for (size_t i = 0; i < m; i++) {
    uint32_t c = out[i];
    int cc = mtpq__uni_ccc_of(c);
    if (starter >= 0) {
      int adjacent = (long)k - 1 == starter;
      if (adjacent || (prev_cc != 0 && prev_cc < cc)) {
        uint32_t comp = compose(out[starter], c);
        if (comp) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = (long)k;
    out[k++] = c;
    prev_cc = cc;
  }
  return k;
}
