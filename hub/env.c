/* The huggingface_hub environment (hub-protocol.md 1.2, 1.4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"

static const char *env_nz(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static int env_true(const char *name) {
  const char *v = env_nz(name);
  if (!v) return 0;
  static const char *yes[] = {"1", "ON", "YES", "TRUE", "on", "yes", "true", "On", "Yes", "True"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (strcmp(v, yes[i]) == 0) return 1;
  return 0;
}

static enum mtpq_status copy(char *dst, size_t cap, const char *src, const char *what, struct mtpq_err *err) {
  if (strlen(src) >= cap) return mtpq_err_set(err, MTPQ_E_INVAL, "%s is too long (%zu bytes)", what, strlen(src));
  memcpy(dst, src, strlen(src) + 1);
  return MTPQ_OK;
}

enum mtpq_status mtpq_hub_env_load(struct mtpq_hub_env *e, struct mtpq_err *err) {
  memset(e, 0, sizeof *e);
  enum mtpq_status st;
  const char *ep = env_nz("HF_ENDPOINT");
  if ((st = copy(e->endpoint, sizeof e->endpoint, ep ? ep : "https://huggingface.co", "HF_ENDPOINT", err))) return st;
  size_t n = strlen(e->endpoint);
  while (n && e->endpoint[n - 1] == '/') e->endpoint[--n] = 0;
  char home[1024];
  const char *hh = env_nz("HF_HOME"), *xdg = env_nz("XDG_CACHE_HOME"), *h = env_nz("HOME");
  if (hh) snprintf(home, sizeof home, "%s", hh);
  else if (xdg) snprintf(home, sizeof home, "%s/huggingface", xdg);
  else snprintf(home, sizeof home, "%s/.cache/huggingface", h ? h : ".");
  const char *cache = env_nz("HF_HUB_CACHE");
  if (!cache) cache = env_nz("HUGGINGFACE_HUB_CACHE");
  char dflt[1100];
  snprintf(dflt, sizeof dflt, "%s/hub", home);
  if ((st = copy(e->cache, sizeof e->cache, cache ? cache : dflt, "the hub cache path", err))) return st;
  const char *tok = env_nz("HF_TOKEN");
  if (!tok) tok = env_nz("HUGGING_FACE_HUB_TOKEN");
  if (tok) {
    if ((st = copy(e->token, sizeof e->token, tok, "HF_TOKEN", err))) return st;
  } else {
    char tp[1100];
    const char *p = env_nz("HF_TOKEN_PATH");
    snprintf(tp, sizeof tp, "%s", p ? p : "");
    if (!p) snprintf(tp, sizeof tp, "%s/token", home);
    FILE *f = fopen(tp, "r");
    if (f) {
      size_t r = fread(e->token, 1, sizeof e->token - 1, f);
      fclose(f);
      e->token[r] = 0;
      /* whitespace trimmed, as huggingface_hub does */
      char *s = e->token;
      while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
      memmove(e->token, s, strlen(s) + 1);
      size_t m = strlen(e->token);
      while (m && (e->token[m - 1] == ' ' || e->token[m - 1] == '\n' || e->token[m - 1] == '\r' ||
                   e->token[m - 1] == '\t'))
        e->token[--m] = 0;
    }
  }
  e->offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
  const char *to = env_nz("HF_HUB_DOWNLOAD_TIMEOUT");
  e->timeout_s = to ? strtod(to, NULL) : 10.0;
  if (!(e->timeout_s > 0)) e->timeout_s = 10.0;
  const char *bo = env_nz("MTPQ_HUB_BACKOFF_S");
  e->backoff_s = bo ? strtod(bo, NULL) : 1.0;
  if (!(e->backoff_s >= 0)) e->backoff_s = 1.0;
  return MTPQ_OK;
}
