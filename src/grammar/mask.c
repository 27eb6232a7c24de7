/*
 * mask.c - DESIGN: per-step token masks.
 *
 * Vocabulary index (gvocab, built once per vocabulary, read-only after): the token byte
 * strings sorted, as a trie in preorder (node = one byte; `end` = index after its subtree; the
 * tokens ending at a node are a run of the sorted order). A mask walk visits nodes in order
 * with one automaton state per depth, so shared prefixes are advanced once and a dead prefix
 * skips its whole subtree. For JSON-string bodies (JSTR) it also holds, per DFA start state,
 * which tokens stay inside the string (with their character counts) and which close it
 * (character count before the quote, and the suffix after it, deduplicated and sorted).
 *
 * Matcher: the mask of a state is the union over its stacks.
 * - Top is a terminal at position p: the adaptive cache (XGrammar's idea, our code). For each
 *   p, once, the trie is walked from the stack [p] over an unknown context (a sentinel below):
 *   tokens consumed inside p's rule, or ending exactly where the rule returns, are accepted
 *   whatever the rest of the stack; tokens rejected inside are rejected; tokens that need bytes
 *   after the rule returned are context-dependent and kept in a list (trie order, with common
 *   prefix lengths). At run time: mask |= accepted(p), then only the context-dependent tokens
 *   are walked with the real stack (sharing prefixes again).
 * - Top is JSTR with count c and DFA state q: inside tokens with at most max - c characters
 *   come from precomputed bitsets; closing tokens need min <= c + n <= max and their suffix
 *   accepted by the continuation, which is checked once per distinct suffix.
 * Memory: cache entries are one bitset (n_vocab bits) + the context-dependent list per
 * position; all entries are dropped when they pass GMATCHER_CACHE_MAX bytes. Steady state
 * allocates nothing: scratch states and buffers grow only to the largest seen.
 * Work: one mask may spend at most m->budget work units (a state built from a stack costs its
 * expansion steps plus the frames it read). A state's own limits bound one advance, not a
 * mask: a grammar whose states hold 128 deep stacks and keep almost every token alive costs
 * thousands of steps per trie node, seconds per mask over a real vocabulary. When the budget is
 * spent, the walks stop and every token not yet proven allowed is left out (a sound
 * under-approximation: each allowed token is still accepted); an entry cut short is not cached;
 * cached entries still contribute their accepted bitsets, which cost no walk. If that leaves no
 * token, the tokens that begin the shortest completion are allowed, so generation goes on.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "grammar/mask.h"

#define GMATCHER_CACHE_MAX ((size_t)256 << 20)
#define THR_MAX 48 /* q = 0 threshold bitsets for remaining character counts 0..THR_MAX-1 */

struct tnode {
    int32_t end;       /* index after this node's subtree */
    int32_t tok_first; /* index into order[] */
    int32_t tok_n;
    uint16_t depth;    /* 1 for a first byte */
    uint8_t byte;
};

struct jtab {
    uint64_t *inside;  /* tokens that stay inside the string body */
    int32_t *big;      /* inside tokens sorted by character count, descending */
    uint16_t *big_n;
    int32_t n_big;
    int32_t n_exit;
    int32_t *ex_tok;
    uint16_t *ex_nch;
    int32_t *ex_suf;
    int32_t n_suf;
    int32_t *suf_tok, *suf_off, *suf_len, *suf_lcp; /* suffix = bytes of suf_tok from suf_off */
};

struct gvocab {
    int32_t n, nw;
    char *pool;
    uint32_t *off;
    int32_t *len;
    uint8_t *eog;
    uint64_t *eog_bits;
    int32_t *order;
    struct tnode *nodes;
    int32_t n_nodes, max_len;
    struct jtab js[GRAM_JSTR_STATES];
    uint64_t *thr0; /* THR_MAX bitsets */
    size_t bytes;
};

int32_t gvocab_n(const struct gvocab *v) { return v->n; }
const char *gvocab_bytes(const struct gvocab *v, int32_t t, int32_t *len) {
    *len = v->len[t];
    return v->pool + v->off[t];
}
bool gvocab_is_eog(const struct gvocab *v, int32_t t) { return v->eog[t]; }
size_t gvocab_memory(const struct gvocab *v) { return v->bytes; }

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const struct gvocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->pool + v->off[x], v->pool + v->off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int32_t lcp(const char *a, int32_t la, const char *b, int32_t lb) {
    int32_t n = la < lb ? la : lb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

void gvocab_free(struct gvocab *v) {
    if (!v) return;
    nx_free(v->pool);
    nx_free(v->off);
    nx_free(v->len);
    nx_free(v->eog);
    nx_free(v->eog_bits);
    nx_free(v->order);
    nx_free(v->nodes);
    for (int q = 0; q < GRAM_JSTR_STATES; q++) {
        struct jtab *j = &v->js[q];
        nx_free(j->inside);
        nx_free(j->big);
        nx_free(j->big_n);
        nx_free(j->ex_tok);
        nx_free(j->ex_nch);
        nx_free(j->ex_suf);
        nx_free(j->suf_tok);
        nx_free(j->suf_off);
        nx_free(j->suf_len);
        nx_free(j->suf_lcp);
    }
    nx_free(v->thr0);
    nx_free(v);
}

/* Run the string-body DFA over token bytes from state q: 0 rejected, 1 inside (n = chars
 * started), 2 closed at the quote (n = chars before it, *after = offset after the quote). */
static int jstr_run(const char *s, int32_t len, int q, int32_t *n, int32_t *after) {
    int32_t cnt = 0;
    for (int32_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (q == 0 && c == '"') {
            *n = cnt;
            *after = i + 1;
            return 2;
        }
        bool starts;
        q = gram_jstr_step(q, c, &starts);
        if (q < 0) return 0;
        if (starts) cnt++;
    }
    *n = cnt;
    return 1;
}

struct sufsort {
    const struct gvocab *v;
    const struct jtab *j;
    const int32_t *off; /* per exit index */
};
static int cmp_suf(const void *a, const void *b, void *ctx) {
    const struct sufsort *s = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int32_t tx = s->j->ex_tok[x], ty = s->j->ex_tok[y];
    const char *px = s->v->pool + s->v->off[tx] + s->off[x];
    const char *py = s->v->pool + s->v->off[ty] + s->off[y];
    int32_t lx = s->v->len[tx] - s->off[x], ly = s->v->len[ty] - s->off[y];
    int c = memcmp(px, py, (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    return (lx > ly) - (lx < ly);
}

static nx_status build_jtab(struct gvocab *v, int q) {
    struct jtab *j = &v->js[q];
    int32_t n = v->n, nw = v->nw;
    j->inside = nx_calloc((size_t)nw, sizeof *j->inside);
    int32_t *kind = nx_malloc(sizeof *kind * (size_t)n * 3);
    if (!j->inside || !kind) {
        nx_free(kind);
        return NX_STATUS_NOMEM;
    }
    int32_t *nch = kind + n, *aft = kind + 2 * n;
    int32_t n_in = 0, n_ex = 0;
    for (int32_t t = 0; t < n; t++) {
        kind[t] = v->len[t] ? jstr_run(v->pool + v->off[t], v->len[t], q, &nch[t], &aft[t]) : 0;
        if (nch[t] > 65535) nch[t] = 65535;
        if (kind[t] == 1) {
            j->inside[t >> 6] |= 1ull << (t & 63);
            n_in++;
        } else if (kind[t] == 2) {
            n_ex++;
        }
    }
    j->big = nx_malloc(sizeof *j->big * (size_t)(n_in + 1));
    j->big_n = nx_malloc(sizeof *j->big_n * (size_t)(n_in + 1));
    j->ex_tok = nx_malloc(sizeof *j->ex_tok * (size_t)(n_ex + 1));
    j->ex_nch = nx_malloc(sizeof *j->ex_nch * (size_t)(n_ex + 1));
    j->ex_suf = nx_malloc(sizeof *j->ex_suf * (size_t)(n_ex + 1));
    int32_t *exoff = nx_malloc(sizeof *exoff * (size_t)(n_ex + 1));
    int32_t *idx = nx_malloc(sizeof *idx * (size_t)(n_ex + 1));
    j->suf_tok = nx_malloc(sizeof *j->suf_tok * (size_t)(n_ex + 1));
    j->suf_off = nx_malloc(sizeof *j->suf_off * (size_t)(n_ex + 1));
    j->suf_len = nx_malloc(sizeof *j->suf_len * (size_t)(n_ex + 1));
    j->suf_lcp = nx_malloc(sizeof *j->suf_lcp * (size_t)(n_ex + 1));
    if (!j->big || !j->big_n || !j->ex_tok || !j->ex_nch || !j->ex_suf || !exoff || !idx ||
        !j->suf_tok || !j->suf_off || !j->suf_len || !j->suf_lcp) {
        nx_free(kind);
        nx_free(exoff);
        nx_free(idx);
        return NX_STATUS_NOMEM;
    }
    /* inside tokens by character count, descending (counting sort) */
    int32_t maxc = 0;
    for (int32_t t = 0; t < n; t++)
        if (kind[t] == 1 && nch[t] > maxc) maxc = nch[t];
    int32_t k = 0;
    for (int32_t c = maxc; c >= 0; c--)
        for (int32_t t = 0; t < n; t++)
            if (kind[t] == 1 && nch[t] == c && c > 0) {
                j->big[k] = t;
                j->big_n[k] = (uint16_t)c;
                k++;
            }
    j->n_big = k;
    k = 0;
    for (int32_t t = 0; t < n; t++)
        if (kind[t] == 2) {
            j->ex_tok[k] = t;
            j->ex_nch[k] = (uint16_t)nch[t];
            exoff[k] = aft[t];
            idx[k] = k;
            k++;
        }
    j->n_exit = k;
    struct sufsort ss = {v, j, exoff};
    qsort_r(idx, (size_t)k, sizeof *idx, cmp_suf, &ss);
    int32_t ns = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t e = idx[i];
        if (i == 0 || cmp_suf(&idx[i - 1], &idx[i], &ss) != 0) {
            int32_t t = j->ex_tok[e];
            j->suf_tok[ns] = t;
            j->suf_off[ns] = exoff[e];
            j->suf_len[ns] = v->len[t] - exoff[e];
            j->suf_lcp[ns] = 0;
            if (ns > 0) {
                int32_t pt = j->suf_tok[ns - 1];
                j->suf_lcp[ns] = lcp(v->pool + v->off[pt] + j->suf_off[ns - 1], j->suf_len[ns - 1],
                                     v->pool + v->off[t] + exoff[e], j->suf_len[ns]);
            }
            ns++;
        }
        j->ex_suf[e] = ns - 1;
    }
    j->n_suf = ns;
    v->bytes += (size_t)nw * 8 + (size_t)j->n_big * 6 + (size_t)k * 26;
    nx_free(kind);
    nx_free(exoff);
    nx_free(idx);
    return NX_STATUS_OK;
}

nx_status gvocab_build(int32_t n_vocab, const char *const *bytes, const int32_t *lens,
                       const bool *eog, struct gvocab **out, struct nx_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return nx_err_set(err, NX_STATUS_INVALID_ARG, "grammar vocab: no tokens");
    struct gvocab *v = nx_calloc(1, sizeof *v);
    if (!v) return nx_err_set(err, NX_STATUS_NOMEM, "grammar vocab: out of memory");
    v->n = n_vocab;
    v->nw = (n_vocab + 63) / 64;
    size_t total = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (lens[t] < 0 || lens[t] > 65535) {
            gvocab_free(v);
            return nx_err_set(err, NX_STATUS_INVALID_ARG, "grammar vocab: token %d too long", t);
        }
        total += (size_t)lens[t];
    }
    if (total > UINT32_MAX) {
        gvocab_free(v);
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "grammar vocab: too large");
    }
    v->pool = nx_malloc(total + 1);
    v->off = nx_malloc(sizeof *v->off * (size_t)n_vocab);
    v->len = nx_malloc(sizeof *v->len * (size_t)n_vocab);
    v->eog = nx_calloc((size_t)n_vocab, 1);
    v->eog_bits = nx_calloc((size_t)v->nw, sizeof *v->eog_bits);
    v->order = nx_malloc(sizeof *v->order * (size_t)n_vocab);
    v->nodes = nx_malloc(sizeof *v->nodes * (total + 1));
    v->thr0 = nx_calloc((size_t)v->nw * THR_MAX, sizeof *v->thr0);
    if (!v->pool || !v->off || !v->len || !v->eog || !v->eog_bits || !v->order || !v->nodes ||
        !v->thr0)
        goto nomem;
    size_t o = 0;
    int32_t n_tok = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        v->off[t] = (uint32_t)o;
        v->len[t] = lens[t];
        if (lens[t]) memcpy(v->pool + o, bytes[t], (size_t)lens[t]);
        o += (size_t)lens[t];
        if (eog && eog[t]) {
            v->eog[t] = 1;
            v->eog_bits[t >> 6] |= 1ull << (t & 63);
            v->len[t] = 0; /* an end token never matches text */
        }
        if (v->len[t] > v->max_len) v->max_len = v->len[t];
        if (v->len[t] > 0) v->order[n_tok++] = t;
    }
    qsort_r(v->order, (size_t)n_tok, sizeof *v->order, cmp_tok, v);
    /* trie in preorder */
    int32_t *path = nx_malloc(sizeof *path * ((size_t)v->max_len + 1));
    if (!path) goto nomem;
    int32_t depth = 0, nn = 0;
    int32_t prev = -1;
    for (int32_t i = 0; i < n_tok; i++) {
        int32_t t = v->order[i];
        const char *s = v->pool + v->off[t];
        int32_t L = v->len[t];
        int32_t c = prev < 0 ? 0 : lcp(v->pool + v->off[prev], v->len[prev], s, L);
        while (depth > c) v->nodes[path[--depth]].end = nn;
        for (; depth < L; depth++) {
            v->nodes[nn] = (struct tnode){.end = -1, .tok_first = -1, .tok_n = 0,
                                          .depth = (uint16_t)(depth + 1), .byte = (uint8_t)s[depth]};
            path[depth] = nn++;
        }
        struct tnode *nd = &v->nodes[path[L - 1]];
        if (nd->tok_n == 0) nd->tok_first = i;
        nd->tok_n++;
        prev = t;
    }
    while (depth > 0) v->nodes[path[--depth]].end = nn;
    nx_free(path);
    v->n_nodes = nn;
    v->bytes = total + (size_t)n_vocab * 17 + (size_t)nn * sizeof *v->nodes +
               (size_t)v->nw * 8 * (THR_MAX + 1);
    for (int q = 0; q < GRAM_JSTR_STATES; q++)
        if (build_jtab(v, q) != NX_STATUS_OK) goto nomem;
    /* thresholds for q = 0: thr0[r] = inside tokens with at most r characters */
    for (int32_t r = 0; r < THR_MAX; r++) {
        uint64_t *b = v->thr0 + (size_t)r * v->nw;
        memcpy(b, v->js[0].inside, sizeof *b * (size_t)v->nw);
        for (int32_t i = 0; i < v->js[0].n_big && v->js[0].big_n[i] > r; i++) {
            int32_t t = v->js[0].big[i];
            b[t >> 6] &= ~(1ull << (t & 63));
        }
    }
    *out = v;
    return NX_STATUS_OK;
nomem:
    gvocab_free(v);
    return nx_err_set(err, NX_STATUS_NOMEM, "grammar vocab: out of memory");
}

/* ---- matcher ---- */

#define CKEY_FRAMES 3 /* the cache is keyed by the top frames of a stack (up to 3 positions) */

struct centry {
    int32_t key[CKEY_FRAMES]; /* positions, top first; -1 past the stack's bottom */
    bool used;
    uint64_t *acc;
    int32_t *cd;     /* context-dependent tokens, trie order */
    int32_t *cd_lcp; /* common prefix with the previous one */
    int32_t n_cd;
    bool done;
};

struct gmatcher {
    const struct gram *g;
    const struct gvocab *v;
    struct gstate cur;
    struct gstate hist[GMATCHER_HISTORY];
    bool hist_fin[GMATCHER_HISTORY];
    int32_t h_n, h_pos;
    bool finished;
    struct centry *cache; /* open-addressing table keyed by the top frames */
    int32_t cache_cap;    /* power of two */
    size_t cache_bytes;
    int64_t n_entries, hits, misses;
    struct gstate *dfs; /* max_len + 2 scratch states */
    struct gmemo memo;  /* scratch of every state built */
    int32_t n_dfs;
    uint8_t *cdp;
    uint64_t *tmp;
    uint8_t *ok;
    int32_t ok_cap;
    int32_t *list, *list_lcp;
    int32_t list_cap;
    char *comp;
    int32_t comp_cap;
    int64_t budget, work; /* work units one mask may spend / spent by the current one */
    bool partial;         /* the last mask was cut short by the budget */
    bool lossy;           /* some state built so far was lossy (gram.h): masks walk the trie */
    int64_t max_work, n_partial;
};

const struct gstate *gmatcher_state(const struct gmatcher *m) { return &m->cur; }

/* Charge the building of state out (from the state in, when there is one) to the mask. */
static inline void charge(struct gmatcher *m, const struct gstate *in, const struct gstate *out) {
    m->work += out->expansions + (in ? in->n / 2 : 0);
    m->lossy |= out->lossy;
}
/* Whether the mask's budget is spent (then the mask is partial). */
static inline bool spent(struct gmatcher *m) {
    if (m->work >= m->budget) m->partial = true;
    return m->partial;
}

static void cache_drop(struct gmatcher *m) {
    for (int32_t p = 0; p < m->cache_cap; p++) {
        nx_free(m->cache[p].acc);
        nx_free(m->cache[p].cd);
        nx_free(m->cache[p].cd_lcp);
        memset(&m->cache[p], 0, sizeof m->cache[p]);
    }
    m->cache_bytes = 0;
    m->n_entries = 0;
}

void gmatcher_free(struct gmatcher *m) {
    if (!m) return;
    if (m->cache) cache_drop(m);
    nx_free(m->cache);
    gstate_free(&m->cur);
    gmemo_free(&m->memo);
    for (int i = 0; i < GMATCHER_HISTORY; i++) gstate_free(&m->hist[i]);
    if (m->dfs)
        for (int32_t i = 0; i < m->n_dfs; i++) gstate_free(&m->dfs[i]);
    nx_free(m->dfs);
    nx_free(m->cdp);
    nx_free(m->tmp);
    nx_free(m->ok);
    nx_free(m->list);
    nx_free(m->list_lcp);
    nx_free(m->comp);
    nx_free(m);
}

void gmatcher_reset(struct gmatcher *m) {
    gram_init_state(m->g, &m->memo, &m->cur);
    m->lossy |= m->cur.lossy;
    m->h_n = 0;
    m->h_pos = 0;
    m->finished = false;
}

nx_status gmatcher_init(const struct gram *g, const struct gvocab *v, struct gmatcher **out) {
    *out = NULL;
    struct gmatcher *m = nx_calloc(1, sizeof *m);
    if (!m) return NX_STATUS_NOMEM;
    m->g = g;
    m->v = v;
    m->n_dfs = v->max_len + 2;
    m->cache_cap = 1024;
    m->cache = nx_calloc((size_t)m->cache_cap, sizeof *m->cache);
    m->dfs = nx_calloc((size_t)m->n_dfs, sizeof *m->dfs);
    m->cdp = nx_calloc((size_t)m->n_dfs, 1);
    m->tmp = nx_calloc((size_t)v->nw, sizeof *m->tmp);
    m->comp_cap = v->max_len + 8;
    m->comp = nx_malloc((size_t)m->comp_cap);
    m->budget = GMATCHER_WORK_BASE + GMATCHER_WORK_PER_NODE * (int64_t)v->n_nodes;
    if (!m->cache || !m->dfs || !m->cdp || !m->tmp || !m->comp ||
        !gram_init_state(g, &m->memo, &m->cur)) {
        gmatcher_free(m);
        return NX_STATUS_NOMEM;
    }
    m->lossy = m->cur.lossy;
    *out = m;
    return NX_STATUS_OK;
}

static bool list_push(struct gmatcher *m, int32_t *n, int32_t t, int32_t l) {
    if (*n == m->list_cap) {
        int32_t nc = m->list_cap ? m->list_cap * 2 : 1024;
        int32_t *a = nx_realloc(m->list, sizeof *a * (size_t)nc);
        if (!a) return false;
        m->list = a;
        int32_t *b = nx_realloc(m->list_lcp, sizeof *b * (size_t)nc);
        if (!b) return false;
        m->list_lcp = b;
        m->list_cap = nc;
    }
    m->list[*n] = t;
    m->list_lcp[*n] = l;
    ++*n;
    return true;
}

/* Walk the trie from position p over an unknown context (see DESIGN). Returns false on
 * allocation failure; when the mask's budget runs out it returns true with e->done false. */
__attribute__((noinline)) static bool cache_compute(struct gmatcher *m, struct centry *e,
                                                     const int32_t *fr, int32_t nf) {
    const struct gvocab *v = m->v;
    size_t bytes = (size_t)v->nw * 8;
    nx_free(e->acc); /* a computation that failed before */
    nx_free(e->cd);
    nx_free(e->cd_lcp);
    e->cd = e->cd_lcp = NULL;
    e->acc = nx_calloc((size_t)v->nw, sizeof *e->acc);
    if (!e->acc) return false;
    if (!gram_state_from_frames(m->g, &m->memo, fr, nf, true, &m->dfs[0])) return false;
    charge(m, NULL, &m->dfs[0]);
    m->cdp[0] = 0;
    int32_t n_cd = 0;
    const char *last = NULL;
    int32_t last_len = 0;
    for (int32_t k = 0; k < v->n_nodes;) {
        const struct tnode *nd = &v->nodes[k];
        int32_t d = nd->depth;
        struct gstate *st = &m->dfs[d];
        if (spent(m)) return true; /* cut short: e->done stays false, e->acc holds what is proven */
        if (!gram_advance(m->g, &m->memo, &m->dfs[d - 1], nd->byte, true, st)) return false;
        charge(m, &m->dfs[d - 1], st);
        bool exit_here = (st->a[0] & GS_EXIT) != 0, live = gstate_live(st);
        bool cd_before = m->cdp[d - 1];
        /* tokens ending at this node */
        for (int32_t i = 0; i < nd->tok_n; i++) {
            int32_t t = v->order[nd->tok_first + i];
            if (live || exit_here) {
                e->acc[t >> 6] |= 1ull << (t & 63);
            } else if (cd_before) {
                const char *s = v->pool + v->off[t];
                int32_t l = last ? lcp(last, last_len, s, v->len[t]) : 0;
                if (!list_push(m, &n_cd, t, l)) return false;
                last = s;
                last_len = v->len[t];
            }
        }
        if (live) {
            m->cdp[d] = cd_before || exit_here;
            k++;
            continue;
        }
        if (cd_before || exit_here) { /* every token below depends on the context */
            for (int32_t j = k + 1; j < nd->end; j++) {
                const struct tnode *c = &v->nodes[j];
                for (int32_t i = 0; i < c->tok_n; i++) {
                    int32_t t = v->order[c->tok_first + i];
                    const char *s = v->pool + v->off[t];
                    int32_t l = last ? lcp(last, last_len, s, v->len[t]) : 0;
                    if (!list_push(m, &n_cd, t, l)) return false;
                    last = s;
                    last_len = v->len[t];
                }
            }
        }
        k = nd->end;
    }
    if (n_cd) {
        e->cd = nx_malloc(sizeof *e->cd * (size_t)n_cd);
        e->cd_lcp = nx_malloc(sizeof *e->cd_lcp * (size_t)n_cd);
        if (!e->cd || !e->cd_lcp) return false;
        memcpy(e->cd, m->list, sizeof *e->cd * (size_t)n_cd);
        memcpy(e->cd_lcp, m->list_lcp, sizeof *e->cd_lcp * (size_t)n_cd);
        e->cd_lcp[0] = 0;
    }
    e->n_cd = n_cd;
    e->done = true;
    bytes += (size_t)n_cd * 8;
    m->cache_bytes += bytes;
    return true;
}

/* Walk byte strings (ptr i = get) from the state in dfs[0], sharing prefixes (lcp[i] with
 * string i-1); ok[i] = accepted (false for the strings not reached when the budget runs out). */
struct strs {
    const struct gvocab *v;
    const int32_t *tok, *off, *len; /* off/len NULL: whole token */
    const int32_t *lcp;
};
static bool walk_strings(struct gmatcher *m, const struct strs *s, int32_t n, uint8_t *ok) {
    int32_t comp = 0;
    for (int32_t i = 0; i < n; i++) {
        if (spent(m)) {
            memset(ok + i, 0, (size_t)(n - i));
            return true;
        }
        int32_t t = s->tok[i];
        const char *b = s->v->pool + s->v->off[t] + (s->off ? s->off[i] : 0);
        int32_t len = s->len ? s->len[i] : s->v->len[t];
        int32_t j = s->lcp[i] < comp ? s->lcp[i] : comp;
        bool dead = gstate_dead(&m->dfs[j]);
        while (!dead && j < len) {
            if (!gram_advance(m->g, &m->memo, &m->dfs[j], (unsigned char)b[j], false,
                              &m->dfs[j + 1]))
                return false;
            charge(m, &m->dfs[j], &m->dfs[j + 1]);
            j++;
            dead = gstate_dead(&m->dfs[j]);
        }
        comp = j;
        ok[i] = !dead && j == len;
    }
    return true;
}

static bool ok_reserve(struct gmatcher *m, int32_t n) {
    if (n <= m->ok_cap) return true;
    uint8_t *o = nx_realloc(m->ok, (size_t)n);
    if (!o) return false;
    m->ok = o;
    m->ok_cap = n;
    return true;
}

__attribute__((noinline)) static uint32_t key_hash(const int32_t *k) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < CKEY_FRAMES; i++) h = (h ^ (uint32_t)k[i]) * 16777619u;
    return h ^ (h >> 15);
}

/* The entry for key (found, or a free slot marked used); NULL on allocation failure. */
static struct centry *cache_slot(struct gmatcher *m, const int32_t *key) {
    if ((m->n_entries + 1) * 2 > m->cache_cap) { /* grow */
        int32_t nc = m->cache_cap * 2;
        struct centry *t = nx_calloc((size_t)nc, sizeof *t);
        if (!t) return NULL;
        for (int32_t i = 0; i < m->cache_cap; i++) {
            if (!m->cache[i].used) continue;
            uint32_t h = key_hash(m->cache[i].key) & (uint32_t)(nc - 1);
            while (t[h].used) h = (h + 1) & (uint32_t)(nc - 1);
            t[h] = m->cache[i];
        }
        nx_free(m->cache);
        m->cache = t;
        m->cache_cap = nc;
    }
    uint32_t h = key_hash(key) & (uint32_t)(m->cache_cap - 1);
    while (m->cache[h].used && memcmp(m->cache[h].key, key, sizeof m->cache[h].key))
        h = (h + 1) & (uint32_t)(m->cache_cap - 1);
    return &m->cache[h];
}

static bool mask_term(struct gmatcher *m, const int32_t *fr, int32_t len, uint64_t *bits) {
    int32_t key[CKEY_FRAMES], nf = len < CKEY_FRAMES ? len : CKEY_FRAMES;
    for (int i = 0; i < CKEY_FRAMES; i++) key[i] = i < nf ? fr[2 * (len - 1 - i)] : -1;
    struct centry *e = cache_slot(m, key);
    if (!e) return false;
    if (!e->done) {
        if (spent(m)) return true;
        m->misses++;
        if (m->cache_bytes > GMATCHER_CACHE_MAX) {
            cache_drop(m);
            e = cache_slot(m, key);
            if (!e) return false;
        }
        if (!e->used) { /* counted when taken, so that slots of entries cut short count too */
            e->used = true;
            memcpy(e->key, key, sizeof e->key);
            m->n_entries++;
        }
        /* the top nf frames, bottom first, over an unknown context */
        if (!cache_compute(m, e, fr + 2 * (len - nf), nf)) return false;
    } else {
        m->hits++;
    }
    for (int32_t w = 0; w < m->v->nw; w++) bits[w] |= e->acc[w];
    /* an entry cut short gives what it proved, without the context-dependent tokens */
    if (!e->done || e->n_cd == 0 || spent(m)) return true;
    if (!gram_state_from_frames(m->g, &m->memo, fr, len, false, &m->dfs[0])) return false;
    charge(m, NULL, &m->dfs[0]);
    if (!ok_reserve(m, e->n_cd)) return false;
    struct strs s = {m->v, e->cd, NULL, NULL, e->cd_lcp};
    if (!walk_strings(m, &s, e->n_cd, m->ok)) return false;
    for (int32_t i = 0; i < e->n_cd; i++)
        if (m->ok[i]) bits[e->cd[i] >> 6] |= 1ull << (e->cd[i] & 63);
    return true;
}

__attribute__((noinline)) static bool mask_jstr(struct gmatcher *m, const int32_t *fr, int32_t len, uint64_t *bits) {
    const struct gvocab *v = m->v;
    int32_t pos = fr[2 * (len - 1)], aux = fr[2 * (len - 1) + 1];
    const struct gel *x = &m->g->el[pos];
    int q = JSTR_Q(aux);
    int32_t cnt = JSTR_COUNT(aux);
    const struct jtab *j = &v->js[q];
    int32_t nw = v->nw;
    /* inside */
    if (x->max < 0) {
        for (int32_t w = 0; w < nw; w++) bits[w] |= j->inside[w];
    } else {
        int32_t r = x->max - cnt;
        if (q == 0 && r < THR_MAX) {
            const uint64_t *b = v->thr0 + (size_t)r * nw;
            for (int32_t w = 0; w < nw; w++) bits[w] |= b[w];
        } else {
            memcpy(m->tmp, j->inside, sizeof *m->tmp * (size_t)nw);
            for (int32_t i = 0; i < j->n_big && j->big_n[i] > r; i++)
                m->tmp[j->big[i] >> 6] &= ~(1ull << (j->big[i] & 63));
            for (int32_t w = 0; w < nw; w++) bits[w] |= m->tmp[w];
        }
    }
    if (j->n_exit == 0 || spent(m)) return true;
    /* closing tokens: suffixes checked from the continuation */
    int32_t work[2 * GRAM_MAX_DEPTH];
    memcpy(work, fr, sizeof *work * 2 * (size_t)len);
    work[2 * (len - 1)] = pos + 1;
    work[2 * (len - 1) + 1] = 0;
    if (!gram_state_from_frames(m->g, &m->memo, work, len, false, &m->dfs[0])) return false;
    charge(m, NULL, &m->dfs[0]);
    if (!ok_reserve(m, j->n_suf)) return false;
    struct strs s = {v, j->suf_tok, j->suf_off, j->suf_len, j->suf_lcp};
    if (!walk_strings(m, &s, j->n_suf, m->ok)) return false;
    for (int32_t i = 0; i < j->n_exit; i++) {
        int32_t n = cnt + j->ex_nch[i];
        if (n < x->min || (x->max >= 0 && n > x->max) || !m->ok[j->ex_suf[i]]) continue;
        bits[j->ex_tok[i] >> 6] |= 1ull << (j->ex_tok[i] & 63);
    }
    return true;
}

static inline int popcount64(uint64_t x) { /* SWAR: no libgcc call without -mpopcnt */
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (int)((x * 0x0101010101010101ull) >> 56);
}

static int32_t popcount_bits(const uint64_t *b, int32_t nw) {
    int32_t c = 0;
    for (int32_t w = 0; w < nw; w++)
        if (b[w]) c += popcount64(b[w]);
    return c;
}

/* Set the bits of the tokens that end at trie node nd; returns how many. */
static int32_t set_node_tokens(const struct gvocab *v, const struct tnode *nd, uint64_t *bits) {
    for (int32_t i = 0; i < nd->tok_n; i++) {
        int32_t t = v->order[nd->tok_first + i];
        bits[t >> 6] |= 1ull << (t & 63);
    }
    return nd->tok_n;
}

/* Tokens that begin the shortest completion (EOG when complete). Each one is checked by the
 * automaton itself as the completion is walked: in a state past GRAM_MAX_STACKS the completion
 * read off the kept stacks can need stacks that the next state drops, and such a token would be
 * refused by gmatcher_accept. Returns the count, or NOMEM. */
static int32_t mask_force(struct gmatcher *m, uint64_t *bits) {
    const struct gvocab *v = m->v;
    int32_t n = gram_completion(m->g, &m->cur, m->comp, m->comp_cap);
    if (n < 0) return 0;
    if (n == 0) {
        for (int32_t w = 0; w < v->nw; w++) bits[w] = v->eog_bits[w];
        return popcount_bits(bits, v->nw);
    }
    if (!gstate_copy(&m->dfs[0], &m->cur)) return NX_STATUS_NOMEM;
    /* follow the completion down the trie (at most max_len bytes: dfs has room) */
    int32_t k = 0, end = v->n_nodes, found = 0;
    for (int32_t d = 0; d < n && k < end; d++) {
        int32_t c = k;
        while (c < end && v->nodes[c].byte != (uint8_t)m->comp[d]) c = v->nodes[c].end;
        if (c >= end) break;
        if (!gram_advance(m->g, &m->memo, &m->dfs[d], (unsigned char)m->comp[d], false,
                          &m->dfs[d + 1]))
            return NX_STATUS_NOMEM;
        if (gstate_dead(&m->dfs[d + 1])) break;
        found += set_node_tokens(v, &v->nodes[c], bits);
        end = v->nodes[c].end;
        k = c + 1;
    }
    return found;
}

/* The mask by a walk of the whole trie from the current state: each token's bytes go through
 * the automaton as gmatcher_accept feeds them (shared prefixes advanced once, dead prefixes
 * skip their subtree), so the result is exact whatever the state lost. Returns false on
 * allocation failure; stops when the budget is spent. */
static bool mask_direct(struct gmatcher *m, uint64_t *bits) {
    const struct gvocab *v = m->v;
    if (!gstate_copy(&m->dfs[0], &m->cur)) return false;
    for (int32_t k = 0; k < v->n_nodes;) {
        if (spent(m)) return true;
        const struct tnode *nd = &v->nodes[k];
        int32_t d = nd->depth;
        if (!gram_advance(m->g, &m->memo, &m->dfs[d - 1], nd->byte, false, &m->dfs[d]))
            return false;
        charge(m, &m->dfs[d - 1], &m->dfs[d]);
        if (gstate_dead(&m->dfs[d])) {
            k = nd->end;
            continue;
        }
        set_node_tokens(v, nd, bits);
        k++;
    }
    return true;
}

int32_t gmatcher_mask(struct gmatcher *m, uint64_t *bits, bool force) {
    const struct gvocab *v = m->v;
    memset(bits, 0, sizeof *bits * (size_t)v->nw);
    m->work = 0;
    m->partial = false;
    if (m->finished) return 0;
    if (force) {
        int32_t n = mask_force(m, bits);
        if (n != 0) return n; /* the tokens, or NOMEM */
    }
    /* per stack, through the cache, while no state has been lossy; a state that was (before or
       during this mask) makes the union over stacks unreliable: then the direct walk */
    if (!m->lossy) {
        const int32_t *a = m->cur.a;
        int32_t i = 2;
        for (int32_t k = 0; k < a[1]; k++) {
            int32_t len = a[i];
            const int32_t *fr = a + i + 1;
            i += 1 + 2 * len;
            bool ok = m->g->el[fr[2 * (len - 1)]].type == GEL_JSTR ? mask_jstr(m, fr, len, bits)
                                                                  : mask_term(m, fr, len, bits);
            if (!ok) return NX_STATUS_NOMEM;
            a = m->cur.a;
        }
    }
    if (m->lossy) { /* what the stacks gave (if anything) is not to be trusted */
        memset(bits, 0, sizeof *bits * (size_t)v->nw);
        if (!mask_direct(m, bits)) return NX_STATUS_NOMEM;
    }
    if (m->cur.a[0] & GS_ACCEPT)
        for (int32_t w = 0; w < v->nw; w++) bits[w] |= v->eog_bits[w];
    if (m->work > m->max_work) m->max_work = m->work;
    int32_t n = popcount_bits(bits, v->nw);
    if (!m->partial) return n;
    m->n_partial++;
    return n > 0 ? n : mask_force(m, bits);
}

bool gmatcher_mask_partial(const struct gmatcher *m) { return m->partial; }
void gmatcher_set_budget(struct gmatcher *m, int64_t work) { m->budget = work; }

static void hist_push(struct gmatcher *m) {
    struct gstate *h = &m->hist[m->h_pos];
    if (!gstate_copy(h, &m->cur)) {
        m->h_n = 0; /* cannot keep history: rollback becomes unavailable, nothing else */
        return;
    }
    m->hist_fin[m->h_pos] = m->finished;
    m->h_pos = (m->h_pos + 1) % GMATCHER_HISTORY;
    if (m->h_n < GMATCHER_HISTORY) m->h_n++;
}

/* Feed bytes from the current state into dfs scratch; returns the index of the result, -1 if
 * rejected, -2 on allocation failure. */
static int feed(struct gmatcher *m, const char *s, size_t n) {
    if (!gstate_copy(&m->dfs[0], &m->cur)) return -2;
    int cur = 0;
    for (size_t i = 0; i < n; i++) {
        int nx = cur ^ 1;
        if (!gram_advance(m->g, &m->memo, &m->dfs[cur], (unsigned char)s[i], false, &m->dfs[nx]))
            return -2;
        m->lossy |= m->dfs[nx].lossy;
        cur = nx;
        if (gstate_dead(&m->dfs[cur])) return -1;
    }
    return cur;
}

nx_status gmatcher_accept_bytes(struct gmatcher *m, const char *s, size_t n) {
    if (m->finished) return NX_STATUS_INVALID_ARG;
    int r = feed(m, s, n);
    if (r == -2) return NX_STATUS_NOMEM;
    if (r < 0 || (n == 0 && gstate_dead(&m->cur))) return NX_STATUS_INVALID_ARG;
    hist_push(m);
    if (!gstate_copy(&m->cur, &m->dfs[r])) return NX_STATUS_NOMEM;
    return NX_STATUS_OK;
}

nx_status gmatcher_accept(struct gmatcher *m, int32_t t) {
    if (t < 0 || t >= m->v->n || m->finished) return NX_STATUS_INVALID_ARG;
    if (m->v->eog[t]) {
        if (!(m->cur.a[0] & GS_ACCEPT)) return NX_STATUS_INVALID_ARG;
        hist_push(m);
        m->finished = true;
        return NX_STATUS_OK;
    }
    if (m->v->len[t] == 0) return NX_STATUS_INVALID_ARG;
    return gmatcher_accept_bytes(m, m->v->pool + m->v->off[t], (size_t)m->v->len[t]);
}

bool gmatcher_allows_slow(struct gmatcher *m, int32_t t) {
    if (t < 0 || t >= m->v->n || m->finished) return false;
    if (m->v->eog[t]) return (m->cur.a[0] & GS_ACCEPT) != 0;
    if (m->v->len[t] == 0) return false;
    return feed(m, m->v->pool + m->v->off[t], (size_t)m->v->len[t]) >= 0;
}

int32_t gmatcher_rollback(struct gmatcher *m, int32_t n) {
    int32_t done = 0;
    while (done < n && m->h_n > 0) {
        m->h_pos = (m->h_pos + GMATCHER_HISTORY - 1) % GMATCHER_HISTORY;
        m->h_n--;
        if (!gstate_copy(&m->cur, &m->hist[m->h_pos])) break;
        m->finished = m->hist_fin[m->h_pos];
        done++;
    }
    return done;
}

bool gmatcher_can_end(const struct gmatcher *m) {
    return !m->finished && (m->cur.a[0] & GS_ACCEPT) != 0;
}
bool gmatcher_finished(const struct gmatcher *m) { return m->finished; }
bool gmatcher_dead(const struct gmatcher *m) { return !m->finished && gstate_dead(&m->cur); }
int64_t gmatcher_completion_cost(const struct gmatcher *m) {
    return m->finished ? 0 : gram_completion_cost(m->g, &m->cur);
}

void gmatcher_stats(const struct gmatcher *m, struct gmatcher_stats *out) {
    out->cache_entries = m->n_entries;
    out->cache_hits = m->hits;
    out->cache_misses = m->misses;
    out->cache_bytes = m->cache_bytes;
    out->last_work = m->work;
    out->max_work = m->max_work;
    out->partial_masks = m->n_partial;
    out->budget = m->budget;
}
