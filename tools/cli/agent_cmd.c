/*
 * agent_cmd.c - `nexus agent` and `nexus eval-toolpath`.
 *
 *   nexus agent -m MODEL --mcp CONFIG [--steps N] [--trace OUT.json] [--tool-choice auto|required]
 *               [-k K] [--template SPEC] [--budget BYTES] [--window TOKENS] [--arg-tokens N]
 *               [-c CTX] [-t N] [--timeout-ms MS] "task"
 */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent_cmd.h"
#include "args.h"
#include "core/alloc.h"
#include "core/json.h"
#include "eval/toolpath.h"

static const char *const k_choices[] = {"auto", "required", NULL};

static void agent_usage(void) {
    fprintf(stderr,
            "usage: nexus agent -m MODEL --mcp CONFIG [--steps N] [--trace OUT.json]\n"
            "                   [--tool-choice auto|required] [-k K] [--template SPEC]\n"
            "                   [--budget BYTES] [--window TOKENS] [--arg-tokens N] [-c CTX] [-t N]\n"
            "                   [--timeout-ms MS] \"task\"\n"
            "One agent turn: the router picks the top-k tools of the MCP servers, their signatures\n"
            "enter the prompt, the model picks one (or answers), its arguments are generated in a\n"
            "sidecar sequence under the tool's full schema, the call runs through MCP and its result\n"
            "comes back as a bounded surrogate; until the model answers or --steps calls.\n");
}

int agent_main(int argc, char **argv) {
    struct ag_agent_params p = {0};
    int choice = 0;
    long budget = 0;
    const char *pos[1] = {NULL};
    int n_pos = 0;
    const struct arg tab[] = {
        A_STR("-m", "--model", &p.model),
        A_STR("--mcp", NULL, &p.mcp_config),
        A_STR("--trace", NULL, &p.trace_path),
        A_STR("--template", NULL, &p.tmpl),
        A_INT("--steps", NULL, &p.turn.steps, 1, 64),
        A_CHOICE("--tool-choice", NULL, &choice, k_choices),
        A_INT("-k", "--top-k", &p.k, 1, 16),
        A_LONG("--budget", NULL, &budget, 96, 1 << 24),
        A_I32("--window", NULL, &p.sidecar.window_tokens, 1, 1 << 20),
        A_I32("--arg-tokens", NULL, &p.sidecar.max_tokens, 8, 1 << 16),
        A_I32("--answer-tokens", NULL, &p.turn.answer_tokens, 1, 1 << 16),
        A_I32("-c", "--ctx", &p.n_ctx, 64, 1 << 20),
        A_INT("-t", "--threads", &p.threads, 1, 512),
        A_INT("--timeout-ms", NULL, &p.timeout_ms, 1, 3600 * 1000),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int r = args_parse(tabs, argc, argv, 1, "nexus agent", true, pos, 1, &n_pos);
    if (r == ARGS_HELP) {
        agent_usage();
        return 0;
    }
    if (r != ARGS_OK) return 2;
    if (!p.model || !p.mcp_config || n_pos != 1) {
        fprintf(stderr, "nexus agent: %s\n", !p.model ? "no model (-m MODEL)"
                                             : !p.mcp_config ? "no MCP config (--mcp CONFIG)"
                                                             : "no task (the last argument)");
        agent_usage();
        return 2;
    }
    p.task = pos[0];
    p.turn.choice = choice == 1 ? AG_TOOL_REQUIRED : AG_TOOL_AUTO;
    p.budget = (size_t)budget;
    json_t *trace = NULL;
    char err[1024];
    if (ag_agent_run(&p, &trace, err, sizeof err)) {
        fprintf(stderr, "nexus agent: %s\n", err);
        return 1;
    }
    json_t *steps = json_object_get(trace, "steps"), *s;
    size_t i;
    json_array_foreach(steps, i, s) {
        json_t *call = json_object_get(s, "call"), *res = json_object_get(s, "result");
        if (!call) continue;
        printf("step %zu: %s %s -> %s%s (%lld bytes, surrogate %lld; ttfa %.1f ms)\n", i + 1,
               json_string_value(json_object_get(call, "name")),
               json_string_value(json_object_get(call, "arguments")),
               json_is_true(json_object_get(res, "is_error")) ? "error: " : "ok: ",
               json_string_value(json_object_get(res, "status")),
               (long long)json_integer_value(json_object_get(res, "bytes")),
               (long long)json_integer_value(json_object_get(res, "surrogate_bytes")),
               json_real_value(json_object_get(json_object_get(s, "sidecar"), "ttfa_ms")));
    }
    printf("stop: %s\nanswer: %s\n", json_string_value(json_object_get(trace, "stop")),
           json_string_value(json_object_get(trace, "answer")));
    if (p.trace_path) printf("trace: %s\n", p.trace_path);
    json_decref(trace);
    return 0;
}

int eval_toolpath_main(int argc, char **argv) {
    struct toolpath_params p = toolpath_default_params();
    const char *sizes = "10,50,100,250";
    long seed = 1;
    const struct arg tab[] = {
        A_STR("-m", "--model", &p.model_path),
        A_STR("--sizes", NULL, &sizes),
        A_STR("--mcp-dir", NULL, &p.mcp_dir),
        A_STR("--bfcl", NULL, &p.bfcl),
        A_INT("--queries", NULL, &p.queries, 1, 1024),
        A_INT("-k", "--top-k", &p.k, 1, 16),
        A_INT("--arg-tokens", NULL, &p.arg_tokens, 8, 4096),
        A_I32("--ctx-limit", NULL, &p.ctx_limit, 64, 1 << 22),
        A_I32("--max-prompt", NULL, &p.max_prompt, 64, 1 << 22),
        A_INT("-t", "--threads", &p.threads, 1, 512),
        A_LONG("--seed", NULL, &seed, 0, 1L << 40),
        A_STR("--json", NULL, &p.json),
        A_STR("--svg", NULL, &p.svg),
        A_FLAG("--static-once", NULL, &p.static_once),
        A_INT("--reps", NULL, &p.reps, 1, 64),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int r = args_parse(tabs, argc, argv, 1, "nexus eval-toolpath", true, NULL, 0, NULL);
    if (r == ARGS_HELP) {
        fprintf(stderr,
                "usage: nexus eval-toolpath -m MODEL [--sizes 10,50,100,250] [--queries 4] [-k 5]\n"
                "                           [--arg-tokens 64] [--ctx-limit 8192] [--max-prompt 32768]\n"
                "                           [--mcp-dir DIR] [--bfcl FILE] [-t N] [--seed S]\n"
                "                           [--json OUT] [--svg FILE] [--static-once] [--reps 1]\n"
                "The tool path's cost, four arms (all schemas, top-k schemas, top-k spliced blocks,\n"
                "nexus: routing + signatures + sidecar) over registries of N tools: prompt tokens,\n"
                "time to the first argument token cold and with the static prompt cached, fit, validity.\n"
                "--static-once: prefill the all arm's static prompt once per size (cold = that + cached).\n"
                "--reps R: the all arm's cached TTFA and nexus's TTFA measured R times per query (medians).\n");
        return 0;
    }
    if (r != ARGS_OK) return 2;
    if (!p.model_path) {
        fprintf(stderr, "nexus eval-toolpath: no model (-m MODEL)\n");
        return 2;
    }
    int v[TOOLPATH_MAX_SIZES];
    p.n_sizes = args_int_list(sizes, 2, 1 << 20, v, TOOLPATH_MAX_SIZES);
    if (p.n_sizes <= 0) {
        fprintf(stderr, "nexus eval-toolpath: --sizes: expected up to %d comma-separated integers >= 2: %s\n",
                TOOLPATH_MAX_SIZES, sizes);
        return 2;
    }
    for (int i = 0; i < p.n_sizes; i++) p.sizes[i] = v[i];
    p.seed = (uint64_t)seed;
    char err[512];
    nx_model *m = NULL;
    if (nx_model_load(p.model_path, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "nexus eval-toolpath: %s\n", err);
        return 1;
    }
    int rc = toolpath_run(m, &p);
    nx_model_free(m);
    return rc;
}
