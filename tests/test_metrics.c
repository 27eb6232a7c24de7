/*
 * test_metrics.c - tests of the evaluation metrics (src/eval/metrics.c).
 *
 * DESIGN
 * - Every expected value is computed by hand and written as an exact expression in a comment;
 *   the decimal in the assertion is that expression evaluated.
 * - Logit cases use logits whose softmax is a simple rational distribution (ln 2 gaps, equal
 *   entries, -INFINITY masks) and integer-valued logits for exact shift-invariance checks.
 * - Stack safety: 20000-byte inputs through every text metric (the binary also runs under
 *   ASan/UBSan via `make SAN=address,undefined`).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "eval/metrics.h"
#include "test.h"

#define LN2 0.69314718055994530942

TEST(kl_three_way) {
    /* p = softmax([0, ln2, 0]) = [1/4, 1/2, 1/4]; q = softmax([0,0,0]) = [1/3, 1/3, 1/3].
     * KL(p||q) = 2 * 1/4 ln(3/4) + 1/2 ln(3/2) = 1/2 ln(9/8) = 0.0588915178281917
     * KL(q||p) = 1/3 (2 ln(4/3) + ln(2/3)) = 1/3 ln(32/27) = 0.0566330122651325 */
    float p[3] = {0.0f, (float)LN2, 0.0f}, q[3] = {0.0f, 0.0f, 0.0f};
    ASSERT_NEAR(metric_kl(p, q, 3), 0.0588915178281917, 1e-7);
    ASSERT_NEAR(metric_kl(q, p, 3), 0.0566330122651325, 1e-7);
}

TEST(kl_reversed_exponentials) {
    /* p = softmax([0,1,2]), q = softmax([2,1,0]) share Z = 1 + e + e^2, so
     * KL = sum p_i (x_i - y_i) = 2 (p_2 - p_0) = 2 (e^2 - 1) / (1 + e + e^2) = 1.15042076520888 */
    float p[3] = {0, 1, 2}, q[3] = {2, 1, 0};
    ASSERT_NEAR(metric_kl(p, q, 3), 1.15042076520888, 1e-12);
    /* shift invariance: +512 and -300 are exact in float, the result must not move */
    float ps[3] = {512, 513, 514}, qs[3] = {-298, -299, -300};
    ASSERT_NEAR(metric_kl(ps, qs, 3), 1.15042076520888, 1e-12);
    /* huge logits do not overflow: [1e4, 1e4+1, 1e4+2] exact in float */
    float ph[3] = {10000, 10001, 10002};
    ASSERT_NEAR(metric_kl(ph, q, 3), 1.15042076520888, 1e-9); /* lse ~1e4: ~1e-12 abs */
}

TEST(kl_equal_is_zero) {
    float p[5] = {1.5f, -2.0f, 0.25f, 7.0f, 3.0f}, s[5];
    for (int i = 0; i < 5; i++) s[i] = p[i] + 64.0f; /* exact: all sums representable */
    ASSERT_TRUE(metric_kl(p, p, 5) == 0.0);
    ASSERT_NEAR(metric_kl(p, s, 5), 0.0, 1e-12);
    ASSERT_TRUE(metric_kl(p, s, 5) >= 0.0);
}

TEST(kl_masked) {
    /* p = softmax([0, -inf, 0]) = [1/2, 0, 1/2], q uniform: KL = ln(3/2) = 0.405465108108164 */
    float p[3] = {0.0f, -INFINITY, 0.0f}, q[3] = {0, 0, 0};
    ASSERT_NEAR(metric_kl(p, q, 3), 0.405465108108164, 1e-12);
    /* q = 0 where p > 0: +inf */
    ASSERT_TRUE(isinf(metric_kl(q, p, 3)) && metric_kl(q, p, 3) > 0);
}

TEST(kl_bad_input) {
    float p[2] = {0, 0}, bad[2] = {0, NAN}, masked[2] = {-INFINITY, -INFINITY};
    ASSERT_TRUE(isnan(metric_kl(NULL, p, 2)));
    ASSERT_TRUE(isnan(metric_kl(p, NULL, 2)));
    ASSERT_TRUE(isnan(metric_kl(p, p, 0)));
    ASSERT_TRUE(isnan(metric_kl(p, p, -1)));
    ASSERT_TRUE(isnan(metric_kl(p, bad, 2)));
    ASSERT_TRUE(isnan(metric_kl(masked, p, 2)));
}

TEST(top1) {
    float a[4] = {1, 3, 2, 3}, b[4] = {0, 5, 5, 1}, c[4] = {9, 0, 0, 0};
    ASSERT_EQ(metric_top1_agree(a, b, 4), 1); /* ties -> index 1 on both */
    ASSERT_EQ(metric_top1_agree(a, c, 4), 0); /* 1 vs 0 */
    float d[4] = {NAN, 2, 2, 1};
    ASSERT_EQ(metric_top1_agree(a, d, 4), 1); /* NaN skipped, tie -> 1 */
    float e[3] = {4, 4, 4}, f[3] = {0, 0, 1};
    ASSERT_EQ(metric_top1_agree(e, e, 3), 1);
    ASSERT_EQ(metric_top1_agree(e, f, 3), 0); /* 0 vs 2 */
    float nn[2] = {NAN, NAN};
    ASSERT_EQ(metric_top1_agree(nn, nn, 2), 0);
    ASSERT_EQ(metric_top1_agree(NULL, a, 4), 0);
    ASSERT_EQ(metric_top1_agree(a, a, 0), 0);
}

TEST(log_prob) {
    float p[3] = {0.0f, (float)LN2, 0.0f};
    /* softmax = [1/4, 1/2, 1/4]: log(1/2) = -0.693147180559945, log(1/4) = -1.38629436111989 */
    ASSERT_NEAR(metric_log_prob(p, 3, 1), -LN2, 1e-7);
    ASSERT_NEAR(metric_log_prob(p, 3, 0), -2 * LN2, 1e-7);
    float big[2] = {1e4f, 1e4f}; /* log(1/2); exp(1e4) would overflow */
    ASSERT_NEAR(metric_log_prob(big, 2, 1), -LN2, 1e-9);
    float m[2] = {0.0f, -INFINITY};
    ASSERT_TRUE(metric_log_prob(m, 2, 0) == 0.0);
    ASSERT_TRUE(isinf(metric_log_prob(m, 2, 1)));
    ASSERT_TRUE(isnan(metric_log_prob(p, 3, 3)));
    ASSERT_TRUE(isnan(metric_log_prob(p, 3, -1)));
    ASSERT_TRUE(isnan(metric_log_prob(NULL, 3, 0)));
    ASSERT_TRUE(isnan(metric_log_prob(p, 0, 0)));
}

TEST(qa_f1_basic) {
    /* pred -> [cat sat on mat] (4), truth -> [cat sat] (2); common 2; P = 1/2, R = 1;
     * F1 = 2 * 1/2 * 1 / (3/2) = 2/3 */
    ASSERT_NEAR(metric_qa_f1("The cat sat on the mat", "a cat sat"), 2.0 / 3.0, 1e-12);
    ASSERT_NEAR(metric_qa_f1("a cat sat", "The cat sat on the mat"), 2.0 / 3.0, 1e-12);
    ASSERT_NEAR(metric_qa_f1("Hello, World!", "hello world"), 1.0, 1e-12);
    /* punctuation deleted, not spaced: "don't" -> "dont"; "U.S.A." -> "usa" */
    ASSERT_NEAR(metric_qa_f1("Don't", "dont"), 1.0, 1e-12);
    ASSERT_NEAR(metric_qa_f1("the U.S.A.", "USA"), 1.0, 1e-12);
    /* "an" inside a word is not an article: [banana] vs [ban ana] -> 0 */
    ASSERT_NEAR(metric_qa_f1("banana", "ban ana"), 0.0, 1e-12);
    /* "the-end" -> "theend", one token, not an article */
    ASSERT_NEAR(metric_qa_f1("The-end", "theend"), 1.0, 1e-12);
    ASSERT_NEAR(metric_qa_f1("cat", "dog"), 0.0, 1e-12);
}

TEST(qa_f1_multiset) {
    /* [x x y] vs [x y y]: common = min(2,1) + min(1,2) = 2; P = R = 2/3; F1 = 2/3 */
    ASSERT_NEAR(metric_qa_f1("x x y", "x y y"), 2.0 / 3.0, 1e-12);
    /* [x x x] vs [x]: common 1; P = 1/3, R = 1; F1 = 2 * 1/3 / (4/3) = 1/2 */
    ASSERT_NEAR(metric_qa_f1("x\tx\nx", "  x  "), 0.5, 1e-12);
}

TEST(qa_f1_utf8) {
    /* only ASCII is lowercased; é (C3 A9) is a word byte: [café au lait] vs [café lait];
     * common 2; P = 2/3, R = 1; F1 = 2 * 2/3 / (5/3) = 4/5 */
    ASSERT_NEAR(metric_qa_f1("Caf\xc3\xa9 au lait", "caf\xc3\xa9 lait"), 0.8, 1e-12);
    /* em dash (E2 80 94) is no ASCII punctuation: "a—b" is one token; [a—b] vs [a b] -> 0 */
    ASSERT_NEAR(metric_qa_f1("a\xe2\x80\x94" "b", "a b"), 0.0, 1e-12);
    /* non-ASCII case is not folded: É (C3 89) != é (C3 A9) */
    ASSERT_NEAR(metric_qa_f1("\xc3\x89t\xc3\xa9", "\xc3\xa9t\xc3\xa9"), 0.0, 1e-12);
}

TEST(qa_f1_empty_and_null) {
    ASSERT_TRUE(metric_qa_f1("", "") == 0.0);
    ASSERT_TRUE(metric_qa_f1("cat", "") == 0.0);
    ASSERT_TRUE(metric_qa_f1("The", "cat") == 0.0); /* pred empty after normalisation */
    ASSERT_TRUE(metric_qa_f1("!!! ...", "a an the") == 0.0);
    ASSERT_TRUE(metric_qa_f1(NULL, "cat") == 0.0);
    ASSERT_TRUE(metric_qa_f1("cat", NULL) == 0.0);
}

TEST(rouge_l) {
    /* pred 6 tokens, ref 5; LCS = [the cat on the mat] = 5; P = 5/6, R = 1;
     * F = 2 * 5/6 / (11/6) = 10/11 */
    ASSERT_NEAR(metric_rouge_l("the cat sat on the mat", "the cat on the mat"), 10.0 / 11.0,
                1e-12);
    ASSERT_NEAR(metric_rouge_l("the cat on the mat", "the cat sat on the mat"), 10.0 / 11.0,
                1e-12);
    /* lowercased; [a b c d] vs [a c b d]: LCS 3; P = R = 3/4; F = 3/4 */
    ASSERT_NEAR(metric_rouge_l("A B C D", "a c b d"), 0.75, 1e-12);
    /* [a b c] vs [c b a]: LCS 1; P = R = 1/3 */
    ASSERT_NEAR(metric_rouge_l("a b c", "c b a"), 1.0 / 3.0, 1e-12);
    /* punctuation stays on the token: [cat.] vs [cat] -> 0; articles are kept */
    ASSERT_NEAR(metric_rouge_l("cat.", "cat"), 0.0, 1e-12);
    ASSERT_NEAR(metric_rouge_l("The", "the"), 1.0, 1e-12);
    /* [x y z w] vs [y w]: LCS 2; P = 1/2, R = 1; F = 2/3 */
    ASSERT_NEAR(metric_rouge_l("x  y\tz\nw", "y w"), 2.0 / 3.0, 1e-12);
    ASSERT_TRUE(metric_rouge_l("", "") == 0.0);
    ASSERT_TRUE(metric_rouge_l("a", "   ") == 0.0);
    ASSERT_TRUE(metric_rouge_l(NULL, "a") == 0.0);
    ASSERT_TRUE(metric_rouge_l("a", NULL) == 0.0);
}

TEST(edit_similarity) {
    /* levenshtein(kitten, sitting) = 3, max len 7: 1 - 3/7 = 4/7 */
    ASSERT_NEAR(metric_edit_similarity("kitten", "sitting"), 4.0 / 7.0, 1e-12);
    ASSERT_NEAR(metric_edit_similarity("sitting", "kitten"), 4.0 / 7.0, 1e-12);
    /* flaw -> lawn: delete f, append n = 2; 1 - 2/4 */
    ASSERT_NEAR(metric_edit_similarity("flaw", "lawn"), 0.5, 1e-12);
    ASSERT_NEAR(metric_edit_similarity("abc", "abc"), 1.0, 1e-12);
    ASSERT_NEAR(metric_edit_similarity("abc", ""), 0.0, 1e-12);
    ASSERT_NEAR(metric_edit_similarity("", "abc"), 0.0, 1e-12);
    ASSERT_TRUE(metric_edit_similarity("", "") == 1.0);
    /* bytes, case-sensitive: "é" (2 bytes) vs "e": 1 sub + 1 del = 2, / 2 -> 0 */
    ASSERT_NEAR(metric_edit_similarity("\xc3\xa9", "e"), 0.0, 1e-12);
    ASSERT_NEAR(metric_edit_similarity("Ab", "ab"), 0.5, 1e-12);
    ASSERT_TRUE(metric_edit_similarity(NULL, "a") == 0.0);
    ASSERT_TRUE(metric_edit_similarity("a", NULL) == 0.0);
}

TEST(classification) {
    ASSERT_TRUE(metric_classification("Type: Location", "Location") == 1.0);
    ASSERT_TRUE(metric_classification("location", "Location") == 0.0); /* case-sensitive */
    ASSERT_TRUE(metric_classification("Location", "Location extra") == 0.0);
    ASSERT_TRUE(metric_classification("abc", "") == 0.0);
    ASSERT_TRUE(metric_classification("", "a") == 0.0);
    ASSERT_TRUE(metric_classification("\xe4\xbd\xa0\xe5\xa5\xbd", "\xe5\xa5\xbd") == 1.0);
    ASSERT_TRUE(metric_classification(NULL, "a") == 0.0);
    ASSERT_TRUE(metric_classification("a", NULL) == 0.0);
}

TEST(long_inputs) {
    enum { N = 20000 };
    char *big = malloc(N + 1), *words = malloc(N + 1);
    ASSERT_TRUE(big && words);
    memset(big, 'a', N);
    big[N] = '\0';
    for (int i = 0; i < N; i += 2) { /* "w w w ... w " : 10000 tokens */
        words[i] = 'w';
        words[i + 1] = ' ';
    }
    words[N] = '\0';
    char small[101];
    memset(small, 'a', 100);
    small[100] = '\0';
    /* distance = 19900 deletions; 1 - 19900/20000 = 0.005 */
    ASSERT_NEAR(metric_edit_similarity(big, small), 0.005, 1e-12);
    ASSERT_NEAR(metric_edit_similarity(small, big), 0.005, 1e-12);
    /* [w x 10000] vs [w]: common 1; P = 1/10000, R = 1; F = 2/10001 */
    ASSERT_NEAR(metric_qa_f1(words, "w"), 2.0 / 10001.0, 1e-15);
    ASSERT_NEAR(metric_rouge_l(words, "w w"), 4.0 / 10002.0, 1e-15);
    /* one 20000-byte token vs itself */
    ASSERT_NEAR(metric_qa_f1(big, big), 1.0, 1e-12);
    ASSERT_NEAR(metric_rouge_l(words, words), 1.0, 1e-12);
    ASSERT_TRUE(metric_classification(big, small) == 1.0);
    free(big);
    free(words);
}

TEST(alloc_failure_is_nan) {
    /* every scratch allocation failing in turn: NaN, never a crash or a fake score */
    for (long k = 1; k <= 4; k++) {
        nx_alloc_fail_after(k);
        double f = metric_qa_f1("x y", "y z");
        nx_alloc_fail_after(k);
        double r = metric_rouge_l("x y", "y z");
        nx_alloc_fail_after(0);
        ASSERT_TRUE(isnan(f) || fabs(f - 0.5) < 1e-12);
        ASSERT_TRUE(isnan(r) || fabs(r - 0.5) < 1e-12);
        if (k == 1) ASSERT_TRUE(isnan(f) && isnan(r)); /* the first allocation is needed */
    }
    nx_alloc_fail_after(1);
    double e = metric_edit_similarity("ab", "b");
    nx_alloc_fail_after(0);
    ASSERT_TRUE(isnan(e));
    ASSERT_TRUE(isnan(metric_qa_f1("", "")) == 0); /* hook disabled again */
}

TEST(longbench_extra_metrics_hand_cases) {
    /* classification with the class list: strict substrings of the gold label do not count */
    const char *cls[4] = {"Number", "Number of people", "Person", "Location"};
    ASSERT_NEAR(metric_classification_classes("Number of people", "Number of people", cls, 4), 1, 0);
    ASSERT_NEAR(metric_classification_classes("Person or Location", "Person", cls, 4), 0.5, 0);
    ASSERT_NEAR(metric_classification_classes("Location", "Person", cls, 4), 0, 0);
    ASSERT_NEAR(metric_classification_classes("Person", "", cls, 4), 0, 0);
    ASSERT_NEAR(metric_classification_classes(NULL, "Person", cls, 4), 0, 0);
    /* retrieval: integers in the prediction equal to the gold paragraph number */
    ASSERT_NEAR(metric_retrieval("Paragraph 12", "Paragraph 12"), 1, 0);
    ASSERT_NEAR(metric_retrieval("It is 12, or 3, or 4, or 12", "Paragraph 12"), 0.5, 0);
    ASSERT_NEAR(metric_retrieval("12", "no number"), 0, 0);
    ASSERT_NEAR(metric_retrieval("\xe6\xae\xb5\xe8\x90\xbd" "7", "\xe6\xae\xb5\xe8\x90\xbd" "7"), 1, 0);
    ASSERT_NEAR(metric_retrieval("nothing", "Paragraph 1"), 0, 0);
    ASSERT_NEAR(metric_count("5 of them", " 5"), 1, 0);
    ASSERT_NEAR(metric_count("5 or 6 or 7 or 8", "5"), 0.25, 0);
    ASSERT_NEAR(metric_count("5", "five"), 0, 0);
    /* indel ratio: LCS("abcd", "abed") = 3 -> 6/8 */
    ASSERT_NEAR(metric_fuzz_ratio("abcd", "abed"), 0.75, 1e-12);
    ASSERT_NEAR(metric_fuzz_ratio("", ""), 1, 0);
    ASSERT_NEAR(metric_fuzz_ratio("abc", ""), 0, 0);
    ASSERT_NEAR(metric_fuzz_ratio("kitten", "sitting"), 8.0 / 13.0, 1e-12); /* LCS "ittn" */
    /* code: skip lines with `, # or //; all comments -> "" */
    ASSERT_NEAR(metric_code_sim("\n\n// c\n```\nx = 1\ny", "x = 1"), 1, 0);
    ASSERT_NEAR(metric_code_sim("# only\n// comments", "x"), 0, 0);
    ASSERT_NEAR(metric_code_sim("a/b", "a/b"), 1, 0); /* a single slash is code */
    ASSERT_NEAR(metric_code_sim("", ""), 1, 0);
}

TEST_MAIN
