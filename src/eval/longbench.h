/*
 * longbench.h - LongBench (v1 / LongBench-E) jsonl reader and scorer (EVICTION.md §4).
 *
 * One JSON object per line with the fields input (string), context (string), answers
 * (non-empty list of strings), dataset (string) and, optional but type-checked when present,
 * length (number), language (string), all_classes (null or list of strings), _id (string).
 * Blank lines are skipped. Any other line is an error naming FILE:LINE and the problem.
 *
 * Dataset name (a trailing "_e" of LongBench-E is ignored) -> metric and generation length as
 * LongBench's eval.py / dataset2maxlen: qa_f1 (narrativeqa, qasper, multifieldqa_en, hotpotqa,
 * 2wikimqa, musique, triviaqa), rouge (gov_report, qmsum, multi_news, samsum), classification
 * (trec, lsht), retrieval (passage_retrieval_en, passage_retrieval_zh), count (passage_count),
 * code_sim (lcc, repobench-p). multifieldqa_zh, dureader and vcsum need jieba word
 * segmentation, which Nexus does not implement: they are reported as unsupported.
 * For trec, triviaqa, samsum and lsht only the first line of the prediction is scored.
 */
#ifndef NX_EVAL_LONGBENCH_H
#define NX_EVAL_LONGBENCH_H

#include <stddef.h>

#include "nexus.h"

enum lb_metric { LB_QA_F1, LB_ROUGE, LB_CLASSIFICATION, LB_RETRIEVAL, LB_COUNT, LB_CODE_SIM,
                 LB_UNSUPPORTED };

struct lb_record {
    char *id, *dataset, *language, *input, *context; /* id, language: "" when absent */
    char **answers;
    int n_answers;
    char **classes; /* all_classes; NULL when null or absent */
    int n_classes;
    double length;  /* -1 when absent */
    int line;       /* 1-based line in the file */
};

struct lb_set {
    struct lb_record *r;
    int n;
};

/* Reads every record; NX_STATUS_OK, or with "FILE:LINE: problem" (or "FILE: problem") in err
   and *out empty: NX_STATUS_IO (cannot open or read), NX_STATUS_FORMAT (a malformed line, no
   records), NX_STATUS_NOMEM. limit > 0 stops after that many records. */
nx_status lb_load(const char *path, int limit, struct lb_set *out, char *err, size_t errlen);
void lb_free(struct lb_set *s);

/* Metric and LongBench's max new tokens for a dataset name; -1 when the name is unknown.
   *first_line is set for the datasets scored on the first prediction line only. */
int lb_dataset_info(const char *dataset, enum lb_metric *metric, int *max_new, int *first_line);
const char *lb_metric_name(enum lb_metric m);

/* One sample's score in [0, 1]: the metric of the record's dataset, maximum over its answers
   (first-line rule applied). NaN for an unknown or unsupported dataset. */
double lb_score(const struct lb_record *r, const char *prediction);

#endif
