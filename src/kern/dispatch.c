/*
 * dispatch.c - run-time choice of the kernel set, and the kern.h entry points that forward to
 * it.
 *
 * DESIGN
 * - The set is chosen once (pthread_once) from CPU features: "avx512" needs AVX-512 F, BW, VL,
 *   DQ and VNNI (plus AVX2/FMA/F16C, which such CPUs have), "avx2" needs AVX2, FMA and F16C,
 *   else "ref". __builtin_cpu_supports also checks that the OS saves the wide registers.
 * - NX_KERNELS (read once, at that first choice) can lower the choice: "ref" forces the
 *   reference set, "avx2" forbids AVX-512. A request the CPU cannot run falls back silently.
 * - Per-operation choice: matmuls go to g_mm[weight type], which is the chosen set except
 *   where a table for that set says another set's kernels are faster on such CPUs
 *   (g_avx512_routes: on the AVX-512 machines measured, the AVX2 Q4_K / Q6_K drivers beat the
 *   AVX-512 tiles on prefill by 10-30% and tie on decode, see README "Kernel sets"; the AVX-512
 *   set itself now runs Q4_K_IL and Q6_K through the AVX2 driver, adding its own small-batch
 *   kernels, so only raw Q4_K (mmap, and the layout choice) is routed to the AVX2 set). A static
 *   table, not a start-up measurement: a measurement on a loaded machine could flip between
 *   runs, and sets round differently, so outputs would change from run to run. The choice is
 *   per weight type, never per call shape: decode and prefill of one type stay in one set,
 *   which keeps them bit-identical. The weight layout follows the routed set.
 * - kern_force_ref flips an atomic flag checked on each call; it is meant for tests and for
 *   start-up configuration, not for switching while kernels run (a matmul split across threads
 *   could otherwise mix sets, whose roundings differ).
 * - The activation format is shared by all sets (kern_impl.h), so kern_act_row_bytes does not
 *   depend on the set.
 * - Prefetch levels of the memory streams (kern_pf_level: decode weights of grouped rows and of
 *   single rows, the next KV block in attention): L1 for every kind except on the CPUs of
 *   g_pf_cpus, where other levels measured faster. A static table like the routes (a start-up
 *   stream measurement on a shared machine would flip between runs), though here nothing else
 *   depends on it: the levels never change a result bit. NX_PREFETCH (read at the first
 *   choice) overrides it, to measure a new CPU: "l1", "l2" or "off" for every kind, or
 *   "GROUPED,SINGLE,KV" such as "l2,off,l2".
 * - A set whose table leaves attn_scores / attn_values / attn_block NULL gets the AVX2 versions: only SIMD
 *   sets may do so (the reference table always sets them), and every SIMD set requires AVX2,
 *   FMA and F16C.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/nx_base.h"
#include "kern/kern_impl.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const struct kern_table *g_table = &kern_table_ref;
static atomic_bool g_force_ref;

/* clang (14) does not know "f16c" in __builtin_cpu_supports: ask CPUID leaf 1 (ECX bit 29). */
static bool cpu_f16c(void) {
#if defined(__clang__)
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
#else
    return __builtin_cpu_supports("f16c");
#endif
}

bool kern_cpu_supports(const char *name) {
    __builtin_cpu_init();
    if (strcmp(name, "ref") == 0) return true;
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                cpu_f16c();
    if (strcmp(name, "avx2") == 0) return avx2;
    if (strcmp(name, "avx512") == 0) {
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    }
    return false;
}

const struct kern_table *kern_table_by_name(const char *name) {
    if (strcmp(name, "ref") == 0) return &kern_table_ref;
    if (strcmp(name, "avx2") == 0) return &kern_table_avx2;
    if (strcmp(name, "avx512") == 0) return &kern_table_avx512;
    return NULL;
}

/* Matmul routes of the AVX-512 set: weight type -> set name. */
static const struct {
    enum nx_type type;
    const char *set;
} g_avx512_routes[] = {
    {NX_TYPE_Q4_K, "avx2"},
};
#define MM_TYPES 48 /* type ids below this have a route (internal ids included) */
static const struct kern_table *g_mm[MM_TYPES];

static void select_routes(void) {
    for (int t = 0; t < MM_TYPES; t++) g_mm[t] = g_table;
    if (g_table != &kern_table_avx512) return;
    for (size_t i = 0; i < sizeof g_avx512_routes / sizeof g_avx512_routes[0]; i++) {
        const struct kern_table *set = kern_table_by_name(g_avx512_routes[i].set);
        if (set && kern_cpu_supports(set->name)) g_mm[g_avx512_routes[i].type] = set;
    }
}

enum kern_pf kern_pf_level[KERN_PF_KINDS] = {KERN_PF_L1, KERN_PF_L1, KERN_PF_L1};

static const char *const g_pf_names[] = {"l1", "l2", "off"};

const char *kern_pf_name(void) {
    static char name[16];
    kern_init();
    snprintf(name, sizeof name, "%s,%s,%s", g_pf_names[kern_pf_level[KERN_PF_GROUPED]],
             g_pf_names[kern_pf_level[KERN_PF_SINGLE]], g_pf_names[kern_pf_level[KERN_PF_KV]]);
    return name;
}

/* CPUs whose streams run fastest with other prefetch levels than L1: vendor, family, model
 * range (CPUID's displayed family and model), the levels of each kind of stream. */
static const struct {
    const char *vendor;
    unsigned family, model_lo, model_hi;
    enum kern_pf level[KERN_PF_KINDS];
} g_pf_cpus[] = {
    /* AMD Zen 4 (EPYC 9004 Genoa), measured on family 25 model 17 with 2 vCPUs (README
       "Eighteenth session"), nexus bench on the Llama-3.2-1B-shaped files, 2 threads,
       interleaved rounds, tg48 with l1 / l2 / off for the weights: F16 8.6-9.9 / 10.8-14.4 /
       11.2-13.6 t/s, Q8_0 16.1-16.9 / 26.9-29.6 / 11.7-15.1, Q4_K_M 35.8-38.8 / 29.3-35.6 /
       38.4-48.7; Q4_K_M tg64 at depth 4096 with the KV block at l1 / l2: 29.5, 28.6 / 35.6,
       31.1 */
    {"AuthenticAMD", 0x19, 0x10, 0x1f, {KERN_PF_L2, KERN_PF_OFF, KERN_PF_L2}},
};

/* The CPU's vendor string and displayed family and model (CPUID leaves 0 and 1). */
static void cpu_id(char vendor[13], unsigned *family, unsigned *model) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    vendor[0] = 0, *family = *model = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4), vendor[12] = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    if (fam == 0xf) fam += (a >> 20) & 0xff;
    if (fam == 0x6 || fam >= 0xf) mod |= ((a >> 16) & 0xf) << 4;
    *family = fam, *model = mod;
}

/* The level named by the n bytes at s ("l1", "l2", "off"); false for any other name. */
static bool pf_parse(const char *s, size_t n, enum kern_pf *out) {
    for (int l = 0; l < (int)NX_ARRAY_LEN(g_pf_names); l++) {
        if (strlen(g_pf_names[l]) == n && strncmp(s, g_pf_names[l], n) == 0) {
            *out = (enum kern_pf)l;
            return true;
        }
    }
    return false;
}

static void select_prefetch(void) {
    char vendor[13];
    unsigned family, model;
    cpu_id(vendor, &family, &model);
    for (size_t i = 0; i < sizeof g_pf_cpus / sizeof g_pf_cpus[0]; i++) {
        if (strcmp(vendor, g_pf_cpus[i].vendor) == 0 && family == g_pf_cpus[i].family &&
            model >= g_pf_cpus[i].model_lo && model <= g_pf_cpus[i].model_hi)
            memcpy(kern_pf_level, g_pf_cpus[i].level, sizeof kern_pf_level);
    }
    const char *env = getenv("NX_PREFETCH");
    if (!env) return;
    int commas = 0;
    for (const char *c = env; *c; c++) commas += *c == ',';
    enum kern_pf lv[KERN_PF_KINDS];
    bool ok = commas == 0 || commas == KERN_PF_KINDS - 1; /* one name for all, or one per kind */
    const char *p = env;
    for (int i = 0; ok && i <= commas; i++) {
        const char *comma = strchr(p, ',');
        ok = pf_parse(p, comma ? (size_t)(comma - p) : strlen(p), &lv[i]);
        p = comma ? comma + 1 : p;
    }
    if (ok && commas == 0) for (int i = 1; i < KERN_PF_KINDS; i++) lv[i] = lv[0];
    if (ok)
        memcpy(kern_pf_level, lv, sizeof kern_pf_level);
    else
        nx_log(NX_LOG_WARN, "kernels: NX_PREFETCH='%s' ignored: expected l1, l2, off or "
                            "GROUPED,SINGLE,KV (each l1, l2 or off)", env);
}

static void select_table(void) {
    select_prefetch();
    const char *env = getenv("NX_KERNELS");
    bool allow512 = !(env && (strcmp(env, "ref") == 0 || strcmp(env, "avx2") == 0));
    bool allow2 = !(env && strcmp(env, "ref") == 0);
    if (allow512 && kern_cpu_supports("avx512")) {
        g_table = &kern_table_avx512;
    } else if (allow2 && kern_cpu_supports("avx2")) {
        g_table = &kern_table_avx2;
    } else {
        g_table = &kern_table_ref;
    }
    select_routes();
}

void kern_init(void) { pthread_once(&g_once, select_table); }

void kern_force_ref(bool force) {
    kern_init();
    atomic_store(&g_force_ref, force);
}

const struct kern_table *kern_table_current(void) {
    kern_init();
    return atomic_load_explicit(&g_force_ref, memory_order_relaxed) ? &kern_table_ref : g_table;
}

const char *kern_name(void) { return kern_table_current()->name; }

void nx_kernels_force_ref(bool force) { kern_force_ref(force); }

const char *nx_kernels_name(void) { return kern_name(); }

/* The set that runs matmuls of weights of type t. */
static const struct kern_table *mm_set(enum nx_type t) {
    kern_init();
    if (atomic_load_explicit(&g_force_ref, memory_order_relaxed)) return &kern_table_ref;
    return (unsigned)t < MM_TYPES ? g_mm[t] : g_table;
}

const char *kern_matmul_name(enum nx_type t) { return mm_set(t)->name; }

enum nx_type kern_weight_layout(enum nx_type t, int64_t ne0, int64_t ne1) {
    const struct kern_table *set = mm_set(t);
    return set->weight_layout ? set->weight_layout(t, ne0, ne1) : t;
}

int kern_matmul_chunks_per_thread(enum nx_type t, int64_t nc) {
    const struct nx_type_info *ti = nx_type_info_get(t);
    if (nc <= 16) return 8;
    if (nx_type_is_x4(t)) return 2;
    return ti && ti->quantized ? 3 : 8;
}

/* X4: the AVX-512 prefill tile's rows (4 * X4_G = 32; the AVX2 tile's 8 divide it) */
int kern_matmul_row_quantum(enum nx_type t) { return nx_type_is_x4(t) ? 4 * X4_G : 48; }

void kern_relayout(enum nx_type from, enum nx_type to, const void *src, void *dst, int64_t ne0,
                   int64_t rows) {
    if (nx_type_is_x4(to) && nx_type_in_file(to) == from) {
        quant_x4_interleave_ref(src, dst, ne0, rows);
    } else if (nx_type_is_x4(from) && nx_type_in_file(from) == to) {
        quant_x4_deinterleave_ref(src, dst, ne0, rows);
    } else {
        size_t rb = 0;
        bool ok = nx_row_bytes(from, ne0, &rb);
        NX_ASSERT(ok && "kern_relayout: row length not a multiple of the block size");
        kern_repack(from, to, src, dst, rows * (int64_t)(rb / nx_type_info_get(from)->type_size));
    }
}

void kern_weight_row(enum nx_type t, const void *data, size_t row_bytes, int64_t ne0,
                     int64_t row, float *out) {
    if (!nx_type_is_x4(t)) {
        quant_dequantize_row_ref(t, (const uint8_t *)data + (size_t)row * row_bytes, out, ne0);
        return;
    }
    uint16_t buf[64];
    for (int64_t i = 0; i < ne0; i += 64) {
        int64_t n = NX_MIN((int64_t)64, ne0 - i);
        quant_x4_get_ref(data, ne0, row, i, n, buf);
        quant_dequantize_row_ref(nx_type_in_file(t), buf, out + i, n);
    }
}

void kern_repack(enum nx_type from, enum nx_type to, const void *src, void *dst, int64_t nb) {
    if (from == NX_TYPE_Q4_K && to == NX_TYPE_Q4_K_IL) {
        if (kern_cpu_supports("avx2")) kern_avx2_q4k_interleave(src, dst, nb);
        else quant_q4k_interleave_ref(src, dst, nb);
    } else if (from == NX_TYPE_Q4_K_IL && to == NX_TYPE_Q4_K) {
        quant_q4k_deinterleave_ref(src, dst, nb);
    } else {
        NX_ASSERT(from == to && "kern_repack: no such layout change");
        const struct nx_type_info *ti = nx_type_info_get(from);
        memmove(dst, src, (size_t)nb * ti->type_size);
    }
}

bool kern_reserve(int64_t k_max, int64_t nc_max) {
    const struct kern_table *set = kern_table_current();
    /* the AVX-512 set runs Q4_K_IL through the AVX2 driver */
    if (set == &kern_table_ref) return true;
    bool ok = kern_avx2_reserve(k_max, nc_max);
    if (nc_max > NX_MIN(X4_INPLACE_NC_AVX2, X4_INPLACE_NC_AVX512)) /* X4 (kern_impl.h) */
        ok = ok && kern_avx2_scratch(kern_x4_scratch_bytes(nc_max)) != NULL;
    return ok;
}

size_t kern_act_row_bytes(enum nx_type wt, int64_t k) {
    switch (nx_type_in_file(wt)) { /* an internal layout takes its file type's activations */
    case NX_TYPE_F32:
    case NX_TYPE_F16:
    case NX_TYPE_BF16: return (size_t)k * sizeof(float);
    case NX_TYPE_Q4_0:
    case NX_TYPE_Q8_0: return (size_t)(k / QK8_0) * sizeof(struct block_q8_0);
    case NX_TYPE_Q4_K:
    case NX_TYPE_Q5_K:
    case NX_TYPE_Q6_K: return (size_t)(k / QK_K) * sizeof(struct block_q8_K);
    default: NX_ASSERT(!"kern_act_row_bytes: unsupported weight type"); return 0;
    }
}

void kern_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k) {
    kern_table_current()->quantize_act(wt, x, xq, k);
}

void kern_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                 int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                 int64_t y_stride) {
    if (r1 <= r0 || nc <= 0) return;
    mm_set(wt)->matmul(wt, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
}

int kern_batch_cols(enum nx_type wt, int64_t nc) {
    const struct kern_table *t = mm_set(wt);
    int q = t->batch_cols ? t->batch_cols(wt, nc) : 0;
    NX_ASSERT(q >= 0 && (q == 0 || KERN_BATCH_ALIGN % q == 0));
    return q;
}

void kern_prepare_batch(enum nx_type wt, int64_t k, const float *x, int64_t ldx, int64_t nc,
                        int64_t c0, int64_t c1, void *xb) {
    const struct kern_table *t = mm_set(wt);
    NX_ASSERT(t->prepare_batch && t->batch_cols(wt, nc) > 0 && "kern_prepare_batch: no batch");
    t->prepare_batch(wt, k, x, ldx, nc, c0, c1, xb);
}

void kern_matmul_batch(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                       int64_t r1, const void *xb, int64_t nc, float *y, int64_t y_stride) {
    if (r1 <= r0 || nc <= 0) return;
    const struct kern_table *t = mm_set(wt);
    NX_ASSERT(t->matmul_batch && t->batch_cols(wt, nc) > 0 && "kern_matmul_batch: no batch");
    t->matmul_batch(wt, k, w, w_stride, r0, r1, xb, nc, y, y_stride);
}

float kern_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q) {
    return kern_table_current()->dot_kv(kvt, n, k, q);
}

void kern_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y) {
    kern_table_current()->axpy_kv(kvt, n, a, v, y);
}

void kern_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst) {
    kern_table_current()->store_kv(kvt, n, x, dst);
}

void kern_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                      int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                      int64_t ld) {
    if (npos <= 0 || ng <= 0) return;
    const struct kern_table *t = kern_table_current();
    (t->attn_scores ? t->attn_scores : kern_avx2_attn_scores)(kvt, hd, k, k_stride, npos, q, ng,
                                                               scale, scores, ld);
}

void kern_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                      int64_t npos, const float *p, int64_t ld, int64_t ng, float *out) {
    if (ng <= 0 || hd <= 0) return;
    const struct kern_table *t = kern_table_current();
    (t->attn_values ? t->attn_values : kern_avx2_attn_values)(kvt, hd, v, v_stride, npos, p, ld,
                                                               ng, out);
}

void kern_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride, const void *v,
                     size_t v_stride, int64_t npos, const float *q, int64_t ng, float scale,
                     float *part) {
    if (ng <= 0 || hd <= 0) return;
    const struct kern_table *t = kern_table_current();
    (t->attn_block ? t->attn_block : kern_avx2_attn_block)(kvt, hd, k, k_stride, v, v_stride, npos,
                                                            q, ng, scale, part);
}

void kern_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                      size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                      int64_t ng, float scale, float *parts) {
    if (ng <= 0 || hd <= 0 || nblk <= 0) return;
    const struct kern_table *t = kern_table_current();
    (t->attn_blocks ? t->attn_blocks : kern_avx2_attn_blocks)(kvt, hd, k, v, stride, nblk, brows,
                                                               npos, q, ng, scale, parts);
}

void kern_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out) {
    if (ng <= 0 || hd <= 0) return;
    const struct kern_table *t = kern_table_current();
    (t->attn_merge ? t->attn_merge : kern_avx2_attn_merge)(hd, ng, nparts, parts, out);
}

void kern_softmax(float *x, int64_t n) { kern_table_current()->softmax(x, n); }

void kern_swiglu(float *g, const float *u, int64_t n) { kern_table_current()->swiglu(g, u, n); }

void kern_load_kv(enum nx_type kvt, int64_t n, const void *src, float *dst) {
    kern_table_current()->load_kv(kvt, n, src, dst);
}
