/*
 * test_namedec.c - constrained tool-name decoding (src/route/namedec.c) and the chat-model
 * relevance reranker (src/route/chat_rerank.c).
 *
 * DESIGN
 * - The trie decoder is checked against an independent brute force: filter the candidates' token
 *   paths step by step, keeping those whose next token has the highest logit among the tokens
 *   some live candidate allows (the end of a path scored by EOS). Logits come from a fake source
 *   (a fixed random preference per token, seeded), or are recorded from the real model at each
 *   feed and replayed to the brute force.
 * - Paths are checked to be the tail of tokenize(prompt + name + "\n") after the decode prefix,
 *   and what the decoder feeds is checked to be exactly prefix + the chosen path's head.
 * - Models: stories260K (512-token SentencePiece vocabulary, trained) and llama-2-tiny-random
 *   (32000-token vocabulary, random weights).
 * - Reranker: the score is recomputed independently (one full teacher-forced decode of each
 *   completed prompt with all logits) and must agree within 1e-4 (float kernels, different
 *   batching); determinism; long documents and queries cut to the context.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/alloc.h"
#include "nexus.h"
#include "route/chat_rerank.h"
#include "route/namedec.h"
#include "test.h"

static nx_model *load_model(const char *rel) {
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/models/%s", test_shared(), rel);
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m, err, sizeof err) != NX_STATUS_OK) {
        fprintf(stderr, "  cannot load %s: %s\n", path, err);
        return NULL;
    }
    return m;
}
#define STORIES "stories260K/stories260K.gguf"
#define RANDOM "llama-2-tiny-random/llama-2-tiny-random.gguf"

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static float rng_unif(uint64_t *s) { return (float)((rng_next(s) >> 40) / (double)(1 << 24)); }

/* ---- logits sources ---- */

#define MAX_FEEDS 64
struct fake {
    int32_t n_vocab;
    const float *pref;     /* static logits (fake mode) */
    nx_ctx *ctx;           /* real mode: decode and record */
    float *rec[MAX_FEEDS]; /* recorded logits per feed */
    int n_rec;
    nx_token fed[4096];
    int n_fed;
};

static const float *fake_feed(void *user, const nx_token *t, int32_t n, char *err, size_t errlen) {
    struct fake *f = user;
    for (int32_t i = 0; i < n && f->n_fed < 4096; i++) f->fed[f->n_fed++] = t[i];
    if (!f->ctx) return f->pref;
    if (nx_decode(f->ctx, t, n, false) != NX_STATUS_OK) {
        snprintf(err, errlen, "decode: %s", nx_ctx_last_error(f->ctx));
        return NULL;
    }
    const float *lg = nx_get_logits(f->ctx, -1);
    if (f->n_rec < MAX_FEEDS) {
        f->rec[f->n_rec] = malloc((size_t)f->n_vocab * sizeof(float));
        memcpy(f->rec[f->n_rec], lg, (size_t)f->n_vocab * sizeof(float));
        f->n_rec++;
    }
    return lg;
}
static void fake_clear(struct fake *f) {
    for (int i = 0; i < f->n_rec; i++) free(f->rec[i]);
    f->n_rec = 0;
    f->n_fed = 0;
}

/* Brute force over the candidates' paths. Logits: f->pref, or f->rec[k] at the k-th branch. */
static int brute_force(const rt_namedec *nd, int n, nx_token eos, const struct fake *f) {
    int alive[64], na = 0;
    const nx_token *path[64];
    int32_t len[64];
    for (int i = 0; i < n; i++) {
        len[i] = rt_namedec_path(nd, i, &path[i]);
        bool dup = false;
        for (int j = 0; j < i && !dup; j++)
            dup = len[j] == len[i] && memcmp(path[j], path[i], (size_t)len[i] * sizeof(nx_token)) == 0;
        if (!dup) alive[na++] = i;
    }
    int branch = 0;
    for (int32_t k = 0;; k++) {
        if (na == 1) return alive[0];
        int ended = -1; /* the first live candidate whose path ends here */
        for (int a = 0; a < na && ended < 0; a++)
            if (len[alive[a]] == k) ended = alive[a];
        /* distinct next tokens, in candidate order */
        nx_token seen[64];
        int ns = 0;
        for (int a = 0; a < na; a++) {
            if (len[alive[a]] == k) continue;
            nx_token t = path[alive[a]][k];
            bool have = false;
            for (int s = 0; s < ns; s++) have |= seen[s] == t;
            if (!have) seen[ns++] = t;
        }
        nx_token best = seen[0];
        if (ended >= 0 || ns > 1) { /* a choice: the next logits */
            const float *lg = f->ctx ? (branch < f->n_rec ? f->rec[branch] : NULL) : f->pref;
            branch++;
            if (!lg) return -2;
            best = -1;
            float bv = -INFINITY;
            for (int s = 0; s < ns; s++)
                if (best < 0 || lg[seen[s]] > bv) {
                    best = seen[s];
                    bv = lg[seen[s]];
                }
            if (ended >= 0 && (best < 0 || eos < 0 || lg[eos] > bv)) return ended;
        }
        int nb = 0;
        for (int a = 0; a < na; a++)
            if (len[alive[a]] > k && path[alive[a]][k] == best) alive[nb++] = alive[a];
        na = nb;
    }
}

/* What was fed must be prefix + the head of the chosen path. */
static bool fed_is_prefix_plus_path(const rt_namedec *nd, int chosen, const struct fake *f) {
    const nx_token *pre, *path;
    int32_t np = rt_namedec_prefix(nd, &pre), nl = rt_namedec_path(nd, chosen, &path);
    /* nothing fed (a single candidate path) or prefix + head of the path */
    bool ok = f->n_fed == 0 || (f->n_fed >= np && f->n_fed <= np + nl);
    for (int i = 0; ok && i < f->n_fed; i++) ok = f->fed[i] == (i < np ? pre[i] : path[i - np]);
    if (!ok) {
        fprintf(stderr, "  fed %d tokens:", f->n_fed);
        for (int i = 0; i < f->n_fed; i++) fprintf(stderr, " %d", f->fed[i]);
        fprintf(stderr, "\n  prefix %d + path %d:", np, nl);
        for (int i = 0; i < np + nl; i++) fprintf(stderr, " %d", i < np ? pre[i] : path[i - np]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static const char *NAMES[] = {"get_weather", "get_weather_forecast", "get_time", "set_time",
                              "search", "search_web", "send_email", "list_files"};
#define N_NAMES ((int)(sizeof NAMES / sizeof NAMES[0]))

TEST(nd_paths_tokenize_after_prompt) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    const char *prompt = "Tools: get_weather, search.\nTool:";
    rt_namedec *nd = rt_namedec_build(m, prompt, NAMES, N_NAMES, NULL, err, sizeof err);
    if (!nd) FAILF("%s", err);
    const nx_token *pre;
    int32_t np = rt_namedec_prefix(nd, &pre);
    ASSERT_TRUE(np >= 2);
    ASSERT_EQ(pre[0], nx_token_bos(m));
    for (int i = 0; i < N_NAMES; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s%s\n", prompt, NAMES[i]);
        nx_token full[256];
        int32_t n = nx_tokenize(m, text, strlen(text), full, 256, true, false);
        const nx_token *path;
        int32_t nl = rt_namedec_path(nd, i, &path);
        ASSERT_EQ(n, np + nl);
        for (int32_t k = 0; k < n; k++) ASSERT_EQ(full[k], k < np ? pre[k] : path[k - np]);
    }
    /* shared prefixes share nodes: fewer nodes than path tokens */
    int total = 0;
    for (int i = 0; i < N_NAMES; i++) {
        const nx_token *p;
        total += rt_namedec_path(nd, i, &p);
    }
    ASSERT_TRUE(rt_namedec_n_nodes(nd) < total + 1);
    rt_namedec_free(nd);
    nx_model_free(m);
}

TEST(nd_fake_logits_follow_best_allowed_token) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    int32_t nv = nx_model_n_vocab(m);
    char err[512] = "";
    float *pref = malloc((size_t)nv * sizeof(float));
    struct fake f = {.n_vocab = nv, .pref = pref};
    uint64_t seed = 42;
    int counts[N_NAMES] = {0};
    for (int trial = 0; trial < 300; trial++) {
        /* random subset (in random order) of the names, random preferences */
        const char *names[N_NAMES];
        int k = 1 + (int)(rng_next(&seed) % N_NAMES), idx[N_NAMES];
        for (int i = 0; i < N_NAMES; i++) idx[i] = i;
        for (int i = N_NAMES - 1; i > 0; i--) {
            int j = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        for (int i = 0; i < k; i++) names[i] = NAMES[idx[i]];
        for (int32_t t = 0; t < nv; t++) pref[t] = rng_unif(&seed) * 10;
        /* the overall best token is never a name token here: a huge disallowed logit */
        pref[(int32_t)(rng_next(&seed) % (uint64_t)nv)] = 1e9f;
        rt_namedec *nd = rt_namedec_build(m, "Query: what now?\nTool:", names, k, NULL, err, sizeof err);
        if (!nd) FAILF("%s", err);
        int chosen = -1, feeds = -1;
        fake_clear(&f);
        if (rt_namedec_run(nd, fake_feed, &f, &chosen, &feeds, err, sizeof err) != 0) {
            rt_namedec_free(nd);
            FAILF("%s", err);
        }
        int want = brute_force(nd, k, nx_token_eos(m), &f);
        if (chosen != want || chosen < 0 || chosen >= k) {
            rt_namedec_free(nd);
            FAILF("trial %d: chose %d, brute force %d", trial, chosen, want);
        }
        ASSERT_TRUE(fed_is_prefix_plus_path(nd, chosen, &f));
        ASSERT_TRUE(k == 1 ? feeds == 0 : feeds >= 1);
        counts[idx[chosen]]++;
        rt_namedec_free(nd);
    }
    /* every name gets chosen sometimes (the preferences really steer) */
    for (int i = 0; i < N_NAMES; i++) ASSERT_TRUE(counts[i] > 0);
    free(pref);
    nx_model_free(m);
}

TEST(nd_prefix_names_end_marker) {
    /* "search" vs "search_web": the terminator token vs the continuation token decides */
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    int32_t nv = nx_model_n_vocab(m);
    char err[512] = "";
    const char *names[] = {"search", "search_web"};
    rt_namedec *nd = rt_namedec_build(m, "Tool:", names, 2, NULL, err, sizeof err);
    if (!nd) FAILF("%s", err);
    const nx_token *a, *b;
    int32_t la = rt_namedec_path(nd, 0, &a), lb = rt_namedec_path(nd, 1, &b);
    int32_t k = 0;
    while (k < la && k < lb && a[k] == b[k]) k++;
    ASSERT_TRUE(k < la && k < lb); /* they diverge at the terminator vs "_web" */
    float *pref = calloc((size_t)nv, sizeof(float));
    struct fake f = {.n_vocab = nv, .pref = pref};
    int chosen;
    pref[a[k]] = 5;
    pref[b[k]] = 4;
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, NULL, err, sizeof err));
    ASSERT_EQ(chosen, 0);
    pref[b[k]] = 6;
    fake_clear(&f);
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, NULL, err, sizeof err));
    ASSERT_EQ(chosen, 1);
    rt_namedec_free(nd);

    /* no terminator: "search" ends inside "search_web"'s path; EOS decides */
    nd = rt_namedec_build(m, "Tool:", names, 2, "", err, sizeof err);
    if (!nd) FAILF("%s", err);
    la = rt_namedec_path(nd, 0, &a);
    lb = rt_namedec_path(nd, 1, &b);
    ASSERT_TRUE(la < lb && memcmp(a, b, (size_t)la * sizeof(nx_token)) == 0);
    nx_token eos = nx_token_eos(m);
    ASSERT_TRUE(eos >= 0);
    memset(pref, 0, (size_t)nv * sizeof(float));
    pref[eos] = 3;
    pref[b[la]] = 2;
    fake_clear(&f);
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, NULL, err, sizeof err));
    ASSERT_EQ(chosen, 0);
    pref[b[la]] = 4;
    fake_clear(&f);
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, NULL, err, sizeof err));
    ASSERT_EQ(chosen, 1);
    rt_namedec_free(nd);
    free(pref);
    nx_model_free(m);
}

TEST(nd_single_and_duplicate_candidates) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    const char *one[] = {"get_weather"};
    rt_namedec *nd = rt_namedec_build(m, "Tool:", one, 1, NULL, err, sizeof err);
    if (!nd) FAILF("%s", err);
    struct fake f = {.n_vocab = nx_model_n_vocab(m), .pref = NULL};
    int chosen = -1, feeds = -1;
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, &feeds, err, sizeof err));
    ASSERT_EQ(chosen, 0);
    ASSERT_EQ(feeds, 0); /* nothing to decide: the model is not run */
    ASSERT_EQ(f.n_fed, 0);
    rt_namedec_free(nd);
    /* the same name twice: one candidate path, the first index */
    const char *dup[] = {"search", "search"};
    nd = rt_namedec_build(m, "Tool:", dup, 2, NULL, err, sizeof err);
    if (!nd) FAILF("%s", err);
    ASSERT_OK(rt_namedec_run(nd, fake_feed, &f, &chosen, &feeds, err, sizeof err));
    ASSERT_EQ(chosen, 0);
    ASSERT_EQ(feeds, 0);
    rt_namedec_free(nd);
    /* bad input */
    const char *bad[] = {"a", ""};
    ASSERT_TRUE(rt_namedec_build(m, "Tool:", bad, 2, NULL, err, sizeof err) == NULL);
    ASSERT_TRUE(strstr(err, "candidate 1 is empty") != NULL);
    const char *nul[] = {NULL};
    ASSERT_TRUE(rt_namedec_build(m, "Tool:", nul, 1, NULL, err, sizeof err) == NULL);
    ASSERT_TRUE(rt_namedec_build(m, "Tool:", one, 0, NULL, err, sizeof err) == NULL);
    ASSERT_TRUE(strstr(err, "no candidate") != NULL);
    nx_model_free(m);
}

/* Real model: valid candidate, replayed brute force agrees, deterministic. */
static void real_model_trials(const char *rel, int trials, uint64_t seed) {
    nx_model *m = load_model(rel);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *ctx = NULL;
    if (nx_ctx_init(m, &cp, &ctx, err, sizeof err) != NX_STATUS_OK) FAILF("%s", err);
    struct fake f = {.n_vocab = nx_model_n_vocab(m), .ctx = ctx};
    static const char *words[] = {"get", "set", "list", "search", "send", "weather", "time", "file",
                                  "user", "email", "web", "repo", "issue", "create", "delete"};
    const int nw = (int)(sizeof words / sizeof words[0]);
    for (int trial = 0; trial < trials; trial++) {
        char buf[8][64];
        const char *names[8];
        int k = 1 + (int)(rng_next(&seed) % 8);
        for (int i = 0; i < k; i++) {
            int parts = 1 + (int)(rng_next(&seed) % 3);
            buf[i][0] = 0;
            for (int p = 0; p < parts; p++) {
                if (p) strcat(buf[i], "_");
                strcat(buf[i], words[rng_next(&seed) % (uint64_t)nw]);
            }
            names[i] = buf[i];
        }
        char prompt[256];
        snprintf(prompt, sizeof prompt, "Query: please %s the %s now.\nTool:",
                 words[rng_next(&seed) % (uint64_t)nw], words[rng_next(&seed) % (uint64_t)nw]);
        rt_namedec *nd = rt_namedec_build(m, prompt, names, k, NULL, err, sizeof err);
        if (!nd) FAILF("%s", err);
        int chosen = -1, again = -1;
        fake_clear(&f);
        nx_ctx_reset(ctx);
        if (rt_namedec_run(nd, fake_feed, &f, &chosen, NULL, err, sizeof err) != 0) {
            rt_namedec_free(nd);
            FAILF("%s", err);
        }
        ASSERT_TRUE(chosen >= 0 && chosen < k);
        ASSERT_EQ(brute_force(nd, k, nx_token_eos(m), &f), chosen);
        ASSERT_TRUE(fed_is_prefix_plus_path(nd, chosen, &f));
        /* the ctx path gives the same answer, twice */
        ASSERT_OK(rt_namedec_decode(nd, ctx, &again, NULL, err, sizeof err));
        ASSERT_EQ(again, chosen);
        ASSERT_OK(rt_namedec_decode(nd, ctx, &again, NULL, err, sizeof err));
        ASSERT_EQ(again, chosen);
        rt_namedec_free(nd);
    }
    fake_clear(&f);
    nx_ctx_free(ctx);
    nx_model_free(m);
}

TEST(nd_stories260k_valid_and_deterministic) { real_model_trials(STORIES, 40, 7); }
TEST(nd_random_model_valid_and_deterministic) { real_model_trials(RANDOM, 25, 11); }

TEST(nd_context_too_small) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 8;
    nx_ctx *ctx = NULL;
    ASSERT_TRUE(nx_ctx_init(m, &cp, &ctx, err, sizeof err) == NX_STATUS_OK);
    rt_namedec *nd = rt_namedec_build(m, "Query: what is the weather like today in Paris?\nTool:",
                                      NAMES, N_NAMES, NULL, err, sizeof err);
    ASSERT_TRUE(nd != NULL);
    int chosen;
    ASSERT_EQ(rt_namedec_decode(nd, ctx, &chosen, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "do not fit") != NULL);
    rt_namedec_free(nd);
    nx_ctx_free(ctx);
    nx_model_free(m);
}

TEST(nd_prompt_helper_and_latency) {
    const char *names[] = {"get_weather", "search"};
    const char *descs[] = {"Get the weather\nfor a city", NULL};
    char *p = rt_namedec_prompt("weather in Paris?", names, descs, 2, 0);
    ASSERT_STR_EQ(p, "Tools:\n- get_weather: Get the weather for a city\n- search\nQuery: weather in "
                     "Paris?\nTool: ");
    nx_free(p);
    /* descriptions cut at a UTF-8 boundary: "caf" + é (2 bytes) cut at 4 bytes -> "caf" */
    const char *d2[] = {"caf\xc3\xa9 au lait", ""};
    p = rt_namedec_prompt("q", names, d2, 2, 4);
    ASSERT_STR_EQ(p, "Tools:\n- get_weather: caf\n- search\nQuery: q\nTool: ");
    nx_free(p);

    /* the trailing space of "Tool: " is handled by the shared-prefix rule: paths are still the
     * tails of tokenize(prompt + name + "\n") */
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    const char *dd[N_NAMES] = {"Get the current weather", "Get a forecast for days ahead",
                               "Get the time", "Set the time", "Search files", "Search the web",
                               "Send an email", "List files"};
    p = rt_namedec_prompt("what will the weather be tomorrow?", NAMES, dd, N_NAMES, 64);
    rt_namedec *nd = rt_namedec_build(m, p, NAMES, N_NAMES, NULL, err, sizeof err);
    if (!nd) FAILF("%s", err);
    const nx_token *pre;
    int32_t np = rt_namedec_prefix(nd, &pre);
    for (int i = 0; i < N_NAMES; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s\n", p, NAMES[i]);
        nx_token full[1024];
        int32_t n = nx_tokenize(m, text, strlen(text), full, 1024, true, false);
        const nx_token *path;
        int32_t nl = rt_namedec_path(nd, i, &path);
        ASSERT_EQ(n, np + nl);
        for (int32_t k = 0; k < n; k++) ASSERT_EQ(full[k], k < np ? pre[k] : path[k - np]);
    }
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *ctx = NULL;
    ASSERT_TRUE(nx_ctx_init(m, &cp, &ctx, err, sizeof err) == NX_STATUS_OK);
    int chosen = -1, feeds = 0;
    const int reps = 20;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < reps; r++) ASSERT_OK(rt_namedec_decode(nd, ctx, &chosen, &feeds, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / reps;
    ASSERT_TRUE(chosen >= 0 && chosen < N_NAMES);
    printf("  namedec on stories260K: %d candidates, prompt %d tokens, %d feeds, %.2f ms per decode, "
           "chose %s (preliminary)\n",
           N_NAMES, np, feeds, ms, NAMES[chosen]);
    nx_ctx_free(ctx);
    rt_namedec_free(nd);
    nx_free(p);
    nx_model_free(m);
}

/* ---- chat reranker -------------------------------------------------------------------- */

/* Independent score: full teacher-forced decodes of prompt+" yes" and prompt+" no". */
static double reference_score(nx_model *m, const char *q, const char *d) {
    char p[4096];
    snprintf(p, sizeof p, RT_CHAT_RERANK_TEMPLATE, (int)strlen(q), q, (int)strlen(d), d);
    char py[4200], pn[4200];
    snprintf(py, sizeof py, "%s yes", p);
    snprintf(pn, sizeof pn, "%s no", p);
    nx_token tp[2048], ty[2048], tn[2048];
    int32_t np = nx_tokenize(m, p, strlen(p), tp, 2048, true, false);
    int32_t ny = nx_tokenize(m, py, strlen(py), ty, 2048, true, false);
    int32_t nn = nx_tokenize(m, pn, strlen(pn), tn, 2048, true, false);
    int32_t c = 0;
    while (c < np && c < ny && c < nn && tp[c] == ty[c] && tp[c] == tn[c]) c++;
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    nx_ctx *ctx;
    char err[256];
    if (nx_ctx_init(m, &cp, &ctx, err, sizeof err) != NX_STATUS_OK) return NAN;
    double lp[2] = {0, 0};
    for (int w = 0; w < 2; w++) {
        const nx_token *t = w ? tn : ty;
        int32_t n = w ? nn : ny;
        nx_ctx_reset(ctx);
        if (nx_decode(ctx, t, n, true) != NX_STATUS_OK) return NAN;
        int32_t nv = nx_model_n_vocab(m);
        for (int32_t i = c; i < n; i++) {
            const float *lg = nx_get_logits(ctx, i - 1);
            double mx = -INFINITY, s = 0;
            for (int32_t v = 0; v < nv; v++) mx = fmax(mx, lg[v]);
            for (int32_t v = 0; v < nv; v++) s += exp(lg[v] - mx);
            lp[w] += lg[t[i]] - mx - log(s);
        }
    }
    nx_ctx_free(ctx);
    return lp[0] - log(exp(lp[0]) + exp(lp[1]));
}

TEST(rr_chat_score_matches_reference) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    rt_reranker *r = NULL;
    rt_reranker_chat_open(m, &r, err, sizeof err);
    if (!r) FAILF("%s", err);
    ASSERT_STR_EQ(r->name, "chat-relevance");
    const char *q = "what is the weather in Paris?";
    const char *docs[] = {"get_weather: Get the current weather for a city",
                          "send_email: Send an email to a recipient", "x"};
    for (int i = 0; i < 3; i++) {
        float s1, s2;
        ASSERT_OK(r->score(r, q, docs[i], &s1, err, sizeof err));
        ASSERT_OK(r->score(r, q, docs[i], &s2, err, sizeof err));
        ASSERT_TRUE(memcmp(&s1, &s2, sizeof s1) == 0); /* deterministic */
        ASSERT_TRUE(isfinite(s1) && s1 <= 0);
        double ref = reference_score(m, q, docs[i]);
        ASSERT_NEAR(s1, ref, 1e-4);
    }
    {
        struct timespec t0, t1;
        float sc;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 10; i++) ASSERT_OK(r->score(r, q, docs[0], &sc, err, sizeof err));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("  chat reranker on stories260K: %.2f ms per score (preliminary)\n",
               ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / 10);
    }
    /* a second instance gives the same scores */
    rt_reranker *r2 = NULL;
    rt_reranker_chat_open(m, &r2, err, sizeof err);
    ASSERT_TRUE(r2 != NULL);
    float a, b;
    ASSERT_OK(r->score(r, q, docs[0], &a, err, sizeof err));
    ASSERT_OK(r2->score(r2, q, docs[0], &b, err, sizeof err));
    ASSERT_TRUE(a == b);
    rt_reranker_free(r2);
    rt_reranker_free(r);
    nx_model_free(m);
}

TEST(rr_chat_long_inputs_truncated) {
    nx_model *m = load_model(STORIES);
    ASSERT_TRUE(m != NULL);
    char err[512] = "";
    struct rt_chat_rerank_params p = rt_chat_rerank_default_params();
    p.n_ctx = 96;
    rt_reranker *r = NULL;
    rt_reranker_chat_open_ex(m, &p, &r, err, sizeof err);
    if (!r) FAILF("%s", err);
    /* two documents that differ only far past what fits: same score */
    size_t n = 20000;
    char *d1 = malloc(n + 1), *d2 = malloc(n + 1);
    for (size_t i = 0; i < n; i++) d1[i] = d2[i] = "lookup the weather "[i % 19];
    d1[n] = d2[n] = 0;
    memset(d2 + n / 2, 'z', n / 2);
    /* a multi-byte character near every cut point: cuts land on UTF-8 boundaries */
    for (size_t i = 100; i + 2 < n / 2; i += 37) memcpy(d1 + i, "\xc3\xa9", 2), memcpy(d2 + i, "\xc3\xa9", 2);
    float s1, s2;
    ASSERT_OK(r->score(r, "weather?", d1, &s1, err, sizeof err));
    ASSERT_OK(r->score(r, "weather?", d2, &s2, err, sizeof err));
    ASSERT_TRUE(isfinite(s1) && s1 == s2);
    /* a long query too (the document is dropped first, then the query cut) */
    ASSERT_OK(r->score(r, d1, "get_weather: weather", &s1, err, sizeof err));
    ASSERT_TRUE(isfinite(s1));
    /* the default context also takes a 20 KB document */
    rt_reranker *rd = NULL;
    rt_reranker_chat_open(m, &rd, err, sizeof err);
    ASSERT_TRUE(rd != NULL);
    ASSERT_OK(rd->score(rd, "weather?", d1, &s1, err, sizeof err));
    ASSERT_TRUE(isfinite(s1));
    rt_reranker_free(rd);
    free(d1);
    free(d2);
    rt_reranker_free(r);
    /* a context too small for the template: a clear error */
    p.n_ctx = 8;
    rt_reranker_chat_open_ex(m, &p, &r, err, sizeof err);
    ASSERT_TRUE(r != NULL);
    ASSERT_EQ(r->score(r, "q", "d", &s1, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "cannot hold the prompt template") != NULL);
    rt_reranker_free(r);
    /* bad parameters */
    p.n_ctx = 0;
    p.yes = p.no = " same";
    ASSERT_EQ(rt_reranker_chat_open_ex(m, &p, &r, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(r == NULL);
    ASSERT_TRUE(strstr(err, "differ") != NULL);
    nx_model_free(m);
}

TEST_MAIN
