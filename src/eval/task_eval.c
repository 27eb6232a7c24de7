/*
 * task_eval.c - the runner of `nexus task-eval` (eval/task_eval.h): token-id task accuracy per
 * eviction policy and density.
 *
 * DESIGN
 * - Input: JSON lines {"task": NAME, "tokens": [ids], "prompt_len": P, "answers": [[pos...]...]}.
 *   Two regimes. Prefill: the prompt tokens[0, P) are decoded in one call, so the cache is
 *   compressed once, at its end. Stream: the prompt is decoded one token at a time under
 *   NX_KV_REGIME_STREAM, so a layer evicts whenever it holds a block more than its budget (an
 *   unbounded stream's protocol: what is kept is decided as the haystack arrives, each fact
 *   surviving every later eviction, never with the whole prompt in view). Either way the budget
 *   is fixed at floor(density x P) tokens per KV head per layer (the paper's protocol: it does
 *   not grow while the queries are decoded). The rest is decoded one token at a time (teacher
 *   forcing); a query (one entry of answers) is correct iff the argmax before each of its
 *   answer positions is the token there, which equals exact-match greedy generation of the
 *   answer. The oracle (it decodes the future once) exists in the prefill regime only.
 * - Every configuration sees the same instances, so each accuracy is reported with its paired
 *   difference from a named reference (--reference, default the dense cache "full"; a policy
 *   reference is taken at the same density) and that difference's standard error over queries.
 *   With --seeds N every configuration whose selection depends on the seed (random, nexus's
 *   reservoir) runs N eviction seeds (seed .. seed + N - 1); a query's score is its mean over
 *   the seeds, so the SE stays paired over queries.
 * - A policy spec is NAME or NAME/OPT/OPT... (eval_policy_spec in src/eval/eval.h): for
 *   nexus, topk, fresh, perhead, matchkv, meanvec; for the oracle, values; or any option as
 *   name=value.
 * - KV held: the KV bytes (all layers and heads, whole blocks) right after the prompt as a
 *   share of the dense cache's on the same instance, and layer 0 / head 0's tokens as a share
 *   of P.
 * - One fresh single-threaded context per (configuration, seed, instance); -t N runs N
 *   instances at once in worker processes (eval_parmap: threads of one process would serialise
 *   on the engine's shared pool), so more threads never make it slower, and the results are
 *   the same at any thread count (each instance's numbers do not depend on the others).
 *   Progress with an ETA goes to stderr.
 */
#include "eval/task_eval.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "eval/eval.h"
#include "eval/outfile.h"
#include "eval/parmap.h"
#include "eval/progress.h"
#include "eval/svg.h"
#include "nexus.h"

struct task_inst {
    char task[32];
    nx_token *tok;
    int n, prompt_len;
    int n_q;
    int *q_off;   /* n_q + 1 offsets into q_pos */
    int *q_pos;
};

struct task_set {
    struct task_inst *v;
    int n;
    int n_queries;
};

static void set_free(struct task_set *s) {
    for (int i = 0; i < s->n; i++) {
        nx_free(s->v[i].tok);
        nx_free(s->v[i].q_off);
        nx_free(s->v[i].q_pos);
    }
    nx_free(s->v);
}

/* Parse one JSON line into *t; 0 on success, else prints the reason: 1 (malformed), -1 (out of
   memory). */
static int parse_inst(const char *line, size_t len, int lineno, int n_vocab,
                      struct task_inst *t) {
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    json_t *toks = o ? json_object_get(o, "tokens") : NULL;
    json_t *ans = o ? json_object_get(o, "answers") : NULL;
    json_t *pl = o ? json_object_get(o, "prompt_len") : NULL;
    json_t *tn = o ? json_object_get(o, "task") : NULL;
    int rc = 1;
    if (!json_is_array(toks) || !json_is_array(ans) || !json_is_integer(pl) || !json_is_string(tn)) {
        fprintf(stderr, "task-eval: line %d: expected task, tokens, prompt_len, answers\n", lineno);
        goto done;
    }
    snprintf(t->task, sizeof t->task, "%s", json_string_value(tn));
    t->n = (int)json_array_size(toks);
    t->prompt_len = (int)json_integer_value(pl);
    if (t->n < 2 || t->prompt_len < 1 || t->prompt_len >= t->n) {
        fprintf(stderr, "task-eval: line %d: bad prompt_len or length\n", lineno);
        goto done;
    }
    t->tok = nx_malloc(sizeof *t->tok * (size_t)t->n);
    t->n_q = (int)json_array_size(ans);
    t->q_off = nx_malloc(sizeof *t->q_off * (size_t)(t->n_q + 1));
    if (!t->tok || !t->q_off) goto oom;
    for (int i = 0; i < t->n; i++) {
        json_t *x = json_array_get(toks, (size_t)i);
        json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (v < 0 || v >= n_vocab) {
            fprintf(stderr, "task-eval: line %d: token %d is not an id < %d\n", lineno, i, n_vocab);
            goto done;
        }
        t->tok[i] = (nx_token)v;
    }
    int total = 0;
    for (int q = 0; q < t->n_q; q++) {
        json_t *a = json_array_get(ans, (size_t)q);
        if (!json_is_array(a) || json_array_size(a) == 0) {
            fprintf(stderr, "task-eval: line %d: answer %d is not a non-empty array\n", lineno, q);
            goto done;
        }
        total += (int)json_array_size(a);
    }
    t->q_pos = nx_malloc(sizeof *t->q_pos * (size_t)(total > 0 ? total : 1));
    if (!t->q_pos) goto oom;
    int k = 0;
    for (int q = 0; q < t->n_q; q++) {
        json_t *a = json_array_get(ans, (size_t)q);
        t->q_off[q] = k;
        for (size_t j = 0; j < json_array_size(a); j++) {
            json_t *x = json_array_get(a, j);
            json_int_t p = json_is_integer(x) ? json_integer_value(x) : -1;
            /* the token at p is predicted from position p - 1, which must follow the prompt */
            if (p <= t->prompt_len || p >= t->n) {
                fprintf(stderr, "task-eval: line %d: answer position %lld outside (prompt_len, n)\n",
                        lineno, (long long)p);
                goto done;
            }
            t->q_pos[k++] = (int)p;
        }
    }
    t->q_off[t->n_q] = k;
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "task-eval: out of memory\n");
    rc = -1;
done:
    json_decref(o);
    if (rc) {
        nx_free(t->tok);
        nx_free(t->q_off);
        nx_free(t->q_pos);
        memset(t, 0, sizeof *t);
    }
    return rc;
}

/* The instances of path into *s; NX_STATUS_OK, or IO / FORMAT / NOMEM with a message on stderr. */
static nx_status load_set(const char *path, int n_vocab, struct task_set *s) {
    char ebuf[256];
    size_t len;
    char *buf = nx_read_file(path, NX_READ_FILE_MAX, &len, ebuf, sizeof ebuf);
    memset(s, 0, sizeof *s);
    if (!buf) {
        fprintf(stderr, "task-eval: %s\n", ebuf);
        return NX_STATUS_IO;
    }
    int cap = 0, lineno = 0, rc = 0;
    for (char *p = buf; p < buf + len && !rc;) {
        char *e = memchr(p, '\n', (size_t)(buf + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(buf + len - p);
        lineno++;
        if (l > 0) {
            if (s->n == cap) {
                int nc = cap ? 2 * cap : 64;
                struct task_inst *nv = nx_realloc(s->v, sizeof *nv * (size_t)nc);
                if (!nv) {
                    fprintf(stderr, "task-eval: out of memory\n");
                    rc = -1;
                    break;
                }
                s->v = nv;
                cap = nc;
            }
            rc = parse_inst(p, l, lineno, n_vocab, &s->v[s->n]);
            if (!rc) s->n_queries += s->v[s->n++].n_q;
        }
        p += l + 1;
    }
    nx_free(buf);
    if (!rc && s->n == 0) {
        fprintf(stderr, "task-eval: %s holds no instances\n", path);
        rc = 1;
    }
    if (rc) set_free(s);
    return rc < 0 ? NX_STATUS_NOMEM : rc ? NX_STATUS_FORMAT : NX_STATUS_OK;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Run one instance; ok[q] = 1 when query q is answered; *held = tokens cached after prompt
   (layer 0, KV head 0), *bytes = KV bytes held then. */
static int run_inst(const nx_model *m, const struct nx_ctx_params *cp, const struct task_inst *t,
                    unsigned char *ok, int64_t *held, double *bytes) {
    const bool stream = cp->kv.regime == NX_KV_REGIME_STREAM;
    nx_ctx *c;
    char err[256];
    if (nx_ctx_init(m, cp, &c, err, sizeof err)) {
        fprintf(stderr, "task-eval: cannot create context: %s\n", err);
        return 1;
    }
    int nv = nx_model_n_vocab(m);
    int *pred = nx_malloc(sizeof *pred * (size_t)t->n); /* pred[p] = argmax after token p - 1 */
    int rc = pred ? 0 : 1;
    /* the oracle sees the future: the whole sequence is one prompt whose window is the queries
       after the prompt; those positions are then removed and decoded again */
    bool oracle = cp->kv.policy && !strcmp(cp->kv.policy, "oracle");
    int first = oracle ? t->n - 1 : t->prompt_len;
    for (int p = 0; !rc && p < first; p += stream ? 1 : first)
        if (nx_decode(c, t->tok + p, stream ? 1 : first, false)) rc = 1;
    if (!rc && oracle && nx_seq_rm(c, t->prompt_len, -1)) rc = 1;
    if (!rc) {
        struct nx_kv_stats ks;
        nx_ctx_kv_stats(c, &ks);
        *held = ks.tokens_cached;
        *bytes = (double)ks.bytes_current;
        pred[t->prompt_len] = oracle ? -1 : argmax(nx_get_logits(c, -1), nv);
    }
    for (int p = t->prompt_len; !rc && p + 1 < t->n; p++) {
        if (nx_decode(c, t->tok + p, 1, false)) {
            rc = 1;
            break;
        }
        pred[p + 1] = argmax(nx_get_logits(c, -1), nv);
    }
    if (rc && pred) fprintf(stderr, "task-eval: decode failed: %s\n", nx_ctx_last_error(c));
    for (int q = 0; !rc && q < t->n_q; q++) {
        ok[q] = 1;
        for (int k = t->q_off[q]; k < t->q_off[q + 1]; k++)
            ok[q] &= pred[t->q_pos[k]] == t->tok[t->q_pos[k]];
    }
    nx_free(pred);
    nx_ctx_free(c);
    return rc;
}

enum { TE_MAX_TASKS = 8, TE_MAX_SEEDS = 64 };

/* Whether a spec runs in a regime (the oracle: prefill only). */
static bool te_runs_in(const char *spec, int regime) {
    return regime == NX_KV_REGIME_PREFILL || !eval_spec_is_oracle(spec);
}

/* One configuration x seed over every instance (eval_parmap items: one instance each). */
struct te_job {
    const nx_model *m;
    const struct task_set *s;
    const char *spec;
    double density; /* 0: dense */
    int regime;     /* NX_KV_REGIME_* */
    uint64_t seed;
    int max_n, max_q;
    struct nx_progress *pg;
    int done_base, done;
    const char *label;
};

/* An instance's record: tokens held and KV bytes after the prompt, then max_q answer flags. */
struct te_rec {
    int64_t held;
    double bytes;
    unsigned char ok[];
};

/* Rounded up so that every record of an array of them is aligned for struct te_rec. */
static size_t te_rec_bytes(const struct te_job *j) {
    size_t a = _Alignof(struct te_rec);
    return (sizeof(struct te_rec) + (size_t)j->max_q + a - 1) / a * a;
}

static int te_item(int i, void *rec, void *arg) {
    const struct te_job *j = arg;
    const struct task_inst *t = &j->s->v[i];
    struct te_rec *r = rec;
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = j->max_n;
    cp.n_batch = j->max_n; /* the prompt is compressed once, at its end */
    cp.n_threads = cp.n_threads_batch = 1;
    cp.kv_type = NX_TYPE_F32;
    char name[64];
    if (eval_policy_spec(j->spec, &cp.kv, name, sizeof name, "task-eval")) return 1;
    cp.kv.policy = name;
    cp.kv.regime = j->regime;
    cp.kv.seed = j->seed;
    if (j->density > 0) {
        int b = (int)floor(j->density * t->prompt_len);
        cp.kv.budget = b > 0 ? b : 1;
    }
    if (!strcmp(name, "oracle")) {
        /* window = the queries after the prompt; budget + the future tokens it drops */
        int fut = t->n - 1 - t->prompt_len;
        cp.kv.window = fut < 256 ? fut : 256;
        cp.kv.budget += fut;
    }
    memset(r->ok, 0, (size_t)j->max_q);
    return run_inst(j->m, &cp, t, r->ok, &r->held, &r->bytes);
}

static void te_done(int i, void *arg) {
    struct te_job *j = arg;
    (void)i;
    nx_progress_update(j->pg, j->done_base + ++j->done, j->label);
}

/* Runs the job on `procs` worker processes into ok (per query), held and bytes (per
   instance); NX_STATUS_OK, NOMEM, or ABORTED when an instance failed (its message on stderr). */
static nx_status te_run(struct te_job *j, int procs, const int *q_first, unsigned char *ok,
                  int64_t *held, double *bytes) {
    size_t rb = te_rec_bytes(j);
    char *recs = nx_malloc(rb * (size_t)j->s->n);
    if (!recs) return NX_STATUS_NOMEM;
    j->done = 0;
    nx_status rc = eval_parmap(j->s->n, procs, rb, te_item, j, recs, te_done, j)
                       ? NX_STATUS_ABORTED
                       : NX_STATUS_OK;
    for (int i = 0; !rc && i < j->s->n; i++) {
        const struct te_rec *r = (const struct te_rec *)(recs + rb * (size_t)i);
        held[i] = r->held;
        bytes[i] = r->bytes;
        memcpy(ok + q_first[i], r->ok, (size_t)j->s->v[i].n_q);
    }
    nx_free(recs);
    return rc;
}

/* The figure of --svg: a panel per regime, accuracy (all tasks) against density, a line per
   policy (full flat), error bars the paired SE of the difference from the reference. acc / se
   are indexed by configuration (NaN: not run). */
static nx_status te_svg(const char *path, const char *const *pols, int np, const double *dens,
                        int nd, const int *regs, int nr, const double *acc, const double *se,
                        const char *ref) {
    size_t cells = (size_t)nr * (size_t)np * (size_t)nd;
    double *buf = nx_malloc(sizeof *buf * cells * 3);
    struct svg_series *ser = nx_malloc(sizeof *ser * (size_t)nr * (size_t)np);
    struct svg_panel panels[2];
    char titles[2][64];
    nx_status rc = buf && ser ? NX_STATUS_OK : NX_STATUS_NOMEM;
    for (int ri = 0; !rc && ri < nr; ri++) {
        int ns = 0;
        for (int pi = 0; pi < np; pi++) {
            if (!te_runs_in(pols[pi], regs[ri])) continue;
            double *x = buf + ((size_t)ri * (size_t)np + (size_t)pi) * (size_t)nd * 3, *y = x + nd,
                   *e = y + nd;
            bool is_full = !strcmp(pols[pi], "full");
            for (int di = 0; di < nd; di++) {
                int c = pi * nd * nr + (is_full ? 0 : di * nr + ri);
                x[di] = dens[di], y[di] = acc[c], e[di] = se[c];
            }
            ser[ri * np + ns++] = (struct svg_series){pols[pi], x, y, e, nd};
        }
        snprintf(titles[ri], sizeof titles[ri], "%s regime", eval_regime_name(regs[ri]));
        panels[ri] = (struct svg_panel){titles[ri], "density (budget / prompt)", "accuracy",
                                        false, true, ser + ri * np, ns};
    }
    if (!rc) {
        char title[160], err[1200];
        snprintf(title, sizeof title, "task-eval: exact-match accuracy (bars: paired SE vs %s)", ref);
        if ((rc = svg_save(path, title, panels, nr, err, sizeof err)) != NX_STATUS_OK)
            fprintf(stderr, "task-eval: %s\n", err);
        else
            fprintf(stderr, "task-eval: wrote %s\n", path);
    }
    nx_free(buf);
    nx_free(ser);
    return rc;
}

nx_status task_eval_run(const nx_model *m, const struct task_eval_params *p) {
    const char *const *pols = p->policies;
    const char *const *dens_s = p->density_names;
    const double *dens = p->densities;
    const int np = p->n_policies, nd = p->n_densities;
    const char *ref = p->reference ? p->reference : "full";
    static const int k_prefill_only[] = {NX_KV_REGIME_PREFILL};
    const int *regs = p->n_regimes > 0 ? p->regimes : k_prefill_only;
    const int nr = p->n_regimes > 0 ? p->n_regimes : 1;
    const int n_seeds = p->seeds > 0 ? p->seeds : 1;
    const uint64_t seed = p->seed;
    if (np < 1 || nd < 1 || p->threads < 1 || p->threads > 64 || n_seeds > TE_MAX_SEEDS || nr > 2) {
        fprintf(stderr, "task-eval: need policies, densities, 1-64 threads, 1-%d seeds, 1-2 regimes\n",
                TE_MAX_SEEDS);
        return NX_STATUS_INVALID_ARG;
    }
    for (int i = 0; i < nr; i++)
        if (regs[i] != NX_KV_REGIME_PREFILL && regs[i] != NX_KV_REGIME_STREAM) {
            fprintf(stderr, "task-eval: unknown regime %d\n", regs[i]);
            return NX_STATUS_INVALID_ARG;
        }
    for (int i = 0; i < nd; i++)
        if (!(dens[i] > 0 && dens[i] <= 1)) {
            fprintf(stderr, "task-eval: density %g ('%s') is not in (0, 1]\n", dens[i], dens_s[i]);
            return NX_STATUS_INVALID_ARG;
        }
    int ref_pi = -1;
    for (int pi = 0; pi < np; pi++) {
        struct nx_kv_params kv = nx_kv_default_params();
        char name[64];
        if (eval_policy_spec(pols[pi], &kv, name, sizeof name, "task-eval"))
            return NX_STATUS_INVALID_ARG;
        if (!strcmp(pols[pi], ref)) ref_pi = pi;
    }
    if (ref_pi < 0) {
        fprintf(stderr, "task-eval: the reference '%s' is not among the policies\n", ref);
        return NX_STATUS_INVALID_ARG;
    }
    struct task_set s;
    nx_status rc = load_set(p->tasks, nx_model_n_vocab(m), &s);
    if (rc != NX_STATUS_OK) return rc;
    int max_n = 0;
    for (int i = 0; i < s.n; i++) max_n = s.v[i].n > max_n ? s.v[i].n : max_n;
    /* task names, and each query's task index */
    char names[TE_MAX_TASKS][32];
    int n_names = 0;
    const int nq = s.n_queries, ncfg = np * nd * nr; /* config c = (policy * nd + density) * nr + regime */
    int *q_task = nx_malloc(sizeof *q_task * (size_t)nq);
    int *q_first = nx_malloc(sizeof *q_first * (size_t)s.n);
    double *score = nx_calloc((size_t)ncfg * (size_t)nq, sizeof *score); /* seed-mean per query */
    double *held_tok = nx_calloc((size_t)ncfg, sizeof *held_tok);
    double *held_kv = nx_calloc((size_t)ncfg, sizeof *held_kv);
    double *dense_bytes = nx_calloc((size_t)s.n, sizeof *dense_bytes);
    unsigned char *ok = nx_malloc((size_t)nq);
    int64_t *held = nx_malloc(sizeof *held * (size_t)s.n);
    double *bytes = nx_malloc(sizeof *bytes * (size_t)s.n);
    if (!q_task || !q_first || !score || !held_tok || !held_kv || !dense_bytes || !ok || !held ||
        !bytes) {
        fprintf(stderr, "task-eval: out of memory\n");
        rc = NX_STATUS_NOMEM;
    }
    for (int i = 0, k = 0; !rc && i < s.n; i++) {
        int ti = -1;
        for (int j = 0; j < n_names; j++)
            if (!strcmp(names[j], s.v[i].task)) ti = j;
        if (ti < 0 && n_names < TE_MAX_TASKS) {
            snprintf(names[n_names], sizeof names[0], "%s", s.v[i].task);
            ti = n_names++;
        }
        q_first[i] = k;
        for (int q = 0; q < s.v[i].n_q; q++) q_task[k++] = ti < 0 ? 0 : ti;
    }
    /* the dense run first (KV held is a share of its bytes), then every configuration */
    int runs = 1;
    for (int pi = 0; pi < np; pi++)
        for (int ri = 0; ri < nr; ri++)
            if (strcmp(pols[pi], "full") && te_runs_in(pols[pi], regs[ri]))
                runs += nd * (eval_spec_stochastic(pols[pi]) ? n_seeds : 1);
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "instances", runs * s.n);
    int done_base = 0;
    int max_q = 1;
    for (int i = 0; i < s.n; i++) max_q = s.v[i].n_q > max_q ? s.v[i].n_q : max_q;
    struct te_job job = {.m = m, .s = &s, .max_n = max_n, .max_q = max_q, .pg = &pg};
    unsigned char *dense_ok = nx_malloc((size_t)nq);
    if (!dense_ok) rc = NX_STATUS_NOMEM;
    if (!rc) {
        job.spec = "full";
        job.density = 0;
        job.regime = NX_KV_REGIME_PREFILL;
        job.seed = seed;
        job.label = "full";
        rc = te_run(&job, p->threads, q_first, dense_ok, held, dense_bytes);
        done_base += s.n;
    }
    for (int pi = 0; !rc && pi < np; pi++) {
        bool is_full = !strcmp(pols[pi], "full");
        for (int ci = 0; !rc && ci < nd * nr; ci++) {
            int di = ci / nr, ri = ci % nr, c = pi * nd * nr + ci;
            int ns = eval_spec_stochastic(pols[pi]) ? n_seeds : 1;
            if (!te_runs_in(pols[pi], regs[ri])) continue;
            double *sc = score + (size_t)c * (size_t)nq;
            for (int k = 0; !rc && k < ns; k++) {
                char label[160];
                snprintf(label, sizeof label, "%s d=%s %s seed %d", pols[pi], dens_s[di],
                         eval_regime_name(regs[ri]), k);
                job.spec = pols[pi];
                job.density = dens[di];
                job.regime = regs[ri];
                job.seed = seed + (uint64_t)k;
                job.label = label;
                job.done_base = done_base;
                if (is_full) { /* the dense run above (full never evicts: one run for both) */
                    memcpy(ok, dense_ok, (size_t)nq);
                    memcpy(bytes, dense_bytes, sizeof *bytes * (size_t)s.n);
                    for (int i = 0; i < s.n; i++) held[i] = s.v[i].prompt_len;
                } else {
                    rc = te_run(&job, p->threads, q_first, ok, held, bytes);
                    done_base += s.n;
                }
                for (int q = 0; q < nq; q++) sc[q] += (double)ok[q] / ns;
                for (int i = 0; i < s.n; i++) {
                    held_tok[c] += (double)held[i] / s.v[i].prompt_len / s.n / ns;
                    held_kv[c] += bytes[i] / (dense_bytes[i] > 0 ? dense_bytes[i] : 1) / s.n / ns;
                }
            }
        }
    }
    nx_free(dense_ok);
    nx_progress_finish(&pg);
    json_t *jout = json_array();
    double *acc_all = nx_malloc(sizeof *acc_all * (size_t)ncfg);
    double *se_all = nx_malloc(sizeof *se_all * (size_t)ncfg);
    if (!rc && (!acc_all || !se_all)) rc = NX_STATUS_NOMEM;
    for (int c = 0; !rc && c < ncfg; c++) acc_all[c] = se_all[c] = NAN;
    printf("| policy | density | regime | task | queries | accuracy | diff vs %s | paired SE | "
           "KV held (bytes) | tokens / prompt |\n", ref);
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int pi = 0; !rc && pi < np; pi++) {
        bool is_full = !strcmp(pols[pi], "full");
        for (int ci = 0; ci < (is_full ? 1 : nd * nr); ci++) {
            int di = ci / nr, ri = ci % nr, c = pi * nd * nr + ci;
            int rc_i = ref_pi * nd * nr + ci; /* the reference at the same density and regime */
            if (!te_runs_in(pols[pi], regs[ri]) || !te_runs_in(ref, regs[ri])) continue;
            const double *sc = score + (size_t)c * (size_t)nq;
            const double *rs = score + (size_t)rc_i * (size_t)nq;
            const char *rname = is_full ? "any" : eval_regime_name(regs[ri]);
            for (int ti = -1; ti < n_names; ti++) {
                double sum = 0, sd = 0, sdd = 0;
                int n = 0;
                for (int q = 0; q < nq; q++) {
                    if (ti >= 0 && q_task[q] != ti) continue;
                    double d = sc[q] - rs[q];
                    sum += sc[q];
                    sd += d;
                    sdd += d * d;
                    n++;
                }
                if (n == 0) continue;
                double md = sd / n;
                double se = n > 1 ? sqrt(fmax(0, (sdd - n * md * md) / (n - 1)) / n) : 0;
                const char *tname = ti < 0 ? "all" : names[ti];
                if (ti < 0) acc_all[c] = sum / n, se_all[c] = se;
                printf("| %s | %s | %s | %s | %d | %.3f | %+.3f | %.3f | %.3f | %.3f |\n", pols[pi],
                       is_full ? "1" : dens_s[di], rname, tname, n, sum / n, md, se, held_kv[c],
                       held_tok[c]);
                json_array_append_new(
                    jout, json_pack("{s:s,s:f,s:s,s:s,s:i,s:f,s:s,s:f,s:f,s:f,s:f,s:i,s:I}",
                                    "policy", pols[pi], "density", is_full ? 1.0 : dens[di],
                                    "regime", rname, "task", tname, "queries", n, "accuracy",
                                    sum / n, "reference", ref, "diff_vs_reference", md,
                                    "paired_se", se, "kv_held_bytes_share", held_kv[c],
                                    "kv_held_share", held_tok[c], "seeds",
                                    eval_spec_stochastic(pols[pi]) ? n_seeds : 1, "seed",
                                    (json_int_t)seed));
            }
        }
    }
    fflush(stdout);
    if (!rc && p->json_path) {
        char err[1200];
        if (!jout) rc = NX_STATUS_NOMEM;
        else if ((rc = nx_outfile_write_json(p->json_path, jout, err, sizeof err)) != NX_STATUS_OK)
            fprintf(stderr, "task-eval: %s\n", err);
    }
    if (!rc && p->svg_path) rc = te_svg(p->svg_path, pols, np, dens, nd, regs, nr, acc_all, se_all, ref);
    nx_free(acc_all);
    nx_free(se_all);
    json_decref(jout);
    nx_free(q_task);
    nx_free(q_first);
    nx_free(score);
    nx_free(held_tok);
    nx_free(held_kv);
    nx_free(dense_bytes);
    nx_free(ok);
    nx_free(held);
    nx_free(bytes);
    set_free(&s);
    return rc;
}
