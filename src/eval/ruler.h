/*
 * ruler.h - RULER-style synthetic long-context tasks (NVIDIA/RULER, EVICTION.md §RULER):
 * a generator that builds a prompt of a target token length with the model's own tokenizer, and
 * the string-match scorers.
 *
 * Tasks implemented (no external corpus needed):
 *   niah_single_1         noise haystack, 1 needle (word key -> 7-digit number), 1 query
 *   niah_multikey_1_noise 4 needles with different keys, 1 queried; NOISE haystack (RULER's
 *                         niah_multikey_1 uses Paul Graham essays, which we do not have)
 *   niah_multikey_2       haystack made of distractor needles (word -> number), 1 real
 *   niah_multikey_3       haystack of distractor needles, uuid key -> uuid value
 *   niah_multivalue_noise 1 key with 4 values, noise haystack (RULER: essays)
 *   niah_multiquery_noise 4 keys, all 4 asked, noise haystack (RULER: essays)
 *   vt                    variable tracking: 1 chain of 4 hops in noise filler (no few-shot
 *                         example, to leave room on small contexts)
 *   cwe                   common words: 10 words x6 (x30 at >= 4K tokens) among words x1 (x3),
 *                         numbered list (our own word list; no few-shot example)
 *   fwe                   frequent words: Zipf(2) over random 6-letter coded words, the most
 *                         frequent replaced by "...", answers ranks 2-4
 * Left out (need corpora we do not have): niah_single_2, niah_single_3, niah_multikey_1,
 * niah_multivalue, niah_multiquery (Paul Graham essays), qa_1 (SQuAD v2), qa_2 (HotpotQA).
 *
 * The haystack size is the largest for which tokens(prompt) + max_new <= target (binary search
 * with the caller's token counter). Everything is seeded: same (task, target, seed) and
 * tokenizer, same prompt. Words are our own lists, not RULER's wonderwords lists.
 */
#ifndef NX_EVAL_RULER_H
#define NX_EVAL_RULER_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

enum ruler_task {
    RULER_NIAH_SINGLE_1,
    RULER_NIAH_MULTIKEY_1_NOISE,
    RULER_NIAH_MULTIKEY_2,
    RULER_NIAH_MULTIKEY_3,
    RULER_NIAH_MULTIVALUE_NOISE,
    RULER_NIAH_MULTIQUERY_NOISE,
    RULER_VT,
    RULER_CWE,
    RULER_FWE,
    RULER_N_TASKS
};

enum { RULER_MAX_ANSWERS = 10, RULER_ANSWER_LEN = 48 };

struct ruler_sample {
    enum ruler_task task;
    char *prompt;      /* task text, haystack, question and answer prefix (nx_malloc) */
    int32_t n_tokens;  /* tokens(prompt) as the counter measured it */
    int max_new;       /* tokens to generate */
    int n_answers;
    char answers[RULER_MAX_ANSWERS][RULER_ANSWER_LEN];
    int n_needles;     /* needle / chain / list items placed in the haystack */
};

/* Token counter: tokens of text[0..len) as the model will see them (with BOS if it adds one);
   negative on failure. */
typedef int32_t (*ruler_count_fn)(void *user, const char *text, size_t len);

const char *ruler_task_name(enum ruler_task t);
/* Task id from its name, -1 when unknown. */
int ruler_task_from_name(const char *name);
/* RULER's generation length for the task (128 NIAH, 30 vt, 120 cwe, 50 fwe). */
int ruler_task_max_new(enum ruler_task t);
/* The tasks left out, with the reason: n entries of "name: reason". */
extern const char *const ruler_left_out[];
extern const int ruler_n_left_out;

/*
 * Builds one sample of `task` at `target` tokens (prompt + max_new; max_new <= 0: the task's
 * default). NX_STATUS_OK (free with ruler_sample_free); with a message in err:
 * NX_STATUS_UNSUPPORTED when the target is too small for the smallest haystack,
 * NX_STATUS_INVALID_ARG for a bad task, target or counter (or the counter failing),
 * NX_STATUS_NOMEM.
 */
nx_status ruler_generate(enum ruler_task task, int32_t target, int max_new, uint64_t seed,
                   ruler_count_fn count, void *user, struct ruler_sample *out, char *err,
                   size_t errlen);
void ruler_sample_free(struct ruler_sample *s);

/* RULER string_match_all: the fraction of references that occur in the prediction
   (ASCII case-insensitive substring). 0 for NULL / no references. */
double ruler_score_all(const char *prediction, const char (*refs)[RULER_ANSWER_LEN], int n);
/* RULER string_match_part: 1 when any reference occurs, else 0. */
double ruler_score_part(const char *prediction, const char (*refs)[RULER_ANSWER_LEN], int n);

#endif
