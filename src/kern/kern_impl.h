/*
 * kern_impl.h - private to src/kern/ and its tests: the kernel-set function table, the tables
 * of each instruction set, and small helpers shared by the kernel files.
 *
 * Every kernel set implements the same contracts as kern.h. All sets share one activation
 * format (below), so an activation row prepared by one set can be used by any other; tests use
 * that to compare sets on identical inputs.
 *
 * Activation formats (what kern_quantize_act writes, per weight type):
 *   F32, F16, BF16 weights -> float[k]
 *   Q4_0, Q8_0 weights     -> struct block_q8_0[k / 32], quants in [-127, 127]
 *   Q4_K, Q5_K, Q6_K       -> struct block_q8_K[k / 256], quants in [-127, 127], bsums filled
 * The quants never take the value -128: the SIMD Q4_0/Q8_0 dot products rely on it (they
 * negate activations with vpsignb). Activation rows written by anything but kern_quantize_act
 * must keep that rule.
 */
#ifndef NX_KERN_IMPL_H
#define NX_KERN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"

struct kern_table {
    const char *name; /* "ref", "avx2", "avx512" */
    void (*quantize_act)(enum nx_type wt, const float *x, void *xq, int64_t k);
    void (*matmul)(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                   int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                   int64_t y_stride);
    float (*dot_kv)(enum nx_type kvt, int64_t n, const void *k, const float *q);
    void (*axpy_kv)(enum nx_type kvt, int64_t n, float a, const void *v, float *y);
    void (*store_kv)(enum nx_type kvt, int64_t n, const float *x, void *dst);
    void (*attn_scores)(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                        int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                        int64_t ld);
    void (*attn_values)(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                        int64_t npos, const float *p, int64_t ld, int64_t ng, float *out);
    void (*softmax)(float *x, int64_t n);
    void (*load_kv)(enum nx_type kvt, int64_t n, const void *src, float *dst);
    void (*swiglu)(float *g, const float *u, int64_t n);
    /* kern_attn_block; NULL: the AVX2 version (SIMD sets only) */
    void (*attn_block)(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                       const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                       float scale, float *part);
    /* kern_attn_blocks; NULL: the AVX2 version (SIMD sets only) */
    void (*attn_blocks)(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                        size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                        int64_t ng, float scale, float *parts);
    /* kern_attn_merge; NULL: the AVX2 version */
    void (*attn_merge)(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out);
    /* kern_weight_layout for this set; NULL: every type as it is in files */
    enum nx_type (*weight_layout)(enum nx_type t, int64_t ne0, int64_t ne1);
    /* kern_batch_cols, kern_prepare_batch, kern_matmul_batch; NULL: no prepared batches */
    int (*batch_cols)(enum nx_type wt, int64_t nc);
    void (*prepare_batch)(enum nx_type wt, int64_t k, const float *x, int64_t ldx, int64_t nc,
                          int64_t c0, int64_t c1, void *xb);
    void (*matmul_batch)(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                         int64_t r1, const void *xb, int64_t nc, float *y, int64_t y_stride);
};

void kern_ref_softmax(float *x, int64_t n);
void kern_ref_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst);
void kern_avx2_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst);
void kern_ref_swiglu(float *g, const float *u, int64_t n);
void kern_avx2_softmax(float *x, int64_t n);
void kern_avx2_swiglu(float *g, const float *u, int64_t n);

/* Where the kernels' software prefetches of memory streams land, per kind of stream:
 * KERN_PF_GROUPED, weights of a group of rows read side by side (float and Q8_0 / Q4_0 decode,
 * 8 rows, and the Q8_0 / Q4_0 prefill's unpacking), KERN_PF_SINGLE, decode weights one row at a
 * time (K-quant decode), KERN_PF_KV, the next KV-cache block's rows in attention (prefetch_span
 * in attn_simd.h; the block after it always goes to L2, prefetch_ahead there). Prefetches go
 * through kern_prefetch. Set once by kern_init from a table of measured CPUs (dispatch.c), or
 * from NX_PREFETCH ("l1", "l2" or "off" for every kind, or "GROUPED,SINGLE,KV" such as
 * "l2,off,l2"). It only moves data earlier: no result bit depends on it. */
enum kern_pf { KERN_PF_L1, KERN_PF_L2, KERN_PF_OFF };
enum kern_pf_kind { KERN_PF_GROUPED, KERN_PF_SINGLE, KERN_PF_KV, KERN_PF_KINDS };
extern enum kern_pf kern_pf_level[KERN_PF_KINDS];
/* Prefetch of the line at p, a stream of the given kind, to that kind's level (the one place
 * the level becomes a hint; __builtin_prefetch locality 3 = prefetcht0, 2 = prefetcht1). */
static inline __attribute__((always_inline)) void kern_prefetch(enum kern_pf_kind kind, const void *p) {
    const enum kern_pf l = kern_pf_level[kind];
    if (l == KERN_PF_L1) __builtin_prefetch(p, 0, 3);
    else if (l == KERN_PF_L2) __builtin_prefetch(p, 0, 2);
}
/* The levels' names, "GROUPED,SINGLE,KV" (such as "l1,l1,l1"), in a static buffer that each
 * call rewrites (for diagnostics and tests). */
const char *kern_pf_name(void);

/* The kernel sets. Only call a SIMD set's functions when kern_cpu_supports(name) is true. */
extern const struct kern_table kern_table_ref;
extern const struct kern_table kern_table_avx2;
extern const struct kern_table kern_table_avx512;

/* Table by name ("ref", "avx2", "avx512"), or NULL for an unknown name. */
const struct kern_table *kern_table_by_name(const char *name);
/* True when this CPU (and OS) can run the named set. */
bool kern_cpu_supports(const char *name);
/* The table kern_matmul & co. currently use (after kern_init and kern_force_ref). */
const struct kern_table *kern_table_current(void);

/* Reference entry points (kern_ref.c), also used by SIMD sets for cases they do not cover. */
void kern_ref_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k);
void kern_ref_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                     int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                     int64_t y_stride);
float kern_ref_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q);
void kern_ref_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y);
void kern_ref_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst);
/* attn_ref.c */
void kern_ref_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                          int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                          int64_t ld);
void kern_ref_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                          int64_t npos, const float *p, int64_t ld, int64_t ng, float *out);

void kern_ref_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                         const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                         float scale, float *part);
void kern_ref_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out);
void kern_avx2_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out);
void kern_avx2_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                          const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                          float scale, float *part);
void kern_ref_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                          size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                          int64_t ng, float scale, float *parts);
void kern_avx2_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                           size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                           int64_t ng, float scale, float *parts);

/* AVX2 entry points (kern_avx2.c); the AVX-512 set reuses some of them. */
void kern_avx2_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k);
void kern_avx2_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                      int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                      int64_t y_stride);
/*
 * Q4_K / Q4_K_IL / Q6_K small-batch kernels (kern_avx2.c): each weight block unpacked in
 * registers once for up to KQ_SMALL_C columns, with the decode kernel's operations per column.
 * A pair kernel does the same for two weight rows at once (w, w + ws) and writes y[c * ys] and
 * y[c * ys + 1] for c < C, from the AVX2 driver's permuted columns (xp, xps); the AVX-512 set
 * has such kernels (kern_avx512.c), bit-identical to the AVX2 ones.
 * Calls of 2 .. raw_nc columns run through these kernels straight from the weight rows (in
 * blocks of rows that stay in L2 while groups of 2 x KQ_SMALL_C columns pass over them), wider
 * calls through the prefill tiles (each row block unpacked once into a buffer). raw_nc per set
 * and type, where dev/bench_batch measured the prefill tiles to overtake (Xeon SPR-class,
 * weights from DRAM, one thread, GFLOP/s on 8192 x 2048 / 2048 x 8192):
 * - AVX2 kernels: Q4_K 16 (at 24 columns small 181 / 162 against tiles 176 / 177, at 64 184 /
 *   164 against 203 / 207); Q6_K 48 (at 32 147 / 144 against 138 / 134, at 48 even, at 64 145
 *   / 146 against 155 / 154).
 * - AVX-512 pair kernels: every width (Q4_K_IL at 24 / 64 / 512 columns 240 / 257 / 254
 *   against tiles 175 / 201 / 214 on 8192 x 2048; Q6_K 161 / 173 / 182 against 121 / 143 /
 *   158).
 */
#define KQ_SMALL_C 8
#define KQ_RAW_NC_AVX2_Q4K 16
#define KQ_RAW_NC_AVX2_Q6K 48
typedef void (*kern_kq_pair_fn)(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *xp, size_t xps,
                                float *y, int64_t ys);
struct kern_kq_pairs {
    kern_kq_pair_fn q4k[KQ_SMALL_C + 1], q4kil[KQ_SMALL_C + 1], q6k[KQ_SMALL_C + 1]; /* [C] */
    int64_t raw_nc; /* raw_nc above, for the types whose pair kernels are there */
};
/* kern_avx2_matmul for wt = Q4_K, Q4_K_IL or Q6_K; small batches take rows two at a time
 * through pairs, with its raw_nc, where it has that type's kernels (pairs may be NULL). */
void kern_avx2_kq_matmul(enum nx_type wt, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                         const void *xq, size_t xs, int64_t nc, float *y, int64_t ys,
                         const struct kern_kq_pairs *pairs);
/* Q4_K -> Q4_K_IL (quant.h), bit-identical to quant_q4k_interleave_ref. */
void kern_avx2_q4k_interleave(const void *src, void *dst, int64_t nb);
/* Grows the calling thread's K-quant scratch buffer for every call with k <= k_max and
 * nc <= nc_max (kern_reserve); false when that memory is not available. */
bool kern_avx2_reserve(int64_t k_max, int64_t nc_max);
/* Test hook: arm (or disarm) a failure of the next growth of a thread's K-quant scratch buffer
 * (the matmul then runs the reference kernel). */
void kern_avx2_test_fail_scratch(bool arm);
float kern_avx2_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q);
void kern_avx2_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y);
void kern_avx2_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst);
/* attn_avx512.c */
void kern_avx512_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                             int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                             int64_t ld);
void kern_avx512_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                            const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                            float scale, float *part);
void kern_avx512_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k,
                             const void *const *v, size_t stride, int64_t nblk, int64_t brows,
                             int64_t npos, const float *q, int64_t ng, float scale, float *parts);

/* attn_avx2.c (also used by the AVX-512 set) */
void kern_avx2_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                           int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                           int64_t ld);
void kern_avx2_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                           int64_t npos, const float *p, int64_t ld, int64_t ng, float *out);

/*
 * Q8_0 / Q4_0 row-lane kernels (q8t_avx2.c, and the AVX-512 tile in kern_avx512.c): one
 * contract per output (see q8t_avx2.c), identical bits in both sets. Prefill (nc >=
 * Q8T_MIN_NC in the AVX2 set, Q8T5_MIN_NC in the AVX-512 one) uses the per-thread scratch:
 * the prepared activation columns (xbytes) then gpb unpacked groups of rows. The plans are
 * here so that kern_reserve can size the buffer for both sets without running AVX-512 code.
 * The decode path takes up to 4 columns per pass over a group of 8 rows (each weight block
 * loaded once for them); the AVX-512 tile beats it from 4 columns, the AVX2 one from 9
 * (dev/bench_batch Q8_0 on the Xeon, ms per call, 8192 x 2048 / 2048 x 8192, decode / tile:
 * AVX-512 nc 2 1.53-1.54 / 1.79-1.81, 1.13-1.17 / 1.39-1.41; nc 3 1.67-1.70 / 1.84,
 * 1.27-1.30 / 1.44-1.46; nc 4 1.87-1.90 / 1.90-1.92, 1.62-1.65 / 1.47-1.51; nc 5 2.30-2.39 /
 * 1.95-2.01. AVX2 nc 8 3.47-3.61 / 3.74-3.76, 3.14-3.15 / 3.25-3.40; nc 9 3.90-4.06 /
 * 3.94-4.06, 3.60 / 3.43-3.48; nc 12 4.96-5.04 / 4.61-4.86). Before the shared weight loads
 * (one column per pass) the AVX-512 tile won from 2 columns and the AVX2 one from 4.
 */
#define Q8T_MIN_NC 9
#define Q8T5_MIN_NC 4
#define Q8T2_XB 68  /* AVX2 prepared activation block: 32 x int16, dx (float) */
#define Q8T2_WB 544 /* AVX2 unpacked block of a group of 8 rows: 16 x 8 int16 pairs, 8 scales */
#define Q8T2_C 6    /* AVX2 tile columns */
#define Q8T5_XB 8   /* AVX-512 prepared activation block: -128 * sum(x) (int32), dx (float) */
#define Q8T5_WB 576 /* AVX-512 unpacked block of 16 rows: 8 x 16 x 4 (w + 128) bytes, 16 scales */
#define Q8T5_C 12   /* AVX-512 tile columns */
#define Q8T_WBUF (128 * 1024) /* unpacked weights per row block */

static inline size_t q8t_plan(int64_t k, int64_t nc, size_t xb, size_t wb, size_t *xbytes,
                              int64_t *gpb) {
    int64_t nb = k / 32;
    size_t gbytes = (size_t)nb * wb;
    int64_t g = (int64_t)(Q8T_WBUF / (gbytes ? gbytes : 1));
    *gpb = g < 1 ? 1 : g;
    *xbytes = ((size_t)nb * xb * (size_t)nc + 63) & ~(size_t)63;
    return *xbytes + gbytes * (size_t)*gpb;
}
static inline size_t q8t2_plan(int64_t k, int64_t nc, size_t *xbytes, int64_t *gpb) {
    return q8t_plan(k, nc, Q8T2_XB, Q8T2_WB, xbytes, gpb);
}
static inline size_t q8t5_plan(int64_t k, int64_t nc, size_t *xbytes, int64_t *gpb) {
    return q8t_plan(k, nc, Q8T5_XB, Q8T5_WB, xbytes, gpb);
}
/* Q8_0 (is_q4 false) or Q4_0 matmul, the kern_matmul contract. */
void kern_avx2_q8t_matmul(bool is_q4, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                          const void *xq, size_t xs, int64_t nc, float *y, int64_t ys);
/* The decode path of it for any nc (no scratch); the AVX-512 set's decode. */
void kern_avx2_q8t_decode(bool is_q4, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                          const void *xq, size_t xs, int64_t nc, float *y, int64_t ys);
/* The calling thread's kernel scratch buffer, at least n bytes (kern_avx2.c); NULL when it
 * cannot grow (the caller then runs a path that needs none). */
uint8_t *kern_avx2_scratch(size_t n);

/* The SIMD sets' X4 float matmul (x4_drive, kern_simd.h): k-blocks of X4_KC elements (a
 * constant of its order of operations); prefill tiles of at most X4_G groups of 4 rows x X4_C
 * columns (AVX-512 8 x 3, AVX2 2 x 3), in-place tiles of at most X4_DG groups x X4_DC columns
 * (each set's own shapes within these). Up to a column count of each set's
 * (x4_set.inplace_nc) the weights are read in place, without scratch; beyond it, the scratch
 * for nc columns holds one k-block of packed activations and one tile's k-block of weights as
 * floats. */
#define X4_KC 512
#define X4_G 8
#define X4_C 3
#define X4_DG 4
#define X4_DC 8
/* each set's x4_set.inplace_nc (the measurements are beside the sets' x4_set tables); the
   scratch is needed only above the smaller */
#define X4_INPLACE_NC_AVX2 32
#define X4_INPLACE_NC_AVX512 64
static inline size_t kern_x4_scratch_bytes(int64_t nc) {
    return ((size_t)nc * X4_KC + 4 * X4_G * X4_KC) * sizeof(float);
}

/*
 * Q4_K / Q5_K scale unpacking: 12 bytes hold eight 6-bit scales and eight 6-bit mins. With the
 * bytes read as three little-endian words a, b, c:
 *   sc[0..3] = bytes of a & 0x3f          m[0..3] = bytes of b & 0x3f
 *   sc[4..7] = (c & 0xf) | (a >> 6) << 4  m[4..7] = (c >> 4) | (b >> 6) << 4   (per byte)
 * out[0] gets sc[0..3], out[1] sc[4..7], out[2] m[0..3], out[3] m[4..7] (one byte each).
 */
static inline void kq_unpack_scales(const uint8_t *s, uint32_t out[4]) {
    uint32_t a = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 |
                 (uint32_t)s[3] << 24;
    uint32_t b = (uint32_t)s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 |
                 (uint32_t)s[7] << 24;
    uint32_t c = (uint32_t)s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 |
                 (uint32_t)s[11] << 24;
    out[0] = a & 0x3f3f3f3fu;
    out[1] = (c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4;
    out[2] = b & 0x3f3f3f3fu;
    out[3] = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4;
}

#endif
