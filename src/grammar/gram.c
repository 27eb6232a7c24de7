/*
 * gram.c - DESIGN: the pushdown automaton over bytes (see gram.h for the state layout). A state
 * is a deduplicated set of stacks whose tops are terminals or JSON-string bodies; advancing a
 * byte steps every stack whose top accepts it and re-expands (pops at END, pushes at REF, tail
 * calls drop the caller's frame). Work frames live on the C stack (GRAM_MAX_DEPTH), so a step
 * allocates only when the output buffer must grow.
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

/* Append stack frames[0..d) unless an equal stack is already there. */
static void emit(struct gstate *out, const int32_t *frames, int32_t d) {
    int32_t *a = out->a;
    int32_t i = 2;
    /* the duplicate scan counts as work too: one step per stack compared per 16 frames */
    out->expansions += a[1] * (1 + d / 16);
    for (int32_t k = 0; k < a[1]; k++) {
        int32_t len = a[i];
        if (len == d && !memcmp(a + i + 1, frames, sizeof *frames * 2 * (size_t)d)) return;
        i += 1 + 2 * len;
    }
    if (a[1] >= GRAM_MAX_STACKS) return;
    if (!st_reserve(out, out->n + 1 + 2 * d)) return;
    a = out->a;
    a[out->n] = d;
    memcpy(a + out->n + 1, frames, sizeof *frames * 2 * (size_t)d);
    out->n += 1 + 2 * d;
    a[1]++;
}

/* Expand the stack frames[0..d) until its top is a terminal or JSTR; emit the results. */
static void expand(const struct gram *g, int32_t *frames, int32_t d, bool sentinel,
                   struct gstate *out) {
    if (++out->expansions > GRAM_MAX_EXPANSIONS) return;
    if (d == 0) {
        out->a[0] |= sentinel ? GS_EXIT : GS_ACCEPT;
        return;
    }
    int32_t pos = frames[2 * (d - 1)];
    const struct gel *x = &g->el[pos];
    switch (x->type) {
    case GEL_TERM:
    case GEL_JSTR:
        emit(out, frames, d);
        return;
    case GEL_END:
        expand(g, frames, d - 1, sentinel, out);
        return;
    default: {
        int32_t save_pos = frames[2 * (d - 1)], save_aux = frames[2 * (d - 1) + 1];
        int32_t nd = d;
        if (g->el[pos + 1].type == GEL_END) {
            nd = d - 1; /* tail call */
        } else {
            frames[2 * (d - 1)] = pos + 1;
            frames[2 * (d - 1) + 1] = 0;
        }
        if (nd + 1 <= GRAM_MAX_DEPTH) {
            for (int32_t a = g->rule_alt_off[x->v]; a < g->rule_alt_off[x->v + 1]; a++) {
                frames[2 * nd] = g->alt_start[a];
                frames[2 * nd + 1] = 0;
                expand(g, frames, nd + 1, sentinel, out);
            }
        }
        frames[2 * (d - 1)] = save_pos;
        frames[2 * (d - 1) + 1] = save_aux;
        return;
    }
    }
}

bool gram_state_from_frames(const struct gram *g, const int32_t *frames, int32_t n,
                            bool sentinel, struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    if (n > GRAM_MAX_DEPTH) return true;
    memcpy(work, frames, sizeof *work * 2 * (size_t)n);
    expand(g, work, n, sentinel, out);
    return !out->oom;
}

bool gram_init_state(const struct gram *g, struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    for (int32_t a = g->rule_alt_off[g->root]; a < g->rule_alt_off[g->root + 1]; a++) {
        work[0] = g->alt_start[a];
        work[1] = 0;
        expand(g, work, 1, false, out);
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

bool gram_advance(const struct gram *g, const struct gstate *in, unsigned char c, bool sentinel,
                  struct gstate *out) {
    int32_t work[2 * GRAM_MAX_DEPTH + 2];
    if (!st_reset(out)) return false;
    const int32_t *a = in->a;
    int32_t i = 2;
    for (int32_t k = 0; k < a[1]; k++) {
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
            expand(g, work, len, sentinel, out);
        } else { /* JSTR */
            int q = JSTR_Q(aux);
            int32_t cnt = JSTR_COUNT(aux);
            memcpy(work, fr, sizeof *work * 2 * (size_t)len);
            if (q == 0 && c == '"') {
                if (cnt < x->min) continue;
                work[2 * (len - 1)] = pos + 1;
                work[2 * (len - 1) + 1] = 0;
                expand(g, work, len, sentinel, out);
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
            emit(out, work, len);
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
