/*
 * seqcache.h - the token trie the longest-common-prefix sequence cache (nx_seqcache in
 * nexus.h, in the model layer's seqcache.c) looks prefixes up in, exposed for the tests.
 *
 * The trie holds the token sequences of up to 32 slots. Each node is one token; its mask has
 * bit s set when slot s's sequence passes through it (so every slot in a node's mask has the
 * node's path as a prefix, and a child's mask is a subset of its parent's). All nodes come
 * from one arena sized at init for n_slots * max_len + 1 nodes, with a free list: inserting
 * and removing never allocate, and a lookup only walks the arena.
 */
#ifndef NX_KV_SEQCACHE_H
#define NX_KV_SEQCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/nx_base.h"

#define SC_MAX_SLOTS 32

struct sc_node {
    int32_t tok;
    int32_t child;   /* first child, -1 = none */
    int32_t sibling; /* next sibling, -1 = none */
    uint32_t mask;   /* slots whose sequence passes through this node */
};

struct sc_trie {
    struct sc_node *nodes; /* node 0 is the root (the empty prefix) */
    int32_t cap;
    int32_t *free_ids;
    int32_t n_free;
};

/* Errors: NOMEM, INVALID_ARG (cap < 1). Room for sequences totalling cap - 1 tokens. */
nx_status sc_trie_init(struct sc_trie *t, int32_t cap);
void sc_trie_free(struct sc_trie *t);
/* Add slot's sequence (the slot must not be in the trie; n <= free nodes). */
void sc_trie_insert(struct sc_trie *t, int slot, const nx_token *tokens, int32_t n);
/* Remove slot's sequence (exactly the tokens it was inserted with). */
void sc_trie_remove(struct sc_trie *t, int slot, const nx_token *tokens, int32_t n);
/* Length of the longest prefix of tokens[0..n) that some slot's sequence starts with; *mask
   gets the slots that share it (0 when the length is 0). */
int32_t sc_trie_lookup(const struct sc_trie *t, const nx_token *tokens, int32_t n,
                       uint32_t *mask);

/* The cache (slots, lookups, room) is the model layer's seqcache.c; its test hooks are declared
   with the context's internal accessors (context.h). */

#endif
