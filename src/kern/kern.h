/*
 * kern.h - compute kernels used by the forward pass, with run-time dispatch.
 *
 * Every kernel has a scalar reference (kern_ref.c / quant_ref.c) and SIMD versions
 * (kern_avx2.c, kern_avx512.c) chosen once at run time from CPU features; kern_force_ref(true)
 * or NX_KERNELS=ref forces the reference set. Kernels are single-threaded pure functions over
 * (pointers, strides, counts): the caller splits rows across threads.
 *
 * Matrix products follow "quantize the activations to the weight type's dot type, then dot":
 *   F32 weights  -> F32 activations      F16/BF16 -> F32 (or F16/BF16 where faster)
 *   Q4_0/Q8_0    -> Q8_0 activations     Q4_K/Q5_K/Q6_K -> Q8_K activations
 * The activation format is private to this module: callers only use kern_act_row_bytes and
 * kern_quantize_act.
 */
#ifndef NX_KERN_H
#define NX_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

/* Pick the kernel set (idempotent; also called lazily). Reads NX_KERNELS=ref once. */
void kern_init(void);
void kern_force_ref(bool force);
const char *kern_name(void); /* "avx512", "avx2", "ref" */

/* Bytes of one activation row of k elements prepared for weights of type wt. */
size_t kern_act_row_bytes(enum nx_type wt, int64_t k);
/* Convert/quantize one activation row (k a multiple of wt's block size). */
void kern_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k);

/*
 * y[c*y_stride + r] = dot(W row r, X row c) for r in [r0, r1), c in [0, nc).
 * W rows are k elements of type wt, w_stride bytes apart; X rows were prepared with
 * kern_quantize_act, xq_stride bytes apart. Results are identical whatever the split of rows
 * into [r0, r1) ranges (so output does not depend on the thread count).
 */
void kern_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                 int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                 int64_t y_stride);

/* ---- attention helpers over a KV cache row of type kvt (F32 or F16) ---- */
/* sum_i k[i]*q[i] */
float kern_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q);
/* y[i] += a * v[i] */
void kern_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y);
/* store n floats as kvt */
void kern_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst);

#endif
