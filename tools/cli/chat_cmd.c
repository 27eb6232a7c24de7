/*
 * chat_cmd.c - `nexus chat -m MODEL`: a conversation rendered with the model's chat template
 * (or --template NAME|FILE), one-shot with -p or interactive on a terminal, history kept.
 *
 * DESIGN: thin. The history is a JSON array of messages; each turn renders the whole
 * conversation with add_generation_prompt, tokenizes it with special tokens parsed, keeps the
 * longest prefix already in the KV cache (nx_ctx_truncate) and decodes only the rest, then
 * generate_reply() samples until an end-of-generation token or -n tokens. generate_reply is the
 * one place to swap for the library's generation loop later. Errors print one line and exit
 * non-zero (one-shot) or end the turn (interactive).
 */
#include <errno.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/alloc.h"
#include "chat_cmd.h"
#include "args.h"
#include "nexus.h"

#define chat_die(...) cli_die("nexus chat", __VA_ARGS__)

static long num_arg(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) chat_die("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
    return x;
}

struct chat {
    nx_model *m;
    nx_ctx *c;
    nx_sampler *s;
    nx_chat_template *t;
    json_t *history;
    char *tools_json;
    char bos[128], eos[128];
    nx_token *cached; /* the tokens now in the KV cache */
    int32_t n_cached, cap_cached;
    long n_predict;
    bool print_prompt, stream;
};

static void token_text(const nx_model *m, nx_token t, char *buf, size_t cap) {
    buf[0] = 0;
    if (t < 0) return;
    int32_t n = nx_token_to_piece(m, t, buf, (int32_t)cap - 1, true);
    buf[n > 0 ? n : 0] = 0;
}

/*
 * The generation loop: prompt tokens [0, n) of which the cache holds a prefix; decodes the rest,
 * samples up to n_predict tokens until an end-of-generation token, appends text to *reply
 * (malloc'd). Returns 0, or -1 with a message on stderr.
 */
static int generate_reply(struct chat *ch, const nx_token *toks, int32_t n, char **reply) {
    int32_t keep = 0;
    while (keep < ch->n_cached && keep < n - 1 && ch->cached[keep] == toks[keep]) keep++;
    if (nx_ctx_truncate(ch->c, keep)) {
        nx_ctx_reset(ch->c);
        keep = 0;
    }
    ch->n_cached = keep;
    if (n + ch->n_predict > nx_ctx_n_ctx(ch->c)) {
        fprintf(stderr, "nexus chat: the conversation (%d tokens) and the reply (-n %ld) do not fit the context (%d)\n",
                n, ch->n_predict, nx_ctx_n_ctx(ch->c));
        return -1;
    }
    if (ch->cap_cached < n + (int32_t)ch->n_predict + 1) {
        ch->cap_cached = n + (int32_t)ch->n_predict + 1;
        ch->cached = realloc(ch->cached, (size_t)ch->cap_cached * sizeof *ch->cached);
        if (!ch->cached) chat_die("out of memory");
    }
    if (nx_decode(ch->c, toks + keep, n - keep, false)) {
        fprintf(stderr, "nexus chat: decode failed: %s\n", nx_ctx_last_error(ch->c));
        return -1;
    }
    memcpy(ch->cached, toks, (size_t)n * sizeof *toks);
    ch->n_cached = n;
    size_t len = 0, cap = 256;
    char *out = malloc(cap);
    if (!out) chat_die("out of memory");
    out[0] = 0;
    for (long i = 0; i < ch->n_predict; i++) {
        nx_token t = nx_sampler_sample(ch->s, nx_get_logits(ch->c, -1));
        if (nx_token_is_eog(ch->m, t)) break;
        char piece[256];
        int32_t k = nx_token_to_piece(ch->m, t, piece, sizeof piece, false);
        if (k > 0) {
            if (len + (size_t)k + 1 > cap) {
                while (len + (size_t)k + 1 > cap) cap *= 2;
                out = realloc(out, cap);
                if (!out) chat_die("out of memory");
            }
            memcpy(out + len, piece, (size_t)k);
            len += (size_t)k;
            out[len] = 0;
            if (ch->stream) {
                fwrite(piece, 1, (size_t)k, stdout);
                fflush(stdout);
            }
        }
        if (i + 1 == ch->n_predict) break;
        if (nx_decode(ch->c, &t, 1, false)) {
            fprintf(stderr, "nexus chat: decode failed: %s\n", nx_ctx_last_error(ch->c));
            free(out);
            return -1;
        }
        ch->cached[ch->n_cached++] = t;
    }
    *reply = out;
    return 0;
}

static void add_message(json_t *h, const char *role, const char *content) {
    json_t *msg = json_pack("{s:s, s:s}", "role", role, "content", content);
    if (!msg || json_array_append_new(h, msg)) chat_die("out of memory");
}

/* One user turn: render, generate, print, keep. Returns 0 or -1 (the turn is dropped). */
static int turn(struct chat *ch, const char *user) {
    add_message(ch->history, "user", user);
    char *msgs = json_dumps(ch->history, JSON_COMPACT);
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = ch->tools_json;
    p.add_generation_prompt = true;
    p.bos_token = ch->bos;
    p.eos_token = ch->eos;
    char *prompt = NULL, err[1024];
    size_t plen = 0;
    nx_status st = nx_chat_render(ch->t, &p, &prompt, &plen, err, sizeof err);
    nx_free(msgs);
    if (st) {
        fprintf(stderr, "nexus chat: template: %s\n", err);
        json_array_remove(ch->history, json_array_size(ch->history) - 1);
        return -1;
    }
    if (ch->print_prompt) {
        fwrite(prompt, 1, plen, stdout);
        fputs("\n----\n", stdout);
    }
    int32_t n_max = (int32_t)plen + 16;
    nx_token *toks = malloc((size_t)n_max * sizeof *toks);
    if (!toks) chat_die("out of memory");
    int32_t n = nx_tokenize(ch->m, prompt, plen, toks, n_max, false, true);
    if (n < 0 && n != INT32_MIN) {
        n_max = -n;
        toks = realloc(toks, (size_t)n_max * sizeof *toks);
        if (!toks) chat_die("out of memory");
        n = nx_tokenize(ch->m, prompt, plen, toks, n_max, false, true);
    }
    nx_chat_free_string(prompt);
    if (n <= 0) {
        fprintf(stderr, "nexus chat: cannot tokenize the prompt\n");
        free(toks);
        json_array_remove(ch->history, json_array_size(ch->history) - 1);
        return -1;
    }
    char *reply = NULL;
    int rc = generate_reply(ch, toks, n, &reply);
    free(toks);
    if (rc) {
        json_array_remove(ch->history, json_array_size(ch->history) - 1);
        return -1;
    }
    if (!ch->stream) fputs(reply, stdout);
    fputs("\n", stdout);
    fflush(stdout);
    enum nx_tool_format f = nx_chat_template_tool_format(ch->t);
    nx_tool_calls *calls = NULL;
    if (ch->tools_json && nx_tool_calls_parse_with_tools(f, reply, strlen(reply), ch->tools_json, &calls, err,
                                                         sizeof err) == NX_STATUS_OK) {
        for (int32_t i = 0; i < nx_tool_calls_count(calls); i++) {
            const struct nx_tool_call *tc = nx_tool_calls_get(calls, i);
            fprintf(stderr, "[tool call] %s %s\n", tc->name, tc->arguments);
        }
    }
    nx_tool_calls_free(calls);
    add_message(ch->history, "assistant", reply);
    free(reply);
    return 0;
}

static void usage_chat(void) {
    fprintf(stderr,
            "usage: nexus chat -m MODEL [-p PROMPT] [--system TEXT] [--template NAME|FILE] [--tools FILE]\n"
            "                  [-n TOKENS] [--temp T] [--seed S] [-t THREADS] [-c CTX] [--print-prompt] [-i]\n"
            "  one-shot with -p (or a prompt on stdin); interactive on a terminal or with -i: one user\n"
            "  turn per line, history kept (/reset clears it, /exit ends).\n"
            "  --template: chatml, llama3, mistral, or a Jinja file (default: the model's own, else chatml)\n");
}

int chat_main(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *system_prompt = NULL, *tmpl = NULL, *tools_file = NULL;
    long n_predict = 256, threads = 4, n_ctx = 0, seed = 1;
    double temp = 0.7;
    bool print_prompt = false, interactive = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (chat_die("%s needs a value", a), ""))
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = NEXT();
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = NEXT();
        else if (!strcmp(a, "--system")) system_prompt = NEXT();
        else if (!strcmp(a, "--template")) tmpl = NEXT();
        else if (!strcmp(a, "--tools")) tools_file = NEXT();
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) n_predict = num_arg(a, NEXT(), 1, 1 << 20);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = num_arg(a, NEXT(), 1, 1024);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) n_ctx = num_arg(a, NEXT(), 0, 1 << 24);
        else if (!strcmp(a, "--seed")) seed = num_arg(a, NEXT(), 0, 1L << 62);
        else if (!strcmp(a, "--temp")) {
            const char *v = NEXT();
            char *end;
            temp = strtod(v, &end);
            if (end == v || *end) chat_die("--temp: expected a number, got '%s'", v);
        } else if (!strcmp(a, "--print-prompt")) print_prompt = true;
        else if (!strcmp(a, "-i") || !strcmp(a, "--interactive")) interactive = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_chat();
            return 0;
        } else {
            usage_chat();
            chat_die("unknown option '%s'", a);
        }
#undef NEXT
    }
    if (!model) {
        usage_chat();
        chat_die("-m MODEL is required");
    }
    struct chat ch = {.n_predict = n_predict, .print_prompt = print_prompt};
    char err[1024];
    if (nx_model_load(model, NULL, &ch.m, err, sizeof err)) chat_die("%s", err);
    nx_status st;
    if (tmpl) st = nx_chat_template_open(tmpl, &ch.t, err, sizeof err);
    else {
        st = nx_chat_template_from_model(ch.m, &ch.t, err, sizeof err);
        if (st == NX_STATUS_NOT_FOUND) {
            fprintf(stderr, "nexus chat: the model has no chat template; using chatml (--template to choose)\n");
            st = nx_chat_template_open("chatml", &ch.t, err, sizeof err);
        }
    }
    if (st) chat_die("template: %s", err);
    if (tools_file) {
        json_error_t je;
        json_t *tj = json_load_file(tools_file, 0, &je);
        if (!tj || !json_is_array(tj)) chat_die("--tools %s: %s", tools_file, tj ? "not a JSON array" : je.text);
        ch.tools_json = json_dumps(tj, JSON_COMPACT);
        json_decref(tj);
    }
    token_text(ch.m, nx_token_bos(ch.m), ch.bos, sizeof ch.bos);
    token_text(ch.m, nx_token_eos(ch.m), ch.eos, sizeof ch.eos);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = (int32_t)threads;
    if (nx_ctx_init(ch.m, &cp, &ch.c, err, sizeof err)) chat_die("%s", err);
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = (float)temp;
    sp.seed = (uint64_t)seed;
    if (nx_sampler_init(&sp, nx_model_n_vocab(ch.m), &ch.s)) chat_die("invalid sampling parameters");
    ch.history = json_array();
    if (system_prompt) add_message(ch.history, "system", system_prompt);
    int rc = 0;
    bool tty = isatty(0) && isatty(1);
    if (prompt || (!tty && !interactive)) {
        char *owned = NULL;
        if (!prompt) { /* the whole of stdin is the prompt */
            size_t len = 0, cap = 4096;
            owned = malloc(cap);
            size_t got;
            while (owned && (got = fread(owned + len, 1, cap - len - 1, stdin)) > 0) {
                len += got;
                if (cap - len < 2) owned = realloc(owned, cap *= 2);
            }
            if (!owned) chat_die("out of memory");
            owned[len] = 0;
            prompt = owned;
        }
        rc = turn(&ch, prompt) ? 1 : 0;
        free(owned);
    } else {
        ch.stream = tty;
        fprintf(stderr, "nexus chat: %s, template %s; /reset clears the history, /exit or Ctrl-D ends\n",
                nx_model_desc(ch.m), tmpl ? tmpl : "from the model");
        char *line = NULL;
        size_t cap = 0;
        for (;;) {
            fputs("> ", stdout);
            fflush(stdout);
            ssize_t got = getline(&line, &cap, stdin);
            if (got < 0) break;
            while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            if (!strcmp(line, "/reset")) {
                json_array_clear(ch.history);
                if (system_prompt) add_message(ch.history, "system", system_prompt);
                continue;
            }
            if (!got) continue;
            turn(&ch, line);
        }
        free(line);
        fputs("\n", stdout);
    }
    json_decref(ch.history);
    nx_free(ch.tools_json);
    free(ch.cached);
    nx_sampler_free(ch.s);
    nx_ctx_free(ch.c);
    nx_chat_template_free(ch.t);
    nx_model_free(ch.m);
    return rc;
}
