/*
 * act_avx2.c - AVX2 + FMA activation kernels: softmax over a row, SwiGLU (silu(g) * u), and
 * F16 KV rows widened to float with F16C.
 *
 * DESIGN: both are dominated by exp. exp8 evaluates e^x for 8 lanes as 2^k * e^r with
 * k = round(x / ln 2) and r = x - k ln 2 (ln 2 split in two parts for accuracy), e^r by a
 * degree-6 polynomial (Taylor coefficients; |r| <= ln2/2 gives a relative error below 2e-7,
 * about 2 ulp), and 2^k built in the exponent bits. Inputs are clamped to [-87.3, 88.7] so k stays
 * in the normal range (e^-87.3 ~ 1e-38: smaller results flush towards 0, as they should for
 * softmax weights and silu of very negative inputs). Softmax sums the exponentials in 8 float
 * lanes and then in double; the reference sums in double element by element, so results differ
 * by float rounding (tested against act_ref.c).
 */
#include <immintrin.h>
#include <string.h>

#include "kern/exp_avx2.h"
#include "kern/kern_impl.h"


void kern_avx2_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    int64_t i = 0;
    __m256 vm = _mm256_set1_ps(x[0]);
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    float buf[8];
    _mm256_storeu_ps(buf, vm);
    float mx = buf[0];
    for (int l = 1; l < 8; l++) mx = buf[l] > mx ? buf[l] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    vm = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    _mm256_storeu_ps(buf, vs);
    double sum = 0;
    for (int l = 0; l < 8; l++) sum += buf[l];
    for (; i < n; i++) {
        x[i] = exp1(x[i] - mx);
        sum += x[i];
    }
    __m256 vinv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    float inv = (float)(1.0 / sum);
    for (; i < n; i++) x[i] *= inv;
}

void kern_avx2_swiglu(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + exp1(-g[i])) * u[i];
}

void kern_avx2_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst) {
    if (kvt == NX_TYPE_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    const nx_half *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = nx_half_to_f32(h[i]);
}
