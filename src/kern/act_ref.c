/*
 * act_ref.c - reference activation kernels: softmax over a row and the SwiGLU product
 * silu(g) * u. Plain C with libm's expf; the sums are accumulated in double. The oracle for
 * act_avx2.c.
 */
#include <math.h>

#include "kern/kern_impl.h"

void kern_ref_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void kern_ref_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
