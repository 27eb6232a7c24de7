/* turn.c - one agent turn: route, choose, sidecar arguments, execute, repeat (turn.h). */
#include "agent/turn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/nx_base.h"
#include "chat/callshape.h"
#include "gen/generate.h"
#include "server/constrain.h"

struct turn {
    const nx_model *m;
    nx_ctx *ctx;
    const nx_chat_template *tmpl;
    ag_toolset *ts;
    nx_token *main;  /* the tokens in sequence 0 */
    int32_t n_main, cap_main;
    struct nx_err e;
};

/* Renders messages (then appends extra), tokenizes, and truncates sequence 0 to the longest
 * common prefix with what it holds (at most n_total - 1 tokens, so the last one is decoded for
 * its logits). *prompt gets all *n_total tokens; its last *n_prompt are still to decode. */
static nx_status sync_main(struct turn *t, json_t *messages, const char *extra, nx_token **prompt,
                           int32_t *n_prompt, int32_t *n_total) {
    char *ms = nx_json_dumps(messages, JSON_COMPACT);
    if (!ms) return nx_err_set(&t->e, NX_STATUS_NOMEM, "out of memory");
    struct nx_chat_params cp = nx_chat_default_params();
    cp.messages_json = ms;
    cp.add_generation_prompt = true;
    char *text = NULL;
    size_t len = 0;
    nx_status st = nx_chat_render(t->tmpl, &cp, &text, &len, t->e.msg, sizeof t->e.msg);
    nx_free(ms);
    if (st) return st;
    size_t xl = extra ? strlen(extra) : 0;
    char *full = nx_malloc(len + xl + 1);
    if (!full) {
        nx_chat_free_string(text);
        return nx_err_set(&t->e, NX_STATUS_NOMEM, "out of memory");
    }
    memcpy(full, text, len);
    if (xl) memcpy(full + len, extra, xl);
    full[len + xl] = 0;
    nx_chat_free_string(text);
    nx_token *tok = NULL;
    int32_t n = 0;
    st = nx_gen_tokenize(t->m, full, len + xl, NX_GEN_TOK_ADD_SPECIAL | NX_GEN_TOK_PARSE_SPECIAL,
                         &tok, &n, &t->e);
    nx_free(full);
    if (st) return st;
    int32_t lcp = 0;
    int32_t have = nx_seq_n_past(t->ctx, 0);
    while (lcp < have && lcp < t->n_main && lcp < n && t->main[lcp] == tok[lcp]) lcp++;
    if (lcp >= n) lcp = n - 1; /* the last token is decoded again for its logits */
    if ((st = nx_ctx_truncate(t->ctx, lcp))) {
        nx_free(tok);
        return nx_err_set(&t->e, st, "main session: %s", nx_ctx_last_error(t->ctx));
    }
    *prompt = tok;
    *n_prompt = n - lcp;
    *n_total = n;
    return NX_STATUS_OK;
}

/* Remembers what sequence 0 holds after a generation: prompt tokens + generated - 1. */
static nx_status remember(struct turn *t, const nx_token *tok, int32_t n) {
    if (n > t->cap_main) {
        nx_token *p = nx_realloc(t->main, (size_t)n * sizeof *p);
        if (!p) return nx_err_set(&t->e, NX_STATUS_NOMEM, "out of memory");
        t->main = p;
        t->cap_main = n;
    }
    memcpy(t->main, tok, (size_t)n * sizeof *tok);
    t->n_main = n;
    return NX_STATUS_OK;
}

/* The top-k tools as a request's tools array (names only: the pick writes no arguments). */
static json_t *choice_tools(const ag_toolset *ts, const struct ag_choice *c) {
    const rt_registry *reg = ag_toolset_registry(ts);
    json_t *a = json_array();
    for (int i = 0; a && i < c->n; i++)
        json_array_append_new(a, json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name",
                                           reg->tools[c->tool[i]].name));
    return a;
}

static json_t *route_json(const ag_toolset *ts, const struct ag_choice *c) {
    const rt_registry *reg = ag_toolset_registry(ts);
    json_t *hits = json_array();
    for (int i = 0; i < c->n; i++)
        json_array_append_new(hits, json_pack("{s:s, s:f}", "name", reg->tools[c->tool[i]].name,
                                              "score", (double)c->score[i]));
    return json_pack("{s:o, s:s?, s:f, s:b, s:b, s:f}", "hits", hits, "chosen",
                     c->chosen >= 0 ? reg->tools[c->chosen].name : NULL, "margin",
                     isfinite(c->margin) ? (double)c->margin : -1.0, "gate", c->gate, "abstain",
                     c->abstain, "ms", c->seconds * 1e3);
}

/* A generation on the main session: messages rendered + extra, under grammar g (lazy with
 * trigger when lazy), at most max tokens; the text into *text. */
static nx_status main_generate(struct turn *t, json_t *messages, const char *extra, nx_grammar *g,
                               nx_grammar_vocab *gv, const char *trigger, int32_t max,
                               char **text, int32_t *n_prompt_total, int32_t *n_prefilled) {
    nx_token *prompt = NULL;
    int32_t np = 0, n = 0;
    nx_status st = sync_main(t, messages, extra, &prompt, &np, &n);
    if (st) return st;
    nx_sampler *smp = NULL;
    struct nx_sampler_params spp = nx_sampler_default_params();
    spp.temp = 0;
    if (nx_sampler_init(&spp, nx_model_n_vocab(t->m), &smp) ||
        (g && nx_sampler_set_grammar(smp, g, gv, trigger, max))) {
        nx_sampler_free(smp);
        nx_free(prompt);
        return nx_err_set(&t->e, NX_STATUS_NOMEM, "out of memory");
    }
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = max;
    gp.sampler = smp;
    gp.keep_text = true;
    nx_token *gen = nx_malloc((size_t)(n + max) * sizeof *gen);
    if (!gen) st = nx_err_set(&t->e, NX_STATUS_NOMEM, "out of memory");
    struct nx_gen_result res = {0};
    if (!st) {
        memcpy(gen, prompt, (size_t)n * sizeof *gen);
        gp.tokens = gen + n;
        gp.tokens_cap = max;
        st = nx_generate(t->m, t->ctx, prompt + (n - np), np, &gp, &res, &t->e);
    }
    if (!st) {
        int32_t held = n + (res.n_generated > 0 ? res.n_generated - 1 : 0);
        if (held > nx_seq_n_past(t->ctx, 0)) held = nx_seq_n_past(t->ctx, 0);
        st = remember(t, gen, held);
        *text = res.text ? res.text : nx_strdup("");
        res.text = NULL;
    }
    *n_prompt_total = n;
    *n_prefilled = np;
    nx_free(res.text);
    nx_free(gen);
    nx_free(prompt);
    nx_sampler_free(smp);
    return st;
}

static json_t *system_message(const char *sigs, const char *how) {
    size_t n = strlen(sigs) + strlen(how) + 256;
    char *s = nx_malloc(n);
    if (!s) return NULL;
    snprintf(s, n,
             "You are an agent. Tools you may call (name(parameter: type, optional?: type)):\n%s"
             "To call a tool write %s; the arguments are filled in for you. "
             "Otherwise answer the user.", sigs, how);
    json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", s);
    nx_free(s);
    return m;
}

nx_status ag_turn_run(const nx_model *m, nx_ctx *ctx, const nx_chat_template *tmpl,
                      ag_toolset *ts, ag_exec *ex, ag_sidecar *sc, const char *task,
                      const struct ag_turn_params *pp, json_t **trace_out, char *err,
                      size_t errlen) {
    *trace_out = NULL;
    struct ag_turn_params p = pp ? *pp : (struct ag_turn_params){0};
    if (p.steps <= 0) p.steps = 4;
    if (p.answer_tokens <= 0) p.answer_tokens = 64;
    if (p.decide_tokens <= 0) p.decide_tokens = 128;
    struct turn t = {.m = m, .ctx = ctx, .tmpl = tmpl, .ts = ts};
    nx_ctx_reset(ctx);
    const rt_registry *reg = ag_toolset_registry(ts);
    enum nx_tool_format family = nx_chat_template_tool_format(tmpl);
    const char *form = chat_template_call_form(tmpl);
    struct srv_constraint pick = {0};
    json_t *ctools = NULL;
    nx_grammar_vocab *gv = NULL;
    json_t *trace = json_pack("{s:s, s:s, s:s, s:s?, s:[]}", "task", task, "tool_choice",
                              p.choice == AG_TOOL_REQUIRED ? "required" : "auto", "call_family",
                              nx_tool_format_name(family), "call_form", form, "steps");
    json_t *messages = json_array(), *steps = json_object_get(trace, "steps");
    char *window = nx_strdup("User: ");
    size_t wlen = 6;
    nx_status st = nx_grammar_vocab_init(m, &gv);
    if (st) nx_err_set(&t.e, st, "out of memory");
    const char *stop = "step_limit";
    char *answer = NULL;
    /* window text grows by appending */
#define WIN_APPEND(s_) do { size_t l_ = strlen(s_); char *w_ = nx_realloc(window, wlen + l_ + 1); \
        if (!w_) { st = nx_err_set(&t.e, NX_STATUS_NOMEM, "out of memory"); break; } \
        window = w_; memcpy(window + wlen, s_, l_ + 1); wlen += l_; } while (0)
    if (!st) WIN_APPEND(task);
    struct ag_choice c;
    char *sigs = NULL;
    if (!st) st = ag_toolset_route(ts, task, &c, t.e.msg, sizeof t.e.msg);
    if (!st && !(sigs = ag_toolset_prompt(ts, &c))) st = nx_err_set(&t.e, NX_STATUS_NOMEM, "out of memory");
    if (!st && !(ctools = choice_tools(ts, &c))) st = nx_err_set(&t.e, NX_STATUS_NOMEM, "out of memory");
    /* the pick: a call of one of the top-k up to its arguments, in the template's own form
       (the server's code, server/constrain.h) */
    if (!st && c.n > 0 && !c.abstain)
        st = srv_pick_build(family, form, ctools, p.choice == AG_TOOL_REQUIRED ? SRV_TOOLS_REQUIRED : SRV_TOOLS_AUTO,
                            &pick, t.e.msg, sizeof t.e.msg);
    if (!st) {
        char *how = srv_call_head(family, form, "TOOL");
        if (!how) st = nx_err_set(&t.e, NX_STATUS_NOMEM, "out of memory");
        else json_array_append_new(messages, system_message(sigs, how));
        nx_free(how);
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", task));
    }
    for (int step = 0; !st && step < p.steps; step++) {
        json_t *js = json_pack("{s:i, s:o}", "step", step + 1, "route", route_json(ts, &c));
        json_array_append_new(steps, js);
        if (c.abstain || c.n == 0) {
            stop = "abstained";
            break;
        }
        bool forced = p.choice == AG_TOOL_REQUIRED;
        char *text = NULL;
        int32_t n_total = 0, n_pre = 0;
        double t0 = nx_time_s();
        st = main_generate(&t, messages, forced ? pick.prefill : NULL, pick.grammar, gv, pick.trigger,
                           p.decide_tokens, &text, &n_total, &n_pre);
        if (st) break;
        json_object_set_new(js, "prompt_tokens", json_integer(n_total));
        json_object_set_new(js, "prefilled_tokens", json_integer(n_pre));
        json_object_set_new(js, "decide_ms", json_real((nx_time_s() - t0) * 1e3));
        const char *after = pick.trigger ? strstr(text, pick.trigger) : text;
        int k = after ? srv_pick_find(family, form, ctools, after) : -1;
        if (k < 0) {
            answer = text;
            stop = "answered";
            break;
        }
        nx_free(text);
        int tool = c.tool[k];
        const struct rt_tool *rt = &reg->tools[tool];
        struct ag_sidecar_result sr;
        st = ag_sidecar_args(sc, ctx, tool, window, &sr, t.e.msg, sizeof t.e.msg);
        if (st) break;
        json_object_set_new(js, "call", json_pack("{s:s, s:s, s:s, s:b, s:b, s:b, s:b}", "name", rt->name,
                                                  "arguments", sr.arguments, "text", sr.raw, "json_object",
                                                  sr.json_object, "schema_valid", sr.schema_valid,
                                                  "grammar_complete",
                                                  sr.grammar_complete, "grammar_fallback",
                                                  sr.grammar_fallback));
        json_object_set_new(js, "sidecar",
                            json_pack("{s:i, s:i, s:i, s:i, s:b, s:f, s:f}", "block_tokens",
                                      sr.n_block, "window_tokens", sr.n_window, "prefix_tokens",
                                      sr.n_prefix, "generated_tokens", sr.n_generated,
                                      "compiled_now", sr.compiled_now, "ttfa_ms",
                                      sr.t_first * 1e3, "total_ms", sr.t_total * 1e3));
        struct ag_exec_result er;
        st = ag_exec_call(ex, rt, sr.arguments, &er);
        if (st) {
            nx_free(sr.arguments);
            nx_free(sr.raw);
            nx_err_set(&t.e, st, "out of memory");
            break;
        }
        json_object_set_new(js, "result",
                            json_pack("{s:b, s:s, s:I, s:I, s:s, s:f, s:s}", "is_error", er.is_error,
                                      "status", nx_status_name(er.status), "bytes",
                                      (json_int_t)er.payload_len, "surrogate_bytes",
                                      (json_int_t)er.surrogate_len, "id", er.id, "ms",
                                      er.seconds * 1e3, "surrogate", er.surrogate));
        /* the call and its surrogate enter the main session (and the sidecar's window) */
        char callid[16];
        snprintf(callid, sizeof callid, "call_%d", step + 1);
        bool oom_ = false;
        json_t *args = nx_json_loads(sr.arguments, 0, NULL, &oom_);
        json_array_append_new(
            messages,
            json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s, s:o}}]}", "role", "assistant", "content", "",
                      "tool_calls", "id", callid, "type", "function", "function", "name", rt->name,
                      "arguments", args ? args : json_object()));
        json_array_append_new(messages, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                                  callid, "content", er.surrogate));
        WIN_APPEND("\nCall: ");
        if (!st) WIN_APPEND(rt->name);
        if (!st) WIN_APPEND(" ");
        if (!st) WIN_APPEND(sr.arguments);
        if (!st) WIN_APPEND("\nResult: ");
        if (!st) WIN_APPEND(er.surrogate);
        nx_free(sr.arguments);
        nx_free(sr.raw);
        nx_free(er.surrogate);
    }
    if (!st && !answer && strcmp(stop, "abstained")) { /* the step limit: answer without tools */
        int32_t n_total = 0, n_pre = 0;
        st = main_generate(&t, messages, NULL, NULL, NULL, NULL, p.answer_tokens, &answer, &n_total, &n_pre);
    }
#undef WIN_APPEND
    if (!st) {
        json_object_set_new(trace, "answer", json_string(answer ? answer : ""));
        if (!json_object_get(trace, "answer")) /* not UTF-8: keep the bytes readable */
            json_object_set_new(trace, "answer", json_string("(answer is not valid UTF-8)"));
        json_object_set_new(trace, "stop", json_string(stop));
        json_object_set_new(trace, "main_tokens", json_integer(t.n_main));
        *trace_out = trace;
    } else {
        json_decref(trace);
        snprintf(err, errlen, "%s", t.e.msg);
    }
    nx_free(answer);
    nx_free(sigs);
    nx_free(window);
    nx_free(t.main);
    srv_constraint_free(&pick);
    json_decref(ctools);
    nx_grammar_vocab_free(gv);
    json_decref(messages);
    return st;
}
