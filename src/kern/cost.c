/*
 * cost.c - rough single-thread cost of kernel calls, and how many threads an operation
 * deserves: a minimum of work per thread, so that splitting never makes an operation slower
 * than one thread would (the forward pass decides, the kernels only estimate).
 *
 * DESIGN
 * - A matmul costs the larger of streaming its weights (decode is bandwidth-bound; weights
 *   under 1 MiB are taken as cache-resident, as a small model's are between steps) and its
 *   multiply-adds at the kernel's compute rate (prefill), plus a fixed call overhead. Rates are
 *   single-thread figures of dev/bench_kern on the project's machines (README "Kernel sets"),
 *   rounded down; the reference set is taken as 20x slower. Estimates only need to be right
 *   within a factor of ~2: they decide between 1 and a few threads for small operations.
 * - KERN_MIN_NS_PER_THREAD is what one more thread must at least get: about the cost of
 *   handing work to a pool thread and meeting it at a barrier when the worker is spinning
 *   (1-5 us measured with dev/bench_small on an idle machine), times a margin for workers
 *   that must be woken and for loaded machines, where a barrier can cost a time slice.
 */
#include "kern/kern_impl.h"

/* multiply-adds per ns of the SIMD prefill kernels (single thread), by file type */
static double mac_rate(enum nx_type t) {
    switch (nx_type_in_file(t)) {
    case NX_TYPE_F32:
    case NX_TYPE_F16:
    case NX_TYPE_BF16: return 35;
    case NX_TYPE_Q4_0:
    case NX_TYPE_Q8_0: return 55;
    case NX_TYPE_Q4_K: return 80;
    case NX_TYPE_Q5_K: return 45;
    case NX_TYPE_Q6_K: return 60;
    default: return 20;
    }
}

#define STREAM_BYTES_PER_NS 12.0 /* one thread reading weights from DRAM */
#define CACHED_BYTES_PER_NS 40.0 /* weights small enough to stay in L2 between steps */
#define CACHED_BYTES (1 << 20)
#define CALL_NS 200.0

double kern_matmul_cost_ns(enum nx_type wt, int64_t k, int64_t rows, int64_t nc) {
    if (k <= 0 || rows <= 0 || nc <= 0) return 0;
    const struct nx_type_info *ti = nx_type_info_get(wt);
    double bytes = ti && ti->blck_size ? (double)rows * (double)k / (double)ti->blck_size * (double)ti->type_size
                                       : (double)rows * (double)k * 4;
    double macs = (double)rows * (double)k * (double)nc;
    double rate = mac_rate(wt) * (kern_table_current() == &kern_table_ref ? 1.0 / 20 : 1.0);
    double mem = bytes / (bytes < CACHED_BYTES ? CACHED_BYTES_PER_NS : STREAM_BYTES_PER_NS), cpu = macs / rate;
    return CALL_NS + (mem > cpu ? mem : cpu);
}

double kern_attn_cost_ns(enum nx_type kvt, int64_t hd, int64_t npos, int64_t ng) {
    if (hd <= 0 || npos <= 0 || ng <= 0) return 0;
    /* K and V rows once, 2 * hd multiply-adds per position and head at ~8 per ns */
    double bytes = 2.0 * (double)npos * (double)hd * (kvt == NX_TYPE_F32 ? 4 : 2);
    double cpu = 2.0 * (double)npos * (double)hd * (double)ng / 8.0;
    double mem = bytes / STREAM_BYTES_PER_NS;
    return CALL_NS + (mem > cpu ? mem : cpu);
}

static double min_ns_per_thread = KERN_MIN_NS_PER_THREAD;

void kern_set_min_ns_per_thread(double ns) { min_ns_per_thread = ns < 0 ? KERN_MIN_NS_PER_THREAD : ns; }

int kern_threads_for(double cost_ns, int nth) {
    if (nth <= 1) return 1;
    if (!(min_ns_per_thread > 0)) return nth;
    if (!(cost_ns > 0)) return 1;
    double t = cost_ns / min_ns_per_thread;
    return t < 1 ? 1 : t >= nth ? nth : (int)t;
}
