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
/* The set whose kernels run matmuls of weight type t (the fastest for t on this CPU: can differ
 * from kern_name, see dispatch.c); decode and prefill of one type always use the same set. */
const char *kern_matmul_name(enum nx_type t);

/*
 * In-memory weight layouts. A kernel set may prefer weights of type t rewritten into an
 * internal layout (types.h): Q4_K -> Q4_K_IL for the AVX2 set, whose decode kernel then does a
 * quarter of the shuffling; F16 / BF16 -> F16_X4 / BF16_X4 (rows interleaved by fours) for
 * both SIMD sets, whose float tiles then hold 4 x 4 (row, column) lanes. The engine asks once
 * per weight at load, when the weights are copied into memory (not with mmap), and rewrites
 * them with kern_relayout. Every set, the reference included, runs every layout it can be
 * asked for, so a model keeps working after kern_force_ref; the reference and AVX2 sets give
 * bit-identical results for a Q4_K matrix in either layout. An X4 matrix runs its own order
 * of operations (kern_simd.h; the same bits in both SIMD sets), not the file layout's (the
 * bits differ in float rounding).
 */
/* The layout the current set wants for a weight of type t with ne1 rows of ne0 elements: t
 * itself or an internal type. */
enum nx_type kern_weight_layout(enum nx_type t, int64_t ne0, int64_t ne1);
/* Rewrite nb blocks of type `from` into `to` for layouts that keep rows apart (Q4_K <->
 * Q4_K_IL, or a type into itself); dst must not overlap src. */
void kern_repack(enum nx_type from, enum nx_type to, const void *src, void *dst, int64_t nb);
/* Rewrite `rows` rows of ne0 elements of type `from` into `to` (= kern_weight_layout(from,
 * ...), or the reverse), any layout; for X4, rows is a multiple of 4. dst must not overlap src. */
void kern_relayout(enum nx_type from, enum nx_type to, const void *src, void *dst, int64_t ne0,
                   int64_t rows);
/* Row `row` of a weight matrix of type t (any layout; rows row_bytes apart in file layouts) as
 * ne0 floats. */
void kern_weight_row(enum nx_type t, const void *data, size_t row_bytes, int64_t ne0,
                     int64_t row, float *out);

/*
 * Grows the calling thread's kernel buffers so that every kern_matmul with k <= k_max and
 * nc <= nc_max runs without allocating (the SIMD K-quant drivers keep a per-thread buffer,
 * grown on demand and kept for the thread's life). Contexts call it on each of their threads
 * at creation, so decode never allocates. False when the memory is not there (matmuls still
 * work: a call that cannot grow the buffer runs the reference kernel).
 */
bool kern_reserve(int64_t k_max, int64_t nc_max);

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
/*
 * Prepared batches (prefill). For some weight types and column counts a set's kernels
 * re-arrange the activations of a many-column product inside every kern_matmul call (each call,
 * each thread, each product that reads the same rows). kern_batch_cols(wt, nc) > 0 says that
 * they can read them prepared once instead, for every product of weights of type wt over the
 * same nc rows: kern_prepare_batch writes columns [c0, c1) of the batch from the float rows x
 * (ldx floats apart; the rows kern_quantize_act would take), c0 a multiple of kern_batch_cols,
 * c1 too or nc, so threads can share the work (the value divides KERN_BATCH_ALIGN); the batch
 * takes at most nc * kern_act_row_bytes(wt, k) bytes. kern_matmul_batch is kern_matmul over it,
 * with the same bits as kern_matmul over the rows prepared one at a time. 0: kern_matmul only.
 * Calls for one batch must see the same kernel set (no kern_force_ref in between).
 */
#define KERN_BATCH_ALIGN 3
int kern_batch_cols(enum nx_type wt, int64_t nc);
void kern_prepare_batch(enum nx_type wt, int64_t k, const float *x, int64_t ldx, int64_t nc,
                        int64_t c0, int64_t c1, void *xb);
void kern_matmul_batch(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                       int64_t r1, const void *xb, int64_t nc, float *y, int64_t y_stride);
/* How many row ranges per thread a product of weights of type t with nc columns is best split
 * into: 8 for decode and small batches (balance); for prefill, 3 for quantized weights and 2
 * for X4 ones (2 measured 0-10% faster than 3 on the F16 1B model's prefill when each call
 * re-arranged its activations; with prepared batches, 4 alternated rounds on Zen 5, pp512 t/s
 * at 2 / 4 / 8: 143-158 / 141-155 / 136-147), 8 for the others. */
int kern_matmul_chunks_per_thread(enum nx_type t, int64_t nc);
/* A row count that the rows of every set's prefill tiles for weights of type t divide (32 for
 * X4 weights: AVX-512 tiles of 32 rows, AVX2 of 8; 48 for the others: 6, 16, 3 ...): splitting
 * a many-column product into row ranges of multiples of it leaves no range with narrower
 * leftover tiles (only the last one). */
int kern_matmul_row_quantum(enum nx_type t);

/* ---- attention helpers over a KV cache row of type kvt (F32 or F16) ---- */
/* sum_i k[i]*q[i] */
float kern_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q);
/* y[i] += a * v[i] */
void kern_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y);
/* store n floats as kvt */
void kern_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst);
/* load n elements of kvt as floats (the inverse of kern_store_kv; exact) */
void kern_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst);

/*
 * Grouped attention over one KV head: the ng query heads that share it are processed together,
 * so each K/V row is read (and converted from F16) once for all of them.
 *   K_j = (const char *)k + j*k_stride, V_j = (const char *)v + j*v_stride: rows of hd elements
 *   of kvt (F32 or F16) for positions j in [0, npos); strides are in bytes (any value, rows may
 *   be interleaved with other heads' slices; F16 rows need only 2-byte alignment).
 *   q: ng query rows of hd floats, contiguous (q + g*hd); scores / p: ng rows, ld floats apart.
 * Both are pure, single-threaded functions of their inputs (no state, no dependence on the
 * caller's thread); each output element's summation order is fixed and does not depend on ng,
 * npos, ld or the other heads (see attn_ref.c / attn_avx2.c). ng <= 0 or npos <= 0 is allowed.
 */
/* scores[g*ld + j] = scale * dot(q + g*hd, K_j) for g in [0, ng), j in [0, npos); ld >= npos;
 * nothing else of scores is written; scores must not overlap q or the K rows. */
void kern_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                      int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                      int64_t ld);
/* out[g*hd + i] = sum_j p[g*ld + j] * V_j[i] for g in [0, ng), i in [0, hd). Overwrites out
 * (all zeros when npos <= 0); out must not overlap p or the V rows. */
void kern_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                      int64_t npos, const float *p, int64_t ld, int64_t ng, float *out);

/*
 * Fused attention (flash-decoding style). A KV range of npos positions (K_j, V_j as above,
 * strides in bytes) is reduced, for each of the ng query heads sharing it, to a partial state
 * in one pass over its rows (scores, online softmax, values):
 *   s_j = scale * dot(q_g, K_j),  m = max_j s_j,  l = sum_j exp(s_j - m),
 *   o[i] = sum_j exp(s_j - m) * V_j[i]
 * written as part[g*(hd+2)] = m, part[g*(hd+2)+1] = l, part[g*(hd+2)+2+i] = o[i]
 * (npos <= 0: m = -inf, l = 0, o = 0). Positions are taken in chunks of KERN_ATTN_CHUNK
 * from the start of the range (the running state is rescaled per chunk), so a part depends
 * only on its own inputs. Pure and single-threaded, like the kernels above.
 *
 * kern_attn_merge combines nparts such partial states (part b at parts + b*ng*(hd+2), e.g.
 * one per KV cache block, in token order) into softmax(s) V: out[g*hd + i] =
 * sum_b exp(m_b - M) o_b[i] / sum_b exp(m_b - M) l_b, M = max_b m_b, summed in part order
 * (one fixed-order implementation per kernel set). Splitting the parts across threads (each
 * fills its parts, then one merge) therefore gives bit-identical output for any thread count,
 * as long as the part boundaries are fixed (KV cache blocks). The result matches the unfused
 * scores + softmax + values path within float rounding (see tests/test_attn.c for the bound).
 * All parts empty: out = 0.
 */
#define KERN_ATTN_CHUNK 64
#define KERN_ATTN_MAX_HD 512 /* larger head dims run the reference kernel */
void kern_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride, const void *v,
                     size_t v_stride, int64_t npos, const float *q, int64_t ng, float scale,
                     float *part);
void kern_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out);
/*
 * kern_attn_block over nblk KV blocks in turn, with the same strides: block b's rows are
 * k[b] + j*stride and v[b] + j*stride for j < min(brows, npos - b*brows) (so every block but
 * the last has brows rows; a block with none gives an empty part), its part at
 * parts + b*ng*(hd+2). Bit-identical to one kern_attn_block call per block; the SIMD sets
 * prefetch block b+1's rows while block b is reduced (the blocks of a paged KV cache are apart
 * in memory, where the hardware prefetchers do not follow).
 */
void kern_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                      size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                      int64_t ng, float scale, float *parts);

/*
 * Minimum work per thread (cost.c). The forward pass splits an operation over
 * kern_threads_for(cost, nth) threads (1 .. nth), cost being the estimated single-thread time of
 * the whole operation in ns: each thread gets at least KERN_MIN_NS_PER_THREAD of work, so no
 * operation is split so finely that the hand-off and barrier cost more than the split saves.
 * When every operation of a step gets 1 thread (tiny models), run the step on one thread
 * without barriers. Estimates are rough (factor ~2); they never change results, only speed
 * (outputs are bit-identical whatever the thread count).
 */
#define KERN_MIN_NS_PER_THREAD 20000.0
double kern_matmul_cost_ns(enum nx_type wt, int64_t k, int64_t rows, int64_t nc);
/* attention of ng query heads over npos positions of one KV head (any path) */
double kern_attn_cost_ns(enum nx_type kvt, int64_t hd, int64_t npos, int64_t ng);
int kern_threads_for(double cost_ns, int nth);
/* Replace KERN_MIN_NS_PER_THREAD process-wide (ns < 0: back to it). For tests: 0 makes every
 * operation take all nth threads, so thread-count invariance is checked on small models too.
 * Set it while no forward pass runs. */
void kern_set_min_ns_per_thread(double ns);

/* ---- activations ---- */
/* In place: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max). n <= 0 does nothing. */
void kern_softmax(float *x, int64_t n);
/* In place: g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i]. */
void kern_swiglu(float *g, const float *u, int64_t n);

#endif
