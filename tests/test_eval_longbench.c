/* test_eval_longbench.c - LongBench jsonl reader (fields, blank lines, one error per malformed
 * file naming FILE:LINE and the problem), dataset -> metric table, per-dataset scoring on hand
 * cases, middle truncation, the prompt template, and eval-longbench end to end on stories260K. */
#include <jansson.h>
#include <unistd.h>

#include "core/alloc.h"
#include "eval/longbench_run.h"
#include "eval/longbench.h"
#include "test.h"

#define FIX "tests/fixtures/eval/"

TEST(longbench_reads_every_field) {
    struct lb_set s;
    char err[512];
    ASSERT_OK(lb_load(FIX "lb_mixed.jsonl", 0, &s, err, sizeof err));
    ASSERT_EQ(s.n, 8);
    const struct lb_record *r = &s.r[0];
    ASSERT_STR_EQ(r->dataset, "hotpotqa");
    ASSERT_STR_EQ(r->id, "hq-1");
    ASSERT_STR_EQ(r->language, "en");
    ASSERT_STR_EQ(r->input, "Where did Lily and Tom go?");
    ASSERT_EQ(r->n_answers, 2);
    ASSERT_STR_EQ(r->answers[1], "to the park");
    ASSERT_NEAR(r->length, 480, 0);
    ASSERT_TRUE(r->classes == NULL);
    ASSERT_EQ(r->line, 1);
    ASSERT_EQ(s.r[2].n_classes, 4);
    ASSERT_STR_EQ(s.r[2].classes[3], "Person");
    ASSERT_EQ(s.r[3].line, 5); /* line 4 is blank */
    ASSERT_STR_EQ(s.r[7].answers[0], "\xe4\xb8\x80\xe6\x9c\xac\xe4\xb9\xa6"); /* UTF-8 intact */
    lb_free(&s);
    ASSERT_OK(lb_load(FIX "lb_mixed.jsonl", 3, &s, err, sizeof err));
    ASSERT_EQ(s.n, 3);
    lb_free(&s);
    lb_free(&s); /* idempotent */
}

static void expect_error(const char *file, const char *where, const char *what) {
    struct lb_set s;
    char err[512] = "";
    nx_status want = strstr(file, "nonexistent") ? NX_STATUS_IO : NX_STATUS_FORMAT;
    if (lb_load(file, 0, &s, err, sizeof err) != want) FAILF("%s loaded (or another error)", file);
    if (!strstr(err, where) || !strstr(err, what)) FAILF("%s: got '%s'", file, err);
    if (s.n != 0 || s.r != NULL) FAILF("%s: partial records left", file);
}

TEST(longbench_malformed_lines_name_file_and_line) {
    expect_error(FIX "lb_bad_json.jsonl", "lb_bad_json.jsonl:2:", "invalid JSON");
    expect_error(FIX "lb_bad_answers.jsonl", "lb_bad_answers.jsonl:3:",
                 "'answers' must be a non-empty list of strings");
    expect_error(FIX "lb_missing_field.jsonl", "lb_missing_field.jsonl:1:", "missing field 'context'");
    expect_error(FIX "lb_unknown_dataset.jsonl", "lb_unknown_dataset.jsonl:2:", "unknown dataset");
    expect_error(FIX "lb_trec_no_classes.jsonl", "lb_trec_no_classes.jsonl:1:", "all_classes");
    expect_error(FIX "lb_bad_length.jsonl", "lb_bad_length.jsonl:1:", "'length' must be a number");
    expect_error(FIX "lb_not_object.jsonl", "lb_not_object.jsonl:1:", "expected a JSON object");
    expect_error(FIX "lb_empty.jsonl", "lb_empty.jsonl", "no records");
    expect_error(FIX "nonexistent.jsonl", "nonexistent.jsonl", "cannot open");
}

TEST(longbench_dataset_table) {
    enum lb_metric m;
    int mx, first;
    ASSERT_OK(lb_dataset_info("hotpotqa", &m, &mx, &first));
    ASSERT_EQ(m, LB_QA_F1);
    ASSERT_EQ(mx, 32);
    ASSERT_EQ(first, 0);
    ASSERT_OK(lb_dataset_info("trec_e", &m, &mx, &first));
    ASSERT_EQ(m, LB_CLASSIFICATION);
    ASSERT_EQ(first, 1);
    ASSERT_OK(lb_dataset_info("gov_report", &m, &mx, NULL));
    ASSERT_EQ(m, LB_ROUGE);
    ASSERT_EQ(mx, 512);
    ASSERT_OK(lb_dataset_info("repobench-p_e", &m, NULL, NULL));
    ASSERT_EQ(m, LB_CODE_SIM);
    ASSERT_OK(lb_dataset_info("passage_retrieval_zh", &m, NULL, NULL));
    ASSERT_EQ(m, LB_RETRIEVAL);
    ASSERT_OK(lb_dataset_info("vcsum", &m, NULL, NULL));
    ASSERT_EQ(m, LB_UNSUPPORTED);
    ASSERT_EQ(lb_dataset_info("hotpot", &m, NULL, NULL), -1);
    ASSERT_EQ(lb_dataset_info("_e", &m, NULL, NULL), -1);
    ASSERT_EQ(lb_dataset_info(NULL, &m, NULL, NULL), -1);
}

TEST(longbench_scores_hand_cases) {
    struct lb_set s;
    char err[512];
    ASSERT_OK(lb_load(FIX "lb_mixed.jsonl", 0, &s, err, sizeof err));
    /* qa_f1, max over answers: "park" vs "the park" -> 1; vs "to the park" -> 2*1*0.5/1.5 */
    ASSERT_NEAR(lb_score(&s.r[0], "park"), 1.0, 1e-12);
    ASSERT_NEAR(lb_score(&s.r[0], "to park now"), 0.8, 1e-12); /* P 2/3, R 1 vs "to the park" */
    /* triviaqa: first line only */
    ASSERT_NEAR(lb_score(&s.r[1], "\nred\nblue"), 1.0, 0);
    ASSERT_NEAR(lb_score(&s.r[1], "blue\nred"), 0.0, 0);
    /* trec: classes in the prediction; two classes -> 1/2 */
    ASSERT_NEAR(lb_score(&s.r[2], "Yes/No"), 1.0, 0);
    ASSERT_NEAR(lb_score(&s.r[2], "Yes/No or Person"), 0.5, 0);
    ASSERT_NEAR(lb_score(&s.r[2], "Person"), 0.0, 0);
    /* retrieval: numbers in the prediction equal to 2 */
    ASSERT_NEAR(lb_score(&s.r[3], "Paragraph 2"), 1.0, 0);
    ASSERT_NEAR(lb_score(&s.r[3], "Paragraph 2, not 1 or 3, maybe 2"), 0.5, 0);
    ASSERT_NEAR(lb_score(&s.r[3], "none"), 0.0, 0);
    /* count */
    ASSERT_NEAR(lb_score(&s.r[4], "There are 2 unique paragraphs."), 1.0, 0);
    ASSERT_NEAR(lb_score(&s.r[4], "3 or 2"), 0.5, 0);
    /* code: the first line without a comment marker */
    ASSERT_NEAR(lb_score(&s.r[5], "# add them\nreturn a + b\n"), 1.0, 0);
    /* "return a+b" vs "return a + b": LCS 10, lengths 10 + 12 */
    ASSERT_NEAR(lb_score(&s.r[5], "return a+b"), 20.0 / 22.0, 1e-12);
    /* rouge-L over words */
    ASSERT_NEAR(lb_score(&s.r[6], "a bird sang every morning"), 1.0, 1e-12);
    ASSERT_TRUE(isnan(lb_score(&s.r[7], "一本书")));
    lb_free(&s);
}

TEST(longbench_truncate_middle_and_template) {
    nx_token t[10];
    for (int i = 0; i < 10; i++) t[i] = i;
    ASSERT_EQ(longbench_truncate_middle(t, 10, 5), 5);
    static const int want[5] = {0, 1, 7, 8, 9};
    for (int i = 0; i < 5; i++) ASSERT_EQ(t[i], want[i]);
    ASSERT_EQ(longbench_truncate_middle(t, 5, 5), 5);
    ASSERT_EQ(longbench_truncate_middle(t, 5, 9), 5);
    char *p = longbench_prompt(NULL, "CTX", "Q?");
    ASSERT_STR_EQ(p, "CTX\n\nQ?\n");
    nx_free(p);
    p = longbench_prompt("Read: {context} -- {input} {input} {x}", "C", "I");
    ASSERT_STR_EQ(p, "Read: C -- I I {x}");
    nx_free(p);
}

TEST(eval_longbench_end_to_end) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    nx_model *m = NULL;
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    char js[] = "/tmp/nx_test_lb_XXXXXX";
    close(mkstemp(js));
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct longbench_params lp = longbench_default_params();
    lp.data = FIX "lb_mixed.jsonl";
    lp.policies = "full,nexus";
    lp.max_len = 200; /* the hotpotqa record is ~500 tokens: middle-truncated */
    lp.max_new = 6;
    lp.threads = 1;
    lp.json_path = js;
    lp.base = &base;
    ASSERT_EQ(eval_longbench_run(m, &lp), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    unlink(js);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 16); /* 8 datasets x (full, nexus 0.2) */
    int seen_trunc = 0, seen_unsup = 0;
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *r = json_array_get(root, i);
        const char *ds = json_string_value(json_object_get(r, "dataset"));
        json_t *sc = json_object_get(r, "score");
        if (!strcmp(ds, "dureader")) {
            ASSERT_TRUE(json_is_null(sc));
            seen_unsup += (int)json_integer_value(json_object_get(r, "unsupported"));
        } else {
            ASSERT_TRUE(json_number_value(sc) >= 0 && json_number_value(sc) <= 100);
        }
        if (!strcmp(ds, "hotpotqa"))
            seen_trunc += (int)json_integer_value(json_object_get(r, "truncated"));
    }
    ASSERT_EQ(seen_trunc, 2);
    ASSERT_EQ(seen_unsup, 2);
    json_decref(root);
    lp.json_path = NULL;
    lp.data = FIX "lb_bad_answers.jsonl";
    ASSERT_EQ(eval_longbench_run(m, &lp), NX_STATUS_FORMAT);
    nx_model_free(m);
}

TEST_MAIN
