/*
 * attn_ref.c - reference (plain C) grouped attention kernels: kern_attn_scores and
 * kern_attn_values for the "ref" kernel set, and the oracle the SIMD versions are tested
 * against.
 *
 * DESIGN
 * - Written to repeat, element for element, what the per-call reference path computes (the
 *   forward pass's old loop of kern_ref_dot_kv / kern_ref_axpy_kv), so switching the forward
 *   pass to the grouped kernels does not change any result under NX_KERNELS=ref:
 *   - scores: each dot product accumulates (double)K[i] * q[i] in a double, in index order
 *     i = 0 .. hd-1, is rounded to float once, then multiplied by scale in float.
 *   - values: each output element starts at 0.0f and accumulates fmaf(p[j], V_j[i], acc) in
 *     float, in position order j = 0 .. npos-1 (one rounding per position).
 * - F16 elements are converted exactly with nx_half_to_f32.
 * - Loops are ordered for clarity (head, then position, then element); every output element
 *   is an independent computation, so the order of the outer loops cannot change results.
 */
#include <math.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern_impl.h"

/* Element i of a KV row of type kvt, as a float (exact). */
static inline float kv_elem(enum nx_type kvt, const void *row, int64_t i) {
    if (kvt == NX_TYPE_F32) return ((const float *)row)[i];
    return nx_half_to_f32(((const nx_half *)row)[i]);
}

void kern_ref_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                          int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                          int64_t ld) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    const char *kb = k;
    for (int64_t g = 0; g < ng; g++) {
        const float *qg = q + g * hd;
        for (int64_t j = 0; j < npos; j++) {
            const void *row = kb + (size_t)j * k_stride;
            double acc = 0.0;
            for (int64_t i = 0; i < hd; i++) acc += (double)kv_elem(kvt, row, i) * qg[i];
            scores[g * ld + j] = (float)acc * scale;
        }
    }
}

void kern_ref_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                          int64_t npos, const float *p, int64_t ld, int64_t ng, float *out) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    const char *vb = v;
    for (int64_t g = 0; g < ng; g++) {
        float *o = out + g * hd;
        for (int64_t i = 0; i < hd; i++) o[i] = 0.0f;
        for (int64_t j = 0; j < npos; j++) {
            const void *row = vb + (size_t)j * v_stride;
            float a = p[g * ld + j];
            for (int64_t i = 0; i < hd; i++) o[i] = fmaf(a, kv_elem(kvt, row, i), o[i]);
        }
    }
}

/*
 * Fused block attention, plain C: the same chunked online softmax as attn_avx2.c's
 * (chunks of KERN_ATTN_CHUNK positions, rescale by expf(m_old - m_new), p = expf(s - m_new),
 * l = l * alpha + sum(p) in order), scores as kern_ref_attn_scores, values by fmaf in position
 * order. Differs from the SIMD version by exp and float-sum rounding only.
 */
void kern_ref_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                         const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                         float scale, float *part) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    const char *kb = k, *vb = v;
    for (int64_t g = 0; g < ng; g++) {
        const float *qg = q + g * hd;
        float *pg = part + g * (hd + 2), *o = pg + 2;
        float m = -INFINITY, l = 0.0f;
        for (int64_t i = 0; i < hd; i++) o[i] = 0.0f;
        for (int64_t j0 = 0; j0 < npos; j0 += KERN_ATTN_CHUNK) {
            int64_t n = NX_MIN(npos - j0, (int64_t)KERN_ATTN_CHUNK);
            float s[KERN_ATTN_CHUNK];
            float mc = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                const void *row = kb + (size_t)(j0 + j) * k_stride;
                double acc = 0.0;
                for (int64_t i = 0; i < hd; i++) acc += (double)kv_elem(kvt, row, i) * qg[i];
                s[j] = (float)acc * scale;
                mc = j == 0 || s[j] > mc ? s[j] : mc;
            }
            float mn = mc > m ? mc : m;
            float alpha = m == -INFINITY ? 0.0f : expf(m - mn);
            float lsum = 0.0f;
            for (int64_t j = 0; j < n; j++) {
                s[j] = expf(s[j] - mn);
                lsum += s[j];
            }
            l = l * alpha + lsum;
            m = mn;
            if (j0 > 0)
                for (int64_t i = 0; i < hd; i++) o[i] *= alpha;
            for (int64_t j = 0; j < n; j++) {
                const void *row = vb + (size_t)(j0 + j) * v_stride;
                for (int64_t i = 0; i < hd; i++) o[i] = fmaf(s[j], kv_elem(kvt, row, i), o[i]);
            }
        }
        pg[0] = m, pg[1] = l;
    }
}

void kern_ref_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                          size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                          int64_t ng, float scale, float *parts) {
    for (int64_t b = 0; b < nblk; b++)
        kern_ref_attn_block(kvt, hd, k[b], stride, v[b], stride, NX_MIN(brows, npos - b * brows), q,
                            ng, scale, parts + b * ng * (hd + 2));
}

void kern_ref_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out) {
    const int64_t rec = ng * (hd + 2);
    for (int64_t g = 0; g < ng; g++) {
        float *o = out + g * hd;
        float mx = -INFINITY;
        for (int64_t b = 0; b < nparts; b++) {
            float mb = parts[b * rec + g * (hd + 2)];
            mx = mb > mx ? mb : mx;
        }
        for (int64_t i = 0; i < hd; i++) o[i] = 0.0f;
        double lsum = 0.0;
        for (int64_t b = 0; b < nparts; b++) {
            const float *pb = parts + b * rec + g * (hd + 2);
            if (pb[0] == -INFINITY) continue; /* empty part */
            float w = expf(pb[0] - mx);
            lsum += (double)w * pb[1];
            for (int64_t i = 0; i < hd; i++) o[i] = fmaf(w, pb[2 + i], o[i]);
        }
        float inv = lsum > 0.0 ? (float)(1.0 / lsum) : 0.0f;
        for (int64_t i = 0; i < hd; i++) o[i] *= inv;
    }
}
