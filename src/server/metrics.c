/* metrics.c - counters and histograms for GET /metrics (Prometheus text format 0.0.4). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "server/engine.h"
#include "server/metrics.h"

static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                0.25,  0.5,    1,     2.5,  5,     10,   30};
#define NB ((int)NX_ARRAY_LEN(bounds))

struct hist {
    atomic_llong bucket[NB + 1]; /* last: +Inf */
    atomic_llong count;
    _Atomic double sum;
};

static const char *ep_names[SRV_EP_COUNT] = {"chat_completions", "completions", "embeddings",
                                             "models", "health", "metrics", "other"};
static const int codes[] = {200, 400, 401, 404, 405, 408, 413, 429, 500, 503};
#define NC ((int)NX_ARRAY_LEN(codes))

static struct {
    atomic_llong req[SRV_EP_COUNT][NC + 1]; /* last: any other code */
    struct hist ttft, step;
    atomic_llong tok_prompt, tok_cached, tok_gen;
} M;

void srv_metrics_reset(void) { memset(&M, 0, sizeof M); }

void srv_metrics_request(enum srv_endpoint ep, int status) {
    int k = NC;
    for (int i = 0; i < NC; i++)
        if (codes[i] == status) k = i;
    atomic_fetch_add(&M.req[ep][k], 1);
}

static void observe(struct hist *h, double s) {
    int b = NB;
    for (int i = 0; i < NB; i++)
        if (s <= bounds[i]) {
            b = i;
            break;
        }
    atomic_fetch_add(&h->bucket[b], 1);
    atomic_fetch_add(&h->count, 1);
    double old = atomic_load(&h->sum);
    while (!atomic_compare_exchange_weak(&h->sum, &old, old + s)) {
    }
}

void srv_metrics_ttft(double s) { observe(&M.ttft, s); }
void srv_metrics_step(double s) { observe(&M.step, s); }
void srv_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated) {
    atomic_fetch_add(&M.tok_prompt, prompt);
    atomic_fetch_add(&M.tok_cached, cached);
    atomic_fetch_add(&M.tok_gen, generated);
}

struct out {
    char *p;
    size_t n, cap;
    bool oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)k < o->cap - o->n) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)k;
        char *p = nx_realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

static void put_hist(struct out *o, const char *name, const char *help, struct hist *h) {
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long long cum = 0;
    for (int i = 0; i < NB; i++) {
        cum += atomic_load(&h->bucket[i]);
        put(o, "%s_bucket{le=\"%g\"} %lld\n", name, bounds[i], cum);
    }
    cum += atomic_load(&h->bucket[NB]);
    put(o, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, cum, name,
        atomic_load(&h->sum), name, (long long)atomic_load(&h->count));
}

char *srv_metrics_render(const struct srv_engine_stats *es) {
    struct out o = {nx_malloc(4096), 0, 4096, false};
    if (!o.p) return NULL;
    o.p[0] = 0;
    put(&o, "# HELP nexus_requests_total HTTP requests by endpoint and status code.\n"
            "# TYPE nexus_requests_total counter\n");
    for (int e = 0; e < SRV_EP_COUNT; e++)
        for (int k = 0; k <= NC; k++) {
            long long v = atomic_load(&M.req[e][k]);
            if (!v) continue;
            if (k < NC)
                put(&o, "nexus_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n", ep_names[e],
                    codes[k], v);
            else
                put(&o, "nexus_requests_total{endpoint=\"%s\",code=\"other\"} %lld\n",
                    ep_names[e], v);
        }
    put(&o, "# HELP nexus_prompt_tokens_total Prompt tokens of finished requests.\n"
            "# TYPE nexus_prompt_tokens_total counter\nnexus_prompt_tokens_total %lld\n",
        (long long)atomic_load(&M.tok_prompt));
    put(&o, "# HELP nexus_prompt_tokens_cached_total Prompt tokens reused from a slot's KV "
            "cache (cache hits).\n# TYPE nexus_prompt_tokens_cached_total counter\n"
            "nexus_prompt_tokens_cached_total %lld\n",
        (long long)atomic_load(&M.tok_cached));
    put(&o, "# HELP nexus_generated_tokens_total Generated tokens.\n"
            "# TYPE nexus_generated_tokens_total counter\nnexus_generated_tokens_total %lld\n",
        (long long)atomic_load(&M.tok_gen));
    put_hist(&o, "nexus_ttft_seconds", "Time from request arrival to the first generated token.",
             &M.ttft);
    put_hist(&o, "nexus_step_seconds", "Latency of one decode step of one slot.", &M.step);
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    put(&o, "# HELP nexus_process_resident_bytes Resident memory of the server process.\n"
            "# TYPE nexus_process_resident_bytes gauge\nnexus_process_resident_bytes %lld\n",
        (long long)rss * (long long)sysconf(_SC_PAGESIZE));
    if (es) {
        put(&o, "# HELP nexus_slots Slots of the engine.\n# TYPE nexus_slots gauge\n"
                "nexus_slots %d\nnexus_slots_busy %d\nnexus_queue_length %d\n",
            es->n_slots, es->slots_busy, es->queued);
        put(&o, "# HELP nexus_kv_bytes KV cache bytes held by each slot's sequence.\n"
                "# TYPE nexus_kv_bytes gauge\n");
        for (int s = 0; s < es->n_slots && s < 64; s++)
            put(&o, "nexus_kv_bytes{slot=\"%d\"} %lld\n", s, (long long)es->kv_bytes[s]);
        put(&o, "# HELP nexus_sessions Sessions by where their KV cache is.\n"
                "# TYPE nexus_sessions gauge\nnexus_sessions{state=\"resident\"} %lld\n"
                "nexus_sessions{state=\"parked\"} %lld\n"
                "# HELP nexus_session_kv_bytes KV bytes of the resident sessions.\n"
                "# TYPE nexus_session_kv_bytes gauge\nnexus_session_kv_bytes %lld\n"
                "# HELP nexus_session_kv_bytes_max KV bytes of the largest resident session.\n"
                "# TYPE nexus_session_kv_bytes_max gauge\nnexus_session_kv_bytes_max %lld\n"
                "# HELP nexus_session_kv_peak_bytes_max The most KV bytes one session has held.\n"
                "# TYPE nexus_session_kv_peak_bytes_max gauge\n"
                "nexus_session_kv_peak_bytes_max %lld\n"
                "# HELP nexus_session_events_total Sessions parked, restored, forgotten.\n"
                "# TYPE nexus_session_events_total counter\n"
                "nexus_session_events_total{event=\"park\"} %lld\n"
                "nexus_session_events_total{event=\"restore\"} %lld\n"
                "nexus_session_events_total{event=\"forget\"} %lld\n"
                "nexus_session_events_total{event=\"restore_failure\"} %lld\n",
            (long long)es->sessions.resident, (long long)es->sessions.parked,
            (long long)es->sessions.resident_bytes, (long long)es->sessions.largest_bytes,
            (long long)es->sessions.largest_peak, (long long)es->sessions.parks,
            (long long)es->sessions.restores, (long long)es->sessions.forgotten,
            (long long)es->sessions.restore_failures);
        put(&o, "# HELP nexus_kv_pool_bytes_in_use KV pool bytes held by any sequence.\n"
                "# TYPE nexus_kv_pool_bytes_in_use gauge\nnexus_kv_pool_bytes_in_use %lld\n"
                "# HELP nexus_kv_pool_bytes KV pool bytes allocated.\n"
                "# TYPE nexus_kv_pool_bytes gauge\nnexus_kv_pool_bytes %lld\n",
            (long long)es->kv_pool_in_use, (long long)es->kv_pool_bytes);
        put(&o, "# HELP nexus_kv_evictions_total Eviction rounds over all slots.\n"
                "# TYPE nexus_kv_evictions_total counter\nnexus_kv_evictions_total %lld\n"
                "# HELP nexus_kv_compactions_total Sequences renumbered at n_ctx so they could go on.\n"
                "# TYPE nexus_kv_compactions_total counter\nnexus_kv_compactions_total %lld\n",
            (long long)es->evictions, (long long)es->compactions);
    }
    if (o.oom) {
        nx_free(o.p);
        return NULL;
    }
    return o.p;
}
