/*
 * slb.c - the INT8 lookaside buffer: quantizer, scalar reference kernel, kernel choice, top-k.
 */
#include "route/slb.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"

struct rt_slb {
    int dim;
    size_t dim_pad;
    int32_t rows, cap;
    int8_t *mat;       /* (cap, dim_pad), 64-byte aligned */
    float *scale;      /* (cap) */
    int32_t *row_sum;  /* (cap) */
    int32_t *scratch;  /* (cap) dots of the last lookup */
    int8_t *qbuf;      /* (dim_pad), 64-byte aligned: the quantized query */
    rt_slb_dots_fn fn; /* NULL: cpuid choice */
};

void rt_slb_dots_ref(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                     const int8_t *q, const int32_t *row_sums, int32_t *out) {
    (void)row_sums;
    for (int32_t r = 0; r < rows; r++) {
        const int8_t *row = mat + (size_t)r * stride;
        int32_t acc = 0;
        for (size_t j = 0; j < dim_pad; j++) acc += (int32_t)row[j] * (int32_t)q[j];
        out[r] = acc;
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static rt_slb_dots_fn g_fn = rt_slb_dots_ref;
static float (*g_quant)(const float *, int, size_t, int8_t *) = rt_slb_quantize;
static const char *g_name = "ref";

static bool cpu_has(const char *name) {
    __builtin_cpu_init();
    if (!strcmp(name, "ref")) return true;
    bool avx2 = __builtin_cpu_supports("avx2");
    if (!strcmp(name, "avx2")) return avx2;
    if (!strcmp(name, "avx512"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    return false;
}

rt_slb_dots_fn rt_slb_kernel_by_name(const char *name) {
    if (!cpu_has(name)) return NULL;
    if (!strcmp(name, "ref")) return rt_slb_dots_ref;
    if (!strcmp(name, "avx2")) return rt_slb_dots_avx2;
    if (!strcmp(name, "avx512")) return rt_slb_dots_avx512;
    return NULL;
}

static void choose(void) {
    const char *env = getenv("NX_KERNELS");
    bool allow512 = !(env && (!strcmp(env, "ref") || !strcmp(env, "avx2")));
    bool allow2 = !(env && !strcmp(env, "ref"));
    if (allow512 && cpu_has("avx512")) {
        g_fn = rt_slb_dots_avx512;
        g_name = "avx512";
    } else if (allow2 && cpu_has("avx2")) {
        g_fn = rt_slb_dots_avx2;
        g_name = "avx2";
    }
    if (allow2 && cpu_has("avx2")) g_quant = rt_slb_quantize_avx2;
}

const char *rt_slb_kernel_name(void) {
    pthread_once(&g_once, choose);
    return g_name;
}

float rt_slb_quantize(const float *x, int dim, size_t dim_pad, int8_t *q) {
    float amax = 0;
    for (int i = 0; i < dim; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a; /* NaN never compares greater: treated as 0 below */
    }
    memset(q, 0, dim_pad);
    if (!(amax > 0) || amax > 3.4028234663852886e38f) return 0; /* zero or infinite */
    float inv = 127.0f / amax;
    for (int i = 0; i < dim; i++) {
        /* round half away from zero without a libm call: |v| <= 127 (+ rounding), so the
         * truncation and the fraction a - t are exact */
        float v = x[i] * inv, a = fabsf(v);
        a = a == a ? a : 0.0f; /* NaN -> 0 */
        a = a < 127.0f ? a : 127.0f;
        int32_t t = (int32_t)a;
        t += (a - (float)t) >= 0.5f;
        q[i] = (int8_t)(v < 0 ? -t : t);
    }
    return amax / 127.0f;
}

nx_status rt_slb_new(int dim, rt_slb **out, char *err, size_t errlen) {
    *out = NULL;
    if (dim < 1 || dim > 65536)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "SLB dimension %d is outside 1..65536",
                       dim);
    rt_slb *s = nx_calloc(1, sizeof *s);
    if (s) {
        s->dim = dim;
        s->dim_pad = nx_align_up((size_t)dim, 64);
        s->qbuf = nx_malloc_aligned(s->dim_pad);
    }
    if (!s || !s->qbuf) {
        if (s) nx_free(s);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    *out = s;
    return NX_STATUS_OK;
}

void rt_slb_free(rt_slb *s) {
    if (!s) return;
    nx_free_aligned(s->mat);
    nx_free_aligned(s->qbuf);
    nx_free(s->scale);
    nx_free(s->row_sum);
    nx_free(s->scratch);
    nx_free(s);
}

int32_t rt_slb_add(rt_slb *s, const float *v) {
    if (s->rows == s->cap) {
        int32_t nc = s->cap ? s->cap * 2 : 64;
        size_t bytes;
        if (!nx_mul_size((size_t)nc, s->dim_pad, &bytes)) return NX_STATUS_NOMEM;
        int8_t *m = nx_malloc_aligned(bytes);
        float *sc = nx_realloc(s->scale, sizeof *sc * (size_t)nc);
        if (sc) s->scale = sc;
        int32_t *rs = nx_realloc(s->row_sum, sizeof *rs * (size_t)nc);
        if (rs) s->row_sum = rs;
        int32_t *sr = nx_realloc(s->scratch, sizeof *sr * (size_t)nc);
        if (sr) s->scratch = sr;
        if (!m || !sc || !rs || !sr) {
            nx_free_aligned(m);
            return NX_STATUS_NOMEM;
        }
        if (s->rows) memcpy(m, s->mat, (size_t)s->rows * s->dim_pad);
        nx_free_aligned(s->mat);
        s->mat = m;
        s->cap = nc;
    }
    int8_t *row = s->mat + (size_t)s->rows * s->dim_pad;
    s->scale[s->rows] = rt_slb_quantize(v, s->dim, s->dim_pad, row);
    int32_t sum = 0;
    for (size_t j = 0; j < s->dim_pad; j++) sum += row[j];
    s->row_sum[s->rows] = sum;
    return s->rows++;
}

int32_t rt_slb_rows(const rt_slb *s) { return s->rows; }
int rt_slb_dim(const rt_slb *s) { return s->dim; }
size_t rt_slb_dim_pad(const rt_slb *s) { return s->dim_pad; }
const int8_t *rt_slb_row(const rt_slb *s, int32_t r) { return s->mat + (size_t)r * s->dim_pad; }
float rt_slb_scale(const rt_slb *s, int32_t r) { return s->scale[r]; }
void rt_slb_set_kernel(rt_slb *s, rt_slb_dots_fn fn) { s->fn = fn; }

void rt_topk_push(struct rt_hit *top, int *n, int k, int32_t id, float score) {
    int m = *n;
    if (m == k) {
        const struct rt_hit *last = &top[k - 1];
        if (score < last->score || (score == last->score && id > last->id)) return;
        m = k - 1; /* the last one drops out */
    } else {
        (*n)++;
    }
    int j = m;
    while (j > 0 && (top[j - 1].score < score || (top[j - 1].score == score && top[j - 1].id > id))) {
        top[j] = top[j - 1];
        j--;
    }
    top[j] = (struct rt_hit){id, score};
}

/* dots[rows] of the quantized query; returns the query scale */
static float scan(const rt_slb *s, const float *q, int32_t *dots) {
    pthread_once(&g_once, choose);
    int8_t qloc[4096] __attribute__((aligned(64)));
    int8_t *qb = s->dim_pad <= sizeof qloc ? qloc : s->qbuf;
    float qs = (s->fn == rt_slb_dots_ref ? rt_slb_quantize : g_quant)(q, s->dim, s->dim_pad, qb);
    (s->fn ? s->fn : g_fn)(s->mat, s->dim_pad, s->rows, s->dim_pad, qb, s->row_sum, dots);
    return qs;
}

void rt_slb_scores(const rt_slb *s, const float *q, float *scores, int32_t *scratch) {
    if (s->rows == 0) return;
    int32_t *dots = scratch ? scratch : s->scratch;
    float qs = scan(s, q, dots);
    for (int32_t r = 0; r < s->rows; r++) scores[r] = (float)dots[r] * s->scale[r] * qs;
}

int rt_slb_topk(const rt_slb *s, const float *q, int k, struct rt_hit *out, float *margin,
                int32_t *scratch) {
    if (k > RT_SLB_KMAX) k = RT_SLB_KMAX;
    if (k > s->rows) k = s->rows;
    if (margin) *margin = INFINITY;
    if (k <= 0) return 0;
    int32_t *dots = scratch ? scratch : s->scratch;
    float qs = scan(s, q, dots);
    int n = 0;
    for (int32_t r = 0; r < s->rows; r++)
        rt_topk_push(out, &n, k, r, (float)dots[r] * s->scale[r] * qs);
    if (margin && n >= 2) *margin = out[0].score - out[1].score;
    return n;
}
