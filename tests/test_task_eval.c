/*
 * test_task_eval.c - `nexus task-eval` (tools/cli/task_eval.c) on the committed retrieval model.
 * Oracle: torch's own argmax at the answer positions (models/nexus-retrieval/torch_ref.json,
 * written by the training scripts; the engine never computed it): the dense accuracy must be
 * exactly the share of answers torch gets right. Also: same numbers for 1 and 2 threads under
 * an evicting policy, and malformed task files are refused.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "eval/task_eval.h"
#include "nexus.h"
#include "support/cli.h"
#include "support/tmpdir.h"
#include "test.h"

#define MODEL "models/nexus-retrieval/nexus-retrieval.gguf"
#define REF "models/nexus-retrieval/torch_ref.json"

/* Tasks file from torch_ref.json (one query per answer position); *expect = torch's accuracy. */
static int write_tasks(const char *path, double *expect) {
    json_error_t je;
    json_t *r = json_load_file(REF, 0, &je);
    if (!r) return 1;
    FILE *f = fopen(path, "w");
    int right = 0, total = 0;
    json_t *seqs = json_object_get(r, "sequences");
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        json_t *s = json_array_get(seqs, i);
        json_t *toks = json_object_get(s, "tokens"), *pos = json_object_get(s, "check_pos");
        json_t *am = json_object_get(s, "argmax");
        json_t *ans = json_array();
        for (size_t j = 0; j < json_array_size(pos); j++) {
            json_int_t p = json_integer_value(json_array_get(pos, j));
            json_array_append_new(ans, json_pack("[I]", p + 1));
            right += json_integer_value(json_array_get(am, j)) ==
                     json_integer_value(json_array_get(toks, (size_t)p + 1));
            total++;
        }
        json_int_t first = json_integer_value(json_array_get(pos, 0));
        json_t *o = json_pack("{s:O,s:O,s:I,s:o}", "task", json_object_get(s, "task"), "tokens",
                              toks, "prompt_len", first - 1, "answers", ans);
        char *line = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        nx_free(line); /* jansson allocates through nx_malloc */
        json_decref(o);
    }
    fclose(f);
    json_decref(r);
    *expect = (double)right / total;
    return 0;
}

static int run(const char *tasks, const char *policies, const char *threads, const char *out) {
    const char *args[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies", policies,
                          "--densities", "0.2", "-t", threads, "--json", out, NULL};
    return test_cli(args, false, NULL);
}

/* accuracy of (policy, task "all") in a task-eval JSON file; -1 if absent */
static double acc_of(const char *path, const char *policy) {
    json_error_t je;
    json_t *a = json_load_file(path, 0, &je);
    double v = -1;
    for (size_t i = 0; a && i < json_array_size(a); i++) {
        json_t *o = json_array_get(a, i);
        if (!strcmp(json_string_value(json_object_get(o, "policy")), policy) &&
            !strcmp(json_string_value(json_object_get(o, "task")), "all"))
            v = json_real_value(json_object_get(o, "accuracy"));
    }
    json_decref(a);
    return v;
}

TEST(dense_accuracy_equals_torch) {
    char tasks[256], out[256];
    double expect = 0;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    ASSERT_TRUE(expect > 0.5); /* the model answers most held-out 512-token queries */
    ASSERT_EQ(run(tasks, "full", "1", test_tmp_path("full.json", out, sizeof out)), 0);
    ASSERT_NEAR(acc_of(out, "full"), expect, 1e-9);
}

TEST(same_numbers_for_every_thread_count) {
    char tasks[256], a[256], b[256];
    double expect;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    ASSERT_EQ(run(tasks, "full,nexus,snapkv", "1", test_tmp_path("a.json", a, sizeof a)), 0);
    ASSERT_EQ(run(tasks, "full,nexus,snapkv", "2", test_tmp_path("b.json", b, sizeof b)), 0);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int ca, cb, same = 1;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        same &= ca == cb;
    } while (ca != EOF && cb != EOF);
    fclose(fa);
    fclose(fb);
    ASSERT_TRUE(same);
    /* an evicting policy holds less and answers no more than the dense cache here */
    ASSERT_TRUE(acc_of(a, "nexus") >= 0 && acc_of(a, "nexus") <= acc_of(a, "full"));
}

TEST(malformed_tasks_refused) {
    const char *bad[] = {"{\"task\":\"x\"}\n", "not json\n",
                         "{\"task\":\"x\",\"tokens\":[1,2,3],\"prompt_len\":5,\"answers\":[[2]]}\n",
                         "{\"task\":\"x\",\"tokens\":[1,2,3,4],\"prompt_len\":1,\"answers\":[[1]]}\n",
                         "{\"task\":\"x\",\"tokens\":[1,99999,3],\"prompt_len\":1,\"answers\":[[2]]}\n",
                         "{\"task\":\"x\",\"tokens\":[1,2,3],\"prompt_len\":1,\"answers\":[[]]}\n", ""};
    char path[256], out[256];
    test_tmp_path("bad.jsonl", path, sizeof path);
    test_tmp_path("bad.json", out, sizeof out);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        if (run(path, "full", "1", out) == 0) FAILF("accepted bad file %zu: %s", i, bad[i]);
    }
    /* the library runner names the problem in its status */
    nx_model *m = NULL;
    char err[256];
    ASSERT_OK(nx_model_load(MODEL, NULL, &m, err, sizeof err));
    const char *pols[] = {"full", "nosuch"};
    double dens[] = {0.5};
    const char *dn[] = {"0.5"};
    struct task_eval_params p = {.tasks = path,
                                 .policies = pols,
                                 .n_policies = 1,
                                 .densities = dens,
                                 .density_names = dn,
                                 .n_densities = 1,
                                 .threads = 1,
                                 .seed = 1};
    ASSERT_EQ(task_eval_run(m, &p), NX_STATUS_FORMAT); /* the last bad file: empty */
    p.tasks = "/nonexistent/tasks.jsonl";
    ASSERT_EQ(task_eval_run(m, &p), NX_STATUS_IO);
    FILE *f = fopen(path, "w");
    fputs("{\"task\":\"x\",\"tokens\":[1,2,3,4],\"prompt_len\":2,\"answers\":[[3]]}\n", f);
    fclose(f);
    p.tasks = path;
    ASSERT_OK(task_eval_run(m, &p));
    dens[0] = 1.5;
    ASSERT_EQ(task_eval_run(m, &p), NX_STATUS_INVALID_ARG);
    dens[0] = 0.5;
    p.policies = pols + 1; /* unknown policy: nx_ctx_init's status */
    ASSERT_EQ(task_eval_run(m, &p), NX_STATUS_INVALID_ARG);
    nx_model_free(m);
}

TEST_MAIN
