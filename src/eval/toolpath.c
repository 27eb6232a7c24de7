/*
 * toolpath.c - the tool-path evaluation (toolpath.h): four arms, registries of N tools, TTFA
 * cold and cached, prompt tokens, fit, argument validity.
 */
#include "eval/toolpath.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/sidecar.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/nx_base.h"
#include "eval/outfile.h"
#include "eval/progress.h"
#include "eval/svg.h"
#include "gen/generate.h"
#include "route/router.h"
#include "route/signature.h"

enum { ARM_ALL, ARM_TOPK, ARM_SPLICE, ARM_NEXUS, N_ARMS };
static const char *const k_arm[N_ARMS] = {"all", "topk", "splice", "nexus"};
static const char k_head[] =
    "You are a helpful assistant with tools. To call a tool write Call: {\"name\": TOOL, "
    "\"arguments\": {...}}.\nTools:\n";

struct toolpath_params toolpath_default_params(void) {
    struct toolpath_params p = {0};
    p.mcp_dir = "../shared/data/mcp";
    p.bfcl = "../shared/data/bfcl/BFCL_v4_simple_python.json";
    int s[] = {10, 50, 100, 250};
    for (int i = 0; i < 4; i++) p.sizes[i] = s[i];
    p.n_sizes = 4;
    p.queries = 4;
    p.k = 5;
    p.arg_tokens = 64;
    p.ctx_limit = 8192;
    p.max_prompt = 32768;
    p.threads = 2;
    p.reps = 1;
    p.seed = 1;
    return p;
}

struct meas {
    bool run;            /* measured (prompt <= max_prompt) */
    int32_t prompt;      /* prompt tokens (nexus: the main prompt) */
    bool fits;
    double cold, cached; /* TTFA, seconds */
    bool valid_cold, valid_cached;
    double main_cold, main_cached; /* nexus: the main prompt's prefill */
};

struct query {
    char *text;
    int target; /* registry index */
};

struct run {
    const nx_model *m;
    const struct toolpath_params *p;
    rt_registry reg;
    struct query *q;
    int nq;
    nx_ctx *ctx;
    ag_sidecar *sc;
    nx_kv_block **blk; /* splice arm: per registry tool, compiled without BOS at m0 = 0 */
    double static_s;   /* --static-once: this size's static prefill, seconds (-1: per query) */
    char err[1024];
};

/* The sidecar parks in sequence 1; --static-once holds the all arm's static prompt in 2. */
enum { SEQ_STATIC = 2 };

/* Empties sequence 0 (the arms' sequence), leaving the static prompt held in SEQ_STATIC. */
static void reset_arm_seq(struct run *r) { nx_kv_seq_rm(r->ctx, 0, -1, -1); }

/* ---- small helpers ---- */

struct tv {
    nx_token *v;
    int32_t n, cap;
};
static bool tv_add(struct tv *t, const nx_token *x, int32_t n) {
    if (t->n + n > t->cap) {
        int32_t cap = NX_MAX(t->n + n, t->cap * 2 + 64);
        nx_token *v = nx_realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        t->v = v;
        t->cap = cap;
    }
    memcpy(t->v + t->n, x, (size_t)n * sizeof *x);
    t->n += n;
    return true;
}
static bool tv_text(struct run *r, struct tv *t, const char *text, bool bos) {
    nx_token *x = NULL;
    int32_t n = 0;
    struct nx_err e = {{0}};
    if (nx_gen_tokenize(r->m, text, strlen(text), bos ? NX_GEN_TOK_FORCE_BOS : 0, &x, &n, &e)) {
        snprintf(r->err, sizeof r->err, "tokenize: %s", e.msg);
        return false;
    }
    bool ok = tv_add(t, x, n);
    nx_free(x);
    return ok;
}

static double median(double *v, int n) {
    if (n == 0) return NAN;
    float *f = nx_malloc((size_t)n * sizeof *f);
    if (!f) return NAN;
    for (int i = 0; i < n; i++) f[i] = (float)v[i];
    double m = rt_percentile(f, n, 50);
    nx_free(f);
    return m;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- the pool and the queries ---- */

static bool load_pool(struct run *r) {
    rt_registry_init(&r->reg);
    r->reg.dup = RT_DUP_KEEP_FIRST;
    DIR *d = opendir(r->p->mcp_dir);
    if (!d) {
        snprintf(r->err, sizeof r->err, "cannot open the MCP captures directory %s", r->p->mcp_dir);
        return false;
    }
    struct dirent *de;
    char *names[64];
    int nn = 0;
    while ((de = readdir(d)) && nn < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json") && strcmp(de->d_name, "SUMMARY.json"))
            names[nn++] = nx_strdup(de->d_name);
    }
    closedir(d);
    for (int i = 0; i < nn; i++) /* sorted for a deterministic registry */
        for (int j = i + 1; j < nn; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    bool ok = true;
    for (int i = 0; i < nn; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", r->p->mcp_dir, names[i]);
        if (ok && rt_registry_load_file(&r->reg, path, r->err, sizeof r->err) < 0) ok = false;
        nx_free(names[i]);
    }
    if (ok && rt_registry_load_file(&r->reg, r->p->bfcl, r->err, sizeof r->err) < 0) ok = false;
    if (ok) rt_registry_sort(&r->reg);
    return ok;
}

static bool load_queries(struct run *r) {
    FILE *f = fopen(r->p->bfcl, "r");
    if (!f) {
        snprintf(r->err, sizeof r->err, "cannot open %s", r->p->bfcl);
        return false;
    }
    int cap = 1024;
    r->q = nx_calloc((size_t)cap, sizeof *r->q);
    char *line = NULL;
    size_t ln = 0;
    bool *used = nx_calloc((size_t)r->reg.n, sizeof *used);
    while (getline(&line, &ln, f) > 0 && r->nq < cap) {
        bool oom = false;
        json_t *j = nx_json_loads(line, 0, NULL, &oom);
        const char *text = json_string_value(
            json_object_get(json_array_get(json_array_get(json_object_get(j, "question"), 0), 0), "content"));
        const char *fn = json_string_value(json_object_get(json_array_get(json_object_get(j, "function"), 0), "name"));
        int t = fn ? rt_registry_find(&r->reg, fn) : -1;
        if (text && t >= 0 && !used[t]) {
            used[t] = true;
            r->q[r->nq].text = nx_strdup(text);
            r->q[r->nq].target = t;
            r->nq++;
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    nx_free(used);
    uint64_t s = r->p->seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = r->nq - 1; i > 0; i--) { /* a seeded shuffle */
        int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
        struct query t = r->q[i];
        r->q[i] = r->q[j];
        r->q[j] = t;
    }
    if (r->nq < r->p->queries) {
        snprintf(r->err, sizeof r->err, "%s has %d usable questions, fewer than --queries %d", r->p->bfcl,
                 r->nq, r->p->queries);
        return false;
    }
    return true;
}

/* The registry subset of size n: the targets of queries 0..nq-1, then a seeded draw. */
static int *draw_subset(struct run *r, int n, int nq) {
    int *sub = nx_malloc((size_t)n * sizeof *sub);
    bool *in = nx_calloc((size_t)r->reg.n, sizeof *in);
    int k = 0;
    for (int i = 0; i < nq && k < n; i++)
        if (!in[r->q[i].target]) in[sub[k++] = r->q[i].target] = true;
    uint64_t s = r->p->seed * 31 + (uint64_t)n;
    while (k < n) {
        int t = (int)(rng_next(&s) % (uint64_t)r->reg.n);
        if (!in[t]) in[sub[k++] = t] = true;
    }
    k = 0; /* registry order: prompts do not depend on the draw order */
    for (int i = 0; i < r->reg.n; i++)
        if (in[i]) sub[k++] = i;
    nx_free(in);
    return sub;
}

/* ---- the arms ---- */

static bool block_tokens(struct run *r, int tool, struct tv *t) {
    char *b = ag_sidecar_block_text(&r->reg.tools[tool]);
    bool ok = b && tv_text(r, t, b, false);
    nx_free(b);
    return ok;
}

static bool compile_block(struct run *r, int tool) {
    if (r->blk[tool]) return true;
    struct tv t = {0};
    bool ok = block_tokens(r, tool, &t) &&
              !nx_kv_block_compile(r->ctx, NULL, 0, t.v, t.n, 0, &r->blk[tool]);
    if (!ok && !r->err[0]) snprintf(r->err, sizeof r->err, "compile: %s", nx_ctx_last_error(r->ctx));
    nx_free(t.v);
    return ok;
}

/* Decodes prompt onto sequence 0 and generates tool's arguments; TTFA from t0. */
static bool gen(struct run *r, int tool, const nx_token *prompt, int32_t n, double t0, double *ttfa,
                bool *valid) {
    struct ag_sidecar_result sr;
    memset(&sr, 0, sizeof sr);
    if (ag_sidecar_generate(r->sc, r->ctx, tool, prompt, n, t0, &sr, r->err, sizeof r->err)) return false;
    *ttfa = sr.t_first;
    *valid = sr.json_object && sr.schema_valid;
    nx_free(sr.arguments);
    nx_free(sr.raw);
    return true;
}

static bool fits(const struct run *r, int32_t prompt) { return prompt + r->p->arg_tokens <= r->p->ctx_limit; }

/* --static-once: prefills this size's static prompt (header + every schema) into sequence 0,
 * timed, and shares it into SEQ_STATIC; run false (the all arm will not run): nothing. */
static bool prefill_static(struct run *r, const struct tv *s_all, bool run) {
    if (!run) return true;
    reset_arm_seq(r);
    double t0 = nx_time_s();
    bool ok = !nx_decode(r->ctx, s_all->v, s_all->n, false);
    r->static_s = nx_time_s() - t0;
    ok = ok && !nx_kv_seq_cp(r->ctx, 0, SEQ_STATIC, -1, -1);
    if (!ok) snprintf(r->err, sizeof r->err, "static prompt: %s", nx_ctx_last_error(r->ctx));
    return ok;
}

/* One query on one registry: all four arms. */
static bool measure(struct run *r, rt_router *rt, const struct tv *s_all, int qi, struct meas *out,
                    bool *route_ok) {
    const struct toolpath_params *p = r->p;
    const struct query *q = &r->q[qi];
    const int reps = NX_MAX(1, NX_MIN(p->reps, TOOLPATH_MAX_REPS));
    struct rt_route ro;
    double tr0 = nx_time_s();
    if (rt_router_route(rt, q->text, NULL, &ro, r->err, sizeof r->err)) return false;
    double t_route = nx_time_s() - tr0;
    int chosen = ro.chosen;
    *route_ok = chosen == q->target;
    /* compile what the query needs first (compiling clears sequence 0) */
    for (int i = 0; i < ro.n; i++)
        if (!compile_block(r, ro.hit[i].id)) return false;
    if (ag_sidecar_compile(r->sc, r->ctx, chosen, r->err, sizeof r->err)) return false;

    struct tv head = {0}, user_t = {0}, user_c = {0}, blocks = {0}, main_t = {0};
    char buf[4096];
    bool ok = tv_text(r, &head, k_head, true);
    snprintf(buf, sizeof buf, "User: %s\nCall: {\"name\":\"%s\",\"arguments\":", q->text, r->reg.tools[q->target].name);
    ok = ok && tv_text(r, &user_t, buf, false);
    snprintf(buf, sizeof buf, "User: %s\nCall: {\"name\":\"%s\",\"arguments\":", q->text, r->reg.tools[chosen].name);
    ok = ok && tv_text(r, &user_c, buf, false);
    for (int i = 0; ok && i < ro.n; i++) ok = block_tokens(r, ro.hit[i].id, &blocks);
    /* nexus main prompt: H + signatures + user */
    ok = ok && tv_add(&main_t, head.v, head.n);
    for (int i = 0; ok && i < ro.n; i++) {
        char *sig = rt_signature(&r->reg.tools[ro.hit[i].id]);
        snprintf(buf, sizeof buf, "- %s\n", sig ? sig : "");
        nx_free(sig);
        ok = tv_text(r, &main_t, buf, false);
    }
    snprintf(buf, sizeof buf, "User: %s\n", q->text);
    ok = ok && tv_text(r, &main_t, buf, false);
    struct tv pr = {0};
    memset(out, 0, N_ARMS * sizeof *out);

    /* all */
    out[ARM_ALL].prompt = s_all->n + user_t.n;
    if (ok && out[ARM_ALL].prompt <= p->max_prompt && r->static_s >= 0) {
        /* --static-once: the header and schemas were prefilled once for this size (r->static_s)
         * and are held in sequence SEQ_STATIC; the cached TTFA is measured on a shared copy and
         * the cold one is that prefill's time plus it */
        double t[TOOLPATH_MAX_REPS];
        out[ARM_ALL].valid_cached = true;
        for (int rep = 0; ok && rep < reps; rep++) {
            bool valid = false;
            reset_arm_seq(r);
            ok = !nx_kv_seq_cp(r->ctx, SEQ_STATIC, 0, -1, -1);
            if (!ok) snprintf(r->err, sizeof r->err, "static prompt: %s", nx_ctx_last_error(r->ctx));
            ok = ok && gen(r, q->target, user_t.v, user_t.n, nx_time_s(), &t[rep], &valid);
            out[ARM_ALL].valid_cached &= valid;
        }
        out[ARM_ALL].cached = ok ? median(t, reps) : 0;
        out[ARM_ALL].cold = r->static_s + out[ARM_ALL].cached;
        out[ARM_ALL].valid_cold = out[ARM_ALL].valid_cached;
        out[ARM_ALL].run = ok;
    } else if (ok && out[ARM_ALL].prompt <= p->max_prompt) {
        ok = tv_add(&pr, s_all->v, s_all->n) && tv_add(&pr, user_t.v, user_t.n);
        reset_arm_seq(r);
        ok = ok && gen(r, q->target, pr.v, pr.n, nx_time_s(), &out[ARM_ALL].cold, &out[ARM_ALL].valid_cold);
        ok = ok && !nx_ctx_truncate(r->ctx, s_all->n);
        ok = ok && gen(r, q->target, user_t.v, user_t.n, nx_time_s(), &out[ARM_ALL].cached,
                       &out[ARM_ALL].valid_cached);
        out[ARM_ALL].run = ok;
    }
    /* topk */
    pr.n = 0;
    out[ARM_TOPK].prompt = head.n + blocks.n + user_c.n;
    if (ok && out[ARM_TOPK].prompt <= p->max_prompt) {
        ok = tv_add(&pr, head.v, head.n) && tv_add(&pr, blocks.v, blocks.n) && tv_add(&pr, user_c.v, user_c.n);
        reset_arm_seq(r);
        ok = ok && gen(r, chosen, pr.v, pr.n, nx_time_s(), &out[ARM_TOPK].cold, &out[ARM_TOPK].valid_cold);
        ok = ok && !nx_ctx_truncate(r->ctx, head.n);
        ok = ok && gen(r, chosen, pr.v + head.n, pr.n - head.n, nx_time_s(), &out[ARM_TOPK].cached,
                       &out[ARM_TOPK].valid_cached);
        out[ARM_TOPK].cold += t_route;
        out[ARM_TOPK].cached += t_route;
        out[ARM_TOPK].run = ok;
    }
    /* splice */
    out[ARM_SPLICE].prompt = out[ARM_TOPK].prompt;
    for (int pass = 0; ok && pass < 2 && out[ARM_SPLICE].prompt <= p->max_prompt; pass++) {
        double t0 = nx_time_s();
        if (pass == 0) {
            reset_arm_seq(r);
            ok = !nx_decode(r->ctx, head.v, head.n, false);
        } else {
            ok = !nx_ctx_truncate(r->ctx, head.n);
        }
        for (int i = 0; ok && i < ro.n; i++) {
            struct nx_splice_params sp = nx_splice_default_params();
            ok = !nx_ctx_splice(r->ctx, r->blk[ro.hit[i].id], &sp, NULL);
            if (!ok) snprintf(r->err, sizeof r->err, "splice: %s", nx_ctx_last_error(r->ctx));
        }
        double *ttfa = pass ? &out[ARM_SPLICE].cached : &out[ARM_SPLICE].cold;
        bool *valid = pass ? &out[ARM_SPLICE].valid_cached : &out[ARM_SPLICE].valid_cold;
        ok = ok && gen(r, chosen, user_c.v, user_c.n, t0, ttfa, valid);
        *ttfa += t_route;
        out[ARM_SPLICE].run = ok;
    }
    /* nexus: the main prompt (measured, not on the critical path), then the sidecar */
    out[ARM_NEXUS].prompt = main_t.n;
    double tn[2][TOOLPATH_MAX_REPS];
    out[ARM_NEXUS].valid_cold = out[ARM_NEXUS].valid_cached = true;
    for (int it = 0; ok && it < 2 * reps; it++) {
        int pass = it / reps, rep = it % reps; /* reps cold runs, then reps cached */
        double t0 = nx_time_s();
        if (pass == 0) {
            reset_arm_seq(r);
            ok = !nx_decode(r->ctx, main_t.v, main_t.n, false);
        } else {
            ok = !nx_ctx_truncate(r->ctx, head.n) &&
                 !nx_decode(r->ctx, main_t.v + head.n, main_t.n - head.n, false);
        }
        if (!ok) snprintf(r->err, sizeof r->err, "main prompt: %s", nx_ctx_last_error(r->ctx));
        *(pass ? &out[ARM_NEXUS].main_cached : &out[ARM_NEXUS].main_cold) = nx_time_s() - t0;
        struct ag_sidecar_result sr;
        snprintf(buf, sizeof buf, "User: %s", q->text);
        ok = ok && !ag_sidecar_args(r->sc, r->ctx, chosen, buf, &sr, r->err, sizeof r->err);
        if (!ok) break;
        tn[pass][rep] = t_route + sr.t_first;
        *(pass ? &out[ARM_NEXUS].valid_cached : &out[ARM_NEXUS].valid_cold) &= sr.json_object && sr.schema_valid;
        nx_free(sr.arguments);
        nx_free(sr.raw);
        out[ARM_NEXUS].run = true;
    }
    if (ok) {
        out[ARM_NEXUS].cold = median(tn[0], reps);
        out[ARM_NEXUS].cached = median(tn[1], reps);
    }
    for (int a = 0; a < N_ARMS; a++) out[a].fits = fits(r, out[a].prompt);
    nx_free(pr.v);
    nx_free(head.v);
    nx_free(user_t.v);
    nx_free(user_c.v);
    nx_free(blocks.v);
    nx_free(main_t.v);
    return ok;
}

/* ---- summaries ---- */

struct size_sum {
    int n;
    double prompt[N_ARMS], cold[N_ARMS], cached[N_ARMS];
    int valid[N_ARMS], runs[N_ARMS], fits[N_ARMS];
    double r_cold_gm, r_cold_min, r_cold_max, r_cached_gm, r_cached_min, r_cached_max, saving;
    int n_ratio, route_ok, nq;
};

static void summarize(const struct meas *ms, int nq, struct size_sum *s) {
    double v[3][1024];
    for (int a = 0; a < N_ARMS; a++) {
        int k = 0;
        s->valid[a] = s->runs[a] = s->fits[a] = 0;
        for (int i = 0; i < nq; i++) {
            const struct meas *m = &ms[i * N_ARMS + a];
            v[0][i] = m->prompt;
            s->fits[a] += m->fits;
            if (!m->run) continue;
            v[1][k] = m->cold * 1e3;
            v[2][k] = m->cached * 1e3;
            k++;
            s->runs[a]++;
            s->valid[a] += m->valid_cold && m->valid_cached;
        }
        s->prompt[a] = median(v[0], nq);
        s->cold[a] = median(v[1], k);
        s->cached[a] = median(v[2], k);
    }
    double lc = 0, lk = 0, sv = 0;
    s->r_cold_min = s->r_cached_min = INFINITY;
    s->r_cold_max = s->r_cached_max = 0;
    s->n_ratio = 0;
    for (int i = 0; i < nq; i++) {
        const struct meas *al = &ms[i * N_ARMS + ARM_ALL], *nx = &ms[i * N_ARMS + ARM_NEXUS];
        sv += 1.0 - (double)nx->prompt / al->prompt;
        if (!al->run || !nx->run) continue;
        double rc = al->cold / nx->cold, rk = al->cached / nx->cached;
        lc += log(rc);
        lk += log(rk);
        s->r_cold_min = fmin(s->r_cold_min, rc);
        s->r_cold_max = fmax(s->r_cold_max, rc);
        s->r_cached_min = fmin(s->r_cached_min, rk);
        s->r_cached_max = fmax(s->r_cached_max, rk);
        s->n_ratio++;
    }
    s->saving = nq ? sv / nq : NAN;
    s->r_cold_gm = s->n_ratio ? exp(lc / s->n_ratio) : NAN;
    s->r_cached_gm = s->n_ratio ? exp(lk / s->n_ratio) : NAN;
}

static void print_size(const struct run *r, const struct size_sum *s) {
    printf("\n### N = %d tools (%d queries, top-%d, context limit %d)\n\n", s->n, s->nq, r->p->k,
           r->p->ctx_limit);
    printf("| arm | prompt tokens | fits | TTFA cold ms | TTFA cached ms | valid args |\n");
    printf("|---|---:|---|---:|---:|---:|\n");
    for (int a = 0; a < N_ARMS; a++) {
        if (s->runs[a])
            printf("| %s | %.0f | %s | %.1f | %.1f | %d/%d |\n", k_arm[a], s->prompt[a],
                   s->fits[a] == s->nq ? "yes" : s->fits[a] ? "some" : "**no**", s->cold[a], s->cached[a],
                   s->valid[a], s->runs[a]);
        else
            printf("| %s | %.0f | %s | not run (prompt > %d) | | |\n", k_arm[a], s->prompt[a],
                   s->fits[a] == s->nq ? "yes" : s->fits[a] ? "some" : "**no**", r->p->max_prompt);
    }
    printf("\nrouting top-1 accuracy %d/%d; nexus main-context tokens %.1f%% fewer than all\n", s->route_ok,
           s->nq, 100 * s->saving);
    if (s->n_ratio)
        printf("all / nexus TTFA, paired over %d queries: cold %.2fx (min %.2f, max %.2f), cached %.2fx "
               "(min %.2f, max %.2f)\n", s->n_ratio, s->r_cold_gm, s->r_cold_min, s->r_cold_max,
               s->r_cached_gm, s->r_cached_min, s->r_cached_max);
}

static json_t *meas_json(const struct meas *m, const struct query *q, const rt_registry *reg) {
    json_t *o = json_pack("{s:s, s:s}", "query", q->text, "target", reg->tools[q->target].name);
    for (int a = 0; a < N_ARMS; a++) {
        json_t *x = json_pack("{s:i, s:b, s:b}", "prompt_tokens", m[a].prompt, "fits", m[a].fits, "run", m[a].run);
        if (m[a].run) {
            json_object_set_new(x, "ttfa_cold_ms", json_real(m[a].cold * 1e3));
            json_object_set_new(x, "ttfa_cached_ms", json_real(m[a].cached * 1e3));
            json_object_set_new(x, "valid", json_boolean(m[a].valid_cold && m[a].valid_cached));
        }
        if (a == ARM_NEXUS && m[a].run) {
            json_object_set_new(x, "main_prefill_cold_ms", json_real(m[a].main_cold * 1e3));
            json_object_set_new(x, "main_prefill_cached_ms", json_real(m[a].main_cached * 1e3));
        }
        json_object_set_new(o, k_arm[a], x);
    }
    return o;
}

static json_t *sum_json(const struct size_sum *s) {
    json_t *o = json_pack("{s:i, s:i, s:i, s:f}", "n", s->n, "queries", s->nq, "route_top1", s->route_ok,
                          "token_saving", s->saving);
    for (int a = 0; a < N_ARMS; a++) {
        json_t *x = json_pack("{s:f, s:i, s:i, s:i}", "prompt_tokens_median", s->prompt[a], "fits", s->fits[a],
                              "runs", s->runs[a], "valid", s->valid[a]);
        if (s->runs[a]) {
            json_object_set_new(x, "ttfa_cold_ms_median", json_real(s->cold[a]));
            json_object_set_new(x, "ttfa_cached_ms_median", json_real(s->cached[a]));
        }
        json_object_set_new(o, k_arm[a], x);
    }
    if (s->n_ratio)
        json_object_set_new(o, "all_over_nexus",
                            json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "pairs", s->n_ratio, "cold_geomean",
                                      s->r_cold_gm, "cold_min", s->r_cold_min, "cold_max", s->r_cold_max,
                                      "cached_geomean", s->r_cached_gm, "cached_min", s->r_cached_min,
                                      "cached_max", s->r_cached_max));
    return o;
}

static bool write_svg(const struct run *r, const struct size_sum *ss, int n) {
    double x[TOOLPATH_MAX_SIZES], y[3][N_ARMS][TOOLPATH_MAX_SIZES];
    struct svg_series se[3][N_ARMS];
    for (int i = 0; i < n; i++) x[i] = ss[i].n;
    for (int a = 0; a < N_ARMS; a++) {
        for (int i = 0; i < n; i++) {
            y[0][a][i] = ss[i].runs[a] ? ss[i].cold[a] : NAN;
            y[1][a][i] = ss[i].runs[a] ? ss[i].cached[a] : NAN;
            y[2][a][i] = ss[i].prompt[a];
        }
        for (int k = 0; k < 3; k++) se[k][a] = (struct svg_series){k_arm[a], x, y[k][a], NULL, n};
    }
    struct svg_panel pn[3] = {
        {"time to first argument, cold", "tools in the registry", "ms", true, true, se[0], N_ARMS},
        {"TTFA, static prompt cached", "tools in the registry", "ms", true, true, se[1], N_ARMS},
        {"prompt tokens (main context)", "tools in the registry", "tokens", true, true, se[2], N_ARMS},
    };
    char title[512], err[512];
    snprintf(title, sizeof title, "eval-toolpath: %s, top-%d", r->p->model_path ? r->p->model_path : "", r->p->k);
    if (svg_save(r->p->svg, title, pn, 3, err, sizeof err)) {
        fprintf(stderr, "eval-toolpath: %s\n", err);
        return false;
    }
    return true;
}

static bool write_json(const struct run *r, json_t *sizes) {
    const struct toolpath_params *p = r->p;
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:i}, s:O}", "eval", "toolpath",
                          "model", p->model_path ? p->model_path : "", "model_desc", nx_model_desc(r->m),
                          "kernels", nx_kernels_name(), "params", "queries", p->queries, "k", p->k,
                          "arg_tokens", p->arg_tokens, "ctx_limit", p->ctx_limit, "max_prompt",
                          p->max_prompt, "threads", p->threads, "seed", (json_int_t)p->seed, "reps", p->reps, "sizes", sizes);
    struct nx_outfile of;
    char err[512];
    bool ok = !nx_outfile_open(&of, p->json, err, sizeof err);
    if (ok) {
        char *s = nx_json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        if (s) fputs(s, of.f);
        nx_free(s);
        ok = s && !nx_outfile_commit(&of, err, sizeof err);
        if (!s) nx_outfile_abort(&of);
    }
    if (!ok) fprintf(stderr, "eval-toolpath: %s\n", err);
    json_decref(o);
    return ok;
}

int toolpath_run(const nx_model *m, const struct toolpath_params *p) {
    struct run r = {.m = m, .p = p};
    int rc = 1;
    struct meas *ms = NULL;
    struct size_sum ss[TOOLPATH_MAX_SIZES];
    json_t *sizes = json_array();
    if (!load_pool(&r) || !load_queries(&r)) goto out;
    for (int i = 0; i < p->n_sizes; i++)
        if (p->sizes[i] > r.reg.n || p->sizes[i] < 2) {
            snprintf(r.err, sizeof r.err, "size %d: the pool has %d tools (sizes must be in [2, %d])",
                     p->sizes[i], r.reg.n, r.reg.n);
            goto out;
        }
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = p->max_prompt + p->arg_tokens + 64;
    cp.n_seq_max = 3; /* 0: the arms, 1: the sidecar's park, SEQ_STATIC */
    cp.kv_pool_tokens = cp.n_ctx + 4096; /* the sidecar's sequence is short; parking shares blocks */
    cp.n_threads = cp.n_threads_batch = p->threads;
    cp.n_batch = 512;
    char e2[512];
    if (nx_ctx_init(m, &cp, &r.ctx, e2, sizeof e2)) {
        snprintf(r.err, sizeof r.err, "context: %s", e2);
        goto out;
    }
    struct ag_sidecar_params sp = {.window_tokens = 256, .max_tokens = p->arg_tokens};
    if (ag_sidecar_new(m, &r.reg, &sp, &r.sc, r.err, sizeof r.err)) goto out;
    r.blk = nx_calloc((size_t)r.reg.n, sizeof *r.blk);
    ms = nx_calloc((size_t)p->queries * N_ARMS, sizeof *ms);
    printf("## eval-toolpath: %s\n", p->model_path ? p->model_path : nx_model_desc(m));
    if (p->static_once)
        printf("\n(--static-once: the all arm's header and schemas are prefilled once per size; its cold "
               "TTFA is that prefill's time plus the query's cached TTFA)\n");
    fflush(stdout);
    fprintf(stderr, "eval-toolpath: pool of %d tools (MCP captures + %s), %d queries per size\n", r.reg.n,
            p->bfcl, p->queries);
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "queries", p->n_sizes * p->queries);
    for (int si = 0; si < p->n_sizes; si++) {
        int n = p->sizes[si], nq = NX_MIN(p->queries, n);
        int *sub = draw_subset(&r, n, nq);
        struct rt_router_params rp = rt_router_default_params();
        rp.k = p->k;
        rt_router *rt = rt_router_new(&r.reg, sub, n, &rp, NULL, r.err, sizeof r.err);
        struct tv s_all = {0};
        bool ok = rt && tv_text(&r, &s_all, k_head, true);
        for (int i = 0; ok && i < n; i++) ok = block_tokens(&r, sub[i], &s_all);
        memset(&ss[si], 0, sizeof ss[si]);
        ss[si].n = n;
        ss[si].nq = nq;
        r.static_s = -1;
        if (ok && p->static_once) ok = prefill_static(&r, &s_all, s_all.n < p->max_prompt);
        json_t *qs = json_array();
        for (int qi = 0; ok && qi < nq; qi++) {
            bool rok = false;
            ok = measure(&r, rt, &s_all, qi, &ms[qi * N_ARMS], &rok);
            ss[si].route_ok += rok;
            if (ok) json_array_append_new(qs, meas_json(&ms[qi * N_ARMS], &r.q[qi], &r.reg));
            char label[64];
            snprintf(label, sizeof label, "N=%d query %d", n, qi + 1);
            nx_progress_update(&pg, si * p->queries + qi + 1, label);
        }
        nx_free(s_all.v);
        rt_router_free(rt);
        nx_free(sub);
        if (!ok) {
            json_decref(qs);
            goto out;
        }
        nx_kv_seq_rm(r.ctx, SEQ_STATIC, -1, -1);
        summarize(ms, nq, &ss[si]);
        json_t *sj = sum_json(&ss[si]);
        json_object_set_new(sj, "static_prefill_ms", r.static_s >= 0 ? json_real(r.static_s * 1e3) : json_null());
        json_object_set_new(sj, "per_query", qs);
        json_array_append_new(sizes, sj);
        /* each size's table, JSON and plot as soon as it is done, so a long run that is
         * stopped keeps what it measured */
        print_size(&r, &ss[si]);
        fflush(stdout);
        if (p->json && !write_json(&r, sizes)) goto out;
        if (p->svg && !write_svg(&r, ss, si + 1)) goto out;
    }
    nx_progress_finish(&pg);
    rc = 0;
out:
    if (rc && r.err[0]) fprintf(stderr, "eval-toolpath: %s\n", r.err);
    json_decref(sizes);
    nx_free(ms);
    for (int i = 0; r.blk && i < r.reg.n; i++) nx_kv_block_free(r.blk[i]);
    nx_free(r.blk);
    ag_sidecar_free(r.sc);
    nx_ctx_free(r.ctx);
    for (int i = 0; i < r.nq; i++) nx_free(r.q[i].text);
    nx_free(r.q);
    rt_registry_free(&r.reg);
    return rc;
}
