/*
 * args.h - the command-line flags of every `nexus` command, described by tables.
 *
 * A command lists its flags as `struct arg` rows (name, optional alias, type, destination,
 * range) and calls args_parse once; tables can be chained (the flags shared by every model
 * command, the policy x density x regime sweep, then the command's own). Values are checked
 * as they are parsed: integers in [lo, hi] (base 10; ARG_U64 also takes 0x...), finite
 * floating-point numbers, one of a list of names (ARG_CHOICE). A flag given twice keeps the
 * last value, except ARG_STRS, which collects every value in order.
 *
 * Messages go to stderr as "PREFIX: ...", e.g.
 *     nexus run: -n: expected an integer in [0, 16777216], got 'x'
 *     nexus run: unknown option '--bogus'
 *     nexus run: --model needs a value
 * and args_parse returns ARGS_ERROR; the caller turns it into its exit status (1 for the
 * model commands, 2 for the routing and mcp commands, as before).
 */
#ifndef NX_CLI_ARGS_H
#define NX_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

enum arg_type {
    ARG_END = 0, /* ends a table */
    ARG_FLAG,    /* bool *: set to true, takes no value */
    ARG_CLEAR,   /* bool *: set to false, takes no value */
    ARG_STR,     /* const char **: the value as given (borrowed from argv) */
    ARG_STRS,    /* struct arg_strs *: every value, in order, at most max */
    ARG_INT,     /* int *, range [lo, hi] */
    ARG_I32,     /* int32_t *, range [lo, hi] */
    ARG_LONG,    /* long *, range [lo, hi] */
    ARG_U64,     /* uint64_t *, range [lo, hi] (hi 0: no upper limit) */
    ARG_FLOAT,   /* float *, finite */
    ARG_DOUBLE,  /* double *, finite */
    ARG_CHOICE,  /* int *: the index of the value in choices[] (a NULL-ended list) */
};

struct arg_strs {
    const char **v;
    int n, max;
};

struct arg {
    const char *name;          /* "--layers" */
    const char *alias;         /* "-l", or NULL */
    enum arg_type type;
    void *dst;
    long long lo, hi;          /* integer range (inclusive) */
    const char *const *choices; /* ARG_CHOICE: the accepted values, NULL-ended */
    bool *seen;                /* set to true when the flag is given (may be NULL) */
};

/* Table rows; the destination's pointer type is checked. Extra designated fields (e.g.
 * .seen = &b) may follow the fixed arguments. */
#define NX_ARG_DST_(p, T) ((void *)(1 ? (p) : (T *)0))
#define A_FLAG(n, al, p, ...) {.name = n, .alias = al, .type = ARG_FLAG, .dst = NX_ARG_DST_(p, bool), __VA_ARGS__}
#define A_CLEAR(n, al, p, ...) {.name = n, .alias = al, .type = ARG_CLEAR, .dst = NX_ARG_DST_(p, bool), __VA_ARGS__}
#define A_STR(n, al, p, ...) {.name = n, .alias = al, .type = ARG_STR, .dst = NX_ARG_DST_(p, const char *), __VA_ARGS__}
#define A_STRS(n, al, p, ...) {.name = n, .alias = al, .type = ARG_STRS, .dst = NX_ARG_DST_(p, struct arg_strs), __VA_ARGS__}
#define A_INT(n, al, p, l, h, ...) {.name = n, .alias = al, .type = ARG_INT, .dst = NX_ARG_DST_(p, int), .lo = (l), .hi = (h), __VA_ARGS__}
#define A_I32(n, al, p, l, h, ...) {.name = n, .alias = al, .type = ARG_I32, .dst = NX_ARG_DST_(p, int32_t), .lo = (l), .hi = (h), __VA_ARGS__}
#define A_LONG(n, al, p, l, h, ...) {.name = n, .alias = al, .type = ARG_LONG, .dst = NX_ARG_DST_(p, long), .lo = (l), .hi = (h), __VA_ARGS__}
#define A_U64(n, al, p, l, h, ...) {.name = n, .alias = al, .type = ARG_U64, .dst = NX_ARG_DST_(p, uint64_t), .lo = (l), .hi = (h), __VA_ARGS__}
#define A_FLOAT(n, al, p, ...) {.name = n, .alias = al, .type = ARG_FLOAT, .dst = NX_ARG_DST_(p, float), __VA_ARGS__}
#define A_DOUBLE(n, al, p, ...) {.name = n, .alias = al, .type = ARG_DOUBLE, .dst = NX_ARG_DST_(p, double), __VA_ARGS__}
#define A_CHOICE(n, al, p, ch, ...) {.name = n, .alias = al, .type = ARG_CHOICE, .dst = NX_ARG_DST_(p, int), .choices = (ch), __VA_ARGS__}
#define A_END {.type = ARG_END}

enum { ARGS_OK = 0, ARGS_ERROR = -1, ARGS_HELP = 1 };

/*
 * Parses argv[start..argc) against the tables (a NULL-ended list, searched in order). Words
 * that are not flags (not starting with '-', or exactly "-") are positional: stored in pos[]
 * (may be NULL) in order, at most max_pos; one more is an error ("unexpected argument").
 * With help_ok, "-h" / "--help" returns ARGS_HELP (the caller prints its usage); otherwise it
 * is an unknown option. Returns ARGS_OK, ARGS_HELP, or ARGS_ERROR after printing a message
 * prefixed with prefix. *n_pos (may be NULL) = positional words stored.
 */
int args_parse(const struct arg *const *tables, int argc, char **argv, int start,
               const char *prefix, bool help_ok, const char **pos, int max_pos, int *n_pos);

/* Single values, for flags whose value needs more than a table row (e.g. FILE@POS). */
bool args_long(const char *v, long long lo, long long hi, long long *out);
/* "PREFIX: message" on stderr (PREFIX e.g. "nexus" or "nexus chat"), then exit(1): the CLI's
   one way to give up. */
__attribute__((noreturn, format(printf, 2, 3))) void cli_die(const char *prefix,
                                                              const char *fmt, ...);
bool args_double(const char *v, double *out);
/* The process exit status for a library runner's result: 0 for NX_STATUS_OK, 1 otherwise (the
   runner has printed its message). */
static inline int cli_exit_status(nx_status st) { return st == NX_STATUS_OK ? 0 : 1; }

/* A comma-separated list of integers in [lo, hi] (empty items are refused): the count, at
 * most max, or -1 when an item is not such an integer or there are more than max. */
int args_int_list(const char *s, long long lo, long long hi, int *out, int max);

#endif
