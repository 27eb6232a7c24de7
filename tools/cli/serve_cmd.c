/* serve_cmd.c - `nexus serve`: parse flags, load the model(s), start the server, wait. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"
#include "serve_cmd.h"
#include "server/server.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static int usage(void) {
    fprintf(stderr,
            "usage: nexus serve -m MODEL [--embed-model ENCODER] [--host 127.0.0.1] [--port 8080]\n"
            "         [-np SLOTS] [--queue N] [-c CTX] [-t THREADS] [--api-key KEY]\n"
            "         [--cors ORIGIN] [--name NAME] [--max-body BYTES] [--max-tokens N]\n"
            "         [--max-messages N] [--max-conns N] [--timeout S] [--idle-timeout S]\n"
            "         [--kv-policy P] [--kv-density D] [--kv-budget N] [--kv-regime R]\n"
            "         [--kv-type f16|f32] [--mmap] [--prefill-chunk N] [--max-history N]\n"
            "         [--sessions N] [--session-dir DIR]\n"
            "         [--session-idle S] [--session-mem BYTES] [--chat-template NAME|FILE]\n"
            "         [--mcp CONFIG [--mcp-k 5] [--mcp-steps 4] [--mcp-budget BYTES]\n"
            "          [--mcp-timeout MS]]   (server-side tools of the config's MCP servers)\n"
            "  the API key may also come from the environment variable NEXUS_API_KEY\n");
    return 2;
}

static bool num(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "nexus serve: %s: expected a number in [%g, %g], got '%s'\n", flag, lo,
                hi, v);
        return false;
    }
    *out = x;
    return true;
}

static nx_model *load(const char *path, bool mmap) {
    struct nx_model_params mp = nx_model_default_params();
    mp.use_mmap = mmap;
    nx_model *m;
    char err[512];
    nx_status st = nx_model_load(path, &mp, &m, err, sizeof err);
    if (st) {
        fprintf(stderr, "nexus serve: cannot load '%s': %s\n", path, err);
        return NULL;
    }
    return m;
}

int serve_main(int argc, char **argv) {
    struct srv_params p = srv_default_params();
    const char *model = NULL, *embed = NULL;
    bool mmap = false;
    p.api_key = getenv("NEXUS_API_KEY");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        if (!strcmp(a, "--mmap")) {
            mmap = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "nexus serve: %s needs a value (or is unknown)\n", a);
            return usage();
        }
        const char *v = argv[++i];
        double x;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--embed-model")) embed = v;
        else if (!strcmp(a, "--host")) p.host = v;
        else if (!strcmp(a, "--api-key")) p.api_key = v;
        else if (!strcmp(a, "--cors")) p.cors_origin = v;
        else if (!strcmp(a, "--name")) p.model_name = v;
        else if (!strcmp(a, "--session-dir")) p.engine.sessions.dir = v;
        else if (!strcmp(a, "--chat-template")) p.chat_template = v;
        else if (!strcmp(a, "--mcp")) p.tools.mcp_config = v;
        else if (!strcmp(a, "--kv-policy")) p.engine.ctx.kv.policy = v;
        else if (!strcmp(a, "--kv-regime")) {
            if (!strcmp(v, "prefill")) p.engine.ctx.kv.regime = NX_KV_REGIME_PREFILL;
            else if (!strcmp(v, "stream")) p.engine.ctx.kv.regime = NX_KV_REGIME_STREAM;
            else {
                fprintf(stderr, "nexus serve: --kv-regime: expected prefill or stream\n");
                return 2;
            }
        } else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f16")) p.engine.ctx.kv_type = NX_TYPE_F16;
            else if (!strcmp(v, "f32")) p.engine.ctx.kv_type = NX_TYPE_F32;
            else {
                fprintf(stderr, "nexus serve: --kv-type: expected f16 or f32\n");
                return 2;
            }
        } else {
            struct {
                const char *flag;
                double lo, hi;
            } nums[] = {{"--port", 0, 65535},        {"-np", 1, 256},
                        {"--queue", 1, 1 << 16},     {"-c", 0, 1 << 24},
                        {"-t", 1, 512},              {"--max-body", 16, 1 << 30},
                        {"--max-tokens", 1, 1 << 24}, {"--max-messages", 1, 1 << 20},
                        {"--max-conns", 1, 1 << 16}, {"--timeout", 0, 1e6},
                        {"--idle-timeout", 1, 1e6},  {"--kv-density", 0, 1},
                        {"--kv-budget", 1, INT32_MAX}, {"--sessions", 0, 4096},
                        {"--session-idle", 0, 1e9},  {"--session-mem", 0, 1e15},
                        {"--mcp-k", 1, 16},          {"--mcp-steps", 1, 64},
                        {"--mcp-budget", 96, 1 << 24}, {"--mcp-timeout", 1, 1e7},
                        {"--prefill-chunk", 0, 1 << 20}, {"--max-history", 0, 1 << 26}};
            size_t k = 0;
            while (k < sizeof nums / sizeof nums[0] && strcmp(a, nums[k].flag)) k++;
            if (k == sizeof nums / sizeof nums[0]) {
                fprintf(stderr, "nexus serve: unknown flag %s\n", a);
                return usage();
            }
            if (!num(a, v, nums[k].lo, nums[k].hi, &x)) return 2;
            switch (k) {
            case 0: p.port = (int)x; break;
            case 1: p.engine.n_slots = (int)x; break;
            case 2: p.engine.queue_max = (int)x; break;
            case 3: p.engine.n_ctx = (int)x; break;
            case 4: p.engine.n_threads = (int)x; break;
            case 5: p.max_body = (size_t)x; break;
            case 6: p.lim.max_tokens = (int)x; break;
            case 7: p.lim.max_messages = (int)x; break;
            case 8: p.max_conns = (int)x; break;
            case 9: p.request_timeout_s = x; break;
            case 10: p.idle_timeout_s = (int)x; break;
            case 11: p.engine.ctx.kv.density = (float)x; break;
            case 12: p.engine.ctx.kv.budget = (int32_t)x; break;
            case 13: p.engine.sessions.max_resident = (int)x; break;
            case 14: p.engine.sessions.idle_s = x; break;
            case 15: p.engine.sessions.max_resident_bytes = (int64_t)x; break;
            case 16: p.tools.k = (int)x; break;
            case 17: p.tools.max_steps = (int)x; break;
            case 18: p.tools.budget = (size_t)x; break;
            case 19: p.tools.timeout_ms = (int)x; break;
            case 20: p.engine.prefill_chunk = (int32_t)x; break;
            default: p.engine.n_hist = (int32_t)x; break;
            }
        }
    }
    if (!model) {
        fprintf(stderr, "nexus serve: no model given (-m MODEL.gguf)\n");
        return usage();
    }
    nx_model *m = load(model, mmap), *em = NULL;
    if (!m) return 1;
    if (embed && !(em = load(embed, mmap))) {
        nx_model_free(m);
        return 1;
    }
    struct srv_server *s;
    char err[512];
    nx_status st = srv_start(m, em, &p, &s, err, sizeof err);
    if (st) {
        fprintf(stderr, "nexus serve: %s\n", err);
        nx_model_free(em);
        nx_model_free(m);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "nexus serve: %s on http://%s:%d (%d slot%s, model %s)\n", p.model_name,
            p.host, srv_port(s), p.engine.n_slots, p.engine.n_slots == 1 ? "" : "s",
            nx_model_desc(m));
    fflush(stderr);
    while (!g_stop) pause();
    fprintf(stderr, "nexus serve: stopping\n");
    srv_stop(s);
    nx_model_free(em);
    nx_model_free(m);
    return 0;
}
