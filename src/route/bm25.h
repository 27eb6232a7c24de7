/*
 * bm25.h - Okapi BM25 over tool documents: the lexical router, always available.
 *
 * Tokens: maximal runs of ASCII letters/digits (bytes >= 0x80 count as letters, so UTF-8 words
 * stay whole), split at camelCase boundaries (aB -> a|B, ABc -> A|Bc), lower-cased; snake_case,
 * kebab-case and dotted names split at their separators. Queries use the same tokenizer.
 * A tool's document is its name, description and parameter names (top-level properties).
 *
 * Score(q, d) = sum over query tokens t (repeats count) of
 *     idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl)),
 *     idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))   (never negative)
 * with k1 = 1.2, b = 0.75 by default.
 *
 * Thread-safety: an index is immutable after building; scoring from several threads is fine.
 */
#ifndef NX_ROUTE_BM25_H
#define NX_ROUTE_BM25_H

#include "route/registry.h"

typedef struct rt_bm25 rt_bm25;

/* An empty index; NULL on OOM. */
rt_bm25 *rt_bm25_new(float k1, float b);
void rt_bm25_free(rt_bm25 *bm);
/* Appends one document (its text is tokenized and forgotten). NX_STATUS_OK or _NOMEM. */
nx_status rt_bm25_add(rt_bm25 *bm, const char *text);
/* Appends a tool's document (name, description, parameter names). */
nx_status rt_bm25_add_tool(rt_bm25 *bm, const struct rt_tool *t);
int rt_bm25_n_docs(const rt_bm25 *bm);
/* scores[n_docs] for the query. Returns the number of query tokens found in the index (0: all
 * scores are 0), or -1 on OOM. */
int rt_bm25_score(const rt_bm25 *bm, const char *query, float *scores);

/* Tokenizes text (rules above); calls fn(token, len, ud) per token, token lower-cased in a
 * scratch buffer (tokens longer than 63 bytes are cut). Returns the token count. */
int rt_lex_tokens(const char *text, void (*fn)(const char *tok, size_t len, void *ud), void *ud);

/* The tool's document text (name, description, parameter names) as a new string (nx_free). */
char *rt_tool_document(const struct rt_tool *t);

#endif
