/* test_eval_ruler.c - RULER-style generator and scorer: prompts fit the target length with the
 * model's own tokenizer (and come close to it), contain their needles / chains / word counts,
 * are seeded; string_match_all / part on hand cases; eval-ruler end to end on stories260K. */
#include <jansson.h>
#include <unistd.h>

#include "eval/ruler_run.h"
#include "eval/ruler.h"
#include "test.h"

static nx_model *g_model;

static nx_model *model(void) {
    if (!g_model) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
        if (nx_model_load(path, NULL, &g_model, err, sizeof err)) g_model = NULL;
    }
    return g_model;
}

static int32_t count_model(void *u, const char *text, size_t len) {
    const nx_model *m = u;
    int32_t n = nx_tokenize(m, text, len, NULL, 0, false, false);
    if (n == INT32_MIN) return -1;
    return (n < 0 ? -n : n) + 1; /* + BOS */
}

static int32_t count_words(void *u, const char *text, size_t len) {
    (void)u;
    int32_t n = 0, in = 0;
    for (size_t i = 0; i < len; i++) {
        int sp = text[i] == ' ' || text[i] == '\n';
        if (!sp && !in) n++;
        in = !sp;
    }
    return n;
}

static int occurrences(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* the prompt fits, and is within `slack` tokens of the target */
static void check_fit(const struct ruler_sample *s, int32_t target, int32_t slack) {
    ASSERT_TRUE(s->prompt != NULL);
    ASSERT_TRUE(s->n_tokens + s->max_new <= target);
    if (!(s->n_tokens + s->max_new > target - slack))
        FAILF("%s: %d + %d tokens, target %d, slack %d", ruler_task_name(s->task), s->n_tokens,
              s->max_new, target, slack);
}

TEST(ruler_prompts_fit_the_target_with_the_model_tokenizer) {
    nx_model *m = model();
    ASSERT_TRUE(m != NULL);
    char err[512];
    for (int t = 0; t < RULER_N_TASKS; t++) {
        struct ruler_sample s;
        ASSERT_OK(ruler_generate(t, 2048, 0, 7, count_model, m, &s, err, sizeof err));
        ASSERT_EQ(s.max_new, ruler_task_max_new(t));
        ASSERT_EQ(count_model(m, s.prompt, strlen(s.prompt)), s.n_tokens);
        /* the gap is below one haystack unit: a noise line or a word-key needle is < 64 tokens
           with this tokenizer, a uuid -> uuid needle (two 36-character uuids) < 128 */
        check_fit(&s, 2048, t == RULER_NIAH_MULTIKEY_3 ? 128 : 64);
        /* every reference answer is in the prompt */
        for (int a = 0; a < s.n_answers; a++)
            if (!strstr(s.prompt, s.answers[a])) FAILF("%s: answer '%s' not in the prompt",
                                                       ruler_task_name(t), s.answers[a]);
        ruler_sample_free(&s);
    }
}

TEST(ruler_niah_needles_and_queries) {
    char err[512];
    struct ruler_sample s;
    /* single: the needle sentence with the queried key and its 7-digit value */
    ASSERT_OK(ruler_generate(RULER_NIAH_SINGLE_1, 1000, 0, 3, count_words, NULL, &s, err, sizeof err));
    check_fit(&s, 1000, 20);
    ASSERT_EQ(s.n_answers, 1);
    ASSERT_EQ(strlen(s.answers[0]), 7);
    ASSERT_EQ(occurrences(s.prompt, "One of the special magic numbers for "), 1);
    const char *q = strstr(s.prompt, "What is the special magic number for ");
    ASSERT_TRUE(q != NULL);
    char key[64];
    ASSERT_EQ(sscanf(q + strlen("What is the special magic number for "), "%63s", key), 1);
    char needle[160];
    snprintf(needle, sizeof needle, "One of the special magic numbers for %s is: %s.", key,
             s.answers[0]);
    ASSERT_TRUE(strstr(s.prompt, needle) != NULL);
    ASSERT_TRUE(occurrences(s.prompt, "The grass is green.") > 20);
    ruler_sample_free(&s);
    /* multi-value: one key, 4 values, all placed; multi-query: 4 keys asked, 4 answers */
    ASSERT_OK(ruler_generate(RULER_NIAH_MULTIVALUE_NOISE, 1000, 0, 3, count_words, NULL, &s, err,
                             sizeof err));
    ASSERT_EQ(s.n_answers, 4);
    ASSERT_EQ(occurrences(s.prompt, "One of the special magic numbers for "), 4);
    ruler_sample_free(&s);
    ASSERT_OK(ruler_generate(RULER_NIAH_MULTIQUERY_NOISE, 1000, 0, 3, count_words, NULL, &s, err,
                             sizeof err));
    ASSERT_EQ(s.n_answers, 4);
    ASSERT_TRUE(strstr(s.prompt, "What are all the special magic numbers for ") != NULL);
    ruler_sample_free(&s);
    /* multikey_1: 4 needles, one asked */
    ASSERT_OK(ruler_generate(RULER_NIAH_MULTIKEY_1_NOISE, 1000, 0, 3, count_words, NULL, &s, err,
                             sizeof err));
    ASSERT_EQ(s.n_answers, 1);
    ASSERT_EQ(occurrences(s.prompt, "One of the special magic numbers for "), 4);
    ruler_sample_free(&s);
    /* multikey_2: the haystack is needles; only one carries the asked key */
    ASSERT_OK(ruler_generate(RULER_NIAH_MULTIKEY_2, 1000, 0, 3, count_words, NULL, &s, err, sizeof err));
    ASSERT_TRUE(occurrences(s.prompt, "One of the special magic numbers for ") > 20);
    ASSERT_EQ(occurrences(s.prompt, "The grass is green."), 0);
    ASSERT_EQ(s.n_needles, occurrences(s.prompt, "One of the special magic numbers for "));
    ruler_sample_free(&s);
    /* multikey_3: uuid keys and values */
    ASSERT_OK(ruler_generate(RULER_NIAH_MULTIKEY_3, 1000, 0, 3, count_words, NULL, &s, err, sizeof err));
    ASSERT_EQ(strlen(s.answers[0]), 36);
    ASSERT_EQ(s.answers[0][14], '4'); /* version 4 */
    ASSERT_TRUE(occurrences(s.prompt, "One of the special magic uuids for ") > 5);
    ruler_sample_free(&s);
}

TEST(ruler_vt_chain_in_order) {
    char err[512];
    struct ruler_sample s;
    ASSERT_OK(ruler_generate(RULER_VT, 800, 0, 5, count_words, NULL, &s, err, sizeof err));
    ASSERT_EQ(s.n_answers, 5);
    const char *prev = s.prompt;
    for (int i = 0; i < 5; i++) {
        char line[64];
        if (i == 0)
            snprintf(line, sizeof line, "VAR %s = ", s.answers[0]);
        else
            snprintf(line, sizeof line, "VAR %s = VAR %s.", s.answers[i], s.answers[i - 1]);
        const char *p = strstr(s.prompt, line);
        ASSERT_TRUE(p != NULL);
        ASSERT_TRUE(p >= prev);
        prev = p;
    }
    ruler_sample_free(&s);
}

static int word_count(const char *prompt, const char *w) {
    char pat[64];
    snprintf(pat, sizeof pat, ". %s ", w);
    return occurrences(prompt, pat);
}

TEST(ruler_cwe_and_fwe_counts) {
    char err[512];
    struct ruler_sample s;
    ASSERT_OK(ruler_generate(RULER_CWE, 1500, 0, 5, count_words, NULL, &s, err, sizeof err));
    ASSERT_EQ(s.n_answers, 10);
    for (int a = 0; a < 10; a++) ASSERT_EQ(word_count(s.prompt, s.answers[a]), 6);
    ASSERT_EQ(word_count(s.prompt, "zzzz"), 0);
    ruler_sample_free(&s);
    /* at >= 4K tokens: x30 */
    ASSERT_OK(ruler_generate(RULER_CWE, 5000, 0, 5, count_words, NULL, &s, err, sizeof err));
    for (int a = 0; a < 10; a++) ASSERT_EQ(word_count(s.prompt, s.answers[a]), 30);
    ruler_sample_free(&s);
    ASSERT_OK(ruler_generate(RULER_FWE, 2000, 0, 5, count_words, NULL, &s, err, sizeof err));
    ASSERT_EQ(s.n_answers, 3);
    int c[3];
    for (int a = 0; a < 3; a++) {
        char pat[16];
        snprintf(pat, sizeof pat, " %s ", s.answers[a]);
        c[a] = occurrences(s.prompt, pat);
    }
    ASSERT_TRUE(c[0] > c[1] && c[1] > c[2] && c[2] > 0);
    ASSERT_TRUE(occurrences(s.prompt, " .... ") > c[0]); /* the rank-1 word, masked */
    ruler_sample_free(&s);
}

TEST(ruler_seeded_and_errors) {
    char err[512];
    struct ruler_sample a, b;
    ASSERT_OK(ruler_generate(RULER_NIAH_SINGLE_1, 600, 0, 9, count_words, NULL, &a, err, sizeof err));
    ASSERT_OK(ruler_generate(RULER_NIAH_SINGLE_1, 600, 0, 9, count_words, NULL, &b, err, sizeof err));
    ASSERT_STR_EQ(a.prompt, b.prompt);
    ruler_sample_free(&b);
    ASSERT_OK(ruler_generate(RULER_NIAH_SINGLE_1, 600, 0, 10, count_words, NULL, &b, err, sizeof err));
    ASSERT_TRUE(strcmp(a.prompt, b.prompt) != 0);
    ruler_sample_free(&a);
    ruler_sample_free(&b);
    ASSERT_EQ(ruler_generate(RULER_NIAH_SINGLE_1, 100, 0, 9, count_words, NULL, &a, err, sizeof err), NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(strstr(err, "too small") != NULL);
    ASSERT_TRUE(a.prompt == NULL);
    ASSERT_EQ(ruler_generate(RULER_N_TASKS, 600, 0, 9, count_words, NULL, &a, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(ruler_task_from_name("vt"), RULER_VT);
    ASSERT_EQ(ruler_task_from_name("qa_1"), -1);
    ASSERT_TRUE(ruler_n_left_out >= 7);
}

TEST(ruler_scores_hand_cases) {
    const char refs[3][RULER_ANSWER_LEN] = {"1234567", "7654321", "1111111"};
    ASSERT_NEAR(ruler_score_all("The numbers are 1234567 and 7654321.", refs, 3), 2.0 / 3, 1e-12);
    ASSERT_NEAR(ruler_score_all("1234567 7654321 1111111", refs, 3), 1, 0);
    ASSERT_NEAR(ruler_score_all("nothing", refs, 3), 0, 0);
    ASSERT_NEAR(ruler_score_part("nothing but 1111111", refs, 3), 1, 0);
    ASSERT_NEAR(ruler_score_part("123456", refs, 3), 0, 0);
    const char names[2][RULER_ANSWER_LEN] = {"QWXYZ", "ABCDE"};
    ASSERT_NEAR(ruler_score_all("they are: qwxyz, abcde", names, 2), 1, 0);
    ASSERT_NEAR(ruler_score_all(NULL, names, 2), 0, 0);
    ASSERT_NEAR(ruler_score_all("x", names, 0), 0, 0);
    const char empty[1][RULER_ANSWER_LEN] = {""};
    ASSERT_NEAR(ruler_score_all("anything", empty, 1), 0, 0);
}

TEST(eval_ruler_end_to_end) {
    nx_model *m = model();
    ASSERT_TRUE(m != NULL);
    char js[] = "/tmp/nx_test_ruler_XXXXXX";
    close(mkstemp(js));
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct ruler_params rp = ruler_default_params();
    rp.tasks = "niah_single_1,vt,cwe";
    rp.policies = "full,nexus";
    rp.length = 512;
    rp.max_new = 8;
    rp.samples = 1;
    rp.threads = 1;
    rp.json_path = js;
    rp.base = &base;
    ASSERT_EQ(eval_ruler_run(m, &rp), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    unlink(js);
    ASSERT_TRUE(root != NULL);
    /* cwe does not fit in 512 tokens with this tokenizer: skipped and listed */
    json_t *sk = json_object_get(root, "skipped");
    ASSERT_EQ(json_array_size(sk), 1);
    ASSERT_STR_EQ(json_string_value(json_array_get(sk, 0)), "cwe");
    json_t *res = json_object_get(root, "results");
    ASSERT_EQ(json_array_size(res), 4); /* 2 tasks x (full, nexus 0.2 prefill) */
    for (size_t i = 0; i < 4; i++) {
        double sc = json_number_value(json_object_get(json_array_get(res, i), "score"));
        ASSERT_TRUE(sc >= 0 && sc <= 100);
    }
    ASSERT_TRUE(json_array_size(json_object_get(root, "left_out")) >= 7);
    json_decref(root);
    rp.json_path = NULL;
    rp.tasks = "qa_1";
    ASSERT_EQ(eval_ruler_run(m, &rp), NX_STATUS_INVALID_ARG);
}

TEST(zz_free_model) {
    nx_model_free(g_model);
    g_model = NULL;
}

TEST_MAIN
