/*
 * gram.c - DESIGN: the pushdown automaton over bytes (see gram.h for the state layout). A state
 * is a set of distinct stacks whose tops are terminals or JSON-string bodies; advancing a byte
 * steps every stack whose top accepts it and re-expands (pops at END, pushes at REF, tail calls
 * drop the caller's frame). Every stack met on the way is interned in the memo (a trie of
 * frames), and one met before is not expanded again, so the work is bounded by distinct stacks,
 * not by derivations. Work frames live on the C stack (GRAM_MAX_DEPTH), so a step allocates
 * only when the output buffer or the memo must grow past its high-water mark.
 */
#include <string.h>

#include "core/alloc.h"
#include "grammar/gram.h"

void gstate_free(struct gstate *s) {
    nx_free(s->a);
    memset(s, 0, sizeof *s);
}

static bool st_reserve(struct gstate *s, int32_t need) {
    if (need <= s->cap) return true;
    int32_t nc = s->cap ? s->cap : 64;
    while (nc < need) nc *= 2;
    int32_t *a = nx_realloc(s->a, sizeof *a * (size_t)nc);
    if (!a) {
        s->oom = true;
        return false;
    }
    s->a = a;
    s->cap = nc;
    return true;
}

static bool st_reset(struct gstate *s) {
    s->oom = false; /* an earlier failure is not this build's */
    s->lossy = false;
    if (!st_reserve(s, 2)) return false;
    s->a[0] = s->a[1] = 0;
    s->n = 2;
    s->expansions = 0;
    return true;
}

bool gstate_copy(struct gstate *dst, const struct gstate *src) {
    if (!st_reserve(dst, src->n)) return false;
    memcpy(dst->a, src->a, sizeof *dst->a * (size_t)src->n);
    dst->n = src->n;
    return true;
}

/* ---- the memo of stacks seen while building one state ---- */

void gmemo_free(struct gmemo *m) {
    nx_free(m->key);
    nx_free(m->where);
    nx_free(m->done);
    nx_free(m->slot);
    memset(m, 0, sizeof *m);
}

static uint32_t memo_hash(int32_t parent, int32_t pos, int32_t aux) {
    uint32_t h = (uint32_t)parent * 0x9E3779B1u ^ (uint32_t)pos * 0x85EBCA77u ^
                 (uint32_t)aux * 0xC2B2AE3Du;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    return h ^ h >> 12;
}

/* Empty the memo (clearing only the slots in use) and give it the empty stack as node 0. */
static bool memo_reset(struct gmemo *m) {
    if (!m->slot) {
        m->slot = nx_calloc(64, sizeof *m->slot);
        m->key = nx_malloc(sizeof *m->key * 3 * 32);
        m->where = nx_malloc(sizeof *m->where * 32);
        m->done = nx_malloc(32);
        if (!m->slot || !m->key || !m->where || !m->done) {
            gmemo_free(m);
            return false;
        }
        m->n_slots = 64;
        m->cap = 32;
    } else {
        for (int32_t i = 1; i < m->n; i++) m->slot[m->where[i]] = 0;
    }
    m->key[0] = -1;
    m->key[1] = m->key[2] = 0;
    m->done[0] = 0;
    m->n = 1;
    return true;
}

static int32_t memo_find_slot(const struct gmemo *m, int32_t parent, int32_t pos, int32_t aux) {
    uint32_t mask = (uint32_t)m->n_slots - 1, s = memo_hash(parent, pos, aux) & mask;
    for (;; s = (s + 1) & mask) {
        int32_t id = m->slot[s] - 1;
        if (id < 0) return (int32_t)s;
        const int32_t *k = m->key + 3 * id;
        if (k[0] == parent && k[1] == pos && k[2] == aux) return (int32_t)s;
    }
}

static bool memo_grow(struct gmemo *m) {
    int32_t nc = m->cap * 2, ns = m->n_slots * 2;
    int32_t *key = nx_realloc(m->key, sizeof *key * 3 * (size_t)nc);
    if (key) m->key = key;
    int32_t *where = key ? nx_realloc(m->where, sizeof *where * (size_t)nc) : NULL;
    if (where) m->where = where;
    uint8_t *done = where ? nx_realloc(m->done, (size_t)nc) : NULL;
    if (done) m->done = done;
    int32_t *slot = done ? nx_calloc((size_t)ns, sizeof *slot) : NULL;
    if (!slot) return false; /* the grown arrays are kept; the table is unchanged */
    nx_free(m->slot);
    m->slot = slot;
    m->n_slots = ns;
    m->cap = nc;
    for (int32_t i = 1; i < m->n; i++) {
        int32_t s = memo_find_slot(m, m->key[3 * i], m->key[3 * i + 1], m->key[3 * i + 2]);
        m->slot[s] = i + 1;
        m->where[i] = s;
    }
    return true;
}

/* The node of stack parent + frame (pos, aux), created when new; -1 on allocation failure. */
static int32_t memo_node(struct gmemo *m, int32_t parent, int32_t pos, int32_t aux) {
    int32_t s = memo_find_slot(m, parent, pos, aux);
    if (m->slot[s]) return m->slot[s] - 1;
    if (m->n == m->cap) { /* the table stays at most half full */
        if (!memo_grow(m)) return -1;
        s = memo_find_slot(m, parent, pos, aux);
    }
    int32_t id = m->n++;
    m->key[3 * id] = parent;
    m->key[3 * id + 1] = pos;
    m->key[3 * id + 2] = aux;
    m->done[id] = 0;
    m->where[id] = s;
    m->slot[s] = id + 1;
    return id;
}

/* The node of stack frames[0..n), interning every prefix; -1 on allocation failure. */
static int32_t memo_stack(struct gmemo *m, const int32_t *frames, int32_t n) {
    int32_t id = 0;
    for (int32_t f = 0; f < n && id >= 0; f++)
        id = memo_node(m, id, frames[2 * f], frames[2 * f + 1]);
    return id;
}

/* ---- expansion ---- */

/* Append stack frames[0..d) (the memo has made it distinct from those already there). */
static void emit(struct gstate *out, const int32_t *frames, int32_t d) {
    if (out->a[1] >= GRAM_MAX_STACKS) {
        out->lossy = true;
        return;
    }
    if (!st_reserve(out, out->n + 1 + 2 * d)) return;
    int32_t *a = out->a;
    a[out->n] = d;
    memcpy(a + out->n + 1, frames, sizeof *frames * 2 * (size_t)d);
    out->n += 1 + 2 * d;
    a[1]++;
}

static int64_t stack_cost(const struct gram *g, const int32_t *fr, int32_t len);

/* The state is full (its stacks, or its work, spent): further derivations are not followed. */
static bool st_full(const struct gstate *out) {
    return out->a[1] >= GRAM_MAX_STACKS || out->expansions >= GRAM_MAX_EXPANSIONS || out->oom;
}

/* The flag a derivation of stack frames[0..d) sets when it pops the whole stack without a byte,
 * read off the shortest completion (empty exactly when some derivation does so): a full state
 * still knows exactly whether the grammar may end (or exit the sentinel) here. */
static void flag_if_nullable(const struct gram *g, const int32_t *frames, int32_t d,
                             bool sentinel, struct gstate *out) {
    if (stack_cost(g, frames, d) == 0) out->a[0] |= sentinel ? GS_EXIT : GS_ACCEPT;
}

/* Expand the stack frames[0..d) (memo node id) until its top is a terminal or JSTR; emit the
 * results. A stack expanded before in this state is skipped: its results are there already. */
static void expand(const struct gram *g, struct gmemo *m, int32_t *frames, int32_t d, int32_t id,
                   bool sentinel, struct gstate *out) {
    if (id < 0) {
        out->oom = true;
        return;
    }
    if (m->done[id]) {
        out->expansions++; /* a visit costs a step even when its results are there already */
        return;
    }
    if (st_full(out)) {
        out->lossy = true;
        flag_if_nullable(g, frames, d, sentinel, out);
        return;
    }
    out->expansions++;
    m->done[id] = 1;
    if (d == 0) {
        out->a[0] |= sentinel ? GS_EXIT : GS_ACCEPT;
        return;
    }
    int32_t pos = frames[2 * (d - 1)];
    const struct gel *x = &g->el[pos];
    int32_t parent = m->key[3 * id];
    switch (x->type) {
    case GEL_TERM:
    case GEL_JSTR:
        emit(out, frames, d);
        return;
    case GEL_END:
        expand(g, m, frames, d - 1, parent, sentinel, out);
        return;
    default: {
        int32_t save_pos = frames[2 * (d - 1)], save_aux = frames[2 * (d - 1) + 1];
        int32_t nd = d, base = parent;
        bool cut = false;
        if (g->el[pos + 1].type == GEL_END) {
            nd = d - 1; /* tail call */
        } else {
            frames[2 * (d - 1)] = pos + 1;
            frames[2 * (d - 1) + 1] = 0;
            base = memo_node(m, parent, pos + 1, 0);
        }
        if (base < 0) {
            out->oom = true;
        } else if (nd + 1 > GRAM_MAX_DEPTH) {
            out->lossy = true; /* the stack dies here */
        } else {
            for (int32_t a = g->rule_alt_off[x->v]; a < g->rule_alt_off[x->v + 1]; a++) {
                if (st_full(out)) {
                    cut = true;
                    break;
                }
                frames[2 * nd] = g->alt_start[a];
                frames[2 * nd + 1] = 0;
                expand(g, m, frames, nd + 1, memo_node(m, base, g->alt_start[a], 0), sentinel,
                       out);
            }
        }
        frames[2 * (d - 1)] = save_pos;
        frames[2 * (d - 1) + 1] = save_aux;
        if (cut) {
            out->lossy = true;
            flag_if_nullable(g, frames, d, sentinel, out);
        }
        return;
    }
    }
}

bool gram_state_from_frames(const struct gram *g, struct gmemo *memo, const int32_t *frames,
                            int32_t n, bool sentinel, struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    if (n > GRAM_MAX_DEPTH) {
        out->lossy = true;
        return true;
    }
    if (!memo_reset(memo)) return false;
    memcpy(work, frames, sizeof *work * 2 * (size_t)n);
    expand(g, memo, work, n, memo_stack(memo, work, n), sentinel, out);
    return !out->oom;
}

bool gram_init_state(const struct gram *g, struct gmemo *memo, struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    if (!memo_reset(memo)) return false;
    for (int32_t a = g->rule_alt_off[g->root]; a < g->rule_alt_off[g->root + 1]; a++) {
        work[0] = g->alt_start[a];
        work[1] = 0;
        expand(g, memo, work, 1, memo_node(memo, 0, work[0], 0), false, out);
    }
    return !out->oom;
}

int gram_jstr_step(int q, unsigned char c, bool *starts) {
    *starts = false;
    switch (q) {
    case 0:
        *starts = true;
        if (c < 0x20 || c == '"') return -1;
        if (c == '\\') return 1;
        if (c < 0x80) return 0;
        if (c >= 0xC2 && c <= 0xDF) return 6;
        if (c == 0xE0) return 8;
        if (c == 0xED) return 9;
        if (c >= 0xE1 && c <= 0xEF) return 7;
        if (c == 0xF0) return 11;
        if (c >= 0xF1 && c <= 0xF3) return 10;
        if (c == 0xF4) return 12;
        return -1;
    case 1:
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
            c == 't')
            return 0;
        return c == 'u' ? 2 : -1;
    case 2: return c == '0' ? 3 : -1;
    case 3: return c == '0' ? 4 : -1;
    case 4:
    case 5: {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        return hex ? (q == 4 ? 5 : 0) : -1;
    }
    case 6: return c >= 0x80 && c <= 0xBF ? 0 : -1;
    case 7: return c >= 0x80 && c <= 0xBF ? 6 : -1;
    case 8: return c >= 0xA0 && c <= 0xBF ? 6 : -1;
    case 9: return c >= 0x80 && c <= 0x9F ? 6 : -1;
    case 10: return c >= 0x80 && c <= 0xBF ? 7 : -1;
    case 11: return c >= 0x90 && c <= 0xBF ? 7 : -1;
    case 12: return c >= 0x80 && c <= 0x8F ? 7 : -1;
    default: return -1;
    }
}

bool gram_advance(const struct gram *g, struct gmemo *memo, const struct gstate *in,
                  unsigned char c, bool sentinel, struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    if (!memo_reset(memo)) return false;
    const int32_t *a = in->a;
    int32_t i = 2;
    for (int32_t k = 0; k < a[1] && !out->oom; k++) {
        int32_t len = a[i];
        const int32_t *fr = a + i + 1;
        i += 1 + 2 * len;
        int32_t pos = fr[2 * (len - 1)], aux = fr[2 * (len - 1) + 1];
        const struct gel *x = &g->el[pos];
        if (x->type == GEL_TERM) {
            if (!(g->sets[x->v][c >> 6] >> (c & 63) & 1)) continue;
            memcpy(work, fr, sizeof *work * 2 * (size_t)len);
            work[2 * (len - 1)] = pos + 1;
            work[2 * (len - 1) + 1] = 0;
            expand(g, memo, work, len, memo_stack(memo, work, len), sentinel, out);
        } else { /* JSTR */
            int q = JSTR_Q(aux);
            int32_t cnt = JSTR_COUNT(aux);
            memcpy(work, fr, sizeof *work * 2 * (size_t)len);
            if (q == 0 && c == '"') {
                if (cnt < x->min) continue;
                work[2 * (len - 1)] = pos + 1;
                work[2 * (len - 1) + 1] = 0;
                expand(g, memo, work, len, memo_stack(memo, work, len), sentinel, out);
                continue;
            }
            bool starts;
            int nq = gram_jstr_step(q, c, &starts);
            if (nq < 0) continue;
            if (starts) {
                cnt++;
                if (x->max >= 0 && cnt > x->max) continue;
                if (x->max < 0 && cnt > x->min) cnt = x->min; /* unbounded: count only to min */
            }
            work[2 * (len - 1) + 1] = JSTR_AUX(cnt, nq);
            int32_t id = memo_stack(memo, work, len);
            if (id < 0) {
                out->oom = true;
            } else if (!memo->done[id]) {
                memo->done[id] = 1;
                emit(out, work, len);
            }
        }
    }
    return !out->oom;
}

/* ---- shortest completion ---- */

static const char *jstr_finish[GRAM_JSTR_STATES] = {
    "", "n", "0000", "000", "00", "0", "\x80", "\x80\x80", "\xA0\x80", "\x80\x80",
    "\x80\x80\x80", "\x90\x80\x80", "\x80\x80\x80"};

struct cbuf {
    char *b;
    int32_t n, cap;
};
static void cput(struct cbuf *o, char c) {
    if (o->n < o->cap) o->b[o->n] = c;
    o->n++;
}

static int lowest_byte(const uint64_t s[4]) {
    for (int w = 0; w < 4; w++)
        if (s[w]) return w * 64 + __builtin_ctzll(s[w]);
    return 0;
}

static void gen_from(const struct gram *g, int32_t pos, struct cbuf *o, int depth);

static void gen_rule(const struct gram *g, int32_t r, struct cbuf *o, int depth) {
    if (depth > 4 * GRAM_MAX_DEPTH || g->rule_alt_off[r] == g->rule_alt_off[r + 1]) return;
    gen_from(g, g->alt_start[g->rule_alt_off[r] + g->min_alt[r]], o, depth + 1);
}

static void gen_from(const struct gram *g, int32_t pos, struct cbuf *o, int depth) {
    for (; g->el[pos].type != GEL_END && o->n < o->cap; pos++) {
        const struct gel *x = &g->el[pos];
        if (x->type == GEL_TERM)
            cput(o, (char)lowest_byte(g->sets[x->v]));
        else if (x->type == GEL_REF)
            gen_rule(g, x->v, o, depth);
        else {
            for (int32_t i = 0; i < x->min; i++) cput(o, 'a');
            cput(o, '"');
        }
    }
}

static int64_t stack_cost(const struct gram *g, const int32_t *fr, int32_t len) {
    int64_t c = 0;
    for (int32_t f = 0; f < len; f++) {
        int32_t pos = fr[2 * f];
        if (f == len - 1 && g->el[pos].type == GEL_JSTR) {
            int32_t aux = fr[2 * f + 1], need = g->el[pos].min - JSTR_COUNT(aux);
            c += (int64_t)strlen(jstr_finish[JSTR_Q(aux)]) + (need > 0 ? need : 0) + 1 +
                 g->min_rest[pos + 1];
        } else {
            c += g->min_rest[pos];
        }
    }
    return c;
}

int64_t gram_completion_cost(const struct gram *g, const struct gstate *s) {
    if (s->a[0] & GS_ACCEPT) return 0;
    int64_t best = -1;
    int32_t i = 2;
    for (int32_t k = 0; k < s->a[1]; k++) {
        int64_t c = stack_cost(g, s->a + i + 1, s->a[i]);
        if (best < 0 || c < best) best = c;
        i += 1 + 2 * s->a[i];
    }
    return best;
}

int32_t gram_completion(const struct gram *g, const struct gstate *s, char *buf, int32_t cap) {
    if (s->a[0] & GS_ACCEPT) return 0;
    const int32_t *a = s->a, *best = NULL;
    int32_t best_len = 0;
    int64_t best_cost = INT64_MAX;
    int32_t i = 2;
    for (int32_t k = 0; k < a[1]; k++) {
        int32_t len = a[i];
        int64_t c = stack_cost(g, a + i + 1, len);
        if (c < best_cost) {
            best_cost = c;
            best = a + i + 1;
            best_len = len;
        }
        i += 1 + 2 * len;
    }
    if (!best) return -1;
    struct cbuf o = {buf, 0, cap};
    for (int32_t f = best_len - 1; f >= 0 && o.n < cap; f--) {
        int32_t pos = best[2 * f];
        if (f == best_len - 1 && g->el[pos].type == GEL_JSTR) {
            int32_t aux = best[2 * f + 1], need = g->el[pos].min - JSTR_COUNT(aux);
            for (const char *p = jstr_finish[JSTR_Q(aux)]; *p; p++) cput(&o, *p);
            for (int32_t j = 0; j < need; j++) cput(&o, 'a');
            cput(&o, '"');
            gen_from(g, pos + 1, &o, 0);
        } else {
            gen_from(g, pos, &o, 0);
        }
    }
    return o.n < cap ? o.n : cap;
}
