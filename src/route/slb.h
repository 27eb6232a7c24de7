/*
 * slb.h - the semantic lookaside buffer: tool embeddings as INT8 rows of one contiguous matrix,
 * scanned with integer dot products, top-k with the margin between the first two.
 *
 * DESIGN
 * - Quantization, per vector, symmetric: scale = max|x| / 127, q_i = clamp(round(x_i / scale),
 *   -127, 127) (round half away from zero); an all-zero vector has scale 0 and q = 0. The query
 *   is quantized the same way; score(row) = dot_int32(q_row, q_query) * scale_row * scale_query.
 * - Error bound (used by the tests): with x = s_x (q_x + e_x), |e_x,i| <= 1/2,
 *     |x.y - s_x s_y q_x.q_y| <= s_x s_y (1/2 sum|q_x| + 1/2 sum|q_y| + n/4).
 * - Layout: rows of dim_pad = dim rounded up to 64 bytes (zero padding), the matrix 64-byte
 *   aligned, so every row starts on a cache line; per-row scale and element sum (the sum serves
 *   the AVX-512 VNNI kernel, which multiplies unsigned by signed bytes: q + 128 as the unsigned
 *   side, then subtracts 128 * sum(row)).
 * - Kernels (all exact int32, so every set gives identical results): scalar reference, AVX2
 *   (sign/abs trick into maddubs: |pair sum| <= 2 * 127 * 127 = 32258, no saturation) and
 *   AVX-512 VNNI (vpdpbusd). Chosen once by cpuid; NX_KERNELS=ref|avx2 lowers the choice.
 *   Inputs must lie in [-127, 127] (the quantizer guarantees it).
 * - Top-k: k <= RT_SLB_KMAX; ties go to the lower row id; margin = s1 - s2 (INFINITY with fewer
 *   than two rows).
 * Thread-safety: adding rows needs exclusive access; lookups on a built buffer may run
 * concurrently.
 */
#ifndef NX_ROUTE_SLB_H
#define NX_ROUTE_SLB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

#define RT_SLB_KMAX 16

struct rt_hit {
    int32_t id;
    float score;
};

/* Kernel: out[r] = sum_j mat[r*stride + j] * q[j] over j < dim_pad, for r < rows.
 * row_sums[r] = sum_j mat[r*stride + j] (needed by the VNNI kernel only). */
typedef void (*rt_slb_dots_fn)(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                               const int8_t *q, const int32_t *row_sums, int32_t *out);

void rt_slb_dots_ref(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                     const int8_t *q, const int32_t *row_sums, int32_t *out);
void rt_slb_dots_avx2(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                      const int8_t *q, const int32_t *row_sums, int32_t *out);
void rt_slb_dots_avx512(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                        const int8_t *q, const int32_t *row_sums, int32_t *out);

/* The kernel by name ("ref", "avx2", "avx512") when this CPU can run it, else NULL. */
rt_slb_dots_fn rt_slb_kernel_by_name(const char *name);
/* Name of the kernel chosen for this CPU (cpuid + NX_KERNELS). */
const char *rt_slb_kernel_name(void);

/* Quantizes x[dim] into q[dim_pad] (zero padded, dim_pad a multiple of 64); returns the scale.
 * NaN elements quantize to 0 and do not count in max|x|; an infinite max gives scale 0. The
 * AVX2 version (run-time chosen for queries) gives identical bytes and scale. */
float rt_slb_quantize(const float *x, int dim, size_t dim_pad, int8_t *q);
float rt_slb_quantize_avx2(const float *x, int dim, size_t dim_pad, int8_t *q);

typedef struct rt_slb rt_slb;

/* An empty buffer for vectors of dimension dim (1..65536) into *out; INVALID_ARG (dim out of
 * range) or NOMEM with a message and *out NULL. */
nx_status rt_slb_new(int dim, rt_slb **out, char *err, size_t errlen);
void rt_slb_free(rt_slb *s);
/* Quantizes and appends v[dim]; returns the row id, or NX_STATUS_NOMEM. */
int32_t rt_slb_add(rt_slb *s, const float *v);
int32_t rt_slb_rows(const rt_slb *s);
int rt_slb_dim(const rt_slb *s);
size_t rt_slb_dim_pad(const rt_slb *s);
/* Row r's quantized data (dim_pad bytes) and scale. */
const int8_t *rt_slb_row(const rt_slb *s, int32_t r);
float rt_slb_scale(const rt_slb *s, int32_t r);
/* Uses kernel fn instead of the cpuid choice (NULL: back to it); for tests and benchmarks. */
void rt_slb_set_kernel(rt_slb *s, rt_slb_dots_fn fn);

/*
 * The k (1..RT_SLB_KMAX, clipped to the row count) best rows for query q[dim], best first, into
 * out; *margin (may be NULL) = out[0].score - out[1].score. scratch: rows int32 (NULL: the
 * buffer's own, which makes concurrent lookups unsafe). Returns the number of hits.
 */
int rt_slb_topk(const rt_slb *s, const float *q, int k, struct rt_hit *out, float *margin,
                int32_t *scratch);

/* Every row's score for query q[dim] into scores[rows] (scratch as for rt_slb_topk). */
void rt_slb_scores(const rt_slb *s, const float *q, float *scores, int32_t *scratch);

/* Inserts (id, score) into a best-first list of *n <= k hits (ties: lower id first). */
void rt_topk_push(struct rt_hit *top, int *n, int k, int32_t id, float score);

#endif
