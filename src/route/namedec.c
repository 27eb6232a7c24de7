/*
 * namedec.c - constrained greedy decoding of a tool name over a token trie (contract in
 * namedec.h).
 *
 * DESIGN
 * - The trie is an array of nodes with first-child / next-sibling links (children in candidate
 *   order, which makes ties go to the earlier candidate). Each node counts the distinct
 *   candidate paths through it, so decoding stops as soon as one candidate remains.
 * - Forced tokens (a node with one child and no end marker) are not fed one by one: they are
 *   queued and sent with the next feed, which needs logits only at branch points.
 */
#include "route/namedec.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "gen/generate.h"

struct nd_node {
    nx_token tok;        /* token on the edge into this node (root: -1) */
    int32_t first_child; /* -1: none */
    int32_t next_sib;    /* -1: none */
    int32_t n_cand;      /* distinct candidate paths through or ending at this node */
    int32_t end_cand;    /* candidate whose path ends here, -1 if none */
    int32_t some_cand;   /* the first candidate through this node */
};

struct rt_namedec {
    int32_t n_vocab;
    nx_token eos;
    nx_token *prefix;
    int32_t n_prefix;
    int n_names;
    nx_token **path;
    int32_t *n_path;
    int32_t max_path;
    struct nd_node *node;
    int n_nodes, cap_nodes;
};

void rt_namedec_free(rt_namedec *nd) {
    if (!nd) return;
    if (nd->path)
        for (int i = 0; i < nd->n_names; i++) nx_free(nd->path[i]);
    nx_free(nd->path);
    nx_free(nd->n_path);
    nx_free(nd->prefix);
    nx_free(nd->node);
    nx_free(nd);
}

int32_t rt_namedec_prefix(const rt_namedec *nd, const nx_token **tokens) {
    *tokens = nd->prefix;
    return nd->n_prefix;
}
int32_t rt_namedec_path(const rt_namedec *nd, int i, const nx_token **tokens) {
    if (i < 0 || i >= nd->n_names) {
        *tokens = NULL;
        return 0;
    }
    *tokens = nd->path[i];
    return nd->n_path[i];
}
int rt_namedec_n_nodes(const rt_namedec *nd) { return nd->n_nodes; }

int32_t rt_tokenize_alloc(const nx_model *m, const char *text, nx_token **out) {
    int32_t n;
    struct nx_err err;
    if (nx_gen_tokenize(m, text, strlen(text), NX_GEN_TOK_ADD_SPECIAL, out, &n, &err)) return -1;
    return n;
}

static int32_t new_node(rt_namedec *nd, nx_token tok) {
    if (nd->n_nodes == nd->cap_nodes) {
        int c = nd->cap_nodes ? nd->cap_nodes * 2 : 64;
        struct nd_node *q = nx_realloc(nd->node, (size_t)c * sizeof(*q));
        if (!q) return -1;
        nd->node = q;
        nd->cap_nodes = c;
    }
    nd->node[nd->n_nodes] = (struct nd_node){tok, -1, -1, 0, -1, -1};
    return nd->n_nodes++;
}

/* Insert candidate i's path; false on out of memory. */
static bool insert(rt_namedec *nd, int i) {
    int32_t cur = 0;
    for (int32_t k = 0; k < nd->n_path[i]; k++) {
        nx_token tok = nd->path[i][k];
        int32_t c = nd->node[cur].first_child, last = -1;
        while (c >= 0 && nd->node[c].tok != tok) {
            last = c;
            c = nd->node[c].next_sib;
        }
        if (c < 0) {
            c = new_node(nd, tok);
            if (c < 0) return false;
            if (last < 0) nd->node[cur].first_child = c;
            else nd->node[last].next_sib = c;
        }
        cur = c;
    }
    if (nd->node[cur].end_cand >= 0) return true; /* the same path again: first one wins */
    nd->node[cur].end_cand = i;
    /* count the new distinct path along it */
    int32_t n = 0;
    nd->node[n].n_cand++;
    if (nd->node[n].some_cand < 0) nd->node[n].some_cand = i;
    for (int32_t k = 0; k < nd->n_path[i]; k++) {
        int32_t c = nd->node[n].first_child;
        while (nd->node[c].tok != nd->path[i][k]) c = nd->node[c].next_sib;
        n = c;
        nd->node[n].n_cand++;
        if (nd->node[n].some_cand < 0) nd->node[n].some_cand = i;
    }
    return true;
}

rt_namedec *rt_namedec_build(const nx_model *model, const char *prompt, const char *const *names,
                             int n_names, const char *term, char *err, size_t errlen) {
    if (!model || !names || n_names < 1) {
        snprintf(err, errlen, "name decoding: no candidate names");
        return NULL;
    }
    for (int i = 0; i < n_names; i++)
        if (!names[i] || !names[i][0]) {
            snprintf(err, errlen, "name decoding: candidate %d is empty", i);
            return NULL;
        }
    if (!prompt) prompt = "";
    if (!term) term = "\n";
    rt_namedec *nd = nx_calloc(1, sizeof(*nd));
    nx_token *p = NULL;
    char *buf = NULL;
    if (!nd) goto oom;
    nd->n_vocab = nx_model_n_vocab(model);
    nd->eos = nx_token_eos(model);
    nd->n_names = n_names;
    nd->path = nx_calloc((size_t)n_names, sizeof(*nd->path));
    nd->n_path = nx_calloc((size_t)n_names, sizeof(*nd->n_path));
    if (!nd->path || !nd->n_path) goto oom;
    int32_t np = rt_tokenize_alloc(model, prompt, &p);
    if (np < 0) goto oom;
    size_t pl = strlen(prompt), tl = strlen(term);
    int32_t common = np;
    for (int i = 0; i < n_names; i++) {
        size_t nl = strlen(names[i]);
        char *b2 = nx_realloc(buf, pl + nl + tl + 1);
        if (!b2) goto oom;
        buf = b2;
        memcpy(buf, prompt, pl);
        memcpy(buf + pl, names[i], nl);
        memcpy(buf + pl + nl, term, tl + 1);
        int32_t n = rt_tokenize_alloc(model, buf, &nd->path[i]);
        if (n < 0) goto oom;
        nd->n_path[i] = n;
        int32_t l = 0;
        while (l < np && l < n && p[l] == nd->path[i][l]) l++;
        if (l < common) common = l;
    }
    if (common < 1) {
        snprintf(err, errlen, "name decoding: nothing to condition on (empty prompt and no BOS, or "
                              "the first token depends on the name)");
        goto fail;
    }
    /* strip the common prefix off every path */
    nd->prefix = nx_malloc((size_t)common * sizeof(*nd->prefix));
    if (!nd->prefix) goto oom;
    memcpy(nd->prefix, p, (size_t)common * sizeof(*p));
    nd->n_prefix = common;
    for (int i = 0; i < n_names; i++) {
        int32_t n = nd->n_path[i] - common;
        if (n < 1) {
            snprintf(err, errlen, "name decoding: candidate '%s' adds no tokens after the prompt", names[i]);
            goto fail;
        }
        memmove(nd->path[i], nd->path[i] + common, (size_t)n * sizeof(nx_token));
        nd->n_path[i] = n;
        if (n > nd->max_path) nd->max_path = n;
    }
    if (new_node(nd, -1) < 0) goto oom;
    for (int i = 0; i < n_names; i++)
        if (!insert(nd, i)) goto oom;
    nx_free(p);
    nx_free(buf);
    return nd;
oom:
    snprintf(err, errlen, "name decoding: out of memory");
fail:
    nx_free(p);
    nx_free(buf);
    rt_namedec_free(nd);
    return NULL;
}

nx_status rt_namedec_run(const rt_namedec *nd, rt_namedec_feed_fn feed, void *user, int *chosen,
                   int *n_feeds, char *err, size_t errlen) {
    int feeds = 0;
    nx_status rc = NX_STATUS_INVALID_ARG; /* the feed failed */
    if (n_feeds) *n_feeds = 0;
    const struct nd_node *N = nd->node;
    if (N[0].n_cand == 1) {
        *chosen = N[0].some_cand;
        return NX_STATUS_OK;
    }
    nx_token *pend = nx_malloc(((size_t)nd->n_prefix + (size_t)nd->max_path) * sizeof(*pend));
    if (!pend) {
        snprintf(err, errlen, "name decoding: out of memory");
        return NX_STATUS_NOMEM;
    }
    memcpy(pend, nd->prefix, (size_t)nd->n_prefix * sizeof(*pend));
    int32_t np = nd->n_prefix, cur = 0;
    for (;;) {
        if (N[cur].n_cand == 1) {
            *chosen = N[cur].some_cand;
            rc = NX_STATUS_OK;
            break;
        }
        int32_t c0 = N[cur].first_child;
        if (N[cur].end_cand < 0 && c0 >= 0 && N[c0].next_sib < 0) { /* forced */
            pend[np++] = N[c0].tok;
            cur = c0;
            continue;
        }
        const float *lg = feed(user, pend, np, err, errlen);
        feeds++;
        np = 0;
        if (!lg) {
            if (strstr(err, "out of memory")) rc = NX_STATUS_NOMEM;
            break;
        }
        int32_t best = -1;
        float bv = -INFINITY;
        for (int32_t c = c0; c >= 0; c = N[c].next_sib) {
            float v = lg[N[c].tok];
            if (best < 0 || v > bv) {
                best = c;
                bv = v;
            }
        }
        if (N[cur].end_cand >= 0) {
            bool take_end = best < 0 || nd->eos < 0 || nd->eos >= nd->n_vocab || lg[nd->eos] > bv;
            if (take_end) {
                *chosen = N[cur].end_cand;
                rc = NX_STATUS_OK;
                break;
            }
        }
        pend[np++] = N[best].tok;
        cur = best;
    }
    nx_free(pend);
    if (n_feeds) *n_feeds = feeds;
    return rc;
}

static const float *feed_ctx(void *user, const nx_token *tokens, int32_t n, char *err, size_t errlen) {
    nx_ctx *ctx = user;
    nx_status st = nx_decode(ctx, tokens, n, false);
    if (st != NX_STATUS_OK) {
        snprintf(err, errlen, "name decoding: decode failed: %s", nx_ctx_last_error(ctx));
        return NULL;
    }
    return nx_get_logits(ctx, -1);
}

nx_status rt_namedec_decode(const rt_namedec *nd, nx_ctx *ctx, int *chosen, int *n_feeds, char *err,
                      size_t errlen) {
    int64_t need = (int64_t)nd->n_prefix + nd->max_path;
    if (need > nx_ctx_n_ctx(ctx)) {
        snprintf(err, errlen,
                 "name decoding: the prompt (%d tokens) and the longest name (%d tokens) do not fit "
                 "a context of %d tokens",
                 nd->n_prefix, nd->max_path, nx_ctx_n_ctx(ctx));
        return NX_STATUS_INVALID_ARG;
    }
    nx_ctx_reset(ctx);
    return rt_namedec_run(nd, feed_ctx, ctx, chosen, n_feeds, err, errlen);
}

/* Append s[0..n) to the growing string *b (length *len, capacity *cap); false on OOM. */
static bool app(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *q = nx_realloc(*b, c);
        if (!q) return false;
        *b = q;
        *cap = c;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = 0;
    return true;
}

char *rt_namedec_prompt(const char *query, const char *const *names, const char *const *descs,
                        int n, size_t desc_max) {
    char *b = NULL;
    size_t len = 0, cap = 0;
    bool ok = app(&b, &len, &cap, "Tools:\n", 7);
    for (int i = 0; ok && i < n; i++) {
        const char *nm = names && names[i] ? names[i] : "";
        ok = app(&b, &len, &cap, "- ", 2) && app(&b, &len, &cap, nm, strlen(nm));
        const char *d = descs ? descs[i] : NULL;
        if (ok && d && *d) {
            size_t dl = strlen(d);
            if (desc_max && dl > desc_max) {
                dl = desc_max;
                while (dl > 0 && ((unsigned char)d[dl] & 0xC0) == 0x80) dl--;
            }
            ok = app(&b, &len, &cap, ": ", 2);
            size_t start = len;
            ok = ok && app(&b, &len, &cap, d, dl);
            for (size_t k = start; ok && k < len; k++)
                if (b[k] == '\n' || b[k] == '\r') b[k] = ' ';
        }
        ok = ok && app(&b, &len, &cap, "\n", 1);
    }
    const char *q = query ? query : "";
    ok = ok && app(&b, &len, &cap, "Query: ", 7) && app(&b, &len, &cap, q, strlen(q));
    ok = ok && app(&b, &len, &cap, "\nTool: ", 7);
    if (!ok) {
        nx_free(b);
        return NULL;
    }
    return b;
}
