/*
 * namedec.h - constrained tool-name decoding: the chat model picks one of a few candidate names
 * (the router's top-k when the margin gate cannot decide), greedily, under a trie that only
 * allows valid names.
 *
 * How names are tokenized: each candidate i is tokenized as prompt + name_i + term (with the
 * model's BOS, without parsing special-token text), so a name tokenizes as it does after the
 * prompt's last characters. The tokens every candidate shares with the prompt's own tokens
 * (the longest common prefix over all candidates) are the decode prefix; what follows is the
 * candidate's path in the trie. The terminator (default "\n") ends every path, so a name that
 * is a prefix of another ("search", "search_web") is chosen by the model's preference between
 * the terminator and the continuation. If two candidates still tokenize so that one path is a
 * strict prefix of the other, that node is an end marker: ending is scored by the EOS logit
 * (or always preferred when the model has no EOS). Identical token paths (e.g. duplicate names)
 * resolve to the first such candidate.
 *
 * Decoding: feed the prefix; at each node, tokens with one child are forced (no choice, batched
 * into the next feed); at a branch, the child whose token has the highest logit wins (logits of
 * all other tokens are in effect masked to -inf; ties go to the earlier candidate). Decoding
 * stops as soon as only one candidate remains under the node, so the result is always one of
 * the candidates and at most (number of branch points on its path) + 1 feeds are made. One
 * candidate: no feed at all.
 *
 * Usage for the router (top-k names and descriptions of the gate's candidates):
 *     char *prompt = rt_namedec_prompt(query, names, descs, k, 200);
 *     rt_namedec *nd = rt_namedec_build(model, prompt, names, k, NULL, err, sizeof err);
 *     int pick;
 *     if (nd && rt_namedec_decode(nd, ctx, &pick, NULL, err, sizeof err) == 0) ... names[pick]
 *     rt_namedec_free(nd);
 *     nx_free(prompt);
 * Any prompt that lists the candidates and ends where the name should follow works, e.g.
 *     "Tools: get_weather, get_time, search.\nQuery: what time is it?\nTool:"
 * with or without a trailing space (the shared-prefix rule above handles both).
 *
 * Ownership / threads: an rt_namedec borrows nothing after build (it copies what it needs) and
 * is immutable; rt_namedec_decode uses the caller's ctx (reset first) and is as thread-safe as
 * that ctx (one thread per ctx).
 */
#ifndef NX_ROUTE_NAMEDEC_H
#define NX_ROUTE_NAMEDEC_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

typedef struct rt_namedec rt_namedec;

/* Build the trie for n_names >= 1 candidates (non-empty strings). term NULL = "\n". NULL with
 * a message on failure (no names, an empty or NULL name, nothing to condition on, no memory). */
rt_namedec *rt_namedec_build(const nx_model *model, const char *prompt, const char *const *names,
                             int n_names, const char *term, char *err, size_t errlen);
void rt_namedec_free(rt_namedec *nd);

/* A routing prompt for rt_namedec_build:
 *     "Tools:\n- NAME: DESCRIPTION\n- ...\nQuery: QUERY\nTool: "
 * (descs NULL, or an entry NULL/empty: the line is "- NAME"; descriptions cut to desc_max bytes
 * at a UTF-8 boundary, 0 = no limit; newlines in them become spaces). Allocated (nx_free); NULL
 * on out of memory. Keeping it within the context is the caller's job (fewer candidates or a
 * smaller desc_max); rt_namedec_decode says when it does not fit. */
char *rt_namedec_prompt(const char *query, const char *const *names, const char *const *descs,
                        int n, size_t desc_max);

/* The decode prefix (tokens fed first). Borrowed; returns the count. */
int32_t rt_namedec_prefix(const rt_namedec *nd, const nx_token **tokens);
/* Candidate i's token path after the prefix (terminator included). Borrowed; the count. */
int32_t rt_namedec_path(const rt_namedec *nd, int i, const nx_token **tokens);
/* Trie nodes (root included), for tests. */
int rt_namedec_n_nodes(const rt_namedec *nd);

/*
 * A source of logits: append tokens[0..n) (n >= 1) to the sequence and return the logits
 * (n_vocab floats) predicting the next token, borrowed until the next call; NULL with a
 * message on failure.
 */
typedef const float *(*rt_namedec_feed_fn)(void *user, const nx_token *tokens, int32_t n, char *err,
                                           size_t errlen);

/* Greedy constrained decode with a logits source. *chosen = the candidate's index; *n_feeds
 * (may be NULL) = feed calls made. NX_STATUS_OK, or with a message NX_STATUS_NOMEM or
 * NX_STATUS_INVALID_ARG (the feed failed). */
nx_status rt_namedec_run(const rt_namedec *nd, rt_namedec_feed_fn feed, void *user, int *chosen,
                   int *n_feeds, char *err, size_t errlen);

/* The same with the model through ctx (reset first; its n_ctx must hold the prefix and the
 * longest path: NX_STATUS_INVALID_ARG otherwise). */
nx_status rt_namedec_decode(const rt_namedec *nd, nx_ctx *ctx, int *chosen, int *n_feeds, char *err,
                      size_t errlen);

/* Tokenize text (BOS as the model asks, no special-token parsing) into a new array
 * *out (nx_free); the token count, or -1 on failure. Also used by chat_rerank.c. */
int32_t rt_tokenize_alloc(const nx_model *m, const char *text, nx_token **out);

#endif
