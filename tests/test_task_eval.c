/*
 * test_task_eval.c - `nexus task-eval` (tools/cli/task_eval.c) on the committed retrieval model.
 * Oracle: torch's own argmax at the answer positions (models/nexus-retrieval/torch_ref.json,
 * written by the training scripts; the engine never computed it): the dense accuracy must be
 * exactly the share of answers torch gets right. Also: same numbers for 1, 2 and 4 threads
 * under every kind of policy (bounds, Nexus variants, several seeds), and malformed task files,
 * references and policy specs are refused.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/readfile.h"
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

/* field (a real) of (policy, regime, task "all") in a task-eval JSON file (regime NULL: any);
   -1 if absent */
static double field_of(const char *path, const char *policy, const char *regime, const char *field) {
    json_error_t je;
    json_t *a = json_load_file(path, 0, &je);
    double v = -1;
    for (size_t i = 0; a && i < json_array_size(a); i++) {
        json_t *o = json_array_get(a, i);
        if (!strcmp(json_string_value(json_object_get(o, "policy")), policy) &&
            (!regime || !strcmp(json_string_value(json_object_get(o, "regime")), regime)) &&
            !strcmp(json_string_value(json_object_get(o, "task")), "all"))
            v = json_real_value(json_object_get(o, field));
    }
    json_decref(a);
    return v;
}

/* accuracy of (policy, task "all"), the prefill regime's where there are both */
static double acc_of(const char *path, const char *policy) {
    double v = field_of(path, policy, "prefill", "accuracy");
    return v >= 0 ? v : field_of(path, policy, NULL, "accuracy");
}

TEST(dense_accuracy_equals_torch) {
    char tasks[256], out[256];
    double expect = 0;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    ASSERT_TRUE(expect > 0.5); /* the model answers most held-out 512-token queries */
    ASSERT_EQ(run(tasks, "full", "1", test_tmp_path("full.json", out, sizeof out)), 0);
    ASSERT_NEAR(acc_of(out, "full"), expect, 1e-9);
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int ca, cb, same = fa && fb;
    do {
        ca = fa ? fgetc(fa) : EOF;
        cb = fb ? fgetc(fb) : EOF;
        same &= ca == cb;
    } while (ca != EOF && cb != EOF);
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Same seed, same numbers, for 1, 2 and 4 threads: every bound (both oracles), Nexus variants
   with fixed and fresh draws, several eviction seeds. */
TEST(same_numbers_for_every_thread_count) {
    char tasks[256], a[256], b[256];
    double expect;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    const char *pols = "full,nexus,nexus/fresh/topk,nexus/perhead/matchkv,snapkv,random,bottomk,"
                       "oracle,oracle/values";
    const char *threads[] = {"1", "2", "4"};
    test_tmp_path("a.json", a, sizeof a);
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies", pols,
                              "--densities", "0.2", "--regimes", "prefill,stream", "--seeds", "2",
                              "-t", threads[i], "--json",
                              i == 0 ? a : test_tmp_path("b.json", b, sizeof b), NULL};
        ASSERT_EQ(test_cli(args, false, NULL), 0);
        if (i > 0 && !same_file(a, b)) FAILF("%s threads differ from 1", threads[i]);
    }
    /* an evicting policy holds less and answers no more than the dense cache here; the
       oracle (it knows the future queries) answers at least what random selection does */
    ASSERT_TRUE(acc_of(a, "nexus") >= 0 && acc_of(a, "nexus") <= acc_of(a, "full"));
    ASSERT_TRUE(acc_of(a, "oracle") >= acc_of(a, "random"));
    ASSERT_TRUE(acc_of(a, "oracle/values") >= acc_of(a, "random"));
}

/*
 * The stream regime decodes the prompt token by token and evicts whenever a layer holds a block
 * more than its budget, so after the prompt it holds between the budget and a block more (the
 * prefill regime compresses to the budget once, at the end): more KV on average, for the same
 * budget. The oracle has no stream form (no row); full runs once (regime "any").
 */
TEST(stream_regime_evicts_as_the_prompt_arrives) {
    char tasks[256], out[256], svg[256];
    double expect;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    test_tmp_path("s.json", out, sizeof out);
    test_tmp_path("s.svg", svg, sizeof svg);
    const char *args[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies",
                          "full,streaming,snapkv,oracle", "--densities", "0.2", "--regimes",
                          "prefill,stream", "--json", out, "--svg", svg, NULL};
    ASSERT_EQ(test_cli(args, false, NULL), 0);
    /* the plot: a panel per regime, a line per policy (the oracle in the prefill panel only) */
    char rerr[256];
    size_t flen;
    char *fig = nx_read_file(svg, 1 << 20, &flen, rerr, sizeof rerr);
    ASSERT_TRUE(fig != NULL);
    const char *p_pre = strstr(fig, ">prefill regime<"), *p_str = strstr(fig, ">stream regime<");
    ASSERT_TRUE(p_pre && p_str && p_pre < p_str);
    ASSERT_TRUE(strstr(fig, ">snapkv<") && strstr(fig, ">oracle<") && strstr(fig, ">full<"));
    nx_free(fig);
    ASSERT_NEAR(field_of(out, "full", "any", "accuracy"), expect, 1e-9);
    for (int i = 0; i < 2; i++) {
        const char *pol = i ? "snapkv" : "streaming";
        double pre = field_of(out, pol, "prefill", "kv_held_share");
        double str = field_of(out, pol, "stream", "kv_held_share");
        ASSERT_TRUE(pre > 0 && str > 0);
        if (!(str > pre)) FAILF("%s: stream regime holds %.4f of the prompt, prefill %.4f", pol, str, pre);
        ASSERT_TRUE(field_of(out, pol, "stream", "accuracy") >= 0);
    }
    ASSERT_TRUE(field_of(out, "oracle", "prefill", "accuracy") >= 0);
    ASSERT_TRUE(field_of(out, "oracle", "stream", "accuracy") < 0);
    const char *bad[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--regimes", "prefill,bogus",
                         "--json", out, NULL};
    ASSERT_TRUE(test_cli(bad, false, NULL) != 0);
}

TEST(bad_reference_and_spec_refused) {
    char tasks[256], out[256];
    double expect;
    ASSERT_EQ(write_tasks(test_tmp_path("t.jsonl", tasks, sizeof tasks), &expect), 0);
    test_tmp_path("r.json", out, sizeof out);
    const char *a1[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies", "full,nexus",
                        "--reference", "snapkv", "--json", out, NULL};
    ASSERT_TRUE(test_cli(a1, false, NULL) != 0);
    const char *a2[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies",
                        "full,nexus/bogus", "--json", out, NULL};
    ASSERT_TRUE(test_cli(a2, false, NULL) != 0);
    const char *a3[] = {"task-eval", "-m", MODEL, "--tasks", tasks, "--policies",
                        "full,nexus/nexus.n=0", "--json", out, NULL};
    ASSERT_TRUE(test_cli(a3, false, NULL) != 0);
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
