/* The acceptance plot of bench-acceptance and bench-decode: per-position
 * acceptance of each drafter with its 95% interval, labelled axes, and a
 * legend sized to its names (never clipped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/replay.h"

int cli_plot_dir_ok(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *sl = strrchr(dir, '/');
  if (sl) *sl = '\0';
  return access(sl ? (dir[0] ? dir : "/") : ".", W_OK) == 0;
}

int cli_acceptance_svg(const char *path, const char *title, const char *const *names,
                       const struct mtpq_accept_stats *const *st, int n, int k) {
  static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                 "#8c564b", "#17becf", "#7f7f7f", "#bcbd22"};
  size_t most = 10;
  for (int d = 0; d < n; d++) most = strlen(names[d]) > most ? strlen(names[d]) : most;
  if (most > 48) most = 48;
  const int L = 70, B = 56, T = 40, R = 60 + 7 * (int)most + 110, pw = 440, ph = 300, W = L + pw + R, Hh = T + ph + B;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
          "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, Hh);
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">%s</text>\n", L, title);
  for (int g = 0; g <= 10; g += 2) {
    const double y = T + ph - ph * g / 10.0;
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" "
            "text-anchor=\"end\">%.1f</text>\n",
            L, y, L + pw, y, L - 6, y + 4, g / 10.0);
  }
  const double dx = n > 1 ? 6.0 : 0.0; /* drafters side by side at each position, so their bars do not hide */
  for (int i = 0; i < k; i++) {
    const double x = L + (k > 1 ? pw * i / (double)(k - 1) : pw / 2.0);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, T + ph + 18, i + 1);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">draft position</text>\n", L + pw / 2, Hh - 12);
  fprintf(f,
          "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">accepted at the position / "
          "rounds</text>\n",
          T + ph / 2);
  for (int d = 0; d < n; d++) {
    const double off = (d - (n - 1) / 2.0) * dx;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[d % 9]);
    for (int i = 0; i < k; i++)
      fprintf(f, "%.1f,%.1f ", L + (k > 1 ? pw * i / (double)(k - 1) : pw / 2.0) + off,
              T + ph - ph * mtpq_accept_perpos(st[d], i));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < k; i++) { /* the 95% interval */
      const double x = L + (k > 1 ? pw * i / (double)(k - 1) : pw / 2.0) + off, p = mtpq_accept_perpos(st[d], i),
                   c = mtpq_accept_perpos_ci95(st[d], i);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
              T + ph - ph * (p - c > 0 ? p - c : 0), x, T + ph - ph * (p + c < 1 ? p + c : 1), colors[d % 9]);
    }
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%.48s: MAL "
            "%.3f &#177; %.3f</text>\n",
            L + pw + 20, T + 22 * d, colors[d % 9], L + pw + 38, T + 10 + 22 * d, names[d], mtpq_accept_mal(st[d]),
            mtpq_accept_mal_ci95(st[d]));
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#555\">bars: 95%% intervals</text>\n", L + pw + 20, T + 22 * n + 10);
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}
