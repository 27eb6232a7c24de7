/* task_eval.c - `nexus task-eval`: parses the flags, loads the model and runs task_eval_run
 * (src/eval/task_eval.h, where the protocol is). */
#include "task_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "eval/task_eval.h"
#include "nexus.h"

enum { TE_MAX_ITEMS = 32 };

static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *p = strtok(s, ","); p && n < max; p = strtok(NULL, ",")) out[n++] = p;
    return n;
}

static void usage(FILE *o) {
    fprintf(o, "usage: nexus task-eval -m MODEL --tasks FILE.jsonl [--policies full,streaming,...]\n"
               "         [--densities 0.2,...] [--reference full|SPEC] [--seeds N] [--seed S]\n"
               "         [-t THREADS] [--json OUT]\n"
               "  Exact-match accuracy per policy x density x task, paired against the reference.\n"
               "  SPEC: NAME or NAME/OPT/...: nexus/topk, nexus/fresh, nexus/perhead,\n"
               "  nexus/matchkv, nexus/meanvec, or NAME/option=value (e.g. nexus/nexus.n=1).\n"
               "  -t N runs N instances at once (one thread each); same numbers at any N.\n");
}

int task_eval_main(int argc, char **argv) {
    const char *model = NULL, *tasks = NULL, *json_out = NULL, *ref = "full";
    char pol_buf[1024] = "full,streaming,h2o,snapkv,tova,nexus", den_buf[256] = "0.2";
    int threads = 1, n_seeds = 1;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "task-eval: missing value for %s\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--tasks")) tasks = v;
        else if (!strcmp(a, "--json")) json_out = v;
        else if (!strcmp(a, "--policies")) snprintf(pol_buf, sizeof pol_buf, "%s", v);
        else if (!strcmp(a, "--densities")) snprintf(den_buf, sizeof den_buf, "%s", v);
        else if (!strcmp(a, "--reference")) ref = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--seeds")) n_seeds = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "task-eval: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !tasks || threads < 1 || threads > 64 || n_seeds < 1 || n_seeds > 64) {
        usage(stderr);
        return 2;
    }
    char *pols[TE_MAX_ITEMS], *dens_s[TE_MAX_ITEMS];
    int np = split_list(pol_buf, pols, TE_MAX_ITEMS), nd = split_list(den_buf, dens_s, TE_MAX_ITEMS);
    double dens[TE_MAX_ITEMS];
    for (int i = 0; i < nd; i++) {
        char *e;
        dens[i] = strtod(dens_s[i], &e);
        if (*e || !(dens[i] > 0 && dens[i] <= 1)) {
            fprintf(stderr, "task-eval: bad density '%s'\n", dens_s[i]);
            return 2;
        }
    }
    nx_model *m;
    char err[256];
    if (nx_model_load(model, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "task-eval: %s\n", err);
        return 1;
    }
    struct task_eval_params p = {.tasks = tasks,
                                 .policies = (const char *const *)pols,
                                 .n_policies = np,
                                 .densities = dens,
                                 .density_names = (const char *const *)dens_s,
                                 .n_densities = nd,
                                 .reference = ref,
                                 .seeds = n_seeds,
                                 .threads = threads,
                                 .seed = seed,
                                 .json_path = json_out};
    int rc = cli_exit_status(task_eval_run(m, &p));
    nx_model_free(m);
    return rc;
}
