/* Partial NeoX RoPE, one rotated pair (j, j + rot/2) at a position: the
 * arithmetic the CPU backend and the CUDA kernels share (angles in double,
 * as both compute them, so the two backends rotate identically). */
#ifndef MTPQ_KERNELS_ROPE_H
#define MTPQ_KERNELS_ROPE_H
#include <math.h>
#include <stdint.h>

#include "quant/numerics.h" /* MTPQ_HD: host+device inline under nvcc */

MTPQ_HD void mtpq_rope_pair(float *x, int64_t j, int64_t rot, int64_t pos, float theta) {
  const int64_t half = rot / 2;
  double inv = pow((double)theta, -2.0 * (double)j / (double)rot);
  double ang = (double)pos * inv;
  float c = (float)cos(ang), s = (float)sin(ang);
  float a = x[j], b = x[j + half];
  x[j] = a * c - b * s;
  x[j + half] = b * c + a * s;
}
#endif
