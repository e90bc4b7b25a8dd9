/* The acceptance plot of bench-acceptance and bench-decode (cli/cli.h):
 * left, per-position acceptance of each drafter with its 95% interval;
 * right, with more than one drafter, each one's MAL difference to the
 * first (stock) over all units and per domain, with paired intervals and
 * the zero line. Axes labelled; the legend is sized to its names (never
 * clipped). Also what the bench reports share beside it: whether an
 * output's directory is writable, and an interval as JSON. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/accept_ci.h"

int cli_out_dir_ok(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *sl = strrchr(dir, '/');
  if (sl) *sl = '\0';
  return access(sl ? (dir[0] ? dir : "/") : ".", W_OK) == 0;
}

cJSON *cli_json_pair(const double v[2]) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, cJSON_CreateNumber(v[0]));
  cJSON_AddItemToArray(a, cJSON_CreateNumber(v[1]));
  return a;
}

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                     "#8c564b", "#17becf", "#7f7f7f", "#bcbd22"};

/* text with the XML specials escaped (names are paths and domain names) */
static void put_text(FILE *f, const char *s, size_t most) {
  for (size_t i = 0; s[i] && i < most; i++) {
    if (s[i] == '<')
      fputs("&lt;", f);
    else if (s[i] == '>')
      fputs("&gt;", f);
    else if (s[i] == '&')
      fputs("&amp;", f);
    else if (s[i] == '"')
      fputs("&quot;", f);
    else
      fputc(s[i], f);
  }
}

/* the per-position panel at (x0, y0), w x h */
static void panel_perpos(FILE *f, int x0, int y0, int w, int h, const struct cli_plot_series *s, int n, int k) {
  for (int g = 0; g <= 10; g += 2) {
    const double y = y0 + h - h * g / 10.0;
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" "
            "text-anchor=\"end\">%.1f</text>\n",
            x0, y, x0 + w, y, x0 - 6, y + 4, g / 10.0);
  }
  for (int i = 0; i < k; i++)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
            x0 + (k > 1 ? w * i / (double)(k - 1) : w / 2.0), y0 + h + 18, i + 1);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">draft position</text>\n", x0 + w / 2, y0 + h + 40);
  fprintf(f,
          "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">accepted at the position / "
          "rounds</text>\n",
          x0 - 52, y0 + h / 2);
  const double dx = n > 1 ? 6.0 : 0.0; /* drafters side by side at each position, so their bars do not hide */
  for (int d = 0; d < n; d++) {
    const struct mtpq_accept_ci *c = s[d].all;
    const double off = (d - (n - 1) / 2.0) * dx;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[d % 9]);
    for (int i = 0; i < k; i++)
      fprintf(f, "%.1f,%.1f ", x0 + (k > 1 ? w * i / (double)(k - 1) : w / 2.0) + off, y0 + h - h * c->perpos[i]);
    fprintf(f, "\"/>\n");
    for (int i = 0; i < k; i++) {
      const double x = x0 + (k > 1 ? w * i / (double)(k - 1) : w / 2.0) + off;
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
              y0 + h - h * c->perpos_ci[i][0], x, y0 + h - h * c->perpos_ci[i][1], colors[d % 9]);
    }
  }
}

/* the difference panel: categories "all" and the domains, a point and its
 * interval per drafter after the first */
static void panel_diff(FILE *f, int x0, int y0, int w, int h, const struct cli_plot_series *s, int n,
                       const char *const *doms, int ndom) {
  double most = 0.05;
  for (int d = 1; d < n; d++)
    for (int j = -1; j < ndom; j++) {
      const struct mtpq_accept_ci *c = j < 0 ? s[d].all : &s[d].dom[j];
      most = fmax(most, fmax(fabs(c->dmal_ci[0]), fabs(c->dmal_ci[1])));
    }
  const double step = most <= 0.1 ? 0.025 : most <= 0.25 ? 0.05 : most <= 0.5 ? 0.1 : 0.25;
  const int ticks = (int)ceil(most / step);
  const double top = ticks * step;
#define YOF(v) (y0 + h / 2.0 - (h / 2.0) * (v) / top)
  for (int g = -ticks; g <= ticks; g++)
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/><text x=\"%d\" y=\"%.1f\" "
            "text-anchor=\"end\">%+.3f</text>\n",
            x0, YOF(g * step), x0 + w, YOF(g * step), g ? "#ddd" : "#555", x0 - 6, YOF(g * step) + 4, g * step);
  const int ncat = ndom + 1;
  const double cw = w / (double)ncat;
  for (int j = -1; j < ndom; j++) {
    const double cx = x0 + cw * (j + 1.5);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", cx, y0 + h + 18);
    put_text(f, j < 0 ? "all" : doms[j], 18);
    fputs("</text>\n", f);
    for (int d = 1; d < n; d++) {
      const struct mtpq_accept_ci *c = j < 0 ? s[d].all : &s[d].dom[j];
      const double x = cx + (d - n / 2.0) * 8.0;
      fprintf(f,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
              "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
              x, YOF(c->dmal_ci[0]), x, YOF(c->dmal_ci[1]), colors[d % 9], x, YOF(c->dmal), colors[d % 9]);
    }
  }
#undef YOF
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">domain</text>\n", x0 + w / 2, y0 + h + 40);
  fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">MAL difference to ", x0 - 56,
          y0 + h / 2);
  put_text(f, s[0].name, 40);
  fputs("</text>\n", f);
}

int cli_acceptance_svg(const char *path, const char *title, const char *unit, const struct cli_plot_series *s, int n,
                       int k, const char *const *doms, int ndom) {
  size_t most = 10;
  for (int d = 0; d < n; d++) most = strlen(s[d].name) > most ? strlen(s[d].name) : most;
  if (most > 48) most = 48;
  const int diff = n > 1;
  const int L = 76, B = 64, T = 40, pw = 400, ph = 300, gap = 100;
  const int dw = diff ? 80 * (ndom + 1) + 40 : 0;
  const int lx = L + pw + (diff ? gap + dw : 0) + 24, W = lx + 7 * (int)most + 200, Hh = T + ph + B;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
          "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, Hh);
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">", L);
  put_text(f, title, 200);
  fputs("</text>\n", f);
  panel_perpos(f, L, T, pw, ph, s, n, k);
  if (diff) panel_diff(f, L + pw + gap, T, dw, ph, s, n, doms, ndom);
  for (int d = 0; d < n; d++) {
    const struct mtpq_accept_ci *c = s[d].all;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">", lx,
            T + 22 * d, colors[d % 9], lx + 18, T + 10 + 22 * d);
    put_text(f, s[d].name, most);
    fprintf(f, ": MAL %.3f [%.3f, %.3f]</text>\n", c->mal, c->mal_ci[0], c->mal_ci[1]);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#555\">bars: 95%% intervals, bootstrap over %zu %s</text>\n", lx,
          T + 22 * n + 10, s[0].all->units, unit);
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}
