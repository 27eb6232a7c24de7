/*
 * task_eval.c - `nexus task-eval`: token-id task accuracy per eviction policy and density.
 *
 * DESIGN
 * - Input: JSON lines {"task": NAME, "tokens": [ids], "prompt_len": P, "answers": [[pos...]...]}.
 *   The prompt tokens[0, P) are decoded in one call, so the prefill regime compresses the cache
 *   once at its end; the budget is fixed at floor(density x P) tokens per KV head per layer (the
 *   paper's protocol: it does not grow while the queries are decoded). The rest is decoded one
 *   token at a time (teacher forcing); a query (one entry of answers) is correct iff the argmax
 *   before each of its answer positions is the token there, which equals exact-match greedy
 *   generation of the answer.
 * - Every configuration sees the same instances, so each accuracy is reported with its paired
 *   difference from the dense cache ("full") and that difference's standard error over queries.
 *   KV held is layer 0 / KV head 0's token count right after the prompt, as a share of P.
 * - One fresh context per (configuration, instance); deterministic for the seed (the reservoir
 *   draws) at any thread count, as the engine is.
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
#include "eval/outfile.h"

enum { TE_MAX_TASKS = 8 };

struct task_inst {
    char task[32];
    nx_token *tok;
    int n, prompt_len;
    int n_q;
    int *q_off; /* n_q + 1 offsets into q_pos */
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

/* Parse one JSON line into *t; 0 on success, else prints the reason. */
static int parse_inst(const char *line, size_t len, int lineno, int n_vocab, struct task_inst *t) {
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    json_t *toks = o ? json_object_get(o, "tokens") : NULL;
    json_t *ans = o ? json_object_get(o, "answers") : NULL;
    json_t *pl = o ? json_object_get(o, "prompt_len") : NULL;
    json_t *tn = o ? json_object_get(o, "task") : NULL;
    int rc = 1;
    if (!json_is_array(toks) || !json_is_array(ans) || !json_is_integer(pl) ||
        !json_is_string(tn)) {
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
                fprintf(stderr,
                        "task-eval: line %d: answer position %lld outside (prompt_len, n)\n",
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
                    nx_free(buf);
                    set_free(s);
                    return NX_STATUS_NOMEM;
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
    return rc ? NX_STATUS_FORMAT : NX_STATUS_OK;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Run one instance; ok[q] = 1 when query q is answered; *held = tokens cached after prompt. */
static nx_status run_inst(const nx_model *m, const struct nx_ctx_params *cp,
                          const struct task_inst *t, unsigned char *ok, int64_t *held) {
    nx_ctx *c;
    char err[256];
    nx_status st = nx_ctx_init(m, cp, &c, err, sizeof err);
    if (st != NX_STATUS_OK) {
        fprintf(stderr, "task-eval: cannot create context: %s\n", err);
        return st;
    }
    int nv = nx_model_n_vocab(m);
    int *pred = nx_malloc(sizeof *pred * (size_t)t->n); /* pred[p] = argmax after token p - 1 */
    nx_status rc = pred ? NX_STATUS_OK : NX_STATUS_NOMEM;
    if (!rc) rc = nx_decode(c, t->tok, t->prompt_len, false);
    if (!rc) {
        struct nx_kv_stats ks;
        nx_ctx_kv_stats(c, &ks);
        *held = ks.tokens_cached;
        pred[t->prompt_len] = argmax(nx_get_logits(c, -1), nv);
    }
    for (int p = t->prompt_len; !rc && p + 1 < t->n; p++) {
        if ((rc = nx_decode(c, t->tok + p, 1, false)) != NX_STATUS_OK) break;
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

nx_status task_eval_run(const nx_model *m, const struct task_eval_params *p) {
    if (!p->tasks || p->n_policies < 1 || p->threads < 1 ||
        (p->n_densities < 1 && !(p->n_policies == 1 && !strcmp(p->policies[0], "full")))) {
        fprintf(stderr, "task-eval: need a tasks file, a policy, a density and threads >= 1\n");
        return NX_STATUS_INVALID_ARG;
    }
    for (int i = 0; i < p->n_densities; i++)
        if (!(p->densities[i] > 0 && p->densities[i] <= 1)) {
            fprintf(stderr, "task-eval: density %g is outside (0, 1]\n", p->densities[i]);
            return NX_STATUS_INVALID_ARG;
        }
    struct task_set s;
    nx_status st = load_set(p->tasks, nx_model_n_vocab(m), &s);
    if (st != NX_STATUS_OK) return st;
    int max_n = 0;
    for (int i = 0; i < s.n; i++) max_n = s.v[i].n > max_n ? s.v[i].n : max_n;
    /* task names, and each query's task index */
    char names[TE_MAX_TASKS][32];
    int n_names = 0;
    int *q_task = nx_malloc(sizeof *q_task * (size_t)s.n_queries);
    unsigned char *full_ok = nx_malloc((size_t)s.n_queries);
    unsigned char *ok = nx_malloc((size_t)s.n_queries);
    nx_status rc = (!q_task || !full_ok || !ok) ? NX_STATUS_NOMEM : NX_STATUS_OK;
    if (rc) fprintf(stderr, "task-eval: out of memory\n");
    for (int i = 0, k = 0; !rc && i < s.n; i++) {
        int ti = -1;
        for (int j = 0; j < n_names; j++)
            if (!strcmp(names[j], s.v[i].task)) ti = j;
        if (ti < 0 && n_names < TE_MAX_TASKS) {
            snprintf(names[n_names], sizeof names[0], "%s", s.v[i].task);
            ti = n_names++;
        }
        for (int q = 0; q < s.v[i].n_q; q++) q_task[k++] = ti < 0 ? 0 : ti;
    }
    json_t *jout = json_array();
    printf(
        "| policy | density | task | queries | accuracy | diff vs full | paired SE | KV held / prompt |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    bool have_full = false;
    for (int pi = 0; !rc && pi < p->n_policies; pi++) {
        const char *pol = p->policies[pi];
        bool is_full = !strcmp(pol, "full");
        for (int di = 0; !rc && di < (is_full ? 1 : p->n_densities); di++) {
            double held_share = 0;
            for (int i = 0, k = 0; !rc && i < s.n; i++) {
                struct nx_ctx_params cp = nx_ctx_default_params();
                cp.n_ctx = max_n;
                cp.n_threads = cp.n_threads_batch = p->threads;
                cp.kv_type = NX_TYPE_F32;
                cp.kv.policy = pol;
                cp.kv.regime = NX_KV_REGIME_PREFILL;
                cp.kv.seed = p->seed;
                if (!is_full) {
                    int b = (int)floor(p->densities[di] * s.v[i].prompt_len);
                    cp.kv.budget = b > 0 ? b : 1;
                }
                int64_t held = 0;
                rc = run_inst(m, &cp, &s.v[i], ok + k, &held);
                held_share += (double)held / s.v[i].prompt_len / s.n;
                k += s.v[i].n_q;
            }
            if (rc) break;
            if (is_full) {
                memcpy(full_ok, ok, (size_t)s.n_queries);
                have_full = true;
            }
            for (int ti = -1; ti < n_names; ti++) {
                double sum = 0, sd = 0, sdd = 0;
                int n = 0;
                for (int q = 0; q < s.n_queries; q++) {
                    if (ti >= 0 && q_task[q] != ti) continue;
                    double d = (double)ok[q] - (have_full ? (double)full_ok[q] : 0);
                    sum += ok[q];
                    sd += d;
                    sdd += d * d;
                    n++;
                }
                if (n == 0) continue;
                double md = sd / n;
                double se = n > 1 ? sqrt(fmax(0, (sdd - n * md * md) / (n - 1)) / n) : 0;
                const char *tname = ti < 0 ? "all" : names[ti];
                printf("| %s | %s | %s | %d | %.3f | %+.3f | %.3f | %.3f |\n", pol,
                       is_full ? "1" : p->density_names[di], tname, n, sum / n,
                       have_full ? md : NAN, have_full ? se : NAN, held_share);
                json_array_append_new(jout,
                                      json_pack("{s:s,s:f,s:s,s:i,s:f,s:f,s:f,s:f}", "policy", pol,
                                                "density", is_full ? 1.0 : p->densities[di], "task",
                                                tname, "queries", n, "accuracy", sum / n,
                                                "diff_vs_full", have_full ? md : 0.0, "paired_se",
                                                have_full ? se : 0.0, "kv_held_share", held_share));
            }
            fflush(stdout);
        }
    }
    if (!rc && p->json_path) {
        char err[1300];
        if ((rc = nx_outfile_write_json(p->json_path, jout, err, sizeof err)) != NX_STATUS_OK)
            fprintf(stderr, "task-eval: %s\n", err);
    }
    json_decref(jout);
    nx_free(q_task);
    nx_free(full_ok);
    nx_free(ok);
    set_free(&s);
    return rc;
}
