/*
 * chat_rerank.h - a relevance reranker backed by the chat model itself (the margin gate's
 * fallback when no cross-encoder is configured).
 *
 * The model reads (prompt template, RT_CHAT_RERANK_TEMPLATE below):
 *
 *     Query: <query>
 *     Tool: <document>
 *     Is the tool relevant to the query? Answer:
 *
 * and the score is log P(" yes" | prompt, answer is " yes" or " no")
 *   = lp_yes - log(exp(lp_yes) + exp(lp_no)),
 * where lp_x is the log-probability of the whole answer text " x" (all its tokens, teacher-forced)
 * after the prompt. It lies in (-inf, 0]; higher is more relevant; exp(score) is the model's
 * probability of "yes" when it must answer yes or no. The answer tokens are found by tokenizing
 * prompt + answer and taking what follows the longest prefix shared with the prompt's own tokens,
 * so tokenizers that merge across the boundary are handled.
 *
 * The prompt is tokenized with the model's special tokens (BOS) but without parsing special-token
 * text inside query or document (a document cannot inject control tokens). When the prompt does
 * not fit the context, the document is cut (at a UTF-8 boundary) to the longest prefix that fits,
 * then, if even an empty document does not fit, the query; a template longer than the context
 * is an error.
 *
 * Pass the tool's text as the document, e.g. "get_weather: Get the current weather for a city".
 *
 * Ownership / threads: the reranker borrows model (free the model after the reranker), owns its
 * own nx_ctx, and is NOT thread-safe (one score call at a time per reranker; open one per
 * thread). Scores are deterministic for a given model, context size and thread count.
 */
#ifndef NX_ROUTE_CHAT_RERANK_H
#define NX_ROUTE_CHAT_RERANK_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"
#include "route/embed.h"

/* printf format; arguments (int len, const char *query, int len, const char *document) */
#define RT_CHAT_RERANK_TEMPLATE "Query: %.*s\nTool: %.*s\nIs the tool relevant to the query? Answer:"

struct rt_chat_rerank_params {
    int32_t n_ctx;     /* context in tokens; 0 = the model's trained context, at most 2048 */
    int32_t n_threads; /* 0 = the engine's default */
    const char *yes;   /* answer texts; NULL = " yes" / " no" */
    const char *no;
};

/* Default parameters (what rt_reranker_chat_open uses). */
struct rt_chat_rerank_params rt_chat_rerank_default_params(void);

/* A chat-relevance reranker on model (borrowed) into *out; (*out)->name is "chat-relevance".
 * On failure *out is NULL and the status (INVALID_ARG for bad parameters, NOMEM, or
 * nx_ctx_init's, e.g. for a vocabulary-only model) comes with a message. score returns
 * INVALID_ARG when the context cannot hold the prompt template or the answers do not tokenize
 * as a continuation of the prompt, or the engine's status when a decode fails. */
nx_status rt_reranker_chat_open(nx_model *model, rt_reranker **out, char *err, size_t errlen);
nx_status rt_reranker_chat_open_ex(nx_model *model, const struct rt_chat_rerank_params *p,
                                   rt_reranker **out, char *err, size_t errlen);

#endif
