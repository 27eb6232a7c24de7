/*
 * metrics.h - evaluation metrics for a future `nexus eval`: fidelity metrics over logits
 * (KL divergence, top-1 agreement, log-probability for perplexity) and LongBench-style text
 * metrics (QA token F1, ROUGE-L, code edit similarity, classification).
 *
 * Pure functions: no global state, thread-safe, inputs never modified. Scratch memory comes
 * from nx_malloc (never the stack), so inputs of any length are safe; the pairwise metrics
 * (ROUGE-L, edit similarity) take O(n*m) time and O(min(n, m)) memory.
 *
 * Bad input never crashes. Logit metrics return NaN (or 0 for top1_agree) on NULL pointers,
 * n <= 0 or an out-of-range token. Text metrics treat a NULL string as a score of 0.0 and return
 * NaN only when a scratch allocation fails. All text handling is byte-oriented: only ASCII bytes
 * are lowercased / classified as whitespace or punctuation; every byte >= 0x80 is an ordinary
 * word character, so UTF-8 passes through unharmed and unsplit.
 */
#ifndef NX_EVAL_METRICS_H
#define NX_EVAL_METRICS_H

#include <stdint.h>

/*
 * KL(softmax(p) || softmax(q)) in nats over n logits, in double with log-sum-exp (so any common
 * shift of p or of q leaves the result unchanged and huge logits do not overflow).
 * -INFINITY logits are allowed (masked tokens): a token with probability 0 under p contributes
 * 0; a token with p > 0 but q = 0 makes the result +INFINITY.
 * NaN when p or q is NULL, n <= 0, any logit is NaN or +INFINITY, or either side is all -INFINITY.
 * The result is >= 0 (tiny negative rounding is clamped to 0).
 */
double metric_kl(const float *logits_p, const float *logits_q, int64_t n);

/*
 * 1 when argmax(p) == argmax(q), else 0. Ties resolve to the lowest index; NaN entries are
 * skipped. 0 when either pointer is NULL, n <= 0, or either side has no non-NaN entry.
 */
int metric_top1_agree(const float *logits_p, const float *logits_q, int64_t n);

/*
 * log softmax(logits)[token] in nats (<= 0), computed with log-sum-exp in double; perplexity
 * over a sequence is exp(-mean of these). -INFINITY when logits[token] is -INFINITY.
 * NaN when logits is NULL, n <= 0, token outside [0, n), or any logit is NaN / +INFINITY, or all
 * logits are -INFINITY.
 */
double metric_log_prob(const float *logits, int64_t n, int32_t token);

/*
 * LongBench qa_f1 / SQuAD token F1. Both strings are normalised as
 * white_space_fix(remove_articles(remove_punc(lower(s)))): ASCII A-Z lowercased; the 32 ASCII
 * punctuation characters (Python's string.punctuation) deleted, not replaced by a space, so
 * "don't" -> "dont"; the words "a", "an", "the" dropped; split on ASCII whitespace
 * (space, \t, \n, \v, \f, \r). Then with common = size of the multiset intersection of the token
 * lists: 0 when common == 0 (including either list empty), else 2*P*R/(P+R) with
 * P = common/|pred|, R = common/|truth|. NULL -> 0.0.
 */
double metric_qa_f1(const char *prediction, const char *ground_truth);

/*
 * ROUGE-L F-measure with beta = 1 over whitespace tokens: ASCII lowercased, split on ASCII
 * whitespace, nothing else removed (punctuation stays attached to its token). With L = length of
 * the longest common subsequence of the two token lists: 0 when L == 0 (including either list
 * empty), else 2*P*R/(P+R) with P = L/|pred|, R = L/|ref|.
 * Simplification of the `rouge` package LongBench uses: no sentence splitting / union-LCS.
 * NULL -> 0.0.
 */
double metric_rouge_l(const char *prediction, const char *reference);

/*
 * 1 - levenshtein(a, b) / max(strlen a, strlen b) over bytes (unit-cost insert, delete,
 * substitute), in [0, 1]; 1.0 for two empty strings. A fuzzy-ratio-like code similarity
 * (fuzzywuzzy's ratio uses a different normaliser). NULL -> 0.0.
 */
double metric_edit_similarity(const char *a, const char *b);

/*
 * 1.0 when label is non-empty and occurs as a byte-exact, case-sensitive substring of
 * prediction, else 0.0. Simplification of LongBench classification_score, which also needs the
 * class list (1/|matches| over all matching class names): this equals that score when no other
 * class name matches. NULL -> 0.0.
 */
double metric_classification(const char *prediction, const char *label);

/*
 * LongBench classification_score: every class name (non-empty) that occurs as a byte-exact
 * substring of the prediction is a match, except class names that are a strict substring of the
 * gold label; the score is 1/|matches| when the gold label is among the matches, else 0.
 * NULL / empty label / no classes -> 0.0.
 */
double metric_classification_classes(const char *prediction, const char *label,
                                     const char *const *classes, int n_classes);

/*
 * LongBench retrieval_score: the paragraph number N of the gold answer ("Paragraph N", or
 * "段落N" for the Chinese set); the score is the fraction of the runs of ASCII digits in the
 * prediction that equal N (0 when there are none, or the gold has no number).
 */
double metric_retrieval(const char *prediction, const char *gold);

/* LongBench count_score: the same fraction against the integer the gold string starts with. */
double metric_count(const char *prediction, const char *gold);

/*
 * Indel similarity 2 * LCS(a, b) / (|a| + |b|) over bytes (what fuzzywuzzy's ratio computes
 * with python-Levenshtein installed, before its rounding to whole percent); 1.0 for two empty
 * strings. NaN only on allocation failure. NULL -> 0.0.
 */
double metric_fuzz_ratio(const char *a, const char *b);

/*
 * LongBench code_sim_score: the first line of the prediction (leading newlines dropped) that
 * contains no '`', '#' or "//" ("" when none), scored with metric_fuzz_ratio against the gold.
 */
double metric_code_sim(const char *prediction, const char *gold);

#endif
