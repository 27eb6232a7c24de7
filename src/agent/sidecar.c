/* sidecar.c - argument generation in a sidecar sequence (sidecar.h). */
#include "agent/sidecar.h"

#include "agent/argcheck.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/nx_base.h"
#include "chat/callshape.h"
#include "gen/generate.h"
#include "server/constrain.h"

struct ag_sidecar {
    const nx_model *m;
    const rt_registry *reg;
    struct ag_sidecar_params p;
    nx_grammar_vocab *gv;
    nx_kv_block **blk; /* per tool, NULL until compiled */
    struct srv_constraint *con; /* per tool: the NAMED call's prefill and argument grammar */
    bool *fallback;
    enum nx_tool_format family;
    const char *form; /* static (callshape) or NULL */
};

nx_status ag_sidecar_new(const nx_model *m, const rt_registry *reg,
                         const struct ag_sidecar_params *p, ag_sidecar **out, char *err,
                         size_t errlen) {
    *out = NULL;
    ag_sidecar *sc = nx_calloc(1, sizeof *sc);
    size_t n = reg->n > 0 ? (size_t)reg->n : 1;
    if (sc) {
        sc->blk = nx_calloc(n, sizeof *sc->blk);
        sc->con = nx_calloc(n, sizeof *sc->con);
        sc->fallback = nx_calloc(n, sizeof *sc->fallback);
    }
    if (!sc || !sc->blk || !sc->con || !sc->fallback || nx_grammar_vocab_init(m, &sc->gv)) {
        ag_sidecar_free(sc);
        snprintf(err, errlen, "sidecar: out of memory");
        return NX_STATUS_NOMEM;
    }
    sc->m = m;
    sc->reg = reg;
    if (p) sc->p = *p;
    if (sc->p.window_tokens <= 0) sc->p.window_tokens = 256;
    if (sc->p.max_tokens <= 0) sc->p.max_tokens = 256;
    if (sc->p.park <= 0) sc->p.park = 1;
    sc->family = sc->p.tmpl ? nx_chat_template_tool_format(sc->p.tmpl) : NX_TOOL_FORMAT_NONE;
    sc->form = sc->p.tmpl ? chat_template_call_form(sc->p.tmpl) : NULL;
    *out = sc;
    return NX_STATUS_OK;
}

void ag_sidecar_free(ag_sidecar *sc) {
    if (!sc) return;
    for (int i = 0; sc->reg && i < sc->reg->n; i++) {
        if (sc->blk) nx_kv_block_free(sc->blk[i]);
        if (sc->con) srv_constraint_free(&sc->con[i]);
    }
    nx_free(sc->blk);
    nx_free(sc->con);
    nx_free(sc->fallback);
    nx_grammar_vocab_free(sc->gv);
    nx_free(sc);
}

char *ag_sidecar_block_text(const struct rt_tool *t) {
    char *schema = t->schema ? nx_json_dumps(t->schema, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    const char *sj = schema ? schema : "{\"type\":\"object\"}";
    size_t n = strlen(t->name) + strlen(t->description) + strlen(sj) + 64;
    char *s = nx_malloc(n);
    if (s) snprintf(s, n, "Tool: %s\nDescription: %s\nParameters: %s\n", t->name, t->description, sj);
    nx_free(schema);
    return s;
}

/* The NAMED constraint of tool i in the family's form (server/constrain.h: the same code as the
 * server's); a schema it refuses falls back to {"type": "object"}. */
static nx_status grammar_for(ag_sidecar *sc, int i, char *err, size_t errlen) {
    if (sc->con[i].grammar) return NX_STATUS_OK;
    const struct rt_tool *t = &sc->reg->tools[i];
    nx_status st = NX_STATUS_OK;
    for (int pass = 0; pass < 2; pass++) {
        json_t *params = pass == 0 && t->schema ? json_incref(t->schema) : json_pack("{s:s}", "type", "object");
        json_t *tools = json_pack("[{s:s, s:{s:s, s:o}}]", "type", "function", "function", "name", t->name,
                                  "parameters", params);
        if (!tools) {
            snprintf(err, errlen, "sidecar: out of memory");
            return NX_STATUS_NOMEM;
        }
        char gerr[512];
        st = srv_constraint_build(sc->family, sc->form, tools, SRV_TOOLS_NAMED, t->name, NULL, &sc->con[i], gerr,
                                  sizeof gerr);
        json_decref(tools);
        if (st == NX_STATUS_OK) {
            sc->fallback[i] = pass > 0;
            return st;
        }
        if (st == NX_STATUS_NOMEM || pass > 0) {
            snprintf(err, errlen, "sidecar: %s: %s", t->name, gerr);
            return st;
        }
    }
    return st;
}

nx_status ag_sidecar_compile(ag_sidecar *sc, nx_ctx *ctx, int i, char *err, size_t errlen) {
    if (i < 0 || i >= sc->reg->n) {
        snprintf(err, errlen, "sidecar: tool %d out of range", i);
        return NX_STATUS_INVALID_ARG;
    }
    if (sc->blk[i]) return NX_STATUS_OK;
    char *text = ag_sidecar_block_text(&sc->reg->tools[i]);
    if (!text) {
        snprintf(err, errlen, "sidecar: out of memory");
        return NX_STATUS_NOMEM;
    }
    nx_token *tok = NULL;
    int32_t n = 0;
    struct nx_err e = {{0}};
    nx_status st = nx_gen_tokenize(sc->m, text, strlen(text), NX_GEN_TOK_FORCE_BOS, &tok, &n, &e);
    nx_free(text);
    if (!st) st = nx_kv_block_compile(ctx, NULL, 0, tok, n, 0, &sc->blk[i]);
    nx_free(tok);
    if (st) snprintf(err, errlen, "sidecar: compiling %s: %s", sc->reg->tools[i].name,
                     e.msg[0] ? e.msg : nx_ctx_last_error(ctx));
    return st;
}

struct first_tok {
    double t0, t_first;
};
static int on_text(void *user, const char *text, size_t len) {
    struct first_tok *f = user;
    if (f->t_first < 0) f->t_first = nx_time_s() - f->t0;
    (void)text;
    (void)len;
    return 0;
}

/* The last `keep` tokens of the window text, then "\nCall: " and the forced prefix. */
static nx_status tail_tokens(ag_sidecar *sc, const char *window, const char *head, nx_token **out,
                             int32_t *n_out, int32_t *n_window, int32_t *n_prefix,
                             struct nx_err *e) {
    nx_token *w = NULL, *f = NULL;
    int32_t nw = 0, nf = 0;
    nx_status st = NX_STATUS_OK;
    if (window && *window) st = nx_gen_tokenize(sc->m, window, strlen(window), 0, &w, &nw, e);
    size_t hl = strlen(head);
    char *pre = st ? NULL : nx_malloc(hl + 8);
    if (!st && !pre) st = nx_err_set(e, NX_STATUS_NOMEM, "sidecar: out of memory");
    if (!st) {
        memcpy(pre, "\nCall: ", 7);
        memcpy(pre + 7, head, hl + 1);
        st = nx_gen_tokenize(sc->m, pre, hl + 7, NX_GEN_TOK_PARSE_SPECIAL, &f, &nf, e);
    }
    nx_free(pre);
    int32_t keep = NX_MIN(nw, sc->p.window_tokens);
    nx_token *all = st ? NULL : nx_malloc(((size_t)keep + (size_t)nf) * sizeof *all);
    if (!st && !all) st = nx_err_set(e, NX_STATUS_NOMEM, "sidecar: out of memory");
    if (!st) {
        if (keep) memcpy(all, w + nw - keep, (size_t)keep * sizeof *all);
        memcpy(all + keep, f, (size_t)nf * sizeof *all);
        *out = all;
        *n_out = keep + nf;
        *n_window = keep;
        *n_prefix = nf;
    }
    nx_free(w);
    nx_free(f);
    return st;
}

static void restore_main(nx_ctx *ctx, nx_seq_id park, bool parked) {
    nx_kv_seq_rm(ctx, 0, -1, -1);
    if (parked) {
        nx_kv_seq_cp(ctx, park, 0, -1, -1);
        nx_kv_seq_rm(ctx, park, -1, -1);
    }
}

/* The call (prefill, the generated text, the suffix) read back by the family's parser: its
 * arguments, or the generated text itself when no call parses (json_object false then). */
static nx_status parse_back(ag_sidecar *sc, int i, struct ag_sidecar_result *out, struct nx_err *e) {
    const struct srv_constraint *c = &sc->con[i];
    size_t lp = strlen(c->prefill), lr = strlen(out->raw), ls = strlen(c->suffix);
    char *text = nx_malloc(lp + lr + ls + 1);
    if (!text) return nx_err_set(e, NX_STATUS_NOMEM, "sidecar: out of memory");
    memcpy(text, c->prefill, lp);
    memcpy(text + lp, out->raw, lr);
    memcpy(text + lp + lr, c->suffix, ls + 1);
    nx_tool_calls *calls = NULL;
    char perr[256];
    nx_status st = nx_tool_calls_parse_with_tools(c->format, text, lp + lr + ls, c->tools_json, &calls, perr,
                                                  sizeof perr);
    nx_free(text);
    if (st == NX_STATUS_NOMEM) return nx_err_set(e, st, "sidecar: out of memory");
    const struct nx_tool_call *call = st ? NULL : nx_tool_calls_get(calls, 0);
    out->arguments = nx_strdup(call && nx_tool_calls_count(calls) == 1 && !strcmp(call->name, sc->reg->tools[i].name)
                                   ? call->arguments
                                   : out->raw);
    nx_tool_calls_free(calls);
    return out->arguments ? NX_STATUS_OK : nx_err_set(e, NX_STATUS_NOMEM, "sidecar: out of memory");
}

nx_status ag_sidecar_generate(ag_sidecar *sc, nx_ctx *ctx, int i, const nx_token *prompt,
                              int32_t n, double t0, struct ag_sidecar_result *out, char *err,
                              size_t errlen) {
    if (i < 0 || i >= sc->reg->n) {
        snprintf(err, errlen, "sidecar: tool %d out of range", i);
        return NX_STATUS_INVALID_ARG;
    }
    nx_status st = grammar_for(sc, i, err, errlen);
    if (st) return st;
    out->grammar_fallback = sc->fallback[i];
    struct nx_err e = {{0}};
    struct first_tok ft = {t0, -1};
    nx_sampler *smp = NULL;
    struct nx_sampler_params spp = nx_sampler_default_params();
    spp.temp = 0;
    if (nx_sampler_init(&spp, nx_model_n_vocab(sc->m), &smp))
        st = nx_err_set(&e, NX_STATUS_NOMEM, "sidecar: out of memory");
    if (!st && nx_sampler_set_grammar(smp, sc->con[i].grammar, sc->gv, NULL, sc->p.max_tokens))
        st = nx_err_set(&e, NX_STATUS_NOMEM, "sidecar: grammar");
    struct nx_gen_result res = {0};
    if (!st) {
        struct nx_gen_params gp = nx_gen_default_params();
        gp.max_tokens = sc->p.max_tokens;
        gp.sampler = smp;
        gp.on_text = on_text;
        gp.user = &ft;
        gp.keep_text = true;
        st = nx_generate(sc->m, ctx, prompt, n, &gp, &res, &e);
    }
    out->t_first = ft.t_first;
    out->t_total = nx_time_s() - t0;
    if (!st) {
        nx_grammar_matcher *gm = nx_sampler_grammar_matcher(smp);
        out->grammar_complete = nx_grammar_matcher_is_finished(gm) || nx_grammar_matcher_can_end(gm);
        out->raw = res.text ? res.text : nx_strdup("");
        res.text = NULL;
        out->n_generated = res.n_generated;
        if (!out->raw) st = nx_err_set(&e, NX_STATUS_NOMEM, "sidecar: out of memory");
    }
    if (!st) st = parse_back(sc, i, out, &e);
    if (!st) {
        json_error_t je;
        bool oom = false;
        json_t *j = nx_json_loads(out->arguments, 0, &je, &oom);
        out->json_object = j && json_is_object(j);
        out->schema_valid = ag_args_check(sc->reg->tools[i].schema, out->arguments, NULL, 0);
        json_decref(j);
    }
    nx_free(res.text);
    nx_sampler_free(smp);
    if (st) snprintf(err, errlen, "%s", e.msg);
    return st;
}

nx_status ag_sidecar_args(ag_sidecar *sc, nx_ctx *ctx, int i, const char *window,
                          struct ag_sidecar_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= sc->reg->n || nx_ctx_n_seq_max(ctx) <= sc->p.park) {
        snprintf(err, errlen, "sidecar: %s", i < 0 || i >= sc->reg->n ? "tool out of range"
                                                 : "the context needs a second sequence (n_seq_max)");
        return NX_STATUS_INVALID_ARG;
    }
    nx_status st = grammar_for(sc, i, err, errlen);
    if (st) return st;
    out->grammar_fallback = sc->fallback[i];
    /* 1. park */
    bool parked = nx_seq_n_past(ctx, 0) > 0;
    if (parked) {
        st = nx_kv_seq_cp(ctx, 0, sc->p.park, -1, -1);
        if (st) {
            snprintf(err, errlen, "sidecar: parking the main session: %s", nx_ctx_last_error(ctx));
            return st;
        }
    }
    nx_kv_seq_rm(ctx, 0, -1, -1);
    double ft_t0 = nx_time_s();
    /* 2. the block at its anchor */
    if (!sc->blk[i]) {
        out->compiled_now = true;
        st = ag_sidecar_compile(sc, ctx, i, err, errlen);
    } else {
        struct nx_splice_params sp = nx_splice_default_params();
        sp.pos = 0;
        sp.repair = false; /* at its anchor the splice is exact */
        st = nx_ctx_splice(ctx, sc->blk[i], &sp, NULL);
        if (st) snprintf(err, errlen, "sidecar: splice: %s", nx_ctx_last_error(ctx));
    }
    out->t_splice = nx_time_s() - ft_t0;
    if (st) {
        restore_main(ctx, sc->p.park, parked);
        return st;
    }
    out->n_block = nx_kv_block_n_tokens(sc->blk[i]);
    /* 3. window + forced name, 4. arguments under the grammar */
    struct nx_err e = {{0}};
    nx_token *tail = NULL;
    int32_t n_tail = 0;
    st = tail_tokens(sc, window, sc->con[i].prefill, &tail, &n_tail, &out->n_window,
                     &out->n_prefix, &e);
    if (st) snprintf(err, errlen, "%s", e.msg);
    if (!st) st = ag_sidecar_generate(sc, ctx, i, tail, n_tail, ft_t0, out, err, errlen);
    nx_free(tail);
    /* 5. end the sidecar, restore the main session */
    restore_main(ctx, sc->p.park, parked);
    return st;
}
