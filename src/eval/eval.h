/* eval.h - the runner of `nexus eval` (fidelity.c: teacher-forced fidelity of KV policies against
 * the dense model) and the helpers the eval runners share (sweep.c). */
#ifndef NX_EVAL_H
#define NX_EVAL_H
#include <stdbool.h>
#include <stdint.h>
#include "nexus.h"

struct eval_params {
    const char *policies;  /* comma-separated */
    const char *densities; /* comma-separated, each in (0, 1] */
    const char *regimes;   /* "prefill", "stream" or both, comma-separated */
    int streams;           /* streams (sampled, or cut from text_file) */
    int stream_len;        /* tokens per stream (first half is the prompt) */
    const char *budgets;   /* "seen" (budget = density x tokens seen), "prompt" (fixed at
                              density x prompt length: the paper's protocol) or both; NULL: seen */
    const char *reference; /* the policy spec every figure is paired against (same density,
                              regime and budget rule; "full": the dense cache); NULL: full */
    int seeds;             /* eviction seeds per configuration (kv seed .. + seeds - 1), >= 1 */
    int score_len;         /* prefill regime: score only the first score_len positions after
                              the prompt (0: all of the second half) */
    int threads;           /* streams run in parallel, one single-threaded context each */
    uint64_t seed;
    const char *json_path; /* NULL: no JSON */
    const char *svg_dir;   /* NULL: no plots; else fidelity_<regime>.svg written there */
    const char *text_file; /* NULL: the model samples its own streams; else consecutive streams
                              of stream_len tokens (BOS first) cut from this UTF-8 file */
    const struct nx_ctx_params *base; /* block, sink, recent, window, nexus knobs, KV type;
                                         NULL: defaults. Policy, density and regime are set per
                                         configuration. */
};
/* Runs every configuration; prints a Markdown table; NX_STATUS_OK, or the failing step's status
 * (INVALID_ARG for bad parameters, NOMEM, IO for an output file, ABORTED when a run failed)
 * with a message on stderr. */
nx_status eval_run(const nx_model *m, const struct eval_params *p);

/* ---- shared by the eval runners (sweep.c) ---- */

/* Copies the comma-separated list src (NULL = "") into buf (buf_len bytes) and splits it there;
 * returns the count, or -1 after a message naming CMD and --WHAT on stderr when the list does
 * not fit in buf or has more than max items: never drops an item silently. */
int eval_split_list(const char *src, char *buf, size_t buf_len, char **items, int max,
                    const char *cmd, const char *what);
/* Parses "prefill" / "stream"; -1 when neither. */
int eval_regime_from_name(const char *s);
const char *eval_regime_name(int regime);
/* A policy spec NAME or NAME/OPT/...: the policy name into name, its options into kv
 * (nx_kv_params_set): topk (nexus.select_topk), fresh (nexus.fresh_draws), perhead
 * (nexus.per_head), matchkv (nexus.match_kv), meanvec (nexus.mean_vectors), or name=value.
 * 0, or -1 with a message (prefixed with cmd) on stderr for an unknown policy or option. */
int eval_policy_spec(const char *spec, struct nx_kv_params *kv, char *name, size_t name_len,
                     const char *cmd);
/* True when a spec's selection depends on the eviction seed (random; nexus unless topk), so
   running it for several seeds measures something. */
bool eval_spec_stochastic(const char *spec);
/* Whether a spec is the oracle bound ("oracle" or "oracle/..."): it decodes the future once, so
   it has no stream-regime form. */
bool eval_spec_is_oracle(const char *spec);
/* Checks every policy spec (eval_policy_spec); NX_STATUS_OK, or INVALID_ARG with a message on
 * stderr. */
nx_status eval_check_policies(char **pols, int n, const char *cmd);
/* Parses densities in (0, 1]; NX_STATUS_OK, or INVALID_ARG with a message on stderr. */
nx_status eval_parse_densities(char **items, int n, float *out, const char *cmd);
/* The validated lists of a policy x density x regime sweep (names point into the split buffer). */
enum { EVAL_MAX_ITEMS = 32 };
struct eval_sweep {
    char pol_buf[1024], den_buf[256], reg_buf[64]; /* the split copies */
    char *pols[EVAL_MAX_ITEMS];
    float dv[EVAL_MAX_ITEMS];
    int rv[2];
    int np, nd, nr;
};
/* Splits copies of the comma lists into sw and checks every policy, density (0, 1] and regime;
 * NX_STATUS_OK, or INVALID_ARG with a message (prefixed with cmd) on stderr. */
nx_status eval_sweep_split(const char *policies, const char *densities, const char *regimes,
                           const char *cmd, struct eval_sweep *sw);
/* One configuration of a policy x density x regime sweep. */
struct eval_sweep_cfg {
    const char *policy;
    float density; /* 1 for full */
    int regime;
};
/* The sweep over the comma lists (split into *sw, which the policy names point into); "full"
 * runs once, dense. Returns the count, or NX_STATUS_INVALID_ARG with a message on stderr (also
 * when there are more than max configurations). */
int eval_sweep_parse(const char *policies, const char *densities, const char *regimes,
                     const char *cmd, struct eval_sweep *sw, struct eval_sweep_cfg *out, int max);
/* Creates a directory if it does not exist; NX_STATUS_OK, or INVALID_ARG (a non-directory is in
 * the way) / IO with a message on stderr. */
nx_status eval_mkdir(const char *dir, const char *cmd);
/* Tokenizes text (add BOS when add_bos and the model has one); allocated (nx_free), *n set; NULL on
   failure. */
nx_token *eval_tokenize(const nx_model *m, const char *text, size_t len, int add_bos, int32_t *n);
/* nx_read_file (1 GiB limit; free with nx_free), its message printed as "cmd: ..." on failure. */
char *eval_read_file(const char *path, size_t *len, const char *cmd);
/* Greedy generation: decodes the prompt (one multi-token call), then up to max_new tokens, stopping
   at an end-of-generation token. The generated text (nx_free) goes to *out. NX_STATUS_OK, or
   nx_generate's status with the context's error on stderr. */
nx_status eval_generate_greedy(const nx_model *m, nx_ctx *c, const nx_token *prompt,
                               int32_t n_prompt, int max_new, char **out);
#endif
