/*
 * seqcache.c - DESIGN: the token trie of the sequence cache (kv/seqcache.h): one node per
 * token in an arena with a free list, a slot mask per node. The cache itself (slots holding
 * block references, lookups, room) is the model layer's seqcache.c, next to the context it drives.
 *
 * (The cache's design, for reference:) warm sequences kept as references to their KV blocks in the context's
 * own pool (kv_cache.h reference counts), so reusing a prefix copies nothing: the live tables
 * take references to the slot's blocks, and the first append into a shared, partly filled
 * block copies just that block (copy on write in kv_cache_reserve). A block returns to the
 * pool only when neither a live table nor a slot holds it, so dropping a slot never frees
 * anything the live sequence uses.
 *
 * Room: after the prefix is shared and before decoding, the least recently used slots are
 * dropped until the live sequence could still grow to n_ctx in every table (counting one
 * block per table for a copy on write); slots therefore only ever use the pool's spare room
 * (nx_ctx_params.kv_extra_tokens) and the blocks the live sequence shares with them.
 *
 * Everything (trie arena, token and block-id arrays of every slot) is allocated at init; the
 * lookup path (trie walk, sharing, room check) allocates nothing.
 */
#include "kv/seqcache.h"

#include <string.h>

#include "core/alloc.h"

/* ---- trie ---- */

nx_status sc_trie_init(struct sc_trie *t, int32_t cap) {
    memset(t, 0, sizeof *t);
    if (cap < 1) return NX_STATUS_INVALID_ARG;
    t->nodes = nx_malloc(sizeof *t->nodes * (size_t)cap);
    t->free_ids = nx_malloc(sizeof *t->free_ids * (size_t)cap);
    if (!t->nodes || !t->free_ids) {
        sc_trie_free(t);
        return NX_STATUS_NOMEM;
    }
    t->cap = cap;
    t->nodes[0] = (struct sc_node){.tok = -1, .child = -1, .sibling = -1, .mask = 0};
    t->n_free = 0;
    for (int32_t i = cap - 1; i >= 1; i--) t->free_ids[t->n_free++] = i;
    return NX_STATUS_OK;
}

void sc_trie_free(struct sc_trie *t) {
    nx_free(t->nodes);
    nx_free(t->free_ids);
    memset(t, 0, sizeof *t);
}

static int32_t find_child(const struct sc_trie *t, int32_t node, nx_token tok) {
    for (int32_t c = t->nodes[node].child; c >= 0; c = t->nodes[c].sibling)
        if (t->nodes[c].tok == tok) return c;
    return -1;
}

void sc_trie_insert(struct sc_trie *t, int slot, const nx_token *tokens, int32_t n) {
    uint32_t bit = 1u << slot;
    int32_t node = 0;
    t->nodes[0].mask |= bit;
    for (int32_t i = 0; i < n; i++) {
        int32_t c = find_child(t, node, tokens[i]);
        if (c < 0) {
            NX_ASSERT(t->n_free > 0);
            c = t->free_ids[--t->n_free];
            t->nodes[c] = (struct sc_node){.tok = tokens[i], .child = -1,
                                           .sibling = t->nodes[node].child, .mask = 0};
            t->nodes[node].child = c;
        }
        t->nodes[c].mask |= bit;
        node = c;
    }
}

void sc_trie_remove(struct sc_trie *t, int slot, const nx_token *tokens, int32_t n) {
    uint32_t bit = 1u << slot;
    int32_t node = 0;
    t->nodes[0].mask &= ~bit;
    for (int32_t i = 0; i < n; i++) {
        int32_t c = find_child(t, node, tokens[i]);
        NX_ASSERT(c >= 0 && (t->nodes[c].mask & bit));
        t->nodes[c].mask &= ~bit;
        if (t->nodes[c].mask == 0) {
            /* only this slot went through c: unlink it; the rest of the path below is ours
               alone too (a child's mask is a subset of its parent's) */
            int32_t *link = &t->nodes[node].child;
            while (*link != c) link = &t->nodes[*link].sibling;
            *link = t->nodes[c].sibling;
            for (int32_t j = i;;) {
                t->free_ids[t->n_free++] = c;
                if (++j >= n) break;
                c = find_child(t, c, tokens[j]);
                NX_ASSERT(c >= 0);
            }
            return;
        }
        node = c;
    }
}

int32_t sc_trie_lookup(const struct sc_trie *t, const nx_token *tokens, int32_t n,
                       uint32_t *mask) {
    int32_t node = 0, depth = 0;
    while (depth < n) {
        int32_t c = find_child(t, node, tokens[depth]);
        if (c < 0) break;
        node = c;
        depth++;
    }
    *mask = depth > 0 ? t->nodes[node].mask : 0;
    return depth;
}

