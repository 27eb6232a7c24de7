/*
 * kern_ref.c - the scalar reference kernel set: the oracle the SIMD sets are tested against
 * and the fallback on CPUs without AVX2 (or with NX_KERNELS=ref).
 *
 * DESIGN
 * - Activations are prepared in the shared formats of kern_impl.h (F32, Q8_0, Q8_K).
 * - Dot products of quantized blocks compute each block's integer sum exactly, then add
 *   (float)(d_w * d_x) * isum into a double accumulator, in block order. Float weights
 *   accumulate w * x in double. The result is rounded to float once. This is more accurate than
 *   the SIMD sets (which accumulate in float lanes), so differences between a SIMD set and this
 *   one measure the SIMD set's rounding.
 * - Each output element is one independent dot product, so results never depend on how rows or
 *   columns are split.
 * - Written for clarity, not speed: one element at a time through the block layouts.
 */
#include <math.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern_impl.h"

/* ---- activations -------------------------------------------------------------------------- */

void kern_ref_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k) {
    switch (nx_type_in_file(wt)) { /* an internal layout takes its file type's activations */
    case NX_TYPE_F32:
    case NX_TYPE_F16:
    case NX_TYPE_BF16: memcpy(xq, x, (size_t)k * sizeof(float)); return;
    case NX_TYPE_Q4_0:
    case NX_TYPE_Q8_0: quant_quantize_row_ref(NX_TYPE_Q8_0, x, xq, k); return;
    case NX_TYPE_Q4_K:
    case NX_TYPE_Q5_K:
    case NX_TYPE_Q6_K: quant_quantize_row_ref(NX_TYPE_Q8_K, x, xq, k); return;
    default: NX_ASSERT(!"kern_quantize_act: unsupported weight type");
    }
}

/* ---- dot products: weight row (type wt) . activation row ---------------------------------- */

static float dot_f32(const float *w, const float *x, int64_t k) {
    double acc = 0;
    for (int64_t i = 0; i < k; i++) acc += (double)w[i] * x[i];
    return (float)acc;
}

static float dot_f16(const nx_half *w, const float *x, int64_t k) {
    double acc = 0;
    for (int64_t i = 0; i < k; i++) acc += (double)nx_half_to_f32(w[i]) * x[i];
    return (float)acc;
}

static float dot_bf16(const nx_bf16 *w, const float *x, int64_t k) {
    double acc = 0;
    for (int64_t i = 0; i < k; i++) acc += (double)nx_bf16_to_f32(w[i]) * x[i];
    return (float)acc;
}

static float dot_q4_0(const struct block_q4_0 *w, const struct block_q8_0 *x, int64_t nb) {
    double acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
            isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
        }
        acc += (double)(nx_half_to_f32(w[b].d) * nx_half_to_f32(x[b].d)) * isum;
    }
    return (float)acc;
}

static float dot_q8_0(const struct block_q8_0 *w, const struct block_q8_0 *x, int64_t nb) {
    double acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += w[b].qs[j] * x[b].qs[j];
        acc += (double)(nx_half_to_f32(w[b].d) * nx_half_to_f32(x[b].d)) * isum;
    }
    return (float)acc;
}

/*
 * Q4_K / Q5_K: sum_s d*sc[s]*sum(q*x) - dmin*m[s]*sum(x), times dx. The mins use the
 * activation's bsums (two per sub-block of 32). il: Q4_K_IL (quants permuted, quant.h).
 */
static float dot_kq(const void *wrow, int bits, bool il, const struct block_q8_K *x, int64_t nb) {
    double acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *scales, *qs, *qh = NULL;
        nx_half dh, dminh;
        if (bits == 4) {
            const struct block_q4_K *w = (const struct block_q4_K *)wrow + b;
            scales = w->scales, qs = w->qs, dh = w->d, dminh = w->dmin;
        } else {
            const struct block_q5_K *w = (const struct block_q5_K *)wrow + b;
            scales = w->scales, qs = w->qs, qh = w->qh, dh = w->d, dminh = w->dmin;
        }
        uint32_t u[4];
        kq_unpack_scales(scales, u);
        int isum = 0, msum = 0;
        for (int s = 0; s < 8; s++) {
            int sc = (u[s / 4] >> (8 * (s % 4))) & 0xff;
            int mn = (u[2 + s / 4] >> (8 * (s % 4))) & 0xff;
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                int q = il ? quant_q4k_il_get(qs, s, l) : (qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0xf;
                if (qh) q |= ((qh[l] >> s) & 1) << 4;
                sub += q * x[b].qs[32 * s + l];
            }
            isum += sc * sub;
            msum += mn * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
        }
        float d = nx_half_to_f32(dh) * x[b].d, dmin = nx_half_to_f32(dminh) * x[b].d;
        acc += (double)d * isum - (double)dmin * msum;
    }
    return (float)acc;
}

static float dot_q6_K(const struct block_q6_K *w, const struct block_q8_K *x, int64_t nb) {
    double acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int s = 0; s < 16; s++) {
            int sub = 0;
            for (int j = 0; j < 16; j++) {
                int e = 16 * s + j;
                int h = e / 128, p = e % 128, g = p / 32, l = p % 32;
                int lo = (w[b].ql[64 * h + l + 32 * (g & 1)] >> (g >= 2 ? 4 : 0)) & 0xf;
                int hi = (w[b].qh[32 * h + l] >> (2 * g)) & 3;
                sub += ((lo | hi << 4) - 32) * x[b].qs[e];
            }
            isum += w[b].scales[s] * sub;
        }
        acc += (double)(nx_half_to_f32(w[b].d) * x[b].d) * isum;
    }
    return (float)acc;
}

static float dot_row(enum nx_type wt, int64_t k, const void *w, const void *x) {
    if (wt == NX_TYPE_Q4_K_IL) return dot_kq(w, 4, true, x, k / QK_K); /* internal id (types.h) */
    switch (wt) {
    case NX_TYPE_F32: return dot_f32(w, x, k);
    case NX_TYPE_F16: return dot_f16(w, x, k);
    case NX_TYPE_BF16: return dot_bf16(w, x, k);
    case NX_TYPE_Q4_0: return dot_q4_0(w, x, k / QK4_0);
    case NX_TYPE_Q8_0: return dot_q8_0(w, x, k / QK8_0);
    case NX_TYPE_Q4_K: return dot_kq(w, 4, false, x, k / QK_K);
    case NX_TYPE_Q5_K: return dot_kq(w, 5, false, x, k / QK_K);
    case NX_TYPE_Q6_K: return dot_q6_K(w, x, k / QK_K);
    default: NX_ASSERT(!"kern_matmul: unsupported weight type"); return 0;
    }
}

/* Row r of an X4 matrix (types.h) . x. */
static float dot_x4(enum nx_type wt, int64_t k, const void *w, int64_t r, const float *x) {
    double acc = 0;
    uint16_t e[64];
    for (int64_t i = 0; i < k; i += 64) {
        int64_t n = NX_MIN((int64_t)64, k - i);
        quant_x4_get_ref(w, k, r, i, n, e);
        for (int64_t j = 0; j < n; j++) {
            float v = wt == NX_TYPE_F16_X4 ? nx_half_to_f32(e[j]) : nx_bf16_to_f32(e[j]);
            acc += (double)v * x[i + j];
        }
    }
    return (float)acc;
}

void kern_ref_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                     int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                     int64_t y_stride) {
    if (nx_type_is_x4(wt)) { /* rows interleaved by fours: by row index (internal ids) */
        for (int64_t c = 0; c < nc; c++) {
            const float *xr = (const float *)((const uint8_t *)xq + (size_t)c * xq_stride);
            for (int64_t r = r0; r < r1; r++) y[c * y_stride + r] = dot_x4(wt, k, w, r, xr);
        }
        return;
    }
    for (int64_t c = 0; c < nc; c++) {
        const uint8_t *xr = (const uint8_t *)xq + (size_t)c * xq_stride;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_stride;
            y[c * y_stride + r] = dot_row(wt, k, wr, xr);
        }
    }
}

/* ---- attention helpers -------------------------------------------------------------------- */

float kern_ref_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q) {
    double acc = 0;
    if (kvt == NX_TYPE_F32) {
        const float *kf = k;
        for (int64_t i = 0; i < n; i++) acc += (double)kf[i] * q[i];
    } else {
        NX_ASSERT(kvt == NX_TYPE_F16);
        const nx_half *kh = k;
        for (int64_t i = 0; i < n; i++) acc += (double)nx_half_to_f32(kh[i]) * q[i];
    }
    return (float)acc;
}

void kern_ref_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y) {
    if (kvt == NX_TYPE_F32) {
        const float *vf = v;
        for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, vf[i], y[i]);
    } else {
        NX_ASSERT(kvt == NX_TYPE_F16);
        const nx_half *vh = v;
        for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, nx_half_to_f32(vh[i]), y[i]);
    }
}

void kern_ref_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst) {
    if (kvt == NX_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
    } else {
        NX_ASSERT(kvt == NX_TYPE_F16);
        nx_half *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = nx_f32_to_half(x[i]);
    }
}

const struct kern_table kern_table_ref = {
    .name = "ref",
    .quantize_act = kern_ref_quantize_act,
    .matmul = kern_ref_matmul,
    .dot_kv = kern_ref_dot_kv,
    .axpy_kv = kern_ref_axpy_kv,
    .store_kv = kern_ref_store_kv,
    .attn_scores = kern_ref_attn_scores,
    .attn_values = kern_ref_attn_values,
    .attn_block = kern_ref_attn_block,
    .attn_blocks = kern_ref_attn_blocks,
    .attn_merge = kern_ref_attn_merge,
    .softmax = kern_ref_softmax,
    .load_kv = kern_ref_load_kv,
    .swiglu = kern_ref_swiglu,
};
