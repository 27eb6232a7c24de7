/*
 * bench.c - DESIGN: llama-bench-like measurements through the public API only.
 *   depth: the context is first filled with `depth` real tokens (prefilled once, untimed), and
 *          each repetition truncates back to it, so every run sees the same depth;
 *   pp:    one nx_decode of n_prompt tokens (logits for the last only) -> tokens/s;
 *   tg:    n_gen single-token nx_decode calls -> tokens/s;
 * medians of `reps` runs with min and max. The roofline is the measured read bandwidth divided
 * by the bytes one decode step must read (weights + the K and V rows at the mean depth).
 * Token ids are drawn from a fixed-seed generator: speed does not depend on them.
 * parallel: N sequences of one context prefilled, then decoded together one batch of N tokens
 * per step (nx_decode_batch), as llama-batched-bench's -npp / -ntg / -npl.
 */
#include "bench.h"

#include "core/nx_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/membw.h"

struct bench_params bench_default_params(void) {
    struct bench_params p = {.n_prompt = 512, .n_gen = 128, .depth = 0, .reps = 5, .json = false,
                             .measure_bandwidth = true};
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stat3 {
    double med, min, max;
};

static struct stat3 stats(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    struct stat3 s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

static nx_token *random_tokens(int n, int32_t n_vocab, uint64_t seed) {
    nx_token *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (nx_token)((seed >> 33) % (uint64_t)n_vocab);
    }
    return t;
}

int bench_run(nx_model *m, nx_ctx *c, int n_threads, const struct bench_params *p) {
    int32_t nv = nx_model_n_vocab(m);
    int need = p->depth + (p->n_prompt > p->n_gen ? p->n_prompt : p->n_gen);
    if (need > nx_ctx_n_ctx(c)) {
        fprintf(stderr, "bench: context %d too small for depth %d + %d tokens\n", nx_ctx_n_ctx(c),
                p->depth, need - p->depth);
        return 1;
    }
    nx_token *toks = random_tokens(need, nv, 12345);
    if (!toks) return 1;
    if (p->depth > 0) {
        fprintf(stderr, "filling context to depth %d...\n", p->depth);
        double t0 = nx_time_s();
        for (int done = 0; done < p->depth;) {
            int nb = p->depth - done < 512 ? p->depth - done : 512;
            if (nx_decode(c, toks + done, nb, false)) {
                fprintf(stderr, "bench: %s\n", nx_ctx_last_error(c));
                return 1;
            }
            done += nb;
            fprintf(stderr, "\r  %d/%d tokens (%.0f s)", done, p->depth, nx_time_s() - t0);
        }
        fprintf(stderr, "\n");
    }
    int reps = p->reps;
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    double tg_total = 0; /* seconds in all decode runs (eviction time is part of it) */
    double tg_evict = 0; /* seconds evicting during those runs */
    long long tg_rounds = 0;
    if (!pp || !tg) return 1;
    for (int r = 0; r < reps; r++) {
        if (p->n_prompt > 0) {
            nx_ctx_truncate(c, p->depth);
            double t0 = nx_time_s();
            if (nx_decode(c, toks + p->depth, p->n_prompt, false)) {
                fprintf(stderr, "bench: %s\n", nx_ctx_last_error(c));
                return 1;
            }
            pp[r] = p->n_prompt / (nx_time_s() - t0);
        }
        if (p->n_gen > 0) {
            nx_ctx_truncate(c, p->depth);
            struct nx_kv_stats k0;
            nx_ctx_kv_stats(c, &k0);
            double t0 = nx_time_s();
            for (int i = 0; i < p->n_gen; i++) {
                if (nx_decode(c, toks + p->depth + i, 1, false)) {
                    fprintf(stderr, "bench: %s\n", nx_ctx_last_error(c));
                    return 1;
                }
            }
            double dt = nx_time_s() - t0;
            tg_total += dt;
            struct nx_kv_stats k1;
            nx_ctx_kv_stats(c, &k1);
            tg_evict += k1.evict_seconds - k0.evict_seconds;
            tg_rounds += k1.evictions - k0.evictions;
            tg[r] = p->n_gen / dt;
        }
        if (!p->json)
            fprintf(stderr, "  rep %d/%d: pp %.1f t/s, tg %.1f t/s\n", r + 1, reps, pp[r], tg[r]);
    }
    struct stat3 spp = stats(pp, reps), stg = stats(tg, reps);
    /* bytes per decode step: the weights plus the KV blocks held at the end of the last run
       (every cached K and V row is read once per step; a slight over-estimate of the mean) */
    struct nx_kv_stats ks;
    nx_ctx_kv_stats(c, &ks);
    double bytes_tok = (double)nx_model_decode_bytes(m) + (double)ks.bytes_current;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024.0; /* before the bandwidth probe's 1 GiB buffer */
    double bw = 0;
    if (p->measure_bandwidth) {
        fprintf(stderr, "measuring memory read bandwidth (%d threads)...\n", n_threads);
        bw = nx_measure_read_bandwidth((size_t)1 << 30, n_threads, 5);
    }
    double roof = bw > 0 ? bw / bytes_tok : 0;
    if (p->json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,"
               "\"depth\":%d,\"reps\":%d,\"pp_tps\":%.3f,\"pp_tps_min\":%.3f,\"pp_tps_max\":%.3f,"
               "\"tg_tps\":%.3f,\"tg_tps_min\":%.3f,\"tg_tps_max\":%.3f,\"peak_rss_bytes\":%.0f,"
               "\"weight_bytes\":%zu,\"decode_bytes_per_token\":%.0f,\"read_bandwidth_bps\":%.0f,"
               "\"roofline_tps\":%.3f,\"roofline_fraction\":%.4f,\"kv_bytes_peak\":%zu,"
               "\"kv_bytes_final\":%zu,\"evict_seconds\":%.6f,\"evictions\":%lld,"
               "\"decode_seconds\":%.6f,\"evict_seconds_total\":%.6f,"
               "\"evictions_total\":%lld}\n",
               nx_model_desc(m), n_threads, nx_kernels_name(), p->n_prompt, p->n_gen, p->depth,
               reps, spp.med, spp.min, spp.max, stg.med, stg.min, stg.max, rss,
               nx_model_weight_bytes(m), bytes_tok, bw, roof, roof > 0 ? stg.med / roof : 0,
               ks.bytes_peak, ks.bytes_current, tg_evict, tg_rounds, tg_total, ks.evict_seconds,
               (long long)ks.evictions);
    } else {
        printf("model: %s, %d threads, kernels %s, depth %d, %d reps\n", nx_model_desc(m),
               n_threads, nx_kernels_name(), p->depth, reps);
        printf("| test   | t/s (median) |    min |    max |\n");
        printf("|--------|-------------:|-------:|-------:|\n");
        if (p->n_prompt > 0)
            printf("| pp%-4d | %12.2f | %6.2f | %6.2f |\n", p->n_prompt, spp.med, spp.min, spp.max);
        if (p->n_gen > 0)
            printf("| tg%-4d | %12.2f | %6.2f | %6.2f |\n", p->n_gen, stg.med, stg.min, stg.max);
        printf("peak RSS %.1f MiB; decode reads %.1f MiB/token; read bandwidth %.2f GB/s; "
               "roofline %.2f t/s; tg reaches %.0f%% of it\n",
               rss / 1048576.0, bytes_tok / 1048576.0, bw / 1e9, roof,
               roof > 0 ? 100.0 * stg.med / roof : 0.0);
        printf("KV: peak %.1f MiB, final %.1f MiB; during decode %lld eviction rounds, %.3f s "
               "evicting (%.1f%% of decode time); %lld rounds, %.3f s in all\n",
               (double)ks.bytes_peak / 1048576.0, (double)ks.bytes_current / 1048576.0,
               tg_rounds, tg_evict, tg_total > 0 ? 100.0 * tg_evict / tg_total : 0.0,
               (long long)ks.evictions, ks.evict_seconds);
    }
    free(pp);
    free(tg);
    free(toks);
    return 0;
}

/* ---- parallel sequences ---- */

/* Policy i of a comma list "POLICY[:DENSITY],..." (cycled) into kv; false on a bad item. */
static bool policy_item(const char *list, int i, struct nx_kv_params *kv, char *name, size_t cap) {
    int n = 1;
    for (const char *q = list; *q; q++) n += *q == ',';
    i %= n;
    const char *s = list;
    while (i-- > 0) s = strchr(s, ',') + 1;
    size_t len = strcspn(s, ",");
    if (len == 0 || len >= cap) return false;
    memcpy(name, s, len);
    name[len] = 0;
    char *colon = strchr(name, ':');
    kv->density = 0;
    kv->budget = 0;
    if (colon) {
        *colon = 0;
        char *end;
        kv->density = strtof(colon + 1, &end);
        if (*end || !(kv->density > 0 && kv->density <= 1)) return false;
    }
    kv->policy = name;
    return true;
}

int bench_parallel(nx_model *m, const struct nx_ctx_params *base, const struct bench_params *p,
                   const int *ns, int n_ns, const char *policies) {
    int32_t nv = nx_model_n_vocab(m);
    const int fill = p->depth + p->n_prompt;
    if (fill < 1 || p->n_gen < 1) {
        fprintf(stderr, "bench --parallel: needs depth + prompt >= 1 and -n >= 1\n");
        return 1;
    }
    if (!p->json)
        printf("| N | prefill t/s | decode t/s (all) | per sequence | KV MiB per sequence | "
               "peak RSS MiB |\n|--:|--:|--:|--:|--:|--:|\n");
    for (int k = 0; k < n_ns; k++) {
        const int N = ns[k];
        struct nx_ctx_params cp = *base;
        cp.n_seq_max = N;
        cp.n_ctx = fill + p->n_gen + 1;
        if (cp.n_batch < N) cp.n_batch = N;
        nx_ctx *c;
        char err[256];
        if (nx_ctx_init(m, &cp, &c, err, sizeof err)) {
            fprintf(stderr, "bench --parallel %d: %s\n", N, err);
            return 1;
        }
        char names[64][32];
        for (int s = 0; policies && s < N; s++) {
            struct nx_kv_params kv = cp.kv;
            if (!policy_item(policies, s, &kv, names[s % 64], sizeof names[0]) ||
                nx_seq_set_kv(c, s, &kv)) {
                fprintf(stderr, "bench --parallel: bad policy for sequence %d in '%s': %s\n", s,
                        policies, nx_ctx_last_error(c));
                nx_ctx_free(c);
                return 1;
            }
        }
        int nb = cp.n_batch > 0 ? cp.n_batch : 512;
        if (nb > cp.n_ctx) nb = cp.n_ctx;
        struct nx_batch b;
        nx_token *toks = random_tokens(N * (fill + p->n_gen), nv, 12345);
        double *pp = calloc((size_t)p->reps, sizeof *pp), *tg = calloc((size_t)p->reps, sizeof *tg);
        if (!toks || !pp || !tg || nx_batch_init(nb > N ? nb : N, &b)) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }
        for (int r = 0; r < p->reps; r++) {
            for (int s = 0; s < N; s++) nx_kv_seq_rm(c, s, -1, -1);
            /* prefill: the sequences one after another, batches of up to n_batch entries */
            double t0 = nx_time_s();
            int s = 0, i = 0;
            while (s < N) {
                nx_batch_clear(&b);
                while (s < N && b.n_tokens < nb) {
                    nx_batch_add(&b, toks[s * (fill + p->n_gen) + i], i, s, i == fill - 1);
                    if (++i == fill) s++, i = 0;
                }
                if (nx_decode_batch(c, &b)) {
                    fprintf(stderr, "bench: %s\n", nx_ctx_last_error(c));
                    return 1;
                }
            }
            pp[r] = (double)N * fill / (nx_time_s() - t0);
            t0 = nx_time_s();
            for (int g = 0; g < p->n_gen; g++) {
                nx_batch_clear(&b);
                for (s = 0; s < N; s++)
                    nx_batch_add(&b, toks[s * (fill + p->n_gen) + fill + g], fill + g, s, true);
                if (nx_decode_batch(c, &b)) {
                    fprintf(stderr, "bench: %s\n", nx_ctx_last_error(c));
                    return 1;
                }
            }
            tg[r] = (double)N * p->n_gen / (nx_time_s() - t0);
            if (!p->json)
                fprintf(stderr, "  N=%d rep %d/%d: prefill %.1f t/s, decode %.1f t/s\n", N, r + 1,
                        p->reps, pp[r], tg[r]);
        }
        struct stat3 spp = stats(pp, p->reps), stg = stats(tg, p->reps);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double rss = (double)ru.ru_maxrss * 1024.0;
        double kv_mean = 0;
        for (int s = 0; s < N; s++) {
            struct nx_kv_stats ks;
            nx_seq_kv_stats(c, s, &ks);
            kv_mean += (double)ks.bytes_current / N;
        }
        if (p->json) {
            printf("{\"model\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"parallel\":%d,"
                   "\"depth\":%d,\"n_prompt\":%d,\"n_gen\":%d,\"reps\":%d,"
                   "\"prefill_tps\":%.3f,\"prefill_tps_min\":%.3f,\"prefill_tps_max\":%.3f,"
                   "\"decode_tps\":%.3f,\"decode_tps_min\":%.3f,\"decode_tps_max\":%.3f,"
                   "\"decode_tps_per_seq\":%.3f,\"peak_rss_bytes\":%.0f,\"sequences\":[",
                   nx_model_desc(m), cp.n_threads, nx_kernels_name(), N, p->depth, p->n_prompt,
                   p->n_gen, p->reps, spp.med, spp.min, spp.max, stg.med, stg.min, stg.max,
                   stg.med / N, rss);
            for (int q = 0; q < N; q++) {
                struct nx_kv_stats ks;
                nx_seq_kv_stats(c, q, &ks);
                printf("%s{\"seq\":%d,\"policy\":\"%s\",\"decode_tps\":%.3f,"
                       "\"kv_bytes\":%zu,\"kv_bytes_peak\":%zu,\"evictions\":%lld,"
                       "\"evict_seconds\":%.6f}",
                       q ? "," : "", q, policies ? names[q % 64] : (cp.kv.policy ? cp.kv.policy : "full"),
                       stg.med / N, ks.bytes_current, ks.bytes_peak, (long long)ks.evictions,
                       ks.evict_seconds);
            }
            printf("]}\n");
        } else {
            printf("| %d | %.2f | %.2f | %.2f | %.2f | %.1f |\n", N, spp.med, stg.med, stg.med / N,
                   kv_mean / 1048576.0, rss / 1048576.0);
            for (int q = 0; policies && q < N; q++) {
                struct nx_kv_stats ks;
                nx_seq_kv_stats(c, q, &ks);
                printf("|   seq %d (%s) | | | %.2f | %.2f | |\n", q, names[q % 64], stg.med / N,
                       (double)ks.bytes_current / 1048576.0);
            }
        }
        fflush(stdout);
        nx_batch_free(&b);
        free(toks);
        free(pp);
        free(tg);
        nx_ctx_free(c);
    }
    return 0;
}
