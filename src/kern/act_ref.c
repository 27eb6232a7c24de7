/*
 * act_ref.c - reference activation kernels: softmax over a row, the SwiGLU product
 * silu(g) * u, and KV rows widened to float. Plain C with libm's expf; the sums are accumulated in double. The oracle for
 * act_avx2.c.
 */
#include <math.h>
#include <string.h>

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

void kern_ref_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst) {
    if (kvt == NX_TYPE_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    const nx_half *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = nx_half_to_f32(h[i]);
}
