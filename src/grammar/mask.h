/*
 * mask.h - token masks over a vocabulary for a grammar state: the vocabulary index (token
 * byte strings in a trie, built once per vocabulary and shared read-only), and the matcher
 * (a grammar, its current state, rollback history, the per-position mask cache).
 */
#ifndef NX_MASK_H
#define NX_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/gram.h"

struct gvocab;
struct gmatcher;

/* Token byte strings: bytes of token t are pool[off[t] .. off[t]+len[t]); empty for control
 * tokens (never allowed by a grammar). eog: tokens allowed when the grammar may end. */
nx_status gvocab_build(int32_t n_vocab, const char *const *bytes, const int32_t *lens,
                       const bool *eog, struct gvocab **out, struct nx_err *err);
void gvocab_free(struct gvocab *v);
int32_t gvocab_n(const struct gvocab *v);
const char *gvocab_bytes(const struct gvocab *v, int32_t t, int32_t *len);
bool gvocab_is_eog(const struct gvocab *v, int32_t t);
size_t gvocab_memory(const struct gvocab *v);

nx_status gmatcher_init(const struct gram *g, const struct gvocab *v, struct gmatcher **out);
void gmatcher_free(struct gmatcher *m);
void gmatcher_reset(struct gmatcher *m);
/* The mask of the current state into bits (ceil(n_vocab / 64) words; bit t = allowed).
 * force: only tokens that are a prefix of the shortest completion (EOG when complete).
 * Returns the number of allowed tokens, or a negative status (NOMEM). A mask spends at most
 * the matcher's work budget (gmatcher_set_budget); past it the mask is partial: a subset of
 * the allowed tokens (never a token that gmatcher_accept refuses), and when that subset is
 * empty, the tokens that begin the shortest completion. */
int32_t gmatcher_mask(struct gmatcher *m, uint64_t *bits, bool force);
/* Whether the last mask was partial (cut short by the work budget). */
bool gmatcher_mask_partial(const struct gmatcher *m);
/* The work one mask may spend (units: expansion steps plus stack frames read while building
 * states; see gmatcher_stats' max_work). The default: GMATCHER_WORK_BASE plus
 * GMATCHER_WORK_PER_NODE per node of the vocabulary's trie (an exact mask walks that trie). */
void gmatcher_set_budget(struct gmatcher *m, int64_t work);
#define GMATCHER_WORK_BASE ((int64_t)1 << 18)
#define GMATCHER_WORK_PER_NODE 64
/* Advance by a token (EOG: only when the grammar may end; the matcher is then finished).
 * INVALID_ARG when not allowed (state unchanged). */
nx_status gmatcher_accept(struct gmatcher *m, int32_t t);
/* Advance by raw bytes; INVALID_ARG when they are not accepted (state unchanged). Counts as
 * one step for rollback. */
nx_status gmatcher_accept_bytes(struct gmatcher *m, const char *s, size_t n);
/* Undo the last n accepted steps (at most the history kept, GMATCHER_HISTORY); returns the
 * number undone. */
int32_t gmatcher_rollback(struct gmatcher *m, int32_t n);
#define GMATCHER_HISTORY 32
bool gmatcher_can_end(const struct gmatcher *m);
bool gmatcher_finished(const struct gmatcher *m);
bool gmatcher_dead(const struct gmatcher *m);
/* Bytes of the shortest completion from the current state (-1: none). */
int64_t gmatcher_completion_cost(const struct gmatcher *m);
/* Brute force: is token t allowed? (its bytes fed through the automaton from the state) */
bool gmatcher_allows_slow(struct gmatcher *m, int32_t t);
/* The current state (for tests). */
const struct gstate *gmatcher_state(const struct gmatcher *m);

struct gmatcher_stats {
    int64_t cache_entries, cache_hits, cache_misses;
    size_t cache_bytes;
    int64_t last_work, max_work; /* work of the last mask, the most one mask spent */
    int64_t partial_masks;       /* masks cut short by the budget */
    int64_t budget;              /* the work one mask may spend */
};
void gmatcher_stats(const struct gmatcher *m, struct gmatcher_stats *out);

#endif
