/*
 * seqcache.c - DESIGN: the sequence cache (nx_seqcache in nexus.h): warm sequences kept as
 * references to their KV blocks in the context's own pool (kv_cache.h reference counts), so
 * reusing a prefix copies nothing: the live tables of the requesting sequence take references
 * to the slot's blocks, and the first write into a shared block copies just that block (copy
 * on write: kv_cache_reserve for a partly filled last block, kv_compact when eviction rewrites
 * blocks, kv_table_unshare before range operations). A block returns to the pool only when
 * neither a table of any sequence nor a slot holds it, so dropping a slot never frees
 * anything a live sequence uses, and an evicting sequence only ever drops its own references.
 *
 * Room: after the prefix is shared and before decoding, the least recently used slots are
 * dropped until the requesting sequence could still grow to its bound (n_ctx, or its budget
 * plus a batch for an evicting one) in every table (counting one block per table for a copy
 * on write); slots therefore only ever use the pool's spare room (kv_extra_tokens) and the
 * blocks live sequences share with them.
 *
 * Everything (trie arena, token and block-id arrays of every slot) is allocated at init; the
 * lookup path (trie walk, sharing, room check) allocates nothing.
 */
#include <string.h>

#include "core/alloc.h"
#include "kv/kv_cache.h"
#include "kv/seqcache.h"
#include "model/context.h"

/* ---- the cache ---- */

struct sc_slot {
    bool used;
    int32_t len;
    uint64_t last_used;
    nx_token *tokens; /* (max_len) */
    int32_t *blocks;  /* (n_tables, max_blocks) block ids, ceil(len / block) per table */
};

struct nx_seqcache {
    nx_ctx *ctx;
    struct kv_cache *kv;
    int n_slots;
    int32_t max_len;    /* n_ctx */
    int32_t max_blocks; /* per table */
    int n_tables;
    struct sc_trie trie;
    struct sc_slot slots[SC_MAX_SLOTS];
    uint64_t clock;
    struct nx_seqcache_stats st;
};

void nx_seqcache_free(nx_seqcache *sc) {
    if (!sc) return;
    for (int s = 0; s < sc->n_slots; s++) {
        struct sc_slot *sl = &sc->slots[s];
        if (sl->used) {
            int32_t nb = (int32_t)((sl->len + sc->kv->p.block - 1) / sc->kv->p.block);
            for (int ti = 0; ti < sc->n_tables; ti++)
                for (int32_t i = 0; i < nb; i++)
                    kv_block_unref(sc->kv, sl->blocks[(size_t)ti * (size_t)sc->max_blocks + (size_t)i]);
        }
        nx_free(sl->tokens);
        nx_free(sl->blocks);
    }
    sc_trie_free(&sc->trie);
    nx_free(sc);
}

nx_status nx_seqcache_init(nx_ctx *ctx, int32_t n_slots, nx_seqcache **out) {
    *out = NULL;
    if (n_slots < 1 || n_slots > SC_MAX_SLOTS)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seqcache: n_slots must be in [1, 32]");
    struct nx_seqcache *sc = nx_calloc(1, sizeof *sc);
    if (!sc) return NX_STATUS_NOMEM;
    sc->ctx = ctx;
    sc->kv = ctx_kv_cache(ctx);
    sc->n_slots = n_slots;
    sc->max_len = nx_ctx_n_ctx(ctx);
    sc->max_blocks = (sc->max_len + sc->kv->p.block - 1) / sc->kv->p.block;
    sc->n_tables = sc->kv->p.n_layer * sc->kv->p.n_head_kv;
    int64_t cap = (int64_t)n_slots * sc->max_len + 1;
    if (cap > INT32_MAX || sc_trie_init(&sc->trie, (int32_t)cap)) goto nomem;
    for (int s = 0; s < n_slots; s++) {
        sc->slots[s].tokens = nx_malloc(sizeof(nx_token) * (size_t)sc->max_len);
        sc->slots[s].blocks =
            nx_malloc(sizeof(int32_t) * (size_t)sc->n_tables * (size_t)sc->max_blocks);
        if (!sc->slots[s].tokens || !sc->slots[s].blocks) goto nomem;
    }
    *out = sc;
    return NX_STATUS_OK;
nomem:
    nx_seqcache_free(sc);
    return ctx_set_error(ctx, NX_STATUS_NOMEM, "seqcache: out of memory");
}

static void drop_slot(struct nx_seqcache *sc, int s) {
    struct sc_slot *sl = &sc->slots[s];
    if (!sl->used) return;
    sc_trie_remove(&sc->trie, s, sl->tokens, sl->len);
    int32_t nb = (int32_t)((sl->len + sc->kv->p.block - 1) / sc->kv->p.block);
    for (int ti = 0; ti < sc->n_tables; ti++)
        for (int32_t i = 0; i < nb; i++)
            kv_block_unref(sc->kv, sl->blocks[(size_t)ti * (size_t)sc->max_blocks + (size_t)i]);
    sl->used = false;
    sl->len = 0;
    sc->st.slots_used--;
    sc->st.slots_dropped++;
}

static int lru_slot(const struct nx_seqcache *sc, int except) {
    int best = -1;
    for (int s = 0; s < sc->n_slots; s++) {
        if (!sc->slots[s].used || s == except) continue;
        if (best < 0 || sc->slots[s].last_used < sc->slots[best].last_used) best = s;
    }
    return best;
}

/* Free blocks sequence seq may still need to reach its bound in every table. */
static int64_t blocks_to_grow(const struct nx_seqcache *sc, int seq) {
    struct kv_cache *kv = sc->kv;
    int64_t need = 0, bound = NX_MIN((int64_t)sc->max_blocks, ctx_seq_grow_blocks(sc->ctx, seq));
    const struct kv_table *tabs = kv_seq_tables(kv, seq);
    for (int ti = 0; ti < sc->n_tables; ti++) {
        const struct kv_table *t = &tabs[ti];
        need += NX_MAX(bound - t->n_blocks, 0);
        /* a shared, partly filled last block is copied at the next append */
        if (t->n_blocks > 0 && t->n_tokens % kv->p.block && kv->refs[t->blocks[t->n_blocks - 1]] > 1)
            need++;
    }
    return need;
}

/* Drop least recently used slots (keep `keep` as long as possible) until sequence seq can
   grow to its bound. */
static void make_room(struct nx_seqcache *sc, int seq, int keep) {
    while (sc->kv->n_free < blocks_to_grow(sc, seq)) {
        int s = lru_slot(sc, keep);
        if (s < 0) s = keep >= 0 && sc->slots[keep].used ? keep : -1;
        if (s < 0) break;
        drop_slot(sc, s);
    }
}

static int pick_slot(const struct nx_seqcache *sc, uint32_t mask) {
    int best = -1;
    for (int s = 0; s < sc->n_slots; s++)
        if ((mask >> s & 1u) && (best < 0 || sc->slots[s].last_used > sc->slots[best].last_used))
            best = s;
    return best;
}

int32_t seqcache_lookup(const struct nx_seqcache *sc, const nx_token *tokens, int32_t n,
                        int *slot) {
    uint32_t mask;
    int32_t L = sc_trie_lookup(&sc->trie, tokens, n, &mask);
    *slot = L > 0 ? pick_slot(sc, mask) : -1;
    return L;
}

const nx_token *seqcache_slot_tokens(const struct nx_seqcache *sc, int s, int32_t *n) {
    if (s < 0 || s >= sc->n_slots || !sc->slots[s].used) {
        *n = 0;
        return NULL;
    }
    *n = sc->slots[s].len;
    return sc->slots[s].tokens;
}

nx_status nx_seqcache_prefill_seq(nx_seqcache *sc, nx_seq_id seq, const nx_token *tokens,
                                  int32_t n, bool all_logits, int32_t *n_reused) {
    nx_ctx *ctx = sc->ctx;
    if (n_reused) *n_reused = 0;
    if (seq < 0 || seq >= ctx_n_seq(ctx))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seqcache: sequence %d out of range",
                             seq);
    if (n <= 0 || !tokens) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "empty request");
    if (n > sc->max_len)
        return ctx_set_error(ctx, NX_STATUS_KV_FULL, "request of %d tokens > n_ctx %d", n,
                             sc->max_len);
    ctx_seq_clear(ctx, seq);
    double t0 = nx_time_s();
    int s;
    int32_t L = seqcache_lookup(sc, tokens, n, &s);
    double dt = nx_time_s() - t0;
    sc->st.lookups++;
    sc->st.lookup_seconds += dt;
    if (dt > sc->st.lookup_max_seconds) sc->st.lookup_max_seconds = dt;
    int32_t reuse = L < n ? L : n - 1; /* the last token is decoded for its logits */
    if (reuse > 0 && s >= 0) {
        struct sc_slot *sl = &sc->slots[s];
        for (int ti = 0; ti < sc->n_tables; ti++)
            kv_table_share_prefix(sc->kv, &kv_seq_tables(sc->kv, seq)[ti],
                                  sl->blocks + (size_t)ti * (size_t)sc->max_blocks, reuse);
        sl->last_used = ++sc->clock;
        ctx_seq_set_n_past(ctx, seq, reuse);
        sc->st.hits++;
    } else {
        reuse = 0;
    }
    make_room(sc, seq, s);
    nx_status st = ctx_decode_seq(ctx, seq, tokens + reuse, n - reuse, all_logits);
    if (st) return st;
    sc->st.tokens_reused += reuse;
    sc->st.tokens_prefilled += n - reuse;
    if (n_reused) *n_reused = reuse;
    return NX_STATUS_OK;
}

nx_status nx_seqcache_prefill(nx_seqcache *sc, const nx_token *tokens, int32_t n,
                              bool all_logits, int32_t *n_reused) {
    return nx_seqcache_prefill_seq(sc, 0, tokens, n, all_logits, n_reused);
}

nx_status nx_seqcache_store_seq(nx_seqcache *sc, nx_seq_id seq, const nx_token *tokens,
                                int32_t n) {
    nx_ctx *ctx = sc->ctx;
    struct kv_cache *kv = sc->kv;
    if (seq < 0 || seq >= ctx_n_seq(ctx))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seqcache: sequence %d out of range",
                             seq);
    if (n <= 0 || !tokens || n != ctx_seq_n_past(ctx, seq) || n > sc->max_len)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "seqcache store: %d tokens given, the sequence has n_past %d", n,
                             ctx_seq_n_past(ctx, seq));
    const struct kv_table *tabs = kv_seq_tables(kv, seq);
    for (int ti = 0; ti < sc->n_tables; ti++) {
        const struct kv_table *t = &tabs[ti];
        /* strictly increasing positions: n of them from 0 to n - 1 means exactly 0 .. n-1 */
        if (t->n_tokens != n || kv_block_pos(kv, t->blocks[0])[0] != 0 ||
            kv_block_pos(kv, kv_slot_block(kv, t, n - 1))[(n - 1) % kv->p.block] != n - 1)
            return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                                 "seqcache store: the cache does not hold exactly positions 0.."
                                 "%d (evicted, removed or spliced with gaps)",
                                 n - 1);
    }
    int s;
    int32_t L = seqcache_lookup(sc, tokens, n, &s);
    if (L == n && s >= 0) {
        sc->slots[s].last_used = ++sc->clock;
        return NX_STATUS_OK;
    }
    for (s = 0; s < sc->n_slots && sc->slots[s].used; s++) {
    }
    if (s == sc->n_slots) {
        s = lru_slot(sc, -1);
        drop_slot(sc, s);
    }
    struct sc_slot *sl = &sc->slots[s];
    memcpy(sl->tokens, tokens, sizeof(nx_token) * (size_t)n);
    sl->len = n;
    int32_t nb = (n + kv->p.block - 1) / kv->p.block;
    for (int ti = 0; ti < sc->n_tables; ti++) {
        const struct kv_table *t = &tabs[ti];
        for (int32_t i = 0; i < nb; i++) {
            kv_block_ref(kv, t->blocks[i]);
            sl->blocks[(size_t)ti * (size_t)sc->max_blocks + (size_t)i] = t->blocks[i];
        }
    }
    sc_trie_insert(&sc->trie, s, tokens, n);
    sl->used = true;
    sl->last_used = ++sc->clock;
    sc->st.slots_used++;
    make_room(sc, seq, s);
    return NX_STATUS_OK;
}

nx_status nx_seqcache_store(nx_seqcache *sc, const nx_token *tokens, int32_t n) {
    return nx_seqcache_store_seq(sc, 0, tokens, n);
}

void nx_seqcache_stats(const nx_seqcache *sc, struct nx_seqcache_stats *out) { *out = sc->st; }
