/*
 * generate.h - the one generation loop: a prompt in, tokens out, the text streamed through a
 * callback, with stop strings, a token limit, end-of-generation handling and a sampler.
 * Every command that generates (`nexus run`, the RULER and LongBench runners, the streams the
 * fidelity and splice evaluations sample) goes through nx_generate.
 *
 * The loop. The prompt (n_prompt >= 1 tokens) is decoded in one call onto whatever the context
 * already holds (nothing is reset: spliced blocks or an earlier turn stay). Then, up to
 * max_tokens times: pick a token from the last logits (the sampler, or greedy argmax with ties
 * to the lower id when there is none); an end-of-generation token (nx_token_is_eog) ends the
 * generation unless ignore_eog, and is neither counted, stored nor shown; otherwise the token
 * is stored, its text (nx_token_to_piece, special tokens not rendered) goes through the stop
 * filter below, and the token is decoded when another one will follow. A token that would not
 * fit the context (n_past == n_ctx) ends the generation (NX_GEN_CTX_FULL). The last token
 * picked is never decoded: after a generation of n_generated >= 1 tokens the context holds the
 * prompt and the first n_generated - 1 of them (an EOG pick is not decoded either).
 *
 * Stop strings. Text is released to the callback only once it cannot be the start of a stop
 * string: after each token the pending text is searched for every stop string; at the earliest
 * match (the lowest stop index among matches at the same offset) the text before it is
 * released, the generation ends (NX_GEN_STOP_STRING) and the match and whatever follows it are
 * dropped. Otherwise the longest pending suffix that is a proper prefix of some stop string is
 * held back and the rest released. A stop string split across tokens ("\n" + "User:") is thus
 * found, and the callback never sees any byte of it. Held text is released when the generation
 * ends any other way than by a stop string or an abort. Without stop strings each token's text
 * is released at once (one callback per token with text). Pieces are bytes: a multi-byte UTF-8
 * character split across byte-fallback tokens reaches the callback in parts.
 *
 * The callback returns 0 to go on, anything else to stop (NX_GEN_ABORTED; nothing more is
 * released, the token whose text was refused is counted). Aborting is not an error.
 *
 * Sampler: borrowed; the prompt tokens are accepted into it (repetition penalty) before the
 * first pick, and nx_sampler_sample records each pick. The context is used by one thread.
 */
#ifndef NX_GEN_GENERATE_H
#define NX_GEN_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"
#include "nexus.h"

/* Receives released text (len >= 1, not NUL-ended). 0: go on; nonzero: stop. */
typedef int (*nx_gen_text_fn)(void *user, const char *text, size_t len);

enum nx_gen_stop {
    NX_GEN_MAX_TOKENS = 0, /* max_tokens generated */
    NX_GEN_EOG,            /* the model picked an end-of-generation token */
    NX_GEN_STOP_STRING,    /* a stop string appeared (result.stop_index says which) */
    NX_GEN_ABORTED,        /* the callback asked to stop */
    NX_GEN_CTX_FULL,       /* no room in the context for the next token */
};

struct nx_gen_params {
    int32_t max_tokens;       /* >= 0; 0: only the prompt is decoded */
    const char *const *stop;  /* n_stop non-empty stop strings (may be NULL when n_stop is 0) */
    int n_stop;
    bool ignore_eog;          /* true: EOG tokens are ordinary tokens */
    nx_sampler *sampler;      /* borrowed; NULL: greedy argmax */
    nx_gen_text_fn on_text;   /* NULL: no streaming */
    void *user;
    bool keep_text;           /* collect the released text into result.text */
    nx_token *tokens;         /* NULL, or room for tokens_cap generated tokens (the rest are */
    int32_t tokens_cap;       /*   counted but not stored) */
};
/* max_tokens 128, no stop strings, stop at EOG, greedy, nothing streamed or kept. */
struct nx_gen_params nx_gen_default_params(void);

struct nx_gen_result {
    enum nx_gen_stop stop;
    int stop_index;       /* NX_GEN_STOP_STRING: the index into params.stop; else -1 */
    int32_t n_prompt;     /* tokens decoded as the prompt */
    int32_t n_generated;  /* tokens picked and kept (EOG excluded) */
    double t_prompt;      /* seconds decoding the prompt */
    double t_gen;         /* seconds from the prompt's logits to the end */
    char *text;           /* keep_text: the released text, NUL-ended (nx_free); else NULL */
    size_t text_len;
};

/*
 * Runs the loop above on ctx (a context of model m). Errors: NX_STATUS_INVALID_ARG (n_prompt < 1, max_tokens < 0, a
 * NULL or empty stop string, a sampler for another vocabulary size is not detected), the
 * decode's status with its message (e.g. the prompt does not fit), NX_STATUS_NOMEM. On failure
 * *res still says how far it got (n_generated; text NULL), err->msg names the problem, and the
 * context holds whatever was decoded before the failure.
 */
nx_status nx_generate(const nx_model *m, nx_ctx *ctx, const nx_token *prompt, int32_t n_prompt,
                      const struct nx_gen_params *p, struct nx_gen_result *res,
                      struct nx_err *err);

/* How nx_gen_tokenize treats special tokens (flags, or-ed). */
enum {
    NX_GEN_TOK_ADD_SPECIAL = 1,   /* BOS / EOS as the model's metadata asks (nx_tokenize) */
    NX_GEN_TOK_FORCE_BOS = 2,     /* a BOS first whenever the model has one, nothing else added */
    NX_GEN_TOK_PARSE_SPECIAL = 4, /* special-token text ("<|eot_id|>") becomes that token */
};
/*
 * Tokenizes text (len bytes) into a new array *out (nx_free; at least one element allocated)
 * of *n tokens. NX_STATUS_NOMEM, or NX_STATUS_INVALID_ARG when the tokenizer fails on the text
 * or it has more than INT32_MAX tokens. *out is NULL and *n 0 on failure.
 */
nx_status nx_gen_tokenize(const nx_model *m, const char *text, size_t len, unsigned flags,
                          nx_token **out, int32_t *n, struct nx_err *err);

#endif
