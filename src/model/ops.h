/*
 * ops.h - small row operations shared by the decoder (forward.c) and the encoder (encoder.c):
 * RMS norm, RoPE rotation and tables, and the deterministic work split used by every
 * data-parallel step. All are pure functions of their inputs.
 */
#ifndef NX_MODEL_OPS_H
#define NX_MODEL_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w over n elements (the sum in double); y may be x. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* Rotate the first n_rot dimensions of x by the angles whose (cos, sin) pairs are cs[2i],
 * cs[2i+1]: pairs (2i, 2i+1), or NEOX halves (i, i + n_rot/2). */
void op_rope_apply(float *x, const float *cs, int n_rot, bool neox);
/* cs[2i], cs[2i+1] = cos, sin of pos * inv_freq[i] for i < half (angles in double). */
void op_rope_table(float *cs, double pos, const float *inv_freq, int64_t half);
/* [start, end) of `n` items for thread ith of nth, in multiples of `align` items. */
void op_split(int64_t n, int64_t align, int ith, int nth, int64_t *start, int64_t *end);

#endif
