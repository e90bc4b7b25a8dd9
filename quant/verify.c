/* verify-bitexact: compare repos byte for byte, or requantize a source and
 * compare with a reference (see quant/verify.h). */
#include "quant/verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/repo.h"
#include "io/util.h"
#include "quant/gpu_quant.h"

/* Element kinds for decoding and distances. */
enum ekind { EK_E2M1, EK_E4M3, EK_E5M2, EK_F16, EK_BF16, EK_F32, EK_F64, EK_SINT, EK_UINT };

struct part {
  const char *name;   /* "weight", ... or "" */
  enum ekind kind;
  size_t esize;       /* bytes per element (E2M1: 1 byte holds 2) */
  int64_t rows, cols; /* element grid for rank-2 parts, else rows = -1 */
};

struct mtpq_verify_opts mtpq_verify_default_opts(void) {
  struct mtpq_verify_opts o = {MTPQ_ARITH_CUDA, MTPQ_FMT_FP8, 0, 1};
  return o;
}

const char *mtpq_verify_result_name(enum mtpq_verify_result r) {
  switch (r) {
  case MTPQ_VERIFY_IDENTICAL: return "identical";
  case MTPQ_VERIFY_DIFFERS: return "differs";
  case MTPQ_VERIFY_ONLY_A: return "only-a";
  case MTPQ_VERIFY_ONLY_B: return "only-b";
  default: return "layout";
  }
}

static double half_to_double(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

static uint64_t load_bits(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

static double decode(enum ekind k, uint64_t b, size_t esize) {
  switch (k) {
  case EK_E2M1: return mtpq_e2m1_to_f32((uint8_t)b);
  case EK_E4M3: return mtpq_e4m3_to_f32((uint8_t)b);
  case EK_E5M2: return half_to_double((uint16_t)(b << 8));
  case EK_F16: return half_to_double((uint16_t)b);
  case EK_BF16: return mtpq_bf16_to_f32((uint16_t)b);
  case EK_F32: return mtpq_f32_from_bits((uint32_t)b);
  case EK_F64: {
    double d;
    memcpy(&d, &b, 8);
    return d;
  }
  case EK_SINT: {
    int shift = 64 - 8 * (int)esize;
    return (double)((int64_t)(b << shift) >> shift);
  }
  default: return (double)b;
  }
}

/* Position on the number line: floats by sign-magnitude bits, codes by
 * their ordinal, integers by value. */
static int64_t ordinal(enum ekind k, uint64_t b, size_t esize) {
  switch (k) {
  case EK_E2M1: return mtpq_e2m1_ordinal((uint8_t)b);
  case EK_E4M3:
  case EK_E5M2: return (b & 0x80) ? -(int64_t)(b & 0x7F) : (int64_t)b;
  case EK_F16:
  case EK_BF16: return (b & 0x8000) ? -(int64_t)(b & 0x7FFF) : (int64_t)b;
  case EK_F32: return (b & 0x80000000u) ? -(int64_t)(b & 0x7FFFFFFFu) : (int64_t)b;
  case EK_F64: return (b >> 63) ? -(int64_t)(b & 0x7FFFFFFFFFFFFFFFull) : (int64_t)(b >> 1);
  case EK_SINT: return (int64_t)decode(k, b, esize);
  default: return (int64_t)b;
  }
}

static void add_first(struct mtpq_verify_tensor *vt, const struct part *p, uint64_t idx,
                      uint64_t a, uint64_t b) {
  if (vt->n_first >= MTPQ_VERIFY_MAX_FIRST) return;
  struct mtpq_mismatch *m = &vt->first[vt->n_first++];
  snprintf(m->part, sizeof m->part, "%s", p->name);
  m->index = idx;
  m->row = p->rows >= 0 && p->cols > 0 ? (int64_t)(idx / (uint64_t)p->cols) : -1;
  m->col = p->rows >= 0 && p->cols > 0 ? (int64_t)(idx % (uint64_t)p->cols) : -1;
  m->a_bits = a;
  m->b_bits = b;
  m->a_val = decode(p->kind, a, p->esize);
  m->b_val = decode(p->kind, b, p->esize);
}

/* Compare nbytes of a and b as elements of part p, accumulating into vt. */
static void compare_part(struct mtpq_verify_tensor *vt, const struct part *p, const uint8_t *a,
                         const uint8_t *b, size_t nbytes) {
  vt->bytes += nbytes;
  int packed = p->kind == EK_E2M1;
  size_t es = packed ? 1 : p->esize;
  size_t n = nbytes / es;
  vt->elements += packed ? 2 * n : n;
  if (memcmp(a, b, nbytes) == 0) return;
  for (size_t i = 0; i < nbytes; i++) vt->bytes_differ += a[i] != b[i];
  for (size_t i = 0; i < n; i++) {
    const uint8_t *pa = a + i * es, *pb = b + i * es;
    if (memcmp(pa, pb, es) == 0) continue;
    uint64_t xa = load_bits(pa, es), xb = load_bits(pb, es);
    for (int nib = 0; nib < (packed ? 2 : 1); nib++) {
      uint64_t ca = packed ? (xa >> (4 * nib)) & 15 : xa;
      uint64_t cb = packed ? (xb >> (4 * nib)) & 15 : xb;
      if (ca == cb) continue;
      vt->elements_differ++;
      int64_t d = ordinal(p->kind, ca, es) - ordinal(p->kind, cb, es);
      if (d < 0) d = -d;
      if (d > vt->max_code_distance) vt->max_code_distance = d > 0x7FFFFFFF ? 0x7FFFFFFF : (int)d;
      add_first(vt, p, packed ? 2 * i + (uint64_t)nib : i, ca, cb);
    }
  }
}

static void finish(struct mtpq_verify_report *r, struct mtpq_verify_tensor *vt) {
  if (vt->result == MTPQ_VERIFY_IDENTICAL && vt->bytes_differ) vt->result = MTPQ_VERIFY_DIFFERS;
  switch (vt->result) {
  case MTPQ_VERIFY_IDENTICAL: r->identical++; break;
  case MTPQ_VERIFY_DIFFERS: r->differ++; break;
  case MTPQ_VERIFY_LAYOUT: r->layout++; break;
  default: r->missing++;
  }
}

static struct mtpq_verify_tensor *add_tensor(struct mtpq_verify_report *r, size_t *cap,
                                             const char *name, const char *kind) {
  if (r->n == *cap) {
    size_t nc = *cap ? 2 * *cap : 64;
    struct mtpq_verify_tensor *nt = realloc(r->t, nc * sizeof *nt);
    if (!nt) return NULL;
    r->t = nt;
    *cap = nc;
  }
  struct mtpq_verify_tensor *vt = &r->t[r->n];
  memset(vt, 0, sizeof *vt);
  vt->name = mtpq__strdup(name);
  if (!vt->name) return NULL;
  vt->kind = kind;
  r->n++;
  return vt;
}

void mtpq_verify_report_free(struct mtpq_verify_report *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) free(r->t[i].name);
  free(r->t);
  free(r);
}

static enum ekind kind_of(enum mtpq_dtype d, size_t *es) {
  *es = mtpq_dtype_size(d);
  switch (d) {
  case MTPQ_DTYPE_F8_E4M3: return EK_E4M3;
  case MTPQ_DTYPE_F8_E5M2: return EK_E5M2;
  case MTPQ_DTYPE_F16: return EK_F16;
  case MTPQ_DTYPE_BF16: return EK_BF16;
  case MTPQ_DTYPE_F32: return EK_F32;
  case MTPQ_DTYPE_F64: return EK_F64;
  case MTPQ_DTYPE_I8:
  case MTPQ_DTYPE_I16:
  case MTPQ_DTYPE_I32:
  case MTPQ_DTYPE_I64: return EK_SINT;
  default: return EK_UINT;
  }
}

/* "<X>.weight" with "<X>.weight_scale" F8_E4M3 beside it: packed NVFP4. */
static const struct mtpq_tensor *sibling(const struct mtpq_repo *r, const char *name,
                                         const char *from, const char *to) {
  char buf[MTPQ_ST_MAX_NAME + 32];
  size_t n = strlen(name), m = strlen(from);
  if (n < m || n - m + strlen(to) >= sizeof buf) return NULL;
  memcpy(buf, name, n - m);
  memcpy(buf + n - m, to, strlen(to) + 1);
  return mtpq_repo_find(r, buf);
}

static int is_nvfp4_weight(const struct mtpq_repo *r, const struct mtpq_tensor *t) {
  if (t->dtype != MTPQ_DTYPE_U8 || t->rank != 2 || !mtpq__ends_with(t->name, ".weight")) return 0;
  const struct mtpq_tensor *s = sibling(r, t->name, ".weight", ".weight_scale");
  return s && s->dtype == MTPQ_DTYPE_F8_E4M3;
}

static void shape_text(const struct mtpq_tensor *t, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "%s [", mtpq_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

enum mtpq_status mtpq_verify_compare(const char *a, const char *b,
                                     const struct mtpq_verify_opts *o,
                                     struct mtpq_verify_report **out, struct mtpq_err *err) {
  (void)o;
  *out = NULL;
  struct mtpq_repo *ra = NULL, *rb = NULL;
  enum mtpq_status st = mtpq_repo_open(a, &ra, err);
  if (!st) st = mtpq_repo_open(b, &rb, err);
  struct mtpq_verify_report *r = calloc(1, sizeof *r);
  if (!st && !r) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  size_t cap = 0, i = 0, j = 0;
  while (!st && (i < mtpq_repo_count(ra) || j < mtpq_repo_count(rb))) {
    const struct mtpq_tensor *ta = i < mtpq_repo_count(ra) ? mtpq_repo_at(ra, i) : NULL;
    const struct mtpq_tensor *tb = j < mtpq_repo_count(rb) ? mtpq_repo_at(rb, j) : NULL;
    int c = !ta ? 1 : !tb ? -1 : strcmp(ta->name, tb->name);
    const struct mtpq_tensor *t = c <= 0 ? ta : tb;
    int nv = c <= 0 ? is_nvfp4_weight(ra, ta) : is_nvfp4_weight(rb, tb);
    struct mtpq_verify_tensor *vt =
        add_tensor(r, &cap, t->name, nv ? "nvfp4" : mtpq_dtype_name(t->dtype));
    if (!vt) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    if (c < 0) {
      vt->result = MTPQ_VERIFY_ONLY_A;
      snprintf(vt->note, sizeof vt->note, "only in %s", a);
      i++;
    } else if (c > 0) {
      vt->result = MTPQ_VERIFY_ONLY_B;
      snprintf(vt->note, sizeof vt->note, "only in %s", b);
      j++;
    } else {
      int same = ta->dtype == tb->dtype && ta->rank == tb->rank;
      for (int k = 0; same && k < ta->rank; k++) same = ta->shape[k] == tb->shape[k];
      if (!same) {
        char sa[96], sb[96];
        shape_text(ta, sa, sizeof sa);
        shape_text(tb, sb, sizeof sb);
        vt->result = MTPQ_VERIFY_LAYOUT;
        snprintf(vt->note, sizeof vt->note, "%s vs %s", sa, sb);
      } else {
        struct part p = {"", EK_UINT, 1, -1, 0};
        p.kind = nv ? EK_E2M1 : kind_of(ta->dtype, &p.esize);
        if (ta->rank == 2) {
          p.rows = ta->shape[0];
          p.cols = nv ? 2 * ta->shape[1] : ta->shape[1];
        }
        compare_part(vt, &p, ta->data, tb->data, (size_t)ta->nbytes);
      }
      i++;
      j++;
    }
    finish(r, vt);
  }
  mtpq_repo_close(ra);
  mtpq_repo_close(rb);
  if (st) {
    mtpq_verify_report_free(r);
    return st;
  }
  *out = r;
  return MTPQ_OK;
}

/* ---- requantize --------------------------------------------------------------- */

struct item {
  char *module;                 /* X */
  void *owned;                  /* gathered source rows (the draft head) */
  int nvfp4;
  const struct mtpq_tensor *w, *ws, *ws2; /* reference parts */
  const void *src;              /* source bf16 [rows, cols] */
  int64_t rows, cols;
  float amax;
  char missing[200];            /* non-empty: cannot requantize */
};

static float f32_of(const struct mtpq_tensor *t) {
  float v;
  memcpy(&v, t->data, 4);
  return v;
}

/* The draft head mtp.draft_lm_head: the rows of the source's lm_head (or
 * tied embedding) for the ids in REFERENCE's mtp_draft_vocab_ids.safetensors. */
static void find_head_source(const struct mtpq_repo *src, const struct mtpq_repo *ref, struct item *it) {
  char *ip = mtpq__path_join(mtpq_repo_dir(ref), "mtp_draft_vocab_ids.safetensors");
  struct mtpq_st_file *f = NULL;
  struct mtpq_err e;
  static const char *heads[] = {"lm_head.weight", "model.embed_tokens.weight",
                                "model.language_model.embed_tokens.weight"};
  const struct mtpq_tensor *h = NULL;
  for (int k = 0; k < 3 && !h; k++) h = mtpq_repo_find(src, heads[k]);
  const struct mtpq_tensor *ids = NULL;
  if (ip && mtpq_st_open(ip, &f, &e) == MTPQ_OK) ids = mtpq_st_find(f, "ids");
  if (!h || h->dtype != MTPQ_DTYPE_BF16 || h->rank != 2 || !ids || ids->dtype != MTPQ_DTYPE_I64) {
    snprintf(it->missing, sizeof it->missing, "no BF16 lm_head/embedding in SOURCE or no ids in %s", ip ? ip : "?");
  } else {
    size_t row = (size_t)h->shape[1] * 2, n = (size_t)ids->numel;
    unsigned char *buf = malloc(n * row + 1);
    for (size_t i = 0; buf && i < n; i++) {
      int64_t id;
      memcpy(&id, (const unsigned char *)ids->data + 8 * i, 8);
      if (id < 0 || id >= h->shape[0]) {
        snprintf(it->missing, sizeof it->missing, "ids[%zu] = %lld outside %s", i, (long long)id, h->name);
        break;
      }
      memcpy(buf + i * row, (const unsigned char *)h->data + (size_t)id * row, row);
    }
    if (!buf) snprintf(it->missing, sizeof it->missing, "out of memory");
    it->owned = buf;
    it->src = buf;
    it->rows = (int64_t)n;
    it->cols = h->shape[1];
  }
  mtpq_st_close(f);
  free(ip);
}

/* Source BF16 for module X: X.weight, or a slice of fused experts. */
static void find_source(const struct mtpq_repo *src, struct item *it) {
  char buf[MTPQ_ST_MAX_NAME + 64];
  snprintf(buf, sizeof buf, "%s.weight", it->module);
  const struct mtpq_tensor *t = mtpq_repo_find(src, buf);
  if (t) {
    if (t->dtype != MTPQ_DTYPE_BF16 || t->rank != 2) {
      char s[96];
      shape_text(t, s, sizeof s);
      snprintf(it->missing, sizeof it->missing, "source %.80s is %.40s, want BF16 rank 2", buf, s);
      return;
    }
    it->src = t->data;
    it->rows = t->shape[0];
    it->cols = t->shape[1];
    return;
  }
  /* <p>.experts.<E>.<gate|up|down>_proj */
  const char *e = strstr(it->module, ".experts.");
  if (e) {
    const char *idx = e + 9;
    char *end = NULL;
    long E = strtol(idx, &end, 10);
    if (end != idx && *end == '.') {
      const char *proj = end + 1;
      int gate = strcmp(proj, "gate_proj") == 0, up = strcmp(proj, "up_proj") == 0,
          down = strcmp(proj, "down_proj") == 0;
      snprintf(buf, sizeof buf, "%.*s.experts.%s", (int)(e - it->module), it->module,
               down ? "down_proj" : "gate_up_proj");
      const struct mtpq_tensor *f = (gate || up || down) ? mtpq_repo_find(src, buf) : NULL;
      if (f && f->dtype == MTPQ_DTYPE_BF16 && f->rank == 3 && E < f->shape[0]) {
        int64_t rows = down ? f->shape[1] : f->shape[1] / 2, cols = f->shape[2];
        size_t off = (size_t)E * (size_t)(f->shape[1] * f->shape[2]) + (up ? (size_t)(rows * cols) : 0);
        it->src = (const uint8_t *)f->data + 2 * off;
        it->rows = rows;
        it->cols = cols;
        return;
      }
    }
  }
  snprintf(it->missing, sizeof it->missing, "no BF16 %s.weight in SOURCE", it->module);
}

static int same_parent(const char *a, const char *b) {
  const char *da = strrchr(a, '.'), *db = strrchr(b, '.');
  if (!da || !db) return !da && !db;
  return da - a == db - b && strncmp(a, b, (size_t)(da - a)) == 0;
}

static enum mtpq_status requant_one(struct item *it, const struct mtpq_verify_opts *o,
                                    struct mtpq_verify_tensor *vt, struct mtpq_err *err) {
  enum mtpq_format fmt = it->nvfp4 ? MTPQ_FMT_NVFP4 : o->fp8_format;
  struct mtpq_quant_opts qo = mtpq_quant_default_opts();
  qo.arith = o->arith;
  qo.group_amax = it->amax;
  qo.threads = o->threads;
  struct mtpq_qtensor q;
  enum mtpq_status st = o->use_gpu ? mtpq_gpu_quantize(fmt, it->src, it->rows, it->cols, &qo, &q, err)
                                   : mtpq_quantize(fmt, it->src, it->rows, it->cols, &qo, &q, err);
  if (st) return st;
  int64_t want_w1 = it->nvfp4 ? q.cols_padded / 2 : q.cols;
  if (it->w->rank != 2 || it->w->shape[0] != it->rows || it->w->shape[1] != want_w1 ||
      (it->nvfp4 && (it->ws->rank != 2 || it->ws->shape[0] != it->rows ||
                     it->ws->shape[1] != q.cols_padded / 16))) {
    char s[96];
    shape_text(it->w, s, sizeof s);
    vt->result = MTPQ_VERIFY_LAYOUT;
    snprintf(vt->note, sizeof vt->note, "reference weight is %s, source [%lld,%lld] quantizes to [%lld,%lld]",
             s, (long long)it->rows, (long long)it->cols, (long long)it->rows, (long long)want_w1);
    mtpq_qtensor_free(&q);
    return MTPQ_OK;
  }
  struct part pw = {"weight", it->nvfp4 ? EK_E2M1 : EK_E4M3, 1, it->rows,
                    it->nvfp4 ? q.cols_padded : q.cols};
  compare_part(vt, &pw, q.data, it->w->data, q.data_bytes);
  uint8_t sb[4];
  memcpy(sb, &q.scale, 4);
  if (it->nvfp4) {
    struct part ps = {"weight_scale", EK_E4M3, 1, it->rows, q.cols_padded / 16};
    compare_part(vt, &ps, q.scales, it->ws->data, q.scale_bytes);
    struct part p2 = {"weight_scale_2", EK_F32, 4, -1, 0};
    compare_part(vt, &p2, sb, it->ws2->data, 4);
  } else {
    struct part ps = {"weight_scale", EK_F32, 4, -1, 0};
    compare_part(vt, &ps, sb, it->ws->data, 4);
  }
  mtpq_qtensor_free(&q);
  return MTPQ_OK;
}

enum mtpq_status mtpq_verify_manifest_recipe(const char *dir, struct mtpq_verify_opts *o, int *found,
                                             struct mtpq_err *err) {
  *found = 0;
  char *path = mtpq__path_join(dir, "mtpq_manifest.json"), *text = NULL;
  if (!path) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (!mtpq__is_file(path)) {
    free(path);
    return MTPQ_OK;
  }
  size_t n = 0;
  enum mtpq_status st = mtpq__read_file(path, 1 << 24, &text, &n, err);
  cJSON *j = st ? NULL : mtpq__json_parse(text, n, path, MTPQ_E_BAD_VALUE, err);
  if (!st && !j) st = MTPQ_E_BAD_VALUE;
  const cJSON *ar = cJSON_GetObjectItemCaseSensitive(j, "arith");
  const cJSON *dl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "recipe"), "draft_linears");
  struct mtpq_verify_opts v = *o;
  if (!st && !(cJSON_IsString(ar) && (!strcmp(ar->valuestring, "cuda") || !strcmp(ar->valuestring, "cpu"))))
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: \"arith\" is %s, not \"cuda\" or \"cpu\"", path,
                      cJSON_IsString(ar) ? ar->valuestring : "missing or not a string");
  if (!st) v.arith = strcmp(ar->valuestring, "cuda") ? MTPQ_ARITH_CPU : MTPQ_ARITH_CUDA;
  static const enum mtpq_format fp8s[] = {MTPQ_FMT_FP8, MTPQ_FMT_FP8_MODELOPT_QTENSOR, MTPQ_FMT_FP8_MODELOPT_EXPORT};
  int fi = -1;
  for (int i = 0; !st && cJSON_IsString(dl) && i < 3; i++)
    if (!strcmp(dl->valuestring, mtpq_format_get(fp8s[i])->name)) fi = i;
  if (!st && fi < 0)
    st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: recipe.draft_linears is %s, not an FP8 format mtpq writes", path,
                      cJSON_IsString(dl) ? dl->valuestring : "missing or not a string");
  if (!st) v.fp8_format = fp8s[fi], *o = v, *found = 1;
  cJSON_Delete(j);
  free(text), free(path);
  return st;
}

enum mtpq_status mtpq_verify_requantize(const char *source, const char *reference,
                                        const struct mtpq_verify_opts *o,
                                        struct mtpq_verify_report **out, struct mtpq_err *err) {
  struct mtpq_verify_opts d = mtpq_verify_default_opts();
  if (!o) o = &d;
  *out = NULL;
  struct mtpq_repo *rs = NULL, *rr = NULL;
  struct item *items = NULL;
  size_t n = 0;
  struct mtpq_verify_report *r = NULL;
  enum mtpq_status st = mtpq_repo_open(source, &rs, err);
  if (!st) st = mtpq_repo_open(reference, &rr, err);
  if (!st) {
    items = calloc(mtpq_repo_count(rr) + 1, sizeof *items);
    r = calloc(1, sizeof *r);
    if (!items || !r) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  /* Collect the quantized modules of REFERENCE. */
  for (size_t i = 0; !st && i < mtpq_repo_count(rr); i++) {
    const struct mtpq_tensor *w = mtpq_repo_at(rr, i);
    if (!mtpq__ends_with(w->name, ".weight")) continue;
    const struct mtpq_tensor *ws = sibling(rr, w->name, ".weight", ".weight_scale");
    const struct mtpq_tensor *ws2 = sibling(rr, w->name, ".weight", ".weight_scale_2");
    struct item *it = &items[n];
    if (w->dtype == MTPQ_DTYPE_U8 && ws && ws->dtype == MTPQ_DTYPE_F8_E4M3 && ws2 &&
        ws2->dtype == MTPQ_DTYPE_F32 && ws2->numel == 1)
      it->nvfp4 = 1;
    else if (w->dtype == MTPQ_DTYPE_F8_E4M3 && ws && ws->dtype == MTPQ_DTYPE_F32 && ws->numel == 1 && !ws2)
      it->nvfp4 = 0;
    else
      continue;
    it->w = w, it->ws = ws, it->ws2 = ws2;
    it->module = malloc(strlen(w->name));
    if (!it->module) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    memcpy(it->module, w->name, strlen(w->name) - 7);
    it->module[strlen(w->name) - 7] = '\0';
    n++;
    if (strcmp(it->module, "mtp.draft_lm_head") == 0) find_head_source(rs, rr, it);
    else find_source(rs, it);
    if (!it->missing[0]) {
      char label[MTPQ_ST_MAX_NAME + 64];
      snprintf(label, sizeof label, "%s: %s.weight", source, it->module);
      st = mtpq_amax_bf16(it->src, (size_t)(it->rows * it->cols), label, &it->amax, err);
    }
  }
  /* NVFP4 groups: siblings with bit-equal weight_scale_2 share the max amax. */
  for (size_t i = 0; !st && i < n; i++) {
    if (!items[i].nvfp4 || items[i].missing[0]) continue;
    float g = items[i].amax;
    uint32_t bi = mtpq_f32_bits(f32_of(items[i].ws2));
    for (size_t j = 0; j < n; j++)
      if (j != i && items[j].nvfp4 && !items[j].missing[0] && same_parent(items[i].module, items[j].module) &&
          mtpq_f32_bits(f32_of(items[j].ws2)) == bi && items[j].amax > g)
        g = items[j].amax;
    items[i].amax = g; /* max is order independent: later reads see >= values */
  }
  size_t cap = 0;
  for (size_t i = 0; !st && i < n; i++) {
    struct mtpq_verify_tensor *vt = add_tensor(r, &cap, items[i].module, items[i].nvfp4 ? "nvfp4"
                                               : mtpq_format_get(o->fp8_format)->name);
    if (!vt) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    if (items[i].missing[0]) {
      vt->result = MTPQ_VERIFY_ONLY_B;
      snprintf(vt->note, sizeof vt->note, "%s", items[i].missing);
    } else {
      st = requant_one(&items[i], o, vt, err);
    }
    finish(r, vt);
  }
  if (!st && n == 0)
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND,
                      "%s: no quantized tensors (X.weight U8 + weight_scale F8_E4M3 + weight_scale_2 "
                      "F32, or X.weight F8_E4M3 + weight_scale F32)",
                      reference);
  for (size_t i = 0; i < n; i++) {
    free(items[i].module);
    free(items[i].owned);
  }
  free(items);
  mtpq_repo_close(rs);
  mtpq_repo_close(rr);
  if (st) {
    mtpq_verify_report_free(r);
    return st;
  }
  *out = r;
  return MTPQ_OK;
}
