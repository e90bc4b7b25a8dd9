/* Recording target traces; see kernels/record.h. */
#include "io/json.h"
#include "kernels/record.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "io/util.h"
#include "kernels/traces.h"
#include "quant/numerics.h"
#include "vocab/tokenizer.h"

void mtpq_prompts_free(struct mtpq_prompts *p) {
  for (size_t i = 0; i < p->n; i++) free(p->v[i].ids);
  free(p->v);
  memset(p, 0, sizeof *p);
}

static enum mtpq_status add(struct mtpq_prompts *p, const char *name, int32_t *ids, int64_t n, struct mtpq_err *err) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 16;
    struct mtpq_prompt *v = realloc(p->v, cap * sizeof *v);
    if (!v) {
      free(ids);
      return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    }
    p->v = v, p->cap = cap;
  }
  struct mtpq_prompt *x = &p->v[p->n++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->ids = ids, x->n = n;
  return MTPQ_OK;
}

struct idbuf {
  int32_t *v;
  int64_t n, cap;
  int oom;
};

static void push(void *ctx, int32_t id) {
  struct idbuf *b = ctx;
  if (b->n == b->cap) {
    int64_t cap = b->cap ? 2 * b->cap : 256;
    int32_t *v = realloc(b->v, (size_t)cap * sizeof *v);
    if (!v) {
      b->oom = 1;
      return;
    }
    b->v = v, b->cap = cap;
  }
  b->v[b->n++] = id;
}

static enum mtpq_status encode(struct mtpq_tokenizer *tok, const char *text, size_t len, struct idbuf *b,
                               struct mtpq_err *err) {
  enum mtpq_status st = mtpq_tokenizer_encode(tok, text, len, push, b, err);
  if (!st && b->oom) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  return st;
}

/* ChatML of a messages array into *s (malloc'd) */
static enum mtpq_status chatml(const cJSON *msgs, const char *path, long line, char **s, struct mtpq_err *err) {
  size_t cap = 64, n = 0;
  char *o = malloc(cap);
  if (!o) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  o[0] = 0;
  const cJSON *m;
  int count = 0;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(r) || !cJSON_IsString(c)) {
      free(o);
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%ld: message %d has no string role and content", path, line,
                          count);
    }
    size_t need = n + strlen(r->valuestring) + strlen(c->valuestring) + 64;
    if (need > cap) {
      char *q = realloc(o, need * 2);
      if (!q) {
        free(o);
        return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      }
      o = q, cap = need * 2;
    }
    n += (size_t)snprintf(o + n, cap - n, "<|im_start|>%s\n%s<|im_end|>\n", r->valuestring, c->valuestring);
    count++;
  }
  if (!count) {
    free(o);
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%ld: \"messages\" is empty", path, line);
  }
  if (n + 32 > cap) {
    char *q = realloc(o, n + 32);
    if (!q) {
      free(o);
      return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    }
    o = q, cap = n + 32;
  }
  snprintf(o + n, cap - n, "<|im_start|>assistant\n");
  *s = o;
  return MTPQ_OK;
}

static void stem(const char *path, char *out, size_t cap) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  snprintf(out, cap, "%.*s", (int)strcspn(b, "."), b);
  if (!out[0]) snprintf(out, cap, "prompts");
}

static int ends(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

enum mtpq_status mtpq_prompts_read(const char *path, struct mtpq_tokenizer *tok, const char *text_field, int chat,
                                   int64_t prompt_len, struct mtpq_prompts *p, struct mtpq_err *err) {
  const size_t first = p->n;
  enum mtpq_status st = MTPQ_OK;
  if (ends(path, ".safetensors")) {
    struct mtpq_traces *t = NULL;
    st = mtpq_traces_open(path, &t, err);
    int64_t P = prompt_len;
    if (!st && !P) st = mtpq_traces_meta_int(t, "prompt_len", 1, INT64_MAX, 192, &P, err);
    for (size_t i = 0; !st && i < mtpq_traces_count(t); i++) {
      const struct mtpq_trace *x = mtpq_traces_at(t, i);
      if (x->n < P) {
        st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: %s has %lld tokens, fewer than the prompt's %lld", path, x->name,
                          (long long)x->n, (long long)P);
        break;
      }
      int32_t *ids = malloc((size_t)P * sizeof *ids);
      if (!ids)
        st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      else
        memcpy(ids, x->tokens, (size_t)P * sizeof *ids), st = add(p, x->name, ids, P, err);
    }
    mtpq_traces_close(t);
    return st;
  }
  if (!tok) return mtpq_err_set(err, MTPQ_E_INVAL, "%s: a text prompt needs the target's tokenizer", path);
  char *buf = NULL, dom[96], name[128];
  size_t len = 0;
  stem(path, dom, sizeof dom);
  st = mtpq__read_file(path, (size_t)1 << 30, &buf, &len, err);
  if (st) return st;
  if (ends(path, ".jsonl")) {
    long line = 0;
    for (char *s = buf; !st && s < buf + len;) {
      char *e = memchr(s, '\n', (size_t)(buf + len - s));
      size_t n = e ? (size_t)(e - s) : (size_t)(buf + len - s);
      line++;
      int blank = 1;
      for (size_t i = 0; i < n && blank; i++) blank = s[i] == ' ' || s[i] == '\t' || s[i] == '\r';
      if (!blank) {
        char where[512];
        snprintf(where, sizeof where, "%s:%ld", path, line);
        cJSON *o = mtpq__json_parse(s, n, where, MTPQ_E_BAD_VALUE, err);
        const cJSON *f = o ? cJSON_GetObjectItemCaseSensitive(o, chat ? "messages" : text_field) : NULL;
        char *text = NULL;
        if (!o)
          st = MTPQ_E_BAD_VALUE;
        else if (chat && !cJSON_IsArray(f))
          st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%ld: no \"messages\" array (--chat)", path, line);
        else if (!chat && !cJSON_IsString(f))
          st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%ld: no string field \"%s\"%s", path, line, text_field,
                            cJSON_GetObjectItemCaseSensitive(o, "messages") ? " (a chat file: --chat)" : "");
        else if (chat)
          st = chatml(f, path, line, &text, err);
        struct idbuf b = {0};
        if (!st) st = encode(tok, chat ? text : f->valuestring, strlen(chat ? text : f->valuestring), &b, err);
        if (!st && b.n == 0) st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s:%ld: an empty prompt", path, line);
        snprintf(name, sizeof name, "%s.%zu", dom, p->n - first);
        if (!st)
          st = add(p, name, b.v, b.n, err);
        else
          free(b.v);
        free(text);
        cJSON_Delete(o);
      }
      if (!e) break;
      s = e + 1;
    }
  } else {
    struct idbuf b = {0};
    st = encode(tok, buf, len, &b, err);
    snprintf(name, sizeof name, "%s.0", dom);
    if (!st && b.n == 0) st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: an empty prompt", path);
    if (!st)
      st = add(p, name, b.v, b.n, err);
    else
      free(b.v);
  }
  free(buf);
  if (!st && p->n == first) st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: no prompts", path);
  return st;
}

enum mtpq_status mtpq_prompts_read_files(const char *const *files, int n, const char *target_dir, const char *tokenizer,
                                         const char *text_field, int chat, int64_t prompt_len, struct mtpq_prompts *p,
                                         struct mtpq_err *err) {
  struct mtpq_tokenizer *tok = NULL;
  enum mtpq_status st = MTPQ_OK;
  for (int i = 0; i < n && !st; i++) {
    if (!tok && !ends(files[i], ".safetensors")) { /* text: the tokenizer, loaded once */
      char def[4096];
      snprintf(def, sizeof def, "%s/tokenizer.json", target_dir);
      st = mtpq_tokenizer_load(tokenizer ? tokenizer : def, &tok, err);
    }
    if (!st) st = mtpq_prompts_read(files[i], tok, text_field, chat, prompt_len, p, err);
  }
  mtpq_tokenizer_free(tok);
  return st;
}

enum mtpq_status mtpq_traces_record(struct mtpq_target *t, enum mtpq_backend be, const struct mtpq_prompts *p,
                                    int64_t n_new, int k, const char *out, mtpq_record_progress_fn progress, void *ctx,
                                    struct mtpq_err *err) {
  if (p->n == 0) return mtpq_err_set(err, MTPQ_E_INVAL, "no prompts");
  if (n_new < 1) return mtpq_err_set(err, MTPQ_E_INVAL, "%lld tokens to generate", (long long)n_new);
  const int64_t H = mtpq_target_hidden(t), V = mtpq_target_vocab(t);
  for (size_t i = 0; i < p->n; i++) {
    for (size_t j = 0; j < i; j++)
      if (!strcmp(p->v[i].name, p->v[j].name))
        return mtpq_err_set(err, MTPQ_E_INVAL, "two prompts named %s (two files of one name?)", p->v[i].name);
    for (int64_t j = 0; j < p->v[i].n; j++)
      if (p->v[i].ids[j] < 0 || p->v[i].ids[j] >= V)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE,
                            "prompt %s: token %lld is %d, outside the target's vocabulary "
                            "(%lld): a prompt made with another tokenizer?",
                            p->v[i].name, (long long)j, p->v[i].ids[j], (long long)V);
  }
  struct mtpq_st_writer *w = NULL;
  enum mtpq_status st = mtpq_stw_init(out, &w, err);
  char nm[160], buf[64];
  int same = 1;
  for (size_t i = 0; !st && i < p->n; i++) {
    const int64_t N = p->v[i].n + n_new, sh[2] = {N, H};
    same &= p->v[i].n == p->v[0].n;
    snprintf(nm, sizeof nm, "%s.tokens", p->v[i].name);
    st = mtpq_stw_add(w, nm, MTPQ_DTYPE_I32, 1, sh, err);
    snprintf(nm, sizeof nm, "%s.hidden", p->v[i].name);
    if (!st) st = mtpq_stw_add(w, nm, MTPQ_DTYPE_BF16, 2, sh, err);
  }
  snprintf(buf, sizeof buf, "%d", k);
  if (!st) st = mtpq_stw_metadata(w, "k", buf, err);
  snprintf(buf, sizeof buf, "%lld", (long long)p->v[0].n);
  if (!st && same) st = mtpq_stw_metadata(w, "prompt_len", buf, err);
  for (size_t i = 0; !st && i < p->n; i++) { /* each trace's own, for prompts of different lengths */
    snprintf(nm, sizeof nm, "prompt_len.%s", p->v[i].name);
    snprintf(buf, sizeof buf, "%lld", (long long)p->v[i].n);
    st = mtpq_stw_metadata(w, nm, buf, err);
  }
  if (!st) st = mtpq_stw_metadata(w, "hidden", "target last_hidden_state (after the final norm), bf16", err);
  if (!st)
    st = mtpq_stw_metadata(w, "made_by",
                           be == MTPQ_BACKEND_CUDA ? "mtpq traces " MTPQ_VERSION ", CUDA backend, greedy"
                                                   : "mtpq traces " MTPQ_VERSION ", CPU reference backend, greedy",
                           err);
  if (!st) st = mtpq_stw_begin(w, err);
  float *h = malloc((size_t)H * 4);
  uint16_t *hb = malloc((size_t)H * 2);
  if (!st && (!h || !hb)) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  int64_t tokens = 0;
  for (size_t i = 0; !st && i < p->n; i++) {
    const struct mtpq_prompt *x = &p->v[i];
    const int64_t N = x->n + n_new;
    struct mtpq_target_seq *s = NULL;
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    if (!ids) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    if (!st) st = mtpq_target_seq_open(t, be, N, 1, &s, err);
    if (!st) memcpy(ids, x->ids, (size_t)x->n * sizeof *ids);
    snprintf(nm, sizeof nm, "%s.hidden", x->name);
    /* the prompt but its last token as one prefill (no head), then a step a token from there */
    const int64_t P1 = x->n - 1;
    float *hp = !st && P1 > 0 ? malloc((size_t)(P1 * H) * 4) : NULL;
    if (!st && P1 > 0 && !hp) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    if (!st && P1 > 0) st = mtpq_target_prefill(s, P1, ids, hp, err);
    for (int64_t pos = 0; !st && pos < P1; pos++) {
      for (int64_t j = 0; j < H; j++) hb[j] = mtpq_f32_to_bf16(hp[pos * H + j]);
      st = mtpq_stw_write(w, nm, (uint64_t)(pos * H * 2), hb, (uint64_t)(H * 2), err);
    }
    free(hp);
    for (int64_t pos = P1 > 0 ? P1 : 0; !st && pos < N; pos++) {
      int32_t next = 0;
      /* the head runs where its argmax is the next token: from the prompt's last position on */
      st = mtpq_target_step(s, ids[pos], h, NULL, pos + 1 >= x->n && pos + 1 < N ? &next : NULL, err);
      if (!st && pos + 1 >= x->n && pos + 1 < N) ids[pos + 1] = next;
      for (int64_t j = 0; !st && j < H; j++) hb[j] = mtpq_f32_to_bf16(h[j]);
      if (!st) st = mtpq_stw_write(w, nm, (uint64_t)(pos * H * 2), hb, (uint64_t)(H * 2), err);
    }
    snprintf(nm, sizeof nm, "%s.tokens", x->name);
    if (!st) st = mtpq_stw_write_all(w, nm, ids, (uint64_t)N * 4, err);
    tokens += N;
    mtpq_target_seq_close(s);
    free(ids);
    if (!st && progress) progress(ctx, i + 1, p->n, tokens);
  }
  free(h), free(hb);
  if (!st) st = mtpq_stw_commit(w, err);
  mtpq_stw_free(w);
  return st;
}
