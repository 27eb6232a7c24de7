/* sweep.c - helpers shared by `nexus eval`, `eval-ruler`, `eval-longbench` and
 * `eval-efficiency`: list parsing, tokenizing, reading files, greedy generation. */
#include "eval/eval.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"

#include "core/readfile.h"
#include "gen/generate.h"
#include "kv/kv_policy.h"

int eval_split_list(const char *src, char *buf, size_t buf_len, char **items, int max,
                    const char *cmd, const char *what) {
    if ((size_t)snprintf(buf, buf_len, "%s", src ? src : "") >= buf_len) {
        fprintf(stderr, "%s: --%s is longer than %zu bytes\n", cmd, what, buf_len - 1);
        return -1;
    }
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max) {
            fprintf(stderr, "%s: --%s lists more than %d items\n", cmd, what, max);
            return -1;
        }
        items[n++] = t;
    }
    return n;
}

int eval_regime_from_name(const char *s) {
    if (!strcmp(s, "prefill")) return NX_KV_REGIME_PREFILL;
    if (!strcmp(s, "stream")) return NX_KV_REGIME_STREAM;
    return -1;
}

const char *eval_regime_name(int regime) {
    return regime == NX_KV_REGIME_STREAM ? "stream" : "prefill";
}

int eval_policy_spec(const char *spec, struct nx_kv_params *kv, char *name, size_t name_len,
                     const char *cmd) {
    static const struct {
        const char *word, *opt;
    } words[] = {{"topk", "nexus.select_topk"}, {"fresh", "nexus.fresh_draws"},
                 {"perhead", "nexus.per_head"}, {"matchkv", "nexus.match_kv"},
                 {"meanvec", "nexus.mean_vectors"}, {"values", "oracle.values"}};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL, *tok = strtok_r(buf, "/", &save);
    snprintf(name, name_len, "%s", tok ? tok : "");
    if (!kv_policy_find(name)) {
        fprintf(stderr, "%s: unknown policy '%s' (full, streaming, h2o, snapkv, pyramidkv, "
                        "adakv, morphkv, tova, nexus, random, bottomk, oracle)\n", cmd, spec);
        return -1;
    }
    for (tok = strtok_r(NULL, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        const char *opt = NULL;
        double v = 1;
        char *eq = strchr(tok, '=');
        if (eq) {
            char *e;
            *eq = 0;
            v = strtod(eq + 1, &e);
            opt = *e || e == eq + 1 ? NULL : tok;
        } else {
            for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
                if (!strcmp(tok, words[i].word)) opt = words[i].opt;
        }
        if (!opt || nx_kv_params_set(kv, opt, v) != NX_STATUS_OK) {
            fprintf(stderr, "%s: policy spec '%s': bad option '%s'\n", cmd, spec, tok);
            return -1;
        }
    }
    return 0;
}

bool eval_spec_stochastic(const char *spec) {
    struct nx_kv_params kv = nx_kv_default_params();
    char name[64];
    if (eval_policy_spec(spec, &kv, name, sizeof name, "eval")) return false;
    if (!strcmp(name, "random")) return true;
    if (strcmp(name, "nexus")) return false;
    for (int i = 0; i < kv.n_opts; i++)
        if (!strcmp(kv.opts[i].name, "nexus.select_topk") && kv.opts[i].value == 1) return false;
    return true;
}

bool eval_spec_is_oracle(const char *spec) {
    return !strncmp(spec, "oracle", 6) && (spec[6] == 0 || spec[6] == '/');
}

nx_status eval_check_policies(char **pols, int n, const char *cmd) {
    if (n == 0) {
        fprintf(stderr, "%s: empty --policies\n", cmd);
        return NX_STATUS_INVALID_ARG;
    }
    for (int i = 0; i < n; i++) {
        struct nx_kv_params kv = nx_kv_default_params();
        char name[64];
        if (eval_policy_spec(pols[i], &kv, name, sizeof name, cmd)) return NX_STATUS_INVALID_ARG;
    }
    return NX_STATUS_OK;
}

nx_status eval_parse_densities(char **items, int n, float *out, const char *cmd) {
    if (n == 0) {
        fprintf(stderr, "%s: empty --densities\n", cmd);
        return NX_STATUS_INVALID_ARG;
    }
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        out[i] = strtof(items[i], &end);
        if (errno || end == items[i] || *end || !(out[i] > 0 && out[i] <= 1)) {
            fprintf(stderr, "%s: density '%s' must be a number in (0, 1]\n", cmd, items[i]);
            return NX_STATUS_INVALID_ARG;
        }
    }
    return NX_STATUS_OK;
}

nx_status eval_sweep_split(const char *policies, const char *densities, const char *regimes,
                           const char *cmd, struct eval_sweep *sw) {
    char *dens[EVAL_MAX_ITEMS], *regs[3];
    sw->np = eval_split_list(policies, sw->pol_buf, sizeof sw->pol_buf, sw->pols, EVAL_MAX_ITEMS,
                             cmd, "policies");
    sw->nd = eval_split_list(densities, sw->den_buf, sizeof sw->den_buf, dens, EVAL_MAX_ITEMS, cmd,
                             "densities");
    sw->nr = eval_split_list(regimes, sw->reg_buf, sizeof sw->reg_buf, regs, 3, cmd, "regimes");
    if (sw->np < 0 || sw->nd < 0) return NX_STATUS_INVALID_ARG;
    if (eval_check_policies(sw->pols, sw->np, cmd) ||
        eval_parse_densities(dens, sw->nd, sw->dv, cmd))
        return NX_STATUS_INVALID_ARG;
    if (sw->nr < 1 || sw->nr > 2) {
        fprintf(stderr, "%s: --regimes takes prefill, stream or both\n", cmd);
        return NX_STATUS_INVALID_ARG;
    }
    for (int r = 0; r < sw->nr; r++)
        if ((sw->rv[r] = eval_regime_from_name(regs[r])) < 0) {
            fprintf(stderr, "%s: unknown regime '%s' (prefill, stream)\n", cmd, regs[r]);
            return NX_STATUS_INVALID_ARG;
        }
    return NX_STATUS_OK;
}

int eval_sweep_parse(const char *policies, const char *densities, const char *regimes,
                     const char *cmd, struct eval_sweep *sw, struct eval_sweep_cfg *out, int max) {
    nx_status st = eval_sweep_split(policies, densities, regimes, cmd, sw);
    if (st != NX_STATUS_OK) return st;
    int nc = 0;
    for (int p = 0; p < sw->np; p++) {
        bool full = !strcmp(sw->pols[p], "full");
        for (int d = 0; d < (full ? 1 : sw->nd); d++)
            for (int r = 0; r < (full ? 1 : sw->nr); r++) {
                if (nc == max) {
                    fprintf(stderr, "%s: more than %d configurations\n", cmd, max);
                    return NX_STATUS_INVALID_ARG;
                }
                out[nc++] = full ? (struct eval_sweep_cfg){sw->pols[p], 1.0f, NX_KV_REGIME_PREFILL}
                                 : (struct eval_sweep_cfg){sw->pols[p], sw->dv[d], sw->rv[r]};
            }
    }
    return nc;
}

nx_status eval_mkdir(const char *dir, const char *cmd) {
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return NX_STATUS_OK;
        fprintf(stderr, "%s: '%s' exists and is not a directory\n", cmd, dir);
        return NX_STATUS_INVALID_ARG;
    }
    fprintf(stderr, "%s: cannot create directory '%s': %s\n", cmd, dir, strerror(errno));
    return NX_STATUS_IO;
}

nx_token *eval_tokenize(const nx_model *m, const char *text, size_t len, int add_bos, int32_t *n) {
    nx_token *t;
    struct nx_err err;
    if (nx_gen_tokenize(m, text, len, add_bos ? NX_GEN_TOK_FORCE_BOS : 0u, &t, n, &err)) return NULL;
    return t;
}

char *eval_read_file(const char *path, size_t *len, const char *cmd) {
    char err[512];
    char *buf = nx_read_file(path, NX_READ_FILE_MAX, len, err, sizeof err);
    if (!buf) fprintf(stderr, "%s: %s\n", cmd, err);
    return buf;
}

nx_status eval_generate_greedy(const nx_model *m, nx_ctx *c, const nx_token *prompt,
                               int32_t n_prompt, int max_new, char **out) {
    *out = NULL;
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = max_new;
    gp.keep_text = true;
    struct nx_gen_result gr;
    struct nx_err err;
    nx_status st = nx_generate(m, c, prompt, n_prompt, &gp, &gr, &err);
    if (st) {
        if (st == NX_STATUS_NOMEM) fprintf(stderr, "generation: out of memory\n");
        else fprintf(stderr, "generation: %s\n", nx_ctx_last_error(c));
        return st;
    }
    *out = gr.text;
    return NX_STATUS_OK;
}
