/*
 * splice_run.c - the `nexus splice-eval` runners (splice_run.h): how close splicing a compiled
 * block stays to prefilling it, and how much sooner the first token comes, at each depth; and
 * the sequence cache on an agent-like request mix.
 *
 * Streams: the model samples `--streams` token streams from BOS (temperature 1, seeded). For a
 * depth d a stream gives the history S[0, d), the block S[d, d + block) and the query
 * S[d + block, d + block + query). The block is compiled alone at m0 = 0 (as a reusable
 * block would be: it never saw the history), then, after the history is in the cache:
 *   full    the block and the query are prefilled (the reference);
 *   splice  the block is spliced at n_past = d (delta = d) and the query prefilled;
 *   repair  as splice, with depth-adaptive repair (the block's last R% re-decoded).
 * For every query position: KL(full || variant) of the next-token distributions and top-1
 * agreement, averaged over positions and streams. Time to first token (TTFT): from the
 * history being cached to the query's logits (block + query prefill, or splice (+ repair) +
 * query prefill); the minimum over --reps repeats per stream, averaged over streams. Depths
 * with d + block + query beyond the model's trained context are skipped.
 */
#include "eval/splice_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "gen/generate.h"
#include "eval/metrics.h"
#include "eval/outfile.h"
#include "eval/svg.h"
#include "nexus.h"

struct se_row {
    int32_t depth;
    double r_pct;
    double kl[2], top1[2];        /* [0] splice, [1] repair */
    double t_full, t_sp[2];
    int32_t n_repaired;
    int n_streams;
};

static nx_status se_fail(nx_status st, const char *msg) {
    fprintf(stderr, "nexus splice-eval: %s\n", msg);
    return st;
}

/* Sample n tokens from BOS at temperature 1. */
static nx_status sample_stream(nx_ctx *c, const nx_model *m, nx_token *out, int32_t n,
                               uint64_t seed) {
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = 1.0f;
    sp.seed = seed;
    nx_sampler *s = NULL;
    nx_status st = nx_sampler_init(&sp, nx_model_n_vocab(m), &s);
    if (st != NX_STATUS_OK) return st;
    nx_ctx_reset(c);
    out[0] = nx_token_bos(m) >= 0 ? nx_token_bos(m) : 1;
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = n - 1;
    gp.ignore_eog = true;
    gp.sampler = s;
    gp.tokens = out + 1;
    gp.tokens_cap = n - 1;
    struct nx_gen_result gr;
    struct nx_err err;
    st = n > 1 ? nx_generate(m, c, out, 1, &gp, &gr, &err) : NX_STATUS_OK;
    nx_sampler_free(s);
    if (st == NX_STATUS_OK && n > 1 && gr.n_generated != n - 1) st = NX_STATUS_KV_FULL;
    return st;
}

static nx_status write_json(const char *path, const char *model, const struct se_row *rows, int n,
                            long block, long query, long streams, long reps, long threads,
                            const struct nx_splice_params *sp, bool f32, uint64_t seed) {
    struct nx_outfile o;
    char err[1200];
    nx_status st = nx_outfile_open(&o, path, err, sizeof err);
    if (st != NX_STATUS_OK) return se_fail(st, err);
    fprintf(o.f,
            "{\"model\":\"%s\",\"block\":%ld,\"query\":%ld,\"streams\":%ld,\"reps\":%ld,"
            "\"threads\":%ld,\"kv_type\":\"%s\",\"seed\":%llu,\"repair_p\":%d,"
            "\"repair_base\":%g,\"repair_k\":%g,\"note\":\"TTFT on a shared 2-core VM: "
            "preliminary\",\n \"rows\":[\n",
            model, block, query, streams, reps, threads, f32 ? "f32" : "f16",
            (unsigned long long)seed, sp->repair_p, (double)sp->repair_base,
            (double)sp->repair_k);
    for (int i = 0; i < n; i++) {
        const struct se_row *r = &rows[i];
        fprintf(o.f,
                "  {\"depth\":%d,\"repair_pct\":%.4g,\"repaired_tokens\":%d,"
                "\"top1_splice\":%.6g,\"kl_splice\":%.6g,\"top1_repair\":%.6g,"
                "\"kl_repair\":%.6g,\"ttft_full_s\":%.6g,\"ttft_splice_s\":%.6g,"
                "\"ttft_repair_s\":%.6g,\"speedup_splice\":%.4g,\"speedup_repair\":%.4g}%s\n",
                r->depth, r->r_pct, r->n_repaired, r->top1[0], r->kl[0], r->top1[1], r->kl[1],
                r->t_full, r->t_sp[0], r->t_sp[1], r->t_full / r->t_sp[0],
                r->t_full / r->t_sp[1], i + 1 < n ? "," : "");
    }
    fprintf(o.f, "]}\n");
    if ((st = nx_outfile_commit(&o, err, sizeof err)) != NX_STATUS_OK) return se_fail(st, err);
    fprintf(stderr, "splice-eval: wrote %s\n", path);
    return 0;
}

static nx_status write_svg(const char *path, const char *model, const struct se_row *rows, int n) {
    double x[16], kl0[16], kl1[16], t1a[16], t1b[16], s0[16], s1[16];
    for (int i = 0; i < n; i++) {
        x[i] = rows[i].depth;
        kl0[i] = rows[i].kl[0];
        kl1[i] = rows[i].kl[1];
        t1a[i] = rows[i].top1[0];
        t1b[i] = rows[i].top1[1];
        s0[i] = rows[i].t_full / rows[i].t_sp[0];
        s1[i] = rows[i].t_full / rows[i].t_sp[1];
    }
    struct svg_series kl[2] = {{"splice", x, kl0, NULL, n}, {"splice + repair", x, kl1, NULL, n}};
    struct svg_series t1[2] = {{"splice", x, t1a, NULL, n}, {"splice + repair", x, t1b, NULL, n}};
    struct svg_series sp[2] = {{"splice", x, s0, NULL, n}, {"splice + repair", x, s1, NULL, n}};
    struct svg_panel panels[3] = {
        {"KL(full prefill || splice)", "depth (tokens before the block)", "nats", false, true,
         kl, 2},
        {"top-1 agreement", "depth", "fraction", false, false, t1, 2},
        {"TTFT speed-up vs prefill (preliminary)", "depth", "x", false, true, sp, 2}};
    char title[300], err[1200];
    snprintf(title, sizeof title, "KV splicing: %s", model);
    nx_status st = svg_save(path, title, panels, 3, err, sizeof err);
    if (st != NX_STATUS_OK) return se_fail(st, err);
    fprintf(stderr, "splice-eval: wrote %s\n", path);
    return 0;
}

/*
 * --seqcache: the sequence cache on an agent-like request mix. `requests` requests, each one of
 * 4 fixed "system prompts" (sys_len random tokens) followed by a fresh random tail (tail
 * tokens); each goes through nx_seqcache_prefill and is then stored. Every request is also
 * prefilled cold (reset + nx_decode) for the time-to-first-token comparison.
 */
nx_status splice_eval_seqcache(const nx_model *m, long requests, long sys_len, long tail,
                               long threads, uint64_t seed, const char *json) {
    const int32_t nv = nx_model_n_vocab(m);
    const int32_t n_ctx = (int32_t)(sys_len + tail);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.kv_extra_tokens = 8 * n_ctx;
    cp.n_threads = cp.n_threads_batch = (int32_t)threads;
    nx_ctx *c = NULL;
    nx_seqcache *sc = NULL;
    char err[512];
    nx_status rc = nx_ctx_init(m, &cp, &c, err, sizeof err);
    if (rc != NX_STATUS_OK) return se_fail(rc, err);
    if ((rc = nx_seqcache_init(c, 32, &sc)) != NX_STATUS_OK) {
        rc = se_fail(rc, nx_ctx_last_error(c));
        nx_ctx_free(c);
        return rc;
    }
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
#define NEXT() (r ^= r << 13, r ^= r >> 7, r ^= r << 17, r)
    nx_token *sys = nx_malloc(sizeof(nx_token) * 4 * (size_t)sys_len);
    nx_token *req = nx_malloc(sizeof(nx_token) * (size_t)n_ctx);
    if (!sys || !req) {
        nx_free(sys);
        nx_free(req);
        nx_seqcache_free(sc);
        nx_ctx_free(c);
        return se_fail(NX_STATUS_NOMEM, "out of memory");
    }
    for (long i = 0; i < 4 * sys_len; i++) sys[i] = 1 + (nx_token)(NEXT() % (uint64_t)(nv - 1));
    double t_hit = 0, t_cold = 0;
    long n_hit = 0;
    for (long q = 0; q < requests; q++) {
        int k = (int)(NEXT() % 4);
        memcpy(req, sys + k * sys_len, sizeof(nx_token) * (size_t)sys_len);
        for (long i = 0; i < tail; i++) req[sys_len + i] = 1 + (nx_token)(NEXT() % (uint64_t)(nv - 1));
        nx_ctx_reset(c);
        double t0 = nx_time_s();
        if ((rc = nx_decode(c, req, n_ctx, false)) != NX_STATUS_OK) goto out;
        t_cold += nx_time_s() - t0;
        int32_t reused = 0;
        t0 = nx_time_s();
        if ((rc = nx_seqcache_prefill(sc, req, n_ctx, false, &reused)) != NX_STATUS_OK) goto out;
        double dt = nx_time_s() - t0;
        if (reused > 0) {
            t_hit += dt;
            n_hit++;
        }
        if ((rc = nx_seqcache_store(sc, req, n_ctx)) != NX_STATUS_OK) goto out;
    }
    struct nx_seqcache_stats st;
    nx_seqcache_stats(sc, &st);
    double hit_rate = (double)st.hits / (double)st.lookups;
    double reuse = (double)st.tokens_reused / (double)(st.tokens_reused + st.tokens_prefilled);
    double lk_us = 1e6 * st.lookup_seconds / (double)st.lookups;
    double ttft_hit = n_hit ? t_hit / (double)n_hit : 0, ttft_cold = t_cold / (double)requests;
    printf("| requests | hit rate | tokens reused | lookup mean us | lookup max us | TTFT cold ms "
           "| TTFT hit ms (x) |\n|---|---|---|---|---|---|---|\n"
           "| %ld (4 prompts x %ld + %ld random) | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f "
           "(%.1fx) |\n",
           requests, sys_len, tail, hit_rate, reuse, lk_us, 1e6 * st.lookup_max_seconds,
           1e3 * ttft_cold, 1e3 * ttft_hit, ttft_hit > 0 ? ttft_cold / ttft_hit : 0.0);
    if (json) {
        struct nx_outfile o;
        char e2[1200];
        if ((rc = nx_outfile_open(&o, json, e2, sizeof e2)) != NX_STATUS_OK) {
            se_fail(rc, e2);
            goto done;
        }
        fprintf(o.f,
                "{\"model\":\"%s\",\"requests\":%ld,\"sys_len\":%ld,\"tail\":%ld,\"slots\":32,"
                "\"threads\":%ld,\"hit_rate\":%.6g,\"reuse_fraction\":%.6g,"
                "\"lookup_mean_us\":%.6g,\"lookup_max_us\":%.6g,\"ttft_cold_s\":%.6g,"
                "\"ttft_hit_s\":%.6g,\"slots_dropped\":%lld,\"note\":\"shared 2-core VM: "
                "preliminary\"}\n",
                nx_model_desc(m), requests, sys_len, tail, threads, hit_rate, reuse, lk_us,
                1e6 * st.lookup_max_seconds, ttft_cold, ttft_hit, (long long)st.slots_dropped);
        if ((rc = nx_outfile_commit(&o, e2, sizeof e2)) != NX_STATUS_OK)
            se_fail(rc, e2);
        else fprintf(stderr, "splice-eval: wrote %s\n", json);
    }
    goto done;
out:
    fprintf(stderr, "splice-eval: %s\n", nx_ctx_last_error(c));
done:
#undef NEXT
    nx_free(sys);
    nx_free(req);
    nx_seqcache_free(sc);
    nx_ctx_free(c);
    return rc;
}

nx_status splice_eval_run(const nx_model *m, const struct splice_eval_params *ep) {
    const long block = ep->block, query = ep->query, streams = ep->streams, reps = ep->reps,
               threads = ep->threads;
    const uint64_t seed = ep->seed;
    const bool f32 = ep->f32;
    const struct nx_splice_params sp = ep->splice;
    const char *json = ep->json, *svg = ep->svg, *model_path = ep->model_path;
    int32_t depths[SPLICE_EVAL_MAX_DEPTHS];
    int nd = ep->n_depths;
    char err[512];
    for (int i = 0; i < nd; i++) depths[i] = ep->depths[i];
    const int32_t nv = nx_model_n_vocab(m), ctx_train = nx_model_n_ctx_train(m);
    int32_t dmax = -1;
    int nd_ok = 0;
    for (int i = 0; i < nd; i++)
        if ((int64_t)depths[i] + block + query <= ctx_train) {
            depths[nd_ok++] = depths[i];
            dmax = NX_MAX(dmax, depths[i]);
        } else {
            fprintf(stderr, "splice-eval: depth %d skipped (%d + %ld + %ld > trained context %d)\n",
                    depths[i], depths[i], block, query, ctx_train);
        }
    if (nd_ok == 0) return se_fail(NX_STATUS_INVALID_ARG, "no depth fits the model's context");
    const int32_t len = dmax + (int32_t)(block + query);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = len;
    cp.kv_type = f32 ? NX_TYPE_F32 : NX_TYPE_F16;
    cp.n_threads = cp.n_threads_batch = (int32_t)threads;
    nx_ctx *c = NULL;
    nx_status rc = nx_ctx_init(m, &cp, &c, err, sizeof err);
    if (rc != NX_STATUS_OK) return se_fail(rc, err);
    fprintf(stderr, "splice-eval: %s, trained context %d, block %ld, query %ld, %ld streams\n",
            nx_model_desc(m), ctx_train, block, query, streams);
    nx_token *S = nx_malloc(sizeof(nx_token) * (size_t)len);
    float *ref = nx_malloc(sizeof(float) * (size_t)nv * (size_t)query);
    struct se_row rows[16];
    memset(rows, 0, sizeof rows);
    if (!S || !ref) {
        rc = se_fail(NX_STATUS_NOMEM, "out of memory");
        goto out;
    }
    for (long s = 0; s < streams; s++) {
        rc = sample_stream(c, m, S, len, (uint64_t)seed * 1000003u + (uint64_t)s);
        if (rc != NX_STATUS_OK) {
            fprintf(stderr, "splice-eval: sampling failed: %s\n", nx_ctx_last_error(c));
            goto out;
        }
        for (int di = 0; di < nd_ok; di++) {
            const int32_t d = depths[di];
            struct se_row *r = &rows[di];
            const nx_token *hist = S, *blk = S + d, *qry = S + d + block;
            nx_kv_block *b = NULL;
            rc = nx_kv_block_compile(c, NULL, 0, blk, (int32_t)block, 0, &b);
            if (rc != NX_STATUS_OK) {
                fprintf(stderr, "splice-eval: compile failed: %s\n", nx_ctx_last_error(c));
                goto out;
            }
            nx_ctx_reset(c);
            if (d > 0 && (rc = nx_decode(c, hist, d, false)) != NX_STATUS_OK) goto decode_fail;
            double best_full = INFINITY, best[2] = {INFINITY, INFINITY};
            double kl[2] = {0, 0}, top1[2] = {0, 0};
            for (long rep = 0; rep < reps; rep++) {
                nx_ctx_truncate(c, d);
                double t0 = nx_time_s();
                if ((rc = nx_decode(c, blk, (int32_t)block, false)) != NX_STATUS_OK ||
                    (rc = nx_decode(c, qry, (int32_t)query, true)) != NX_STATUS_OK)
                    goto decode_fail;
                best_full = fmin(best_full, nx_time_s() - t0);
                if (rep == 0)
                    for (long q = 0; q < query; q++)
                        memcpy(ref + q * nv, nx_get_logits(c, (int32_t)q), sizeof(float) * nv);
                for (int v = 0; v < 2; v++) {
                    struct nx_splice_params p = sp;
                    p.pos = d;
                    p.repair = v == 1;
                    int32_t nrep = 0;
                    nx_ctx_truncate(c, d);
                    t0 = nx_time_s();
                    if ((rc = nx_ctx_splice(c, b, &p, &nrep)) != NX_STATUS_OK ||
                        (rc = nx_decode(c, qry, (int32_t)query, true)) != NX_STATUS_OK)
                        goto decode_fail;
                    best[v] = fmin(best[v], nx_time_s() - t0);
                    if (rep > 0) continue;
                    if (v == 1) r->n_repaired = nrep;
                    for (long q = 0; q < query; q++) {
                        const float *l = nx_get_logits(c, (int32_t)q);
                        kl[v] += metric_kl(ref + q * nv, l, nv);
                        top1[v] += metric_top1_agree(ref + q * nv, l, nv);
                    }
                }
            }
            nx_kv_block_free(b);
            r->depth = d;
            r->r_pct = nx_splice_repair_pct(&sp, d);
            for (int v = 0; v < 2; v++) {
                r->kl[v] += kl[v] / (double)query;
                r->top1[v] += top1[v] / (double)query;
                r->t_sp[v] += best[v];
            }
            r->t_full += best_full;
            r->n_streams++;
            continue;
        decode_fail:
            nx_kv_block_free(b);
            fprintf(stderr, "splice-eval: decode failed: %s\n", nx_ctx_last_error(c));
            goto out;
        }
        fprintf(stderr, "splice-eval: stream %ld/%ld done\n", s + 1, streams);
    }
    for (int i = 0; i < nd_ok; i++) {
        struct se_row *r = &rows[i];
        double k = r->n_streams;
        for (int v = 0; v < 2; v++) {
            r->kl[v] /= k;
            r->top1[v] /= k;
            r->t_sp[v] /= k;
        }
        r->t_full /= k;
    }
    printf("| depth | R %% (tokens) | top-1 splice | KL splice | top-1 repair | KL repair | "
           "TTFT prefill ms | TTFT splice ms (x) | TTFT splice+repair ms (x) |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nd_ok; i++) {
        const struct se_row *r = &rows[i];
        printf("| %d | %.1f (%d) | %.3f | %.4f | %.3f | %.4f | %.2f | %.2f (%.1fx) | %.2f (%.1fx) "
               "|\n",
               r->depth, r->r_pct, r->n_repaired, r->top1[0], r->kl[0], r->top1[1], r->kl[1],
               1e3 * r->t_full, 1e3 * r->t_sp[0], r->t_full / r->t_sp[0], 1e3 * r->t_sp[1],
               r->t_full / r->t_sp[1]);
    }
    rc = NX_STATUS_OK;
    if (json)
        rc = write_json(json, model_path, rows, nd_ok, block, query, streams, reps, threads, &sp,
                        f32, (uint64_t)seed);
    if (svg && rc == NX_STATUS_OK) rc = write_svg(svg, nx_model_desc(m), rows, nd_ok);
out:
    nx_free(S);
    nx_free(ref);
    nx_ctx_free(c);
    return rc;
}
