/*
 * ops.c - DESIGN: the row operations the decoder and encoder share (ops.h), written once so
 * both compute them identically. No state, no allocation.
 */
#include "model/ops.h"

#include <math.h>

#include "core/nx_base.h"

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

void op_rope_apply(float *x, const float *cs, int n_rot, bool neox) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        int i0 = neox ? i : 2 * i;
        int i1 = neox ? i + half : 2 * i + 1;
        float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

void op_rope_table(float *cs, double pos, const float *inv_freq, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        double th = pos * (double)inv_freq[i];
        cs[2 * i] = (float)cos(th);
        cs[2 * i + 1] = (float)sin(th);
    }
}

void op_split(int64_t n, int64_t align, int ith, int nth, int64_t *start, int64_t *end) {
    int64_t blocks = (n + align - 1) / align;
    int64_t b0 = blocks * ith / nth, b1 = blocks * (ith + 1) / nth;
    *start = NX_MIN(b0 * align, n);
    *end = NX_MIN(b1 * align, n);
}
