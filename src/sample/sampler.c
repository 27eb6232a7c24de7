/*
 * sampler.c - DESIGN: turns logits into a token. The sampler owns a xoshiro256** generator
 * seeded by splitmix64(seed), a candidate buffer of n_vocab (id, value) pairs allocated at init,
 * and a ring of the last repeat_last_n accepted tokens for the repetition penalty. Nothing is
 * allocated per call. Order: repetition penalty (llama.cpp convention: positive logits divided,
 * negative multiplied), then greedy argmax when temp <= 0, else top-k, temperature, softmax,
 * top-p, min-p, and a draw. Ties break to the lower id, so results are deterministic.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"

struct cand {
    int32_t id;
    float v;
};

struct nx_sampler {
    struct nx_sampler_params p;
    int32_t n_vocab;
    uint64_t s[4];
    struct cand *c;   /* (n_vocab) */
    nx_token *recent; /* ring (repeat_last_n) */
    int32_t n_recent;
    int32_t recent_pos;
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t next_u64(struct nx_sampler *s) {
    uint64_t r = rotl(s->s[1] * 5, 7) * 9, t = s->s[1] << 17;
    s->s[2] ^= s->s[0];
    s->s[3] ^= s->s[1];
    s->s[1] ^= s->s[2];
    s->s[0] ^= s->s[3];
    s->s[2] ^= t;
    s->s[3] = rotl(s->s[3], 45);
    return r;
}
static double next_unit(struct nx_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

struct nx_sampler_params nx_sampler_default_params(void) {
    struct nx_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                  .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 42};
    return p;
}

nx_status nx_sampler_init(const struct nx_sampler_params *params, int32_t n_vocab,
                          nx_sampler **out) {
    *out = NULL;
    struct nx_sampler_params p = params ? *params : nx_sampler_default_params();
    if (n_vocab <= 0 || p.repeat_last_n < 0 || p.repeat_last_n > (1 << 20) ||
        !(p.repeat_penalty > 0) || isnan(p.temp) || isnan(p.top_p) || isnan(p.min_p))
        return NX_STATUS_INVALID_ARG;
    struct nx_sampler *s = nx_calloc(1, sizeof *s);
    if (!s) return NX_STATUS_NOMEM;
    s->p = p;
    s->n_vocab = n_vocab;
    s->c = nx_malloc(sizeof *s->c * (size_t)n_vocab);
    s->recent = nx_malloc(sizeof *s->recent * (size_t)(p.repeat_last_n > 0 ? p.repeat_last_n : 1));
    if (!s->c || !s->recent) {
        nx_sampler_free(s);
        return NX_STATUS_NOMEM;
    }
    uint64_t x = p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    *out = s;
    return NX_STATUS_OK;
}

void nx_sampler_free(nx_sampler *s) {
    if (!s) return;
    nx_free(s->c);
    nx_free(s->recent);
    nx_free(s);
}

void nx_sampler_accept(nx_sampler *s, nx_token t) {
    if (s->p.repeat_last_n <= 0) return;
    s->recent[s->recent_pos] = t;
    s->recent_pos = (s->recent_pos + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

/* descending by value, ties by id */
static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Move the k largest to the front, sorted (partial selection, then sort of k). */
static void top_k_sort(struct cand *c, int32_t n, int32_t k) {
    if (k < n) {
        /* quickselect-like partition by nth element */
        int32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            struct cand piv = c[(lo + hi) / 2];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (cand_cmp(&c[i], &piv) < 0) i++;
                while (cand_cmp(&c[j], &piv) > 0) j--;
                if (i <= j) {
                    struct cand t = c[i];
                    c[i] = c[j];
                    c[j] = t;
                    i++;
                    j--;
                }
            }
            if (k - 1 <= j)
                hi = j;
            else if (k - 1 >= i)
                lo = i;
            else
                break;
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
}

nx_token nx_sampler_sample(nx_sampler *s, const float *logits) {
    int32_t n = s->n_vocab;
    struct cand *c = s->c;
    for (int32_t i = 0; i < n; i++) c[i] = (struct cand){i, logits[i]};
    if (s->p.repeat_penalty != 1.0f) {
        for (int32_t i = 0; i < s->n_recent; i++) {
            nx_token t = s->recent[i];
            if (t < 0 || t >= n) continue;
            /* apply once per distinct token: skip if seen earlier in the ring */
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->recent[j] == t;
            if (dup) continue;
            c[t].v = c[t].v > 0 ? c[t].v / s->p.repeat_penalty : c[t].v * s->p.repeat_penalty;
        }
    }
    nx_token out;
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].v > c[best].v) best = i;
        out = c[best].id;
    } else {
        int32_t k = (s->p.top_k > 0 && s->p.top_k < n) ? s->p.top_k : n;
        top_k_sort(c, n, k);
        double mx = c[0].v, sum = 0;
        for (int32_t i = 0; i < k; i++) {
            c[i].v = (float)exp(((double)c[i].v - mx) / s->p.temp);
            sum += c[i].v;
        }
        for (int32_t i = 0; i < k; i++) c[i].v = (float)(c[i].v / sum);
        int32_t keep = k;
        if (s->p.top_p < 1.0f) {
            double cum = 0;
            for (int32_t i = 0; i < k; i++) {
                cum += c[i].v;
                if (cum >= s->p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if (s->p.min_p > 0) {
            float thr = c[0].v * s->p.min_p;
            int32_t i = 1;
            while (i < keep && c[i].v >= thr) i++;
            keep = i;
        }
        double tot = 0;
        for (int32_t i = 0; i < keep; i++) tot += c[i].v;
        double r = next_unit(s) * tot, acc = 0;
        out = c[keep - 1].id;
        for (int32_t i = 0; i < keep; i++) {
            acc += c[i].v;
            if (r < acc) {
                out = c[i].id;
                break;
            }
        }
    }
    nx_sampler_accept(s, out);
    return out;
}
