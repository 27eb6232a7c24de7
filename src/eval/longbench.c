/*
 * longbench.c - LongBench jsonl reader and per-dataset scoring (see longbench.h).
 *
 * DESIGN: the file is read line by line (read_line: no line-length limit, nx_realloc), each non-blank line
 * parsed with jansson into an owned record (strings copied, the JSON freed at once), so the
 * records do not depend on jansson afterwards. The first bad line stops the load with its line
 * number. The metric table is data; the metrics themselves live in metrics.c.
 */
#include "eval/longbench.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"

#include "eval/metrics.h"

struct lb_info {
    const char *name;
    enum lb_metric metric;
    int max_new, first_line;
};

static const struct lb_info INFO[] = {
    {"narrativeqa", LB_QA_F1, 128, 0},       {"qasper", LB_QA_F1, 128, 0},
    {"multifieldqa_en", LB_QA_F1, 64, 0},    {"multifieldqa_zh", LB_UNSUPPORTED, 64, 0},
    {"hotpotqa", LB_QA_F1, 32, 0},           {"2wikimqa", LB_QA_F1, 32, 0},
    {"musique", LB_QA_F1, 32, 0},            {"dureader", LB_UNSUPPORTED, 128, 0},
    {"gov_report", LB_ROUGE, 512, 0},        {"qmsum", LB_ROUGE, 512, 0},
    {"multi_news", LB_ROUGE, 512, 0},        {"vcsum", LB_UNSUPPORTED, 512, 0},
    {"trec", LB_CLASSIFICATION, 64, 1},      {"triviaqa", LB_QA_F1, 32, 1},
    {"samsum", LB_ROUGE, 128, 1},            {"lsht", LB_CLASSIFICATION, 64, 1},
    {"passage_count", LB_COUNT, 32, 0},      {"passage_retrieval_en", LB_RETRIEVAL, 32, 0},
    {"passage_retrieval_zh", LB_RETRIEVAL, 32, 0}, {"lcc", LB_CODE_SIM, 64, 0},
    {"repobench-p", LB_CODE_SIM, 64, 0}};

int lb_dataset_info(const char *dataset, enum lb_metric *metric, int *max_new, int *first_line) {
    if (!dataset) return -1;
    size_t n = strlen(dataset);
    if (n > 2 && !strcmp(dataset + n - 2, "_e")) n -= 2;
    for (size_t i = 0; i < sizeof INFO / sizeof INFO[0]; i++)
        if (strlen(INFO[i].name) == n && !strncmp(INFO[i].name, dataset, n)) {
            if (metric) *metric = INFO[i].metric;
            if (max_new) *max_new = INFO[i].max_new;
            if (first_line) *first_line = INFO[i].first_line;
            return 0;
        }
    return -1;
}

const char *lb_metric_name(enum lb_metric m) {
    switch (m) {
    case LB_QA_F1: return "qa_f1";
    case LB_ROUGE: return "rouge_l";
    case LB_CLASSIFICATION: return "classification";
    case LB_RETRIEVAL: return "retrieval";
    case LB_COUNT: return "count";
    case LB_CODE_SIM: return "code_sim";
    default: return "unsupported";
    }
}

static void rec_free(struct lb_record *r) {
    nx_free(r->id);
    nx_free(r->dataset);
    nx_free(r->language);
    nx_free(r->input);
    nx_free(r->context);
    for (int i = 0; i < r->n_answers; i++) nx_free(r->answers[i]);
    nx_free(r->answers);
    for (int i = 0; i < r->n_classes; i++) nx_free(r->classes[i]);
    nx_free(r->classes);
    memset(r, 0, sizeof *r);
}

void lb_free(struct lb_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) rec_free(&s->r[i]);
    nx_free(s->r);
    s->r = NULL;
    s->n = 0;
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = nx_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* a list of strings: 0, -1 when not a list of strings (or empty and !allow_empty), -2 on OOM */
static int str_list(json_t *a, char ***out, int *n, int allow_empty) {
    *out = NULL;
    *n = 0;
    if (!json_is_array(a)) return -1;
    size_t k = json_array_size(a);
    if (k == 0 && !allow_empty) return -1;
    if (k > 1000000) return -1;
    for (size_t i = 0; i < k; i++)
        if (!json_is_string(json_array_get(a, i))) return -1;
    char **v = nx_calloc(k ? k : 1, sizeof *v);
    if (!v) return -2;
    for (size_t i = 0; i < k; i++) {
        v[i] = dup(json_string_value(json_array_get(a, i)));
        if (!v[i]) {
            for (size_t j = 0; j < i; j++) nx_free(v[j]);
            nx_free(v);
            return -2;
        }
    }
    *out = v;
    *n = (int)k;
    return 0;
}

/* one parsed object -> record; NULL on success, else the problem */
static const char *to_record(json_t *o, struct lb_record *r) {
    if (!json_is_object(o)) return "expected a JSON object";
    static const char *const req[4][2] = {{"input", "missing field 'input'"},
                                          {"context", "missing field 'context'"},
                                          {"dataset", "missing field 'dataset'"},
                                          {"answers", "missing field 'answers'"}};
    for (int i = 0; i < 4; i++)
        if (!json_object_get(o, req[i][0])) return req[i][1];
    json_t *in = json_object_get(o, "input"), *ctx = json_object_get(o, "context"),
           *ds = json_object_get(o, "dataset"), *ans = json_object_get(o, "answers"),
           *len = json_object_get(o, "length"), *lang = json_object_get(o, "language"),
           *cls = json_object_get(o, "all_classes"), *id = json_object_get(o, "_id");
    if (!json_is_string(in)) return "field 'input' must be a string";
    if (!json_is_string(ctx)) return "field 'context' must be a string";
    if (!json_is_string(ds) || !*json_string_value(ds))
        return "field 'dataset' must be a non-empty string";
    if (len && !json_is_null(len) && !json_is_number(len)) return "field 'length' must be a number";
    if (lang && !json_is_null(lang) && !json_is_string(lang))
        return "field 'language' must be a string";
    if (id && !json_is_null(id) && !json_is_string(id)) return "field '_id' must be a string";
    r->input = dup(json_string_value(in));
    r->context = dup(json_string_value(ctx));
    r->dataset = dup(json_string_value(ds));
    r->language = dup(json_is_string(lang) ? json_string_value(lang) : "");
    r->id = dup(json_is_string(id) ? json_string_value(id) : "");
    r->length = json_is_number(len) ? json_number_value(len) : -1;
    if (!r->input || !r->context || !r->dataset || !r->language || !r->id) return "out of memory";
    int rc = str_list(ans, &r->answers, &r->n_answers, 0);
    if (rc == -2) return "out of memory";
    if (rc) return "field 'answers' must be a non-empty list of strings";
    if (cls && !json_is_null(cls)) {
        rc = str_list(cls, &r->classes, &r->n_classes, 0);
        if (rc == -2) return "out of memory";
        if (rc) return "field 'all_classes' must be null or a non-empty list of strings";
    }
    enum lb_metric m;
    if (lb_dataset_info(r->dataset, &m, NULL, NULL))
        return "unknown dataset (expected a LongBench v1 name such as hotpotqa, trec, lcc, "
               "optionally with _e)";
    if (m == LB_CLASSIFICATION && !r->classes)
        return "classification dataset without 'all_classes'";
    return NULL;
}

/* The next line of f (its newline included) into *buf (grown with nx_realloc, NUL-ended): its
 * length; -1 at the end of the file, -2 on out of memory. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap) {
    size_t n = 0;
    int ch;
    while ((ch = getc(f)) != EOF) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = nx_realloc(*buf, nc);
            if (!nb) return -2;
            *buf = nb, *cap = nc;
        }
        (*buf)[n++] = (char)ch;
        if (ch == '\n') break;
    }
    if (n == 0) return -1;
    (*buf)[n] = '\0';
    return (ssize_t)n;
}

nx_status lb_load(const char *path, int limit, struct lb_set *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NX_STATUS_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, cap_r = 0;
    nx_status rc = NX_STATUS_OK;
    while ((len = read_line(f, &line, &cap)) != -1) {
        lineno++;
        if (len == -2) {
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
            rc = NX_STATUS_NOMEM;
            break;
        }
        int blank = 1;
        for (ssize_t i = 0; i < len && blank; i++)
            blank = line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n';
        if (blank) continue;
        if ((ssize_t)strlen(line) != len) {
            snprintf(err, errlen, "%s:%d: NUL byte in the line", path, lineno);
            rc = NX_STATUS_FORMAT;
            break;
        }
        json_error_t je;
        bool oom;
        json_t *o = nx_json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &je, &oom);
        if (!o && oom) {
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
            rc = NX_STATUS_NOMEM;
            break;
        }
        if (!o) {
            snprintf(err, errlen, "%s:%d: invalid JSON at column %d: %s", path, lineno, je.column,
                     je.text);
            rc = NX_STATUS_FORMAT;
            break;
        }
        if (out->n == cap_r) {
            int nc = cap_r ? cap_r * 2 : 64;
            struct lb_record *nr = nx_realloc(out->r, sizeof *nr * (size_t)nc);
            if (!nr) {
                json_decref(o);
                snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
                rc = NX_STATUS_NOMEM;
                break;
            }
            out->r = nr, cap_r = nc;
        }
        struct lb_record *r = &out->r[out->n];
        memset(r, 0, sizeof *r);
        r->line = lineno;
        const char *bad = to_record(o, r);
        json_decref(o);
        if (bad) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, bad);
            rec_free(r);
            rc = strstr(bad, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_FORMAT;
            break;
        }
        out->n++;
        if (limit > 0 && out->n >= limit) break;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = NX_STATUS_IO;
    }
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s: no records", path);
        rc = NX_STATUS_FORMAT;
    }
    nx_free(line);
    fclose(f);
    if (rc) lb_free(out);
    return rc;
}

double lb_score(const struct lb_record *r, const char *prediction) {
    enum lb_metric m;
    int first = 0;
    if (!r || lb_dataset_info(r->dataset, &m, NULL, &first) || m == LB_UNSUPPORTED) return NAN;
    if (!prediction) prediction = "";
    char *pred = NULL;
    if (first) { /* the first line after leading newlines */
        while (*prediction == '\n') prediction++;
        const char *e = strchr(prediction, '\n');
        size_t n = e ? (size_t)(e - prediction) : strlen(prediction);
        pred = nx_malloc(n + 1);
        if (!pred) return NAN;
        memcpy(pred, prediction, n);
        pred[n] = 0;
        prediction = pred;
    }
    double best = 0;
    for (int i = 0; i < r->n_answers; i++) {
        const char *g = r->answers[i];
        double s = 0;
        switch (m) {
        case LB_QA_F1: s = metric_qa_f1(prediction, g); break;
        case LB_ROUGE: s = metric_rouge_l(prediction, g); break;
        case LB_CLASSIFICATION:
            s = metric_classification_classes(prediction, g, (const char *const *)r->classes,
                                              r->n_classes);
            break;
        case LB_RETRIEVAL: s = metric_retrieval(prediction, g); break;
        case LB_COUNT: s = metric_count(prediction, g); break;
        case LB_CODE_SIM: s = metric_code_sim(prediction, g); break;
        default: s = NAN;
        }
        if (isnan(s)) {
            nx_free(pred);
            return NAN;
        }
        if (s > best) best = s;
    }
    nx_free(pred);
    return best;
}
