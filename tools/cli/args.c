/*
 * args.c - table-driven flag parsing for the nexus CLI (see args.h).
 *
 * DESIGN
 * - One pass over argv; each word is looked up by name or alias in the tables, in order, so a
 *   command's own table can sit after the shared ones without clashing (first match wins).
 * - Numbers: strtoll / strtoull / strtod with the whole word consumed, errno clear and the
 *   range checked before anything is stored, so a bad value never half-updates a destination.
 */
#include "args.h"

#include <stdarg.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool args_long(const char *v, long long lo, long long hi, long long *out) {
    if (!v) return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return false;
    *out = x;
    return true;
}

bool args_double(const char *v, double *out) {
    if (!v) return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}

int args_int_list(const char *s, long long lo, long long hi, int *out, int max) {
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        long long v;
        if (len == 0 || len >= sizeof item || n == max) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (!args_long(item, lo, hi, &v)) return -1;
        out[n++] = (int)v;
        if (!comma) return n;
        p = comma + 1;
    }
}

static const struct arg *find(const struct arg *const *tables, const char *word) {
    for (int t = 0; tables[t]; t++)
        for (const struct arg *a = tables[t]; a->type != ARG_END; a++)
            if (!strcmp(word, a->name) || (a->alias && !strcmp(word, a->alias))) return a;
    return NULL;
}

static bool takes_value(enum arg_type t) { return t != ARG_FLAG && t != ARG_CLEAR; }

/* Stores v into a's destination; false (nothing stored) when v is not a valid value. */
static bool store(const struct arg *a, const char *v, const char *prefix, const char *word) {
    long long x;
    double d;
    switch (a->type) {
    case ARG_STR:
        *(const char **)a->dst = v;
        return true;
    case ARG_STRS: {
        struct arg_strs *s = a->dst;
        if (s->n == s->max) {
            fprintf(stderr, "%s: %s: at most %d values\n", prefix, word, s->max);
            return false;
        }
        s->v[s->n++] = v;
        return true;
    }
    case ARG_INT:
    case ARG_I32:
    case ARG_LONG:
        if (!args_long(v, a->lo, a->hi, &x)) {
            fprintf(stderr, "%s: %s: expected an integer in [%lld, %lld], got '%s'\n", prefix, word,
                    a->lo, a->hi, v);
            return false;
        }
        if (a->type == ARG_INT) *(int *)a->dst = (int)x;
        else if (a->type == ARG_I32) *(int32_t *)a->dst = (int32_t)x;
        else *(long *)a->dst = (long)x;
        return true;
    case ARG_U64: {
        char *end;
        errno = 0;
        unsigned long long u = v[0] == '-' ? 0 : strtoull(v, &end, 0);
        if (v[0] == '-' || errno || end == v || *end || u < (unsigned long long)a->lo ||
            (a->hi > 0 && u > (unsigned long long)a->hi)) {
            fprintf(stderr, "%s: %s: expected a non-negative integer%s, got '%s'\n", prefix, word,
                    a->hi > 0 ? " in range" : "", v);
            return false;
        }
        *(uint64_t *)a->dst = (uint64_t)u;
        return true;
    }
    case ARG_FLOAT:
    case ARG_DOUBLE:
        if (!args_double(v, &d)) {
            fprintf(stderr, "%s: %s: expected a number, got '%s'\n", prefix, word, v);
            return false;
        }
        if (a->type == ARG_FLOAT) *(float *)a->dst = (float)d;
        else *(double *)a->dst = d;
        return true;
    case ARG_CHOICE:
        for (int i = 0; a->choices[i]; i++)
            if (!strcmp(v, a->choices[i])) {
                *(int *)a->dst = i;
                return true;
            }
        fprintf(stderr, "%s: %s: expected ", prefix, word);
        for (int i = 0; a->choices[i]; i++)
            fprintf(stderr, "%s%s", i ? (a->choices[i + 1] ? ", " : " or ") : "", a->choices[i]);
        fprintf(stderr, ", got '%s'\n", v);
        return false;
    case ARG_FLAG:
    case ARG_CLEAR:
    case ARG_END:
        break;
    }
    return false;
}

int args_parse(const struct arg *const *tables, int argc, char **argv, int start,
               const char *prefix, bool help_ok, const char **pos, int max_pos, int *n_pos) {
    int np = 0;
    if (n_pos) *n_pos = 0;
    for (int i = start; i < argc; i++) {
        const char *w = argv[i];
        if (w[0] != '-' || !w[1]) {
            if (np == max_pos) {
                fprintf(stderr, "%s: unexpected argument '%s'\n", prefix, w);
                return ARGS_ERROR;
            }
            if (pos) pos[np] = w;
            np++;
            if (n_pos) *n_pos = np;
            continue;
        }
        const struct arg *a = find(tables, w);
        if (!a) {
            if (help_ok && (!strcmp(w, "-h") || !strcmp(w, "--help"))) return ARGS_HELP;
            fprintf(stderr, "%s: unknown option '%s'\n", prefix, w);
            return ARGS_ERROR;
        }
        if (!takes_value(a->type)) {
            *(bool *)a->dst = a->type == ARG_FLAG;
        } else {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value\n", prefix, w);
                return ARGS_ERROR;
            }
            if (!store(a, argv[++i], prefix, w)) return ARGS_ERROR;
        }
        if (a->seen) *a->seen = true;
    }
    return ARGS_OK;
}

void cli_die(const char *prefix, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prefix);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}
