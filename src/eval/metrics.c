/*
 * metrics.c - evaluation metrics (see metrics.h for the contracts).
 *
 * DESIGN
 * - Logit metrics: one pass for the max, one for sum(exp(x - max)) in double, so
 *   lse = max + log(sum). KL uses log p_i - log q_i = (p_i - lse_p) - (q_i - lse_q) directly,
 *   never the ratio of probabilities, and skips p_i = 0 terms (masked -INFINITY logits).
 * - Text metrics work on bytes. A string is copied once into a heap buffer, normalised in
 *   place (ASCII lowercase, optional punctuation deletion) and split on ASCII whitespace into
 *   (pointer, length) tokens; article removal drops whole tokens, which equals SQuAD's
 *   \b(a|an|the)\b regex because after punctuation removal only whitespace separates words.
 * - Tokens of both strings are interned to small integer ids by sorting one array of all tokens
 *   (memcmp order) and numbering runs of equal tokens. F1 then counts ids per side
 *   (multiset intersection = sum of min counts); ROUGE-L runs an LCS over id arrays, so the
 *   O(n*m) inner loop compares integers, not strings.
 * - LCS and Levenshtein use one DP row over the shorter sequence (O(min) memory, heap) plus a
 *   scalar for the diagonal; no recursion and no variable-length arrays anywhere.
 * - Allocation failure in a text metric returns NaN, distinguishable from every real score.
 */
#include "eval/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"

/* ---------------------------------------------------------------------------------------- */
/* logits                                                                                    */

/* log-sum-exp of n logits in double; NaN on NaN / +inf input or when all are -inf. */
static double lse(const float *x, int64_t n) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        if (isnan(v) || v == INFINITY) return NAN;
        if (v > mx) mx = v;
    }
    if (mx == -INFINITY) return NAN;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

double metric_kl(const float *logits_p, const float *logits_q, int64_t n) {
    if (!logits_p || !logits_q || n <= 0) return NAN;
    double lp = lse(logits_p, n), lq = lse(logits_q, n);
    if (isnan(lp) || isnan(lq)) return NAN;
    double kl = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double a = (double)logits_p[i] - lp;
        if (a == -INFINITY) continue; /* p_i = 0 */
        double b = (double)logits_q[i] - lq;
        if (b == -INFINITY) return INFINITY;
        kl += exp(a) * (a - b);
    }
    return kl < 0.0 ? 0.0 : kl;
}

/* Index of the first maximum, NaN skipped; -1 when every entry is NaN. */
static int64_t argmax(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (best < 0 || x[i] > x[best]) best = i;
    }
    return best;
}

int metric_top1_agree(const float *logits_p, const float *logits_q, int64_t n) {
    if (!logits_p || !logits_q || n <= 0) return 0;
    int64_t a = argmax(logits_p, n), b = argmax(logits_q, n);
    return a >= 0 && a == b;
}

double metric_log_prob(const float *logits, int64_t n, int32_t token) {
    if (!logits || n <= 0 || token < 0 || (int64_t)token >= n) return NAN;
    double l = lse(logits, n);
    if (isnan(l)) return NAN;
    return (double)logits[token] - l;
}

/* ---------------------------------------------------------------------------------------- */
/* tokenisation and interning                                                                */

struct tok {
    const char *s;
    size_t len;
    size_t pos; /* index into the combined id array */
};

/* Two token sequences as interned ids: ids[0..na) for a, ids[na..na+nb) for b. */
struct seqs {
    char *buf; /* normalised copies of both strings */
    uint32_t *ids;
    size_t na, nb;
    size_t n_distinct;
};

static int is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Python's string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ */
static int is_punct(unsigned char c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}

static int is_article(const char *s, size_t len) {
    return (len == 1 && s[0] == 'a') || (len == 2 && memcmp(s, "an", 2) == 0) ||
           (len == 3 && memcmp(s, "the", 3) == 0);
}

/* Normalise src into dst (lowercase, optionally delete punctuation), NUL-terminated. */
static void normalise(const char *src, char *dst, int qa) {
    for (; *src; src++) {
        unsigned char c = (unsigned char)*src;
        if (qa && is_punct(c)) continue;
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
        *dst++ = (char)c;
    }
    *dst = '\0';
}

/* Append the whitespace tokens of s to t (dropping articles when qa); returns the count. */
static size_t split(const char *s, int qa, struct tok *t, size_t pos0) {
    size_t n = 0;
    while (*s) {
        while (*s && is_space((unsigned char)*s)) s++;
        if (!*s) break;
        const char *w = s;
        while (*s && !is_space((unsigned char)*s)) s++;
        size_t len = (size_t)(s - w);
        if (qa && is_article(w, len)) continue;
        t[n] = (struct tok){w, len, pos0 + n};
        n++;
    }
    return n;
}

static int tok_cmp(const void *x, const void *y) {
    const struct tok *a = x, *b = y;
    size_t m = NX_MIN(a->len, b->len);
    int c = memcmp(a->s, b->s, m);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static void seqs_free(struct seqs *q) {
    nx_free(q->buf);
    nx_free(q->ids);
}

/* Normalise, split and intern a and b. 0 on success, -1 on allocation failure. */
static int intern(const char *a, const char *b, int qa, struct seqs *q) {
    memset(q, 0, sizeof(*q));
    size_t la = strlen(a), lb = strlen(b), total, n_max;
    if (!nx_add_size(la, lb, &total) || !nx_add_size(total, 2, &total)) return -1;
    /* at most one token per two bytes, plus one per string */
    n_max = (la + 1) / 2 + (lb + 1) / 2 + 2;
    size_t tok_bytes, id_bytes;
    if (!nx_mul_size(n_max, sizeof(struct tok), &tok_bytes)) return -1;
    if (!nx_mul_size(n_max, sizeof(uint32_t), &id_bytes)) return -1;
    q->buf = nx_malloc(total);
    q->ids = nx_malloc(id_bytes);
    struct tok *t = nx_malloc(tok_bytes);
    if (!q->buf || !q->ids || !t) {
        nx_free(t);
        seqs_free(q);
        return -1;
    }
    char *na = q->buf, *nb = q->buf + la + 1;
    normalise(a, na, qa);
    normalise(b, nb, qa);
    q->na = split(na, qa, t, 0);
    q->nb = split(nb, qa, t + q->na, q->na);
    size_t n = q->na + q->nb;
    if (n > 0) qsort(t, n, sizeof(*t), tok_cmp);
    uint32_t id = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && tok_cmp(&t[i - 1], &t[i]) != 0) id++;
        q->ids[t[i].pos] = id;
    }
    q->n_distinct = n ? (size_t)id + 1 : 0;
    nx_free(t);
    return 0;
}

static double f_measure(double common, size_t n_pred, size_t n_ref) {
    if (common <= 0.0 || n_pred == 0 || n_ref == 0) return 0.0;
    double p = common / (double)n_pred, r = common / (double)n_ref;
    return 2.0 * p * r / (p + r);
}

/* ---------------------------------------------------------------------------------------- */
/* text metrics                                                                              */

double metric_qa_f1(const char *prediction, const char *ground_truth) {
    if (!prediction || !ground_truth) return 0.0;
    struct seqs q;
    if (intern(prediction, ground_truth, 1, &q) != 0) return NAN;
    double f1 = 0.0;
    if (q.na > 0 && q.nb > 0) {
        uint32_t *cnt = nx_calloc(q.n_distinct * 2, sizeof(uint32_t));
        if (!cnt) {
            seqs_free(&q);
            return NAN;
        }
        for (size_t i = 0; i < q.na; i++) cnt[2 * q.ids[i]]++;
        for (size_t i = q.na; i < q.na + q.nb; i++) cnt[2 * q.ids[i] + 1]++;
        size_t common = 0;
        for (size_t d = 0; d < q.n_distinct; d++) common += NX_MIN(cnt[2 * d], cnt[2 * d + 1]);
        nx_free(cnt);
        f1 = f_measure((double)common, q.na, q.nb);
    }
    seqs_free(&q);
    return f1;
}

/* LCS length of x[0..nx) and y[0..ny), ny <= nx; row has ny + 1 entries. */
static size_t lcs_len(const uint32_t *x, size_t nx, const uint32_t *y, size_t ny, size_t *row) {
    for (size_t j = 0; j <= ny; j++) row[j] = 0;
    for (size_t i = 0; i < nx; i++) {
        size_t diag = 0; /* row[j - 1] of the previous i */
        for (size_t j = 1; j <= ny; j++) {
            size_t up = row[j];
            row[j] = x[i] == y[j - 1] ? diag + 1 : NX_MAX(up, row[j - 1]);
            diag = up;
        }
    }
    return row[ny];
}

double metric_rouge_l(const char *prediction, const char *reference) {
    if (!prediction || !reference) return 0.0;
    struct seqs q;
    if (intern(prediction, reference, 0, &q) != 0) return NAN;
    double f = 0.0;
    if (q.na > 0 && q.nb > 0) {
        const uint32_t *x = q.ids, *y = q.ids + q.na;
        size_t nx = q.na, ny = q.nb;
        if (ny > nx) {
            const uint32_t *ts = x;
            x = y;
            y = ts;
            nx = q.nb;
            ny = q.na;
        }
        size_t *row = nx_malloc((ny + 1) * sizeof(size_t));
        if (!row) {
            seqs_free(&q);
            return NAN;
        }
        size_t l = lcs_len(x, nx, y, ny, row);
        nx_free(row);
        f = f_measure((double)l, q.na, q.nb);
    }
    seqs_free(&q);
    return f;
}

double metric_edit_similarity(const char *a, const char *b) {
    if (!a || !b) return 0.0;
    size_t la = strlen(a), lb = strlen(b);
    if (la == 0 && lb == 0) return 1.0;
    if (lb > la) { /* keep the row over the shorter string */
        const char *ts = a;
        a = b;
        b = ts;
        size_t tl = la;
        la = lb;
        lb = tl;
    }
    size_t row_bytes;
    if (!nx_add_size(lb, 1, &row_bytes) || !nx_mul_size(row_bytes, sizeof(size_t), &row_bytes))
        return NAN;
    size_t *row = nx_malloc(row_bytes);
    if (!row) return NAN;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0]; /* d[i-1][j-1] */
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t best = NX_MIN(up + 1, row[j - 1] + 1);
            row[j] = NX_MIN(best, sub);
            diag = up;
        }
    }
    size_t dist = row[lb];
    nx_free(row);
    return 1.0 - (double)dist / (double)la;
}

double metric_classification(const char *prediction, const char *label) {
    if (!prediction || !label || !*label) return 0.0;
    return strstr(prediction, label) ? 1.0 : 0.0;
}

/* ---------------------------------------------------------------------------------------- */
/* LongBench scorers beyond the basic text metrics                                          */

double metric_classification_classes(const char *prediction, const char *label,
                                     const char *const *classes, int n_classes) {
    if (!prediction || !label || !*label || !classes || n_classes <= 0) return 0.0;
    int matches = 0, gold = 0;
    for (int i = 0; i < n_classes; i++) {
        const char *c = classes[i];
        if (!c || !*c || !strstr(prediction, c)) continue;
        /* a class name that is a strict part of the gold label does not count */
        if (strcmp(c, label) != 0 && strstr(label, c)) continue;
        matches++;
        if (!strcmp(c, label)) gold = 1;
    }
    return gold ? 1.0 / matches : 0.0;
}

/* Next run of ASCII digits at or after *p: its value in *v (saturated), *p moved past it. */
static int next_int(const char **p, long long *v) {
    const char *s = *p;
    while (*s && !(*s >= '0' && *s <= '9')) s++;
    if (!*s) return 0;
    long long x = 0;
    for (; *s >= '0' && *s <= '9'; s++) x = x < 100000000000000000LL ? x * 10 + (*s - '0') : x;
    *v = x;
    *p = s;
    return 1;
}

/* fraction of the integers in the prediction that equal `want` (0 when it has none) */
static double int_fraction(const char *prediction, long long want) {
    int n = 0, right = 0;
    long long v;
    for (const char *p = prediction; next_int(&p, &v);) {
        n++;
        right += v == want;
    }
    return n ? (double)right / n : 0.0;
}

double metric_retrieval(const char *prediction, const char *gold) {
    if (!prediction || !gold) return 0.0;
    static const char *const marks[2] = {"Paragraph ", "\xe6\xae\xb5\xe8\x90\xbd"}; /* 段落 */
    for (int k = 0; k < 2; k++) {
        const char *g = strstr(gold, marks[k]);
        if (!g) continue;
        g += strlen(marks[k]);
        if (!(*g >= '0' && *g <= '9')) continue;
        long long want;
        next_int(&g, &want);
        return int_fraction(prediction, want);
    }
    return 0.0;
}

double metric_count(const char *prediction, const char *gold) {
    if (!prediction || !gold) return 0.0;
    const char *g = gold;
    while (is_space((unsigned char)*g)) g++;
    if (!(*g >= '0' && *g <= '9')) return 0.0;
    long long want;
    next_int(&g, &want);
    return int_fraction(prediction, want);
}

double metric_fuzz_ratio(const char *a, const char *b) {
    if (!a || !b) return 0.0;
    size_t na = strlen(a), nb = strlen(b);
    if (na + nb == 0) return 1.0;
    if (na == 0 || nb == 0) return 0.0;
    const char *x = a, *y = b; /* DP row over the shorter string */
    size_t nx = na, ny = nb;
    if (ny > nx) {
        x = b, y = a, nx = nb, ny = na;
    }
    size_t *row = nx_malloc(sizeof *row * (ny + 1));
    if (!row) return NAN;
    memset(row, 0, sizeof *row * (ny + 1));
    for (size_t i = 1; i <= nx; i++) {
        size_t diag = 0;
        for (size_t j = 1; j <= ny; j++) {
            size_t up = row[j];
            row[j] = x[i - 1] == y[j - 1] ? diag + 1 : (row[j - 1] > up ? row[j - 1] : up);
            diag = up;
        }
    }
    double r = 2.0 * (double)row[ny] / (double)(na + nb);
    nx_free(row);
    return r;
}

double metric_code_sim(const char *prediction, const char *gold) {
    if (!prediction || !gold) return 0.0;
    const char *p = prediction;
    while (*p == '\n') p++;
    char *line = NULL;
    while (*p || !line) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int comment = 0;
        for (size_t i = 0; i < len; i++)
            if (p[i] == '`' || p[i] == '#' || (p[i] == '/' && i + 1 < len && p[i + 1] == '/'))
                comment = 1;
        if (!comment) {
            line = nx_malloc(len + 1);
            if (!line) return NAN;
            memcpy(line, p, len);
            line[len] = 0;
            break;
        }
        if (!e) break;
        p = e + 1;
    }
    double r = metric_fuzz_ratio(line ? line : "", gold);
    nx_free(line);
    return r;
}
