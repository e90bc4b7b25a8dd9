/* Partial NeoX RoPE, one rotated pair (j, j + rot/2) at a position: the
 * arithmetic the CPU backend and the CUDA kernels share. The angle's cosine
 * and sine are computed in double and rounded to float (mtpq_rope_cs); the
 * CUDA backend tabulates them per position on the host with this same
 * function, so the two backends rotate identically. */
#ifndef MTPQ_KERNELS_ROPE_H
#define MTPQ_KERNELS_ROPE_H
#include <math.h>
#include <stdint.h>

#include "quant/numerics.h" /* MTPQ_HD: host+device inline under nvcc */

MTPQ_HD void mtpq_rope_cs(int64_t j, int64_t rot, int64_t pos, float theta, float *c, float *s) {
  double inv = pow((double)theta, -2.0 * (double)j / (double)rot);
  double ang = (double)pos * inv;
  *c = (float)cos(ang), *s = (float)sin(ang);
}

MTPQ_HD void mtpq_rope_apply(float *x, int64_t j, int64_t half, float c, float s) {
  float a = x[j], b = x[j + half];
  x[j] = a * c - b * s;
  x[j + half] = b * c + a * s;
}

MTPQ_HD void mtpq_rope_pair(float *x, int64_t j, int64_t rot, int64_t pos, float theta) {
  float c, s;
  mtpq_rope_cs(j, rot, pos, theta, &c, &s);
  mtpq_rope_apply(x, j, rot / 2, c, s);
}
#endif
