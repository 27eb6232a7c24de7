/*
 * gram.h - grammars for constrained decoding: the builder (rules of alternatives of sequences),
 * the compiled byte-level form, and the pushdown automaton over bytes.
 *
 * DESIGN
 * - A grammar is built from rules; each rule is a list of alternatives; each alternative a
 *   sequence of symbols: a terminal (a set of bytes), a reference to a rule, or JSTR (the body
 *   of a JSON string with its closing quote, min..max characters: a small DFA with a character
 *   counter, so string lengths need no unrolled rules). Code-point classes are compiled to
 *   UTF-8 byte sequences at build time (gram_class: valid UTF-8 only, no surrogates), and
 *   repetitions to helper rules (gram_repeat), so the automaton only ever sees bytes.
 * - gram_finish checks every referenced rule is defined, refuses left recursion (also through
 *   nullable prefixes, which would make expansion loop) and flattens the rules into one element
 *   array: alternative i of rule r is el[alt_start[...]] .. up to an END element.
 * - The automaton state is a set of stacks (a nondeterministic PDA, as llama.cpp's grammar
 *   sampler): a stack is a list of frames (pos, aux), the top frame's pos always a terminal or
 *   JSTR element; lower frames hold the continuation in the calling rule. A reference at the end
 *   of an alternative is a tail call (the caller's frame is dropped), so right-recursive loops
 *   run in constant stack depth. A state is stored flat in an int32 buffer:
 *     [flags, n_stacks, (len, pos0, aux0, ..., pos_{len-1}, aux_{len-1}) * n_stacks]
 *   flags: GS_ACCEPT (the grammar may end here), GS_EXIT (a stack popped its bottom frame
 *   while the bottom is a "context sentinel": used to compute context-independent masks).
 * - A compiled grammar is immutable and may be shared by threads.
 */
#ifndef NX_GRAM_H
#define NX_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

/* ---- builder ---- */

enum gsym_kind { GSYM_TERM = 0, GSYM_REF = 1, GSYM_JSTR = 2 };
struct gsym {
    uint8_t kind;
    int32_t v;        /* TERM: byte-set id; REF: rule id */
    int32_t min, max; /* JSTR: characters (max < 0: unbounded) */
};

struct galt {
    struct gsym *s;
    int32_t n, cap;
};
struct grule {
    char *name;
    struct galt *alts;
    int32_t n_alts, cap_alts;
    bool defined;
    int32_t line, col; /* first reference or definition, for messages */
};

struct gbuilder {
    struct grule *rules;
    int32_t n_rules, cap_rules;
    uint64_t (*sets)[4]; /* byte sets */
    int32_t n_sets, cap_sets;
    int32_t n_helpers;
    bool oom;
};

void gram_builder_init(struct gbuilder *b);
void gram_builder_free(struct gbuilder *b);
/* The rule named name (created undefined when new); -1 on allocation failure. */
int32_t gram_rule(struct gbuilder *b, const char *name, size_t len);
/* A fresh helper rule named "<base>-<n>". */
int32_t gram_rule_helper(struct gbuilder *b, const char *base);
/* Start a new alternative of rule r; returns its index or -1. */
int32_t gram_alt_new(struct gbuilder *b, int32_t r);
void gram_alt_push(struct gbuilder *b, int32_t r, int32_t alt, struct gsym s);
/* A terminal symbol for one byte set. */
struct gsym gram_byteset(struct gbuilder *b, const uint64_t set[4]);
struct gsym gram_byte(struct gbuilder *b, unsigned char c);
struct gsym gram_ref(int32_t r);
/* Code-point class: sorted-or-not ranges [lo, hi] (inclusive), negated or not. Returns a
 * TERM (ASCII only) or a REF to a helper rule of UTF-8 byte sequences. An empty class gives a
 * reference to a rule with no alternative (matches nothing). */
struct gsym gram_class(struct gbuilder *b, const uint32_t (*ranges)[2], int32_t n, bool negated);
/* Append the bytes of a literal to rule r, alternative alt. */
void gram_alt_push_literal(struct gbuilder *b, int32_t r, int32_t alt, const char *s, size_t n);
/* A symbol matching s repeated min..max times (max < 0: unbounded) through helper rules:
 * x{m,n} = m copies, then a chain of n-m optional ones (x{0,k} nests, never k copies of x?). */
struct gsym gram_repeat(struct gbuilder *b, struct gsym s, int32_t min, int32_t max);

/* ---- compiled grammar ---- */

enum gel_type { GEL_END = 0, GEL_TERM = 1, GEL_REF = 2, GEL_JSTR = 3 };
struct gel {
    uint8_t type;
    int32_t v;        /* TERM: set id; REF: rule id */
    int32_t min, max; /* JSTR */
};

struct gram {
    struct gel *el;
    int32_t n_el;
    int32_t *rule_alt_off; /* rule r's alternatives: alt_start[rule_alt_off[r] .. [r+1]) */
    int32_t *alt_start;
    int32_t n_rules;
    uint64_t (*sets)[4];
    int32_t n_sets;
    int32_t root;
    char **rule_names;
    /* shortest completion: min_rule[r] bytes; min_alt[r] = index of the shortest alternative;
       min_rest[pos] = bytes from element pos to the END of its alternative */
    int32_t *min_rule, *min_alt, *min_rest;
};

/* Check and flatten. Errors (message in err): FORMAT (undefined rule, left recursion, rule
 * that derives nothing finite), NOMEM. The builder is left as it was. */
nx_status gram_finish(struct gbuilder *b, const char *root, struct gram **out, struct nx_err *err);
void gram_free(struct gram *g);
/* GBNF text of the compiled grammar (for debugging); returns length, -needed if too small. */
int32_t gram_print(const struct gram *g, char *buf, int32_t len);

/* ---- automaton ---- */

enum { GS_ACCEPT = 1, GS_EXIT = 2 };
#define GRAM_MAX_DEPTH 256  /* frames per stack; deeper stacks die */
#define GRAM_MAX_STACKS 128 /* stacks per state; more are dropped (documented in nexus.h), but a
                              full state still sets GS_ACCEPT / GS_EXIT exactly (read off the
                              shortest completion of what it did not follow) */
/* Work spent building one state: one step per visit of a stack (also of one already expanded);
 * derivations beyond are dropped as above (documented in nexus.h). With the memo below the work
 * is bounded by distinct stacks and their alternatives, not by derivations. */
#define GRAM_MAX_EXPANSIONS 32768

/* Scratch for building a state: the stacks seen so far, hash-consed as a trie (node = parent
 * node + one frame; node 0 is the empty stack), each marked once expanded. A stack reached again
 * along another derivation (nested nullable repetitions such as "x"???? reach one stack along
 * exponentially many paths) is skipped, which also makes the emitted stacks distinct without a
 * duplicate scan. Grows to its high-water mark and is reused; one per thread at a time. */
struct gmemo {
    int32_t *key;   /* 3 per node: parent, pos, aux */
    int32_t *where; /* per node: its slot in the table */
    uint8_t *done;  /* per node: expanded (or emitted) already */
    int32_t *slot;  /* open addressing, node id + 1 (0: empty); n_slots a power of two */
    int32_t n, cap, n_slots;
};
void gmemo_free(struct gmemo *m);

/* Growable int32 buffer holding one state. */
struct gstate {
    int32_t *a;
    int32_t n, cap;
    int32_t expansions; /* expansion steps spent since the last reset */
    bool oom;
    bool lossy; /* the build dropped stacks (past GRAM_MAX_STACKS or GRAM_MAX_EXPANSIONS) or let
                   one die at GRAM_MAX_DEPTH: a mask made per stack may then allow a token that
                   the whole state refuses (mask.c walks the trie from such states instead) */
};
void gstate_free(struct gstate *s);
bool gstate_copy(struct gstate *dst, const struct gstate *src);
/* memo: scratch for the build (any struct gmemo, zeroed once, then reused; gmemo_free it).
 * The initial state: the root rule expanded (with sentinel: context-free start at one
 * terminal position, see mask.c). */
bool gram_init_state(const struct gram *g, struct gmemo *memo, struct gstate *out);
/* State {one stack: frames[0..n) (pairs pos, aux)}, expanded; sentinel: a pop of the bottom
 * frame sets GS_EXIT instead of GS_ACCEPT. */
bool gram_state_from_frames(const struct gram *g, struct gmemo *memo, const int32_t *frames,
                            int32_t n, bool sentinel, struct gstate *out);
/* out = in advanced by byte c (out != in). Returns false on allocation failure. out may be
 * dead (no stack, no flags). The GS_EXIT flag is not inherited (it means "exited here"). */
bool gram_advance(const struct gram *g, struct gmemo *memo, const struct gstate *in,
                  unsigned char c, bool sentinel, struct gstate *out);
static inline bool gstate_dead(const struct gstate *s) { return s->a[1] == 0 && s->a[0] == 0; }
static inline bool gstate_live(const struct gstate *s) { return s->a[1] > 0; }

/* JSON string body DFA: state after byte c from state q (-1: rejected). q = 0 is a character
 * boundary. *starts: c starts a new character. */
int gram_jstr_step(int q, unsigned char c, bool *starts);
#define GRAM_JSTR_STATES 13
#define JSTR_AUX(count, q) (((count) << 4) | (q))
#define JSTR_COUNT(aux) ((aux) >> 4)
#define JSTR_Q(aux) ((aux) & 15)

/* Shortest byte string completing the state, written to buf (its first cap bytes); returns the
 * bytes written, -1 when the state has no stack and cannot end. */
int32_t gram_completion(const struct gram *g, const struct gstate *s, char *buf, int32_t cap);
/* Length of that string (0 when the state may end now), -1 when there is none. */
int64_t gram_completion_cost(const struct gram *g, const struct gstate *s);

#endif
