/*
 * sampler.c - DESIGN: turns logits into a token. The sampler owns a xoshiro256** generator
 * seeded by splitmix64(seed), a candidate buffer of n_vocab (id, value) pairs allocated at init,
 * and a ring of the last repeat_last_n accepted tokens for the repetition penalty. Nothing is
 * allocated per call. Order: repetition penalty (llama.cpp convention: positive logits divided,
 * negative multiplied), then greedy argmax when temp <= 0, else top-k, temperature, softmax,
 * top-p, min-p, and a draw (no sort when top-k, top-p and min-p are all off). Ties break to
 * the lower id, so results are deterministic.
 * Grammar (nx_sampler_set_grammar): when active, the candidates are only the tokens the
 * matcher's mask allows (built from the bitset, in id order), and the chosen token advances
 * the matcher. Lazy mode watches the rendered text of sampled tokens for the trigger (the last
 * len-1 bytes are kept across tokens, so a trigger split over tokens is found too).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "grammar/grammar_api.h"

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
    /* grammar */
    nx_grammar_matcher *gm;
    const nx_grammar_vocab *gv;
    uint64_t *gbits;     /* mask (ceil(n_vocab / 64) words) */
    char *trigger;       /* NULL: not lazy */
    size_t trig_len;
    char *tail;          /* last trig_len - 1 bytes of text + one token's text */
    size_t tail_n, tail_cap;
    bool g_active, g_failed;
    int32_t g_max, g_used;
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

static void grammar_clear(nx_sampler *s) {
    nx_grammar_matcher_free(s->gm);
    nx_free(s->gbits);
    nx_free(s->trigger);
    nx_free(s->tail);
    s->gm = NULL;
    s->gv = NULL;
    s->gbits = NULL;
    s->trigger = NULL;
    s->tail = NULL;
    s->tail_n = s->tail_cap = s->trig_len = 0;
    s->g_active = s->g_failed = false;
    s->g_max = s->g_used = 0;
}

nx_status nx_sampler_set_grammar(nx_sampler *s, const nx_grammar *g, const nx_grammar_vocab *v,
                                 const char *trigger, int32_t max_tokens) {
    grammar_clear(s);
    if (!g) return NX_STATUS_OK;
    if (!v || grammar_vocab_n(v) != s->n_vocab) return NX_STATUS_INVALID_ARG;
    nx_status st = nx_grammar_matcher_init(g, v, &s->gm);
    if (st != NX_STATUS_OK) return st;
    s->gv = v;
    s->gbits = nx_malloc(sizeof *s->gbits * (size_t)((s->n_vocab + 63) / 64));
    if (!s->gbits) goto nomem;
    if (trigger && *trigger) {
        s->trig_len = strlen(trigger);
        s->trigger = nx_strdup(trigger);
        s->tail_cap = s->trig_len + 4096;
        s->tail = nx_malloc(s->tail_cap);
        if (!s->trigger || !s->tail) goto nomem;
    } else {
        s->g_active = true;
    }
    s->g_max = max_tokens > 0 ? max_tokens : 0;
    return NX_STATUS_OK;
nomem:
    grammar_clear(s);
    return NX_STATUS_NOMEM;
}

void nx_sampler_grammar_reset(nx_sampler *s) {
    if (!s->gm) return;
    nx_grammar_matcher_reset(s->gm);
    s->g_used = 0;
    s->g_failed = false;
    s->g_active = s->trigger == NULL;
    s->tail_n = 0;
}

bool nx_sampler_grammar_active(const nx_sampler *s) { return s->gm && s->g_active; }
nx_grammar_matcher *nx_sampler_grammar_matcher(nx_sampler *s) { return s->gm; }

/* Lazy mode: look for the trigger in the text so far; on a hit, activate and feed the rest. */
static void grammar_watch(nx_sampler *s, nx_token t) {
    int32_t len;
    const char *txt = grammar_vocab_text(s->gv, t, &len);
    size_t room = s->tail_cap - s->tail_n, k = (size_t)len < room ? (size_t)len : room;
    memcpy(s->tail + s->tail_n, txt, k);
    s->tail_n += k;
    const char *hit = memmem(s->tail, s->tail_n, s->trigger, s->trig_len);
    if (hit) {
        s->g_active = true;
        const char *rest = hit + s->trig_len;
        size_t nrest = (size_t)(s->tail + s->tail_n - rest);
        if (nrest && nx_grammar_matcher_accept_text(s->gm, rest, nrest) != NX_STATUS_OK)
            s->g_failed = true;
        s->tail_n = 0;
        return;
    }
    size_t keep = s->trig_len - 1;
    if (s->tail_n > keep) {
        memmove(s->tail, s->tail + s->tail_n - keep, keep);
        s->tail_n = keep;
    }
}

void nx_sampler_free(nx_sampler *s) {
    if (!s) return;
    grammar_clear(s);
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

static int32_t cand_find(const struct cand *c, int32_t n, nx_token t) {
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (c[mid].id == t) return mid;
        if (c[mid].id < t)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Choose a token from the logits (masked: only the tokens in s->gbits). */
static nx_token pick(nx_sampler *s, const float *logits, bool masked) {
    int32_t n = s->n_vocab;
    struct cand *c = s->c;
    if (masked) {
        int32_t m = 0;
        for (int32_t w = 0; w < (n + 63) / 64; w++) {
            uint64_t b = s->gbits[w];
            while (b) {
                int32_t i = w * 64 + __builtin_ctzll(b);
                b &= b - 1;
                c[m++] = (struct cand){i, logits[i]};
            }
        }
        n = m;
    } else {
        for (int32_t i = 0; i < n; i++) c[i] = (struct cand){i, logits[i]};
    }
    if (s->p.repeat_penalty != 1.0f) {
        for (int32_t i = 0; i < s->n_recent; i++) {
            nx_token t = s->recent[i];
            if (t < 0 || t >= s->n_vocab) continue;
            /* apply once per distinct token: skip if seen earlier in the ring */
            bool dup = false;
            for (int32_t j = 0; j < i && !dup; j++) dup = s->recent[j] == t;
            if (dup) continue;
            int32_t ci = masked ? cand_find(c, n, t) : t;
            if (ci < 0) continue;
            c[ci].v = c[ci].v > 0 ? c[ci].v / s->p.repeat_penalty : c[ci].v * s->p.repeat_penalty;
        }
    }
    nx_token out;
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].v > c[best].v) best = i;
        out = c[best].id;
    } else if ((s->p.top_k <= 0 || s->p.top_k >= n) && s->p.top_p >= 1.0f && s->p.min_p <= 0) {
        /* no truncation: softmax and a draw in id order, no sort */
        double mx = c[0].v, sum = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].v > mx) mx = c[i].v;
        for (int32_t i = 0; i < n; i++) {
            c[i].v = (float)exp(((double)c[i].v - mx) / s->p.temp);
            sum += c[i].v;
        }
        double r = next_unit(s) * sum, acc = 0;
        out = c[n - 1].id;
        for (int32_t i = 0; i < n; i++) {
            acc += c[i].v;
            if (r < acc) {
                out = c[i].id;
                break;
            }
        }
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
    return out;
}

/* No token is allowed: the vocabulary's first end-of-generation token (-1 when it has none). */
static nx_token end_of_generation(nx_sampler *s) {
    nx_token e = grammar_vocab_first_eog(s->gv);
    if (e >= 0) nx_sampler_accept(s, e);
    return e;
}

nx_token nx_sampler_sample(nx_sampler *s, const float *logits) {
    bool masked = s->gm && s->g_active;
    if (!masked) {
        nx_token out = pick(s, logits, false);
        nx_sampler_accept(s, out);
        if (s->gm) grammar_watch(s, out);
        return out;
    }
    bool force = false;
    if (s->g_max > 0) {
        int64_t need = nx_grammar_matcher_completion_bytes(s->gm);
        force = need >= 0 && (int64_t)(s->g_max - s->g_used) <= need + 1;
    }
    int32_t k = s->g_failed ? 0 : nx_grammar_matcher_mask(s->gm, s->gbits, force);
    if (k <= 0) return end_of_generation(s);
    nx_token out = pick(s, logits, true);
    nx_status ast = nx_grammar_matcher_accept(s->gm, out);
    if (ast == NX_STATUS_INVALID_ARG) {
        /* past 128 parses a mask can hold a token the automaton refuses; the refusal makes the
           matcher check every token through the automaton from then on: mask and pick again */
        if (nx_grammar_matcher_mask(s->gm, s->gbits, force) <= 0) {
            s->g_failed = true;
            return end_of_generation(s);
        }
        out = pick(s, logits, true);
        ast = nx_grammar_matcher_accept(s->gm, out);
    }
    if (ast != NX_STATUS_OK) {
        s->g_failed = true;
    } else if (s->g_max > 0 && !force) {
        /* a free token may open more than the budget left can close (an optional property
           with a long minimum, say): then undo it and take a token of the shortest completion,
           which always shortens it, so need + 1 <= budget left holds at every step */
        int64_t need = nx_grammar_matcher_completion_bytes(s->gm);
        int64_t left = (int64_t)s->g_max - s->g_used - 1;
        if (need < 0 || need + 1 > left) {
            nx_grammar_matcher_rollback(s->gm, 1);
            if (nx_grammar_matcher_mask(s->gm, s->gbits, true) > 0) {
                out = pick(s, logits, true);
                if (nx_grammar_matcher_accept(s->gm, out) != NX_STATUS_OK) s->g_failed = true;
            }
        }
    }
    s->g_used++;
    nx_sampler_accept(s, out);
    return out;
}
