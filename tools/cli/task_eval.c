/* task_eval.c - `nexus task-eval`: parses the flags, loads the model and runs task_eval_run
 * (src/eval/task_eval.h, where the protocol is). */
#include "task_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "eval/eval.h"
#include "eval/task_eval.h"
#include "nexus.h"

enum { TE_MAX_ITEMS = 32 };

static void usage(FILE *o) {
    fprintf(o, "usage: nexus task-eval -m MODEL --tasks FILE.jsonl [--policies full,streaming,...]\n"
               "         [--densities 0.2,...] [--regimes prefill|stream|prefill,stream]\n"
               "         [--reference full|SPEC] [--seeds N] [--seed S] [-t THREADS] [--json OUT]\n"
               "         [--svg FILE]\n"
               "  Exact-match accuracy per policy x density x regime x task, paired against the\n"
               "  reference. prefill: the prompt is compressed once, at its end; stream: it is\n"
               "  decoded token by token, evicting whenever a layer is a block over its budget.\n"
               "  SPEC: NAME or NAME/OPT/...: nexus/topk, nexus/fresh, nexus/perhead,\n"
               "  nexus/matchkv, nexus/meanvec, oracle/values, or NAME/option=value (e.g.\n"
               "  nexus/nexus.n=1).\n"
               "  -t N runs N instances at once (one thread each); same numbers at any N.\n");
}

int task_eval_main(int argc, char **argv) {
    const char *model = NULL, *tasks = NULL, *json_out = NULL, *svg_out = NULL, *ref = "full";
    const char *pol_arg = "full,streaming,h2o,snapkv,tova,nexus", *den_arg = "0.2";
    const char *reg_arg = "prefill";
    int threads = 1, n_seeds = 1;
    uint64_t seed = 1;
    const struct arg tab[] = {
        A_STR("-m", "--model", &model),
        A_STR("--tasks", NULL, &tasks),
        A_STR("--json", NULL, &json_out),
        A_STR("--svg", NULL, &svg_out),
        A_STR("--policies", NULL, &pol_arg),
        A_STR("--densities", NULL, &den_arg),
        A_STR("--regimes", NULL, &reg_arg),
        A_STR("--reference", NULL, &ref),
        A_INT("-t", "--threads", &threads, 1, 64),
        A_INT("--seeds", NULL, &n_seeds, 1, 64),
        A_U64("--seed", NULL, &seed, 0, 0),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int r = args_parse(tabs, argc, argv, 1, "nexus task-eval", true, NULL, 0, NULL);
    if (r == ARGS_HELP) {
        usage(stdout);
        return 0;
    }
    if (r != ARGS_OK) return 2;
    if (!model || !tasks) {
        usage(stderr);
        return 2;
    }
    char pol_buf[1024], den_buf[256], reg_buf[64];
    char *pols[TE_MAX_ITEMS], *dens_s[TE_MAX_ITEMS], *regs_s[TE_MAX_ITEMS];
    int np = eval_split_list(pol_arg, pol_buf, sizeof pol_buf, pols, TE_MAX_ITEMS,
                             "nexus task-eval", "policies");
    int nd = eval_split_list(den_arg, den_buf, sizeof den_buf, dens_s, TE_MAX_ITEMS,
                             "nexus task-eval", "densities");
    int nr = eval_split_list(reg_arg, reg_buf, sizeof reg_buf, regs_s, TE_MAX_ITEMS,
                             "nexus task-eval", "regimes");
    if (np < 0 || nd < 0 || nr < 0) return 2;
    double dens[TE_MAX_ITEMS];
    for (int i = 0; i < nd; i++) {
        if (!args_double(dens_s[i], &dens[i]) || !(dens[i] > 0 && dens[i] <= 1)) {
            fprintf(stderr, "nexus task-eval: bad density '%s'\n", dens_s[i]);
            return 2;
        }
    }
    int regs[2];
    if (nr < 1 || nr > 2) {
        fprintf(stderr, "nexus task-eval: --regimes: one or both of prefill, stream\n");
        return 2;
    }
    for (int i = 0; i < nr; i++) {
        if ((regs[i] = eval_regime_from_name(regs_s[i])) < 0) {
            fprintf(stderr, "nexus task-eval: unknown regime '%s' (prefill or stream)\n", regs_s[i]);
            return 2;
        }
        if (i == 1 && regs[1] == regs[0]) {
            fprintf(stderr, "nexus task-eval: regime '%s' given twice\n", regs_s[i]);
            return 2;
        }
    }
    nx_model *m;
    char err[256];
    if (nx_model_load(model, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "nexus task-eval: %s\n", err);
        return 1;
    }
    struct task_eval_params p = {.tasks = tasks,
                                 .policies = (const char *const *)pols,
                                 .n_policies = np,
                                 .densities = dens,
                                 .density_names = (const char *const *)dens_s,
                                 .n_densities = nd,
                                 .regimes = regs,
                                 .n_regimes = nr,
                                 .reference = ref,
                                 .seeds = n_seeds,
                                 .threads = threads,
                                 .seed = seed,
                                 .json_path = json_out,
                                 .svg_path = svg_out};
    int rc = cli_exit_status(task_eval_run(m, &p));
    nx_model_free(m);
    return rc;
}
