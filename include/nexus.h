/*
 * nexus.h - the public C API of Nexus, an inference runtime for long-lived LLM agents.
 *
 * This header is the specification. It is C11, includes only <stddef.h>, <stdint.h> and
 * <stdbool.h>, and compiles as C and as C++.
 *
 * Conventions
 * - Every function that can fail on input returns an nx_status: NX_STATUS_OK (0) or a negative
 *   code. Loaders also fill a caller-provided message buffer that names the problem.
 * - Whoever calls *_load / *_init calls the matching *_free; *_free(NULL) does nothing.
 * - Returned pointers are borrowed: valid until the next call on the same handle, unless stated.
 * - Buffer-filling functions return the count written, or -needed when the buffer is too small.
 * - Thread safety: an nx_model is immutable after load and may be shared by threads and contexts;
 *   an nx_ctx is used by one thread at a time; tokenizer functions are thread-safe.
 *
 * Versioning: same major = ABI-stable; minor releases only add.
 */
#ifndef NEXUS_H
#define NEXUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NX_VERSION_MAJOR 0
#define NX_VERSION_MINOR 1
#define NX_VERSION_PATCH 0
#define NX_VERSION_HEX ((NX_VERSION_MAJOR << 16) | (NX_VERSION_MINOR << 8) | NX_VERSION_PATCH)

#if defined(__GNUC__)
#define NX_API __attribute__((visibility("default")))
#else
#define NX_API
#endif

typedef int32_t nx_token;
typedef int32_t nx_pos;

/* ---------------------------------------------------------------------------------------------
 * Status codes. Add at the end only; values are explicit and never reused.
 * ------------------------------------------------------------------------------------------- */
#define NX_STATUS_MAP(X) \
    X(OK, 0, "ok") \
    X(NOMEM, -1, "out of memory") \
    X(IO, -2, "I/O error") \
    X(FORMAT, -3, "malformed or corrupt input") \
    X(UNSUPPORTED, -4, "unsupported feature") \
    X(INVALID_ARG, -5, "invalid argument") \
    X(KV_FULL, -6, "KV cache full") \
    X(ABORTED, -7, "aborted") \
    X(TIMEOUT, -8, "timed out") \
    X(NOT_FOUND, -9, "not found") \
    X(PROTOCOL, -10, "protocol error") \
    X(CLOSED, -11, "connection closed") \
    X(REMOTE, -12, "error reported by the remote side")

typedef enum nx_status {
#define NX_STATUS_ENUM_(name, val, msg) NX_STATUS_##name = (val),
    NX_STATUS_MAP(NX_STATUS_ENUM_)
#undef NX_STATUS_ENUM_
} nx_status;

/* Human-readable message and the enum's name ("NX_STATUS_FORMAT") for a status. */
NX_API const char *nx_status_str(nx_status st);
NX_API const char *nx_status_name(nx_status st);

/* ---------------------------------------------------------------------------------------------
 * Tensor element types. Values equal ggml's type ids, so the type field of a GGUF tensor info
 * maps directly. Append-only.
 * ------------------------------------------------------------------------------------------- */
enum nx_type {
    NX_TYPE_F32 = 0,
    NX_TYPE_F16 = 1,
    NX_TYPE_Q4_0 = 2,
    NX_TYPE_Q4_1 = 3,
    /* 4, 5 removed in ggml (Q4_2, Q4_3) */
    NX_TYPE_Q5_0 = 6,
    NX_TYPE_Q5_1 = 7,
    NX_TYPE_Q8_0 = 8,
    NX_TYPE_Q8_1 = 9,
    NX_TYPE_Q2_K = 10,
    NX_TYPE_Q3_K = 11,
    NX_TYPE_Q4_K = 12,
    NX_TYPE_Q5_K = 13,
    NX_TYPE_Q6_K = 14,
    NX_TYPE_Q8_K = 15,
    NX_TYPE_BF16 = 30,
    NX_TYPE_COUNT = 40
};

/* Name of a type ("Q4_K"), or NULL for an id Nexus does not know. */
NX_API const char *nx_type_name(enum nx_type t);
/* True when Nexus can load weights of this type (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K). */
NX_API bool nx_type_supported(enum nx_type t);

/* ---------------------------------------------------------------------------------------------
 * Logging. The library never writes to stdout; messages go to the callback, or stderr.
 * ------------------------------------------------------------------------------------------- */
enum nx_log_level { NX_LOG_ERROR = 0, NX_LOG_WARN = 1, NX_LOG_INFO = 2, NX_LOG_DEBUG = 3 };
typedef void (*nx_log_fn)(int level, const char *msg, void *user_data);
NX_API void nx_log_set(nx_log_fn fn, void *user_data);
NX_API void nx_log_set_level(int level);

/* ---------------------------------------------------------------------------------------------
 * Kernels. Nexus picks AVX-512, AVX2 or scalar reference kernels at run time from the CPU's
 * features. Forcing the reference kernels (also: environment NX_KERNELS=ref) is for testing.
 * Call before loading models; not thread-safe against running contexts.
 * ------------------------------------------------------------------------------------------- */
NX_API void nx_kernels_force_ref(bool force);
/* "avx512", "avx2" or "ref": the kernel set in use. */
NX_API const char *nx_kernels_name(void);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_model nx_model;

struct nx_model_params {
    bool use_mmap; /* true: weights used in place from a read-only mapping; false (default):
                      weights read into memory (and possibly repacked for SIMD) */
};
NX_API struct nx_model_params nx_model_default_params(void);

/*
 * Load a GGUF model (version 2 or 3). On success *out owns the model (free with nx_model_free).
 * On failure *out is NULL, the return is negative and err (if not NULL, errlen > 0) holds a
 * message naming the problem: NX_STATUS_IO (cannot open/read), NX_STATUS_FORMAT (corrupt file,
 * naming the field), NX_STATUS_UNSUPPORTED (GGUF v1, unknown architecture or weight type),
 * NX_STATUS_NOMEM. A vocabulary-only GGUF (tokenizer metadata, no tensors) loads as a model that
 * can tokenize but not run (nx_ctx_init refuses it).
 */
NX_API nx_status nx_model_load(const char *path, const struct nx_model_params *params,
                               nx_model **out, char *err, size_t errlen);
NX_API void nx_model_free(nx_model *model);

NX_API int32_t nx_model_n_vocab(const nx_model *model);
NX_API int32_t nx_model_n_ctx_train(const nx_model *model);
NX_API int32_t nx_model_n_embd(const nx_model *model);
NX_API int32_t nx_model_n_layer(const nx_model *model);
NX_API int32_t nx_model_n_head(const nx_model *model);
NX_API int32_t nx_model_n_head_kv(const nx_model *model);
/* Bytes of weight data (as stored in memory). */
NX_API size_t nx_model_weight_bytes(const nx_model *model);
/* Bytes of weights one single-token decode step reads (every matrix, one embedding row). */
NX_API size_t nx_model_decode_bytes(const nx_model *model);
/* One-line description, e.g. "llama 5L 64d 8h/4kv F32 vocab 512". Borrowed, lives with model. */
NX_API const char *nx_model_desc(const nx_model *model);
/* general.architecture as loaded: "llama", "mistral", "qwen2", "qwen3", "bert", "nomic-bert";
 * "" for a vocabulary-only file. Static string. */
NX_API const char *nx_model_arch(const nx_model *model);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer (from the model's GGUF metadata). Thread-safe.
 * ------------------------------------------------------------------------------------------- */
NX_API nx_token nx_token_bos(const nx_model *model); /* -1 when none */
NX_API nx_token nx_token_eos(const nx_model *model); /* -1 when none */
/* True for end-of-generation tokens (EOS, EOT and similar from metadata). */
NX_API bool nx_token_is_eog(const nx_model *model, nx_token t);

/*
 * Tokenize UTF-8 text. add_special: add BOS/EOS as the model's metadata asks. parse_special:
 * recognise special/control token texts (e.g. "<|eot_id|>") in the input. Returns the number of
 * tokens written, or -(tokens needed) when n_max is too small (nothing useful written), or
 * INT32_MIN on internal failure.
 */
NX_API int32_t nx_tokenize(const nx_model *model, const char *text, size_t text_len,
                           nx_token *tokens, int32_t n_max, bool add_special, bool parse_special);
/*
 * The UTF-8 bytes of one token (byte-fallback tokens give their byte; SentencePiece's "▁" gives
 * a space). special: render control tokens' text (otherwise they give nothing). Returns bytes
 * written or -(bytes needed). Not NUL-terminated.
 */
NX_API int32_t nx_token_to_piece(const nx_model *model, nx_token t, char *buf, int32_t len,
                                 bool special);

/* ---------------------------------------------------------------------------------------------
 * Contexts: sequences sharing one KV block pool, work buffers, and the process's thread pool.
 *
 * A context serves n_seq_max sequences, ids 0 .. n_seq_max-1 (as llama.h's llama_seq_id). A
 * sequence exists as soon as a token is decoded into it and ends when its tokens are removed
 * (nx_kv_seq_rm(ctx, seq, -1, -1)): its blocks go back to the pool, which every sequence of the
 * context draws from. Each sequence has its own block table per (layer, KV head), its own
 * eviction policy and budget (nx_seq_set_kv) and its own statistics (nx_seq_kv_stats). The
 * single-sequence calls (nx_decode, nx_get_logits, nx_ctx_n_past, nx_ctx_truncate,
 * nx_ctx_reset, nx_ctx_splice, nx_seq_rm / nx_seq_shift / nx_seq_cp, nx_kv_block_compile and
 * the sequence cache's nx_seqcache_prefill / nx_seqcache_store) act on sequence 0 (reset: on
 * every sequence).
 * Every context shares one persistent thread pool per process (widened when a context asks
 * for more threads); contexts used from different threads take turns per forward step.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_ctx nx_ctx;
typedef int32_t nx_seq_id;

/*
 * KV-cache budget and eviction of one sequence. Budget: tokens kept per KV head per layer,
 * sink and recent blocks included (one definition for every policy). budget > 0 fixes it;
 * otherwise density > 0 makes it floor(density * tokens seen so far); both 0: no eviction. A
 * budget below what the policy needs to keep its sink and recent blocks is raised to that
 * minimum. A policy's own parameters are set by name (nx_kv_params_set).
 */
#define NX_KV_MAX_OPTS 12
struct nx_kv_opt {
    char name[24];
    double value;
};
struct nx_kv_params {
    const char *policy;  /* "full" (default), "streaming", "h2o", "snapkv", "pyramidkv",
                            "adakv", "morphkv", "tova", "nexus", and the evaluation bounds
                            "random", "bottomk", "oracle"; NULL = "full" */
    float density;
    int32_t budget;
    int32_t regime;      /* NX_KV_REGIME_PREFILL: compress at the end of each multi-token
                            decode (the prompt); NX_KV_REGIME_STREAM: also whenever a layer
                            holds a block more than its budget during generation */
    int32_t sink;        /* tokens always kept at the start (32) */
    int32_t recent;      /* newest tokens always kept (32) */
    int32_t window;      /* observation window: recent queries scored against (16, <= 256) */
    uint64_t seed;       /* seed of the policy's random draws (nexus reservoir) */
    int32_t n_opts;      /* policy options set with nx_kv_params_set */
    struct nx_kv_opt opts[NX_KV_MAX_OPTS];
};
enum { NX_KV_REGIME_PREFILL = 0, NX_KV_REGIME_STREAM = 1 };
NX_API struct nx_kv_params nx_kv_default_params(void);
/*
 * Set a policy option by name (a later call for the same name replaces the value):
 *   "nexus.walk" (H, window rows in the walk, >= 0; 3), "nexus.lambda" (bridge-score weight,
 *   >= 0; 0.5), "nexus.eps" (recency tie-break, >= 0; 1e-6), "nexus.n" (uniforms averaged per
 *   reservoir priority, >= 1; 5), "nexus.w_scale" (weights scale before sampling, > 0; 1),
 *   "nexus.fresh_draws" (1: redraw uniforms at each eviction; 0), "nexus.mean_vectors" (1:
 *   head aggregation by averaged q/k vectors; 0), "nexus.select_topk" (1: keep the K blocks of
 *   highest weight instead of sampling; 0), "nexus.per_head" (1: score and select per KV head;
 *   0), "nexus.match_kv" (1: round K to the nearest block so Nexus holds the budget on average;
 *   0), "pool.kernel" (snapkv / pyramidkv / adakv
 *   key pooling kernel, >= 1; 7), "pool.max" (1: max pooling, 0: average; 1),
 *   "pyramidkv.beta" (> 0; 20), "adakv.alpha" (floor fraction in [0, 1]; 0.2),
 *   "morphkv.max" (1: max over window rows; 0), "oracle.values" (1: the oracle ranks past
 *   tokens by how far removing one moves the future queries' attention outputs; 0: by the
 *   attention mass they get).
 * INVALID_ARG (p unchanged) for an unknown name, a value out of range, or a full option list.
 */
NX_API nx_status nx_kv_params_set(struct nx_kv_params *p, const char *name, double value);

struct nx_ctx_params {
    int32_t n_ctx;           /* most positions a sequence may reach (the longest stream); without
                                eviction also the tokens one sequence's tables hold. 0 = the
                                model's trained context, at most 4096 */
    int32_t n_batch;         /* most tokens in one forward step: nx_decode splits larger calls,
                                nx_decode_batch refuses larger batches */
    int32_t n_threads;       /* threads for single-token decode (>= 1) */
    int32_t n_threads_batch; /* threads for prompt batches (>= 1) */
    enum nx_type kv_type;    /* NX_TYPE_F16 (default) or NX_TYPE_F32 */
    int32_t n_seq_max;       /* sequences the context serves, ids 0 .. n_seq_max-1 (1) */
    int32_t kv_pool_tokens;  /* the shared pool in tokens per (layer, KV head), all sequences
                                together (rounded up to blocks). 0 (default): n_seq_max times
                                one sequence's need under `kv` (n_ctx; for an evicting policy
                                its largest budget n_ctx allows, twice that for pyramidkv, plus
                                one batch and two blocks), plus kv_extra_tokens */
    int32_t kv_block;        /* tokens per KV block (32) */
    int32_t kv_extra_tokens; /* extra pool room per (layer, KV head) for a sequence cache
                                (nx_seqcache), in tokens (0); added to kv_pool_tokens too */
    struct nx_kv_params kv;  /* every sequence's eviction policy until nx_seq_set_kv */
};

/* KV-cache statistics of a context (nx_ctx_kv_stats: the pool, every sequence's evictions
 * summed) or of one sequence (nx_seq_kv_stats: the blocks its tables hold, shared ones
 * included, and its own evictions). */
struct nx_kv_stats {
    size_t bytes_current;    /* KV bytes held now (blocks in use) */
    size_t bytes_peak;       /* the most ever held */
    size_t bytes_pool;       /* bytes of the pool allocated at init */
    int64_t evictions;       /* eviction events (one per layer compaction round) */
    int64_t tokens_evicted;  /* token slots freed, summed over layers and KV heads */
    double evict_seconds;    /* wall time spent scoring and compacting */
    int64_t tokens_cached;   /* tokens in layer 0, KV head 0 now (of sequence 0 for a ctx) */
};
NX_API void nx_ctx_kv_stats(const nx_ctx *ctx, struct nx_kv_stats *out);
/* Statistics of sequence seq (all zero for an id out of range); the eviction counters count
 * from the sequence's last nx_seq_set_kv. */
NX_API void nx_seq_kv_stats(const nx_ctx *ctx, nx_seq_id seq, struct nx_kv_stats *out);
NX_API struct nx_ctx_params nx_ctx_default_params(void);

/* Create a context. *out owned by the caller (nx_ctx_free). Errors: INVALID_ARG, NOMEM. */
NX_API nx_status nx_ctx_init(const nx_model *model, const struct nx_ctx_params *params,
                             nx_ctx **out, char *err, size_t errlen);
NX_API void nx_ctx_free(nx_ctx *ctx);

/*
 * Give sequence seq its own eviction policy and budget (replacing the context's default).
 * Allowed at any time; the policy's observation window starts empty. Allocates the policy's
 * state (and, for the context's first evicting policy, the shared eviction buffers). Errors
 * (nothing changed): INVALID_ARG (seq out of range, a parameter out of range, unknown policy;
 * message in nx_ctx_last_error), NOMEM.
 */
NX_API nx_status nx_seq_set_kv(nx_ctx *ctx, nx_seq_id seq, const struct nx_kv_params *p);
NX_API int32_t nx_ctx_n_seq_max(const nx_ctx *ctx);
/* The next position of sequence seq (its last decoded position + 1, or as set by the range
 * operations); -1 for an id out of range. */
NX_API nx_pos nx_seq_n_past(const nx_ctx *ctx, nx_seq_id seq);
/* The tokens sequence seq has seen: n_past plus every position nx_kv_seq_compact closed (what a
 * density budget counts); -1 for an id out of range. */
NX_API int64_t nx_seq_n_seen(const nx_ctx *ctx, nx_seq_id seq);

/*
 * Run tokens[0..n) of sequence 0 at positions n_past..n_past+n-1 and append them to its KV
 * cache (evicting by its policy and budget; calls of more than n_batch tokens run in chunks).
 * all_logits: keep logits for every token (else only for the last). Returns OK,
 * NX_STATUS_KV_FULL (n_past + n > n_ctx, or the pool cannot hold the first chunk; nothing
 * changed), NX_STATUS_INVALID_ARG (token id out of range, n <= 0; nothing changed). No
 * allocation happens here, except growing the logits buffer for more all_logits rows than
 * ever before.
 */
NX_API nx_status nx_decode(nx_ctx *ctx, const nx_token *tokens, int32_t n, bool all_logits);

/*
 * A batch: entries (token, position, sequence, want logits) for nx_decode_batch, as llama.h's
 * llama_batch. nx_batch_init allocates room for n_max entries (free with nx_batch_free);
 * nx_batch_add appends one (INVALID_ARG when full), nx_batch_clear empties it.
 */
struct nx_batch {
    int32_t n_tokens;
    int32_t n_max;
    nx_token *token;
    nx_pos *pos;
    nx_seq_id *seq_id;
    int8_t *logits;  /* nonzero: keep this entry's logits (NULL: every entry's) */
};
NX_API nx_status nx_batch_init(int32_t n_max, struct nx_batch *out);
NX_API void nx_batch_free(struct nx_batch *b);
NX_API void nx_batch_clear(struct nx_batch *b);
NX_API nx_status nx_batch_add(struct nx_batch *b, nx_token token, nx_pos pos, nx_seq_id seq,
                              bool logits);
/*
 * One forward step over every entry of b (continuous batching: tokens of any sequences, the
 * weights read once for all of them). Each token attends to the tokens of its own sequence
 * at positions up to its own (the cached ones and the batch's earlier entries of the same
 * sequence). A sequence's entries must have strictly increasing positions, the first >= the
 * sequence's nx_seq_n_past and all < n_ctx; afterwards its n_past is its last position + 1.
 * Then every sequence of the batch is held to its budget (a multi-token share of the batch
 * counts as a prompt for the prefill regime). A sequence's logits do not depend on which other
 * sequences share the batch, nor on the thread count. Errors (nothing changed): INVALID_ARG
 * (empty batch, more than n_batch entries, a token, sequence or position out of range or out
 * of order; message in nx_ctx_last_error), KV_FULL (the pool cannot hold the batch). Allocates
 * nothing except growing the logits buffer for more logits rows than ever before.
 */
NX_API nx_status nx_decode_batch(nx_ctx *ctx, const struct nx_batch *b);
/*
 * Logits (n_vocab floats, borrowed until the next decode) of entry i of the last
 * nx_decode_batch (i = -1: the last entry); NULL when that entry's logits were not asked for.
 * After nx_decode, the same as nx_get_logits.
 */
NX_API const float *nx_get_logits_ith(nx_ctx *ctx, int32_t i);

/*
 * Logits of the i-th token of the last nx_decode call (i = -1: the last token). n_vocab floats,
 * borrowed until the next nx_decode. NULL when not kept. After nx_decode_batch: entry i's.
 */
NX_API const float *nx_get_logits(nx_ctx *ctx, int32_t i);

/* Sequence 0's next position. */
NX_API int32_t nx_ctx_n_past(const nx_ctx *ctx);
/* Capacity of a sequence in positions. */
NX_API int32_t nx_ctx_n_ctx(const nx_ctx *ctx);
/* Forget every sequence (KV cache emptied, n_past = 0). */
NX_API void nx_ctx_reset(nx_ctx *ctx);
/* Drop sequence 0's positions >= n_past (0 <= n_past <= current n_past); earlier positions
 * stay valid. INVALID_ARG (nothing changed) when out of range. */
NX_API nx_status nx_ctx_truncate(nx_ctx *ctx, int32_t n_past);
/* Change the thread counts (the shared pool is widened when needed). */
NX_API nx_status nx_ctx_set_threads(nx_ctx *ctx, int32_t n_threads, int32_t n_threads_batch);
/* Bytes of KV cache memory allocated for this context (the block pool). */
NX_API size_t nx_ctx_kv_bytes(const nx_ctx *ctx);
/* Message for the last failed call on this context, "" if none. Borrowed. */
NX_API const char *nx_ctx_last_error(const nx_ctx *ctx);

/*
 * Range operations on one sequence of a context (llama.h's llama_memory_seq_*). A range
 * [p0, p1) with p0 < 0 means from 0, p1 < 0 means to the end.
 * nx_kv_seq_rm: as nx_seq_rm on sequence seq; nx_kv_seq_rm(ctx, seq, -1, -1) ends the
 *   sequence (every block back to the pool, n_past = 0, its policy kept).
 * nx_kv_seq_shift: as nx_seq_shift on sequence seq.
 * nx_kv_seq_cp: make sequence dst hold src's tokens at positions [p0, p1) after its own (dst's
 *   n_past must be <= the first copied position; becomes the last copied position + 1). When
 *   dst is empty and the range starts at src's first token the blocks are shared, not copied
 *   (reference counts; a block is copied only when either sequence would write into it); else
 *   the rows are copied. Errors (dst unchanged): INVALID_ARG (src == dst, ids or range out of
 *   range, dst not before the range), KV_FULL.
 * nx_kv_seq_keep: end every sequence but seq.
 * All: OK, INVALID_ARG (bad id or range; nothing changed; message in nx_ctx_last_error),
 * KV_FULL (no free block to copy a shared block into). The last logits are forgotten.
 */
NX_API nx_status nx_kv_seq_rm(nx_ctx *ctx, nx_seq_id seq, nx_pos p0, nx_pos p1);
NX_API nx_status nx_kv_seq_shift(nx_ctx *ctx, nx_seq_id seq, nx_pos p0, nx_pos p1, nx_pos delta);
NX_API nx_status nx_kv_seq_cp(nx_ctx *ctx, nx_seq_id src, nx_seq_id dst, nx_pos p0, nx_pos p1);
NX_API nx_status nx_kv_seq_keep(nx_ctx *ctx, nx_seq_id seq);
/*
 * nx_kv_seq_compact: close the gaps that eviction left in sequence seq's positions, so an
 * evicting sequence can go on past n_ctx (StreamingLLM's positions within the cache). Each
 * (layer, KV head) table's tokens become consecutive, the newest staying as far from the next
 * position as they were; when every table holds the same positions (policies that choose
 * positions for all heads at once) they become 0, 1, 2, ...; per-head choices give each head
 * its own run, ending where the others end. Keys are re-rotated by how far they moved (RoPE
 * is relative: tokens adjacent in the cache attend to each other as before, distances across
 * a closed gap shrink). n_past moves back by *shift (may be NULL; 0 when nothing was closed).
 * What the sequence has seen is kept: nx_seq_n_seen still counts every token (a density
 * budget goes on counting them). The policy's observation window starts empty; the last
 * logits are forgotten. Errors: INVALID_ARG (seq out of range), NOMEM, KV_FULL (no free
 * block to copy a shared block into); on error the sequence is unchanged (it may hold
 * private copies).
 */
NX_API nx_status nx_kv_seq_compact(nx_ctx *ctx, nx_seq_id seq, nx_pos *shift);

/*
 * Sequence state files: park a sequence on disk and resume it (a server's idle sessions).
 * nx_seq_state_save writes everything sequence seq holds (every table's tokens: positions,
 * pins, attention accumulators, key and value rows in the cache's type; its next position)
 * with the model's fingerprint and a checksum, atomically (temporary file, fsync, rename: a
 * crash never leaves a partial file at path), and user[0..user_len) of the caller's own (a
 * server's token history; may be NULL when user_len is 0). The sequence is not changed. IO,
 * INVALID_ARG (bad id), NOMEM; message in err.
 * nx_seq_state_load replaces sequence seq with a saved state: the file is read and verified
 * whole first (magic, version, checksum, every count and position against this context, the
 * model's fingerprint and KV layout), and only then is the sequence emptied and filled; its
 * eviction policy stays as set, and the policy's observation window starts empty. Afterwards
 * the sequence decodes exactly as the saved one would have (bit-identical logits) as long as
 * its policy does not evict before the window has refilled. Errors: IO (cannot read), FORMAT
 * (not a state file, truncated, corrupt: err says which), INVALID_ARG (another model or KV
 * layout, bad id, caller data longer than user_cap) with the sequence unchanged; KV_FULL (the pool cannot hold it) with the
 * sequence left empty.
 */
NX_API nx_status nx_seq_state_save(nx_ctx *ctx, nx_seq_id seq, const char *path,
                                   const void *user, size_t user_len, char *err,
                                   size_t errlen);
NX_API nx_status nx_seq_state_load(nx_ctx *ctx, nx_seq_id seq, const char *path, void *user,
                                   size_t user_cap, size_t *user_len, char *err,
                                   size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * Sampling. A sampler owns its RNG; same seed and same logits give the same tokens.
 * Order: repetition penalty, then (temp <= 0: greedy argmax) top-k, temperature, top-p, min-p.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_sampler nx_sampler;

struct nx_sampler_params {
    float temp;           /* <= 0: greedy */
    int32_t top_k;        /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int32_t repeat_last_n; /* tokens the penalty looks back over */
    uint64_t seed;
};
NX_API struct nx_sampler_params nx_sampler_default_params(void);
NX_API nx_status nx_sampler_init(const struct nx_sampler_params *params, int32_t n_vocab,
                                 nx_sampler **out);
NX_API void nx_sampler_free(nx_sampler *s);
/* Pick a token from n_vocab logits (not modified). Records it for the repetition penalty. */
NX_API nx_token nx_sampler_sample(nx_sampler *s, const float *logits);
/* Record a token as seen (e.g. prompt tokens) for the repetition penalty. */
NX_API void nx_sampler_accept(nx_sampler *s, nx_token t);

/* ---------------------------------------------------------------------------------------------
 * Encoders: embeddings and reranking with BERT-family GGUF models (general.architecture "bert":
 * learned positions, GELU; "nomic-bert": RoPE on NEOX halves, SwiGLU). Bidirectional attention,
 * post-LayerNorm, WordPiece tokenizer; sequences are [CLS] text [SEP], or [CLS] query [SEP]
 * document [SEP] for a pair (token types 0 up to the first [SEP], 1 after, when the model has
 * two token types). nx_ctx_init refuses encoder models; these functions need no context.
 * All are thread-safe (the model is read-only; scratch memory is allocated per call).
 * ------------------------------------------------------------------------------------------- */
/* Pooling of the last hidden states into one vector (values as llama.cpp's pooling_type). */
enum nx_pooling {
    NX_POOLING_UNSPECIFIED = -1, /* the model file's pooling_type (mean when absent, rank when
                                    the file has a classification head) */
    NX_POOLING_NONE = 0,         /* not supported by nx_embed* (per-token output) */
    NX_POOLING_MEAN = 1,         /* mean over every token, [CLS] and [SEP] included */
    NX_POOLING_CLS = 2,          /* the first token ([CLS]) */
    NX_POOLING_LAST = 3,         /* the last token */
    NX_POOLING_RANK = 4,         /* classification head on [CLS]: tanh(cls * h + b), then
                                    cls.output -> n_cls_out logits (rerankers) */
};

/* True for bert / nomic-bert models. */
NX_API bool nx_model_is_encoder(const nx_model *model);
/* The file's pooling (never UNSPECIFIED for an encoder; UNSPECIFIED for other models). */
NX_API enum nx_pooling nx_model_pooling(const nx_model *model);
/* Outputs of the classification head (1 for a cross-encoder reranker), 0 when it has none. */
NX_API int32_t nx_model_n_cls_out(const nx_model *model);
/* Longest token sequence an encoder takes (its trained context); longer texts are truncated. */
NX_API int32_t nx_model_n_max_tokens(const nx_model *model);

struct nx_embed_params {
    int32_t pooling;   /* enum nx_pooling; NX_POOLING_UNSPECIFIED (default) = the file's */
    int32_t n_threads; /* threads for this call (>= 1; default 1); results do not depend on it */
    bool normalize;    /* L2-normalise the pooled vector (default true; ignored for RANK) */
};
NX_API struct nx_embed_params nx_embed_default_params(void);

/*
 * Run the encoder over tokens[0..n) (the caller adds [CLS]/[SEP]) with token types
 * token_types[0..n) (NULL = all 0) and pool. Writes nx_model_n_embd floats to out (n_cls_out
 * for RANK); dim is the room in out. Returns OK, or INVALID_ARG (not an encoder, n < 1 or over
 * nx_model_n_max_tokens, a token id or type out of range, pooling NONE or unknown, RANK without
 * a head, dim too small; out untouched) or NOMEM, with a message in err.
 */
NX_API nx_status nx_embed_tokens(const nx_model *model, const nx_token *tokens,
                                 const int32_t *token_types, int32_t n,
                                 const struct nx_embed_params *params, float *out, int32_t dim,
                                 char *err, size_t errlen);
/* As nx_embed_tokens for [CLS] + WordPiece(text) + [SEP], word pieces truncated to fit
 * nx_model_n_max_tokens. Special-token texts in `text` are not parsed. */
NX_API nx_status nx_embed(const nx_model *model, const char *text,
                          const struct nx_embed_params *params, float *out, int32_t dim,
                          char *err, size_t errlen);
/*
 * Cross-encoder relevance of (query, document): the first logit of the classification head on
 * [CLS] query [SEP] document [SEP] (raw, no sigmoid; higher is more relevant). Over-long pairs
 * are truncated longest-first. params: only n_threads is used (NULL = defaults). Errors as
 * nx_embed_tokens (INVALID_ARG when the model has no classification head).
 */
NX_API nx_status nx_rerank_score(const nx_model *model, const char *query, const char *document,
                                 const struct nx_embed_params *params, float *out, char *err,
                                 size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * KV splicing: compiled blocks. A block is the K/V cache rows of a run of tokens (a system
 * prompt, a tool schema, a document) computed once and saved; splicing copies its rows into a
 * live sequence at any position, re-rotating the keys by the position difference, instead of
 * prefilling the tokens again. Blocks are tied to one model: a fingerprint (architecture, layer
 * and head counts, head size, RoPE parameters and frequencies, a hash of the weights) is checked
 * on load and on splice. A block is immutable and may be shared by threads and contexts.
 * Compiling and splicing act on a context's sequence 0.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_kv_block nx_kv_block;

/*
 * Run tokens[0..n) through ctx's model at positions m0 .. m0+n-1, after prefix[0..n_prefix)
 * at positions m0-n_prefix .. m0-1 (n_prefix <= m0; prefix may be NULL when n_prefix = 0;
 * positions before the prefix are empty: the block sees only the prefix), and return the
 * tokens' K/V rows as a block of the context's KV type (F16 or F32). The context is reset
 * before and holds the prefix and block afterwards (n_past = m0 + n). Errors: INVALID_ARG
 * (n <= 0, n_prefix > m0, a token out of range, sequence 0 with an eviction budget),
 * KV_FULL (m0 + n > n_ctx), NOMEM; the message is in nx_ctx_last_error. *out owned by the
 * caller (nx_kv_block_free).
 */
NX_API nx_status nx_kv_block_compile(nx_ctx *ctx, const nx_token *prefix, int32_t n_prefix,
                                     const nx_token *tokens, int32_t n, int32_t m0,
                                     nx_kv_block **out);
/* Write a block to path atomically (temporary file in the same directory, fsync, rename): a
 * crash never leaves a partial file at path. Errors: IO (message in err), INVALID_ARG. */
NX_API nx_status nx_kv_block_save(const nx_kv_block *b, const char *path, char *err,
                                  size_t errlen);
/*
 * Map a block file read-only and verify it: magic, version, every size and offset, zero
 * padding, checksum; with model != NULL also the fingerprint against that model. Errors:
 * IO (cannot open/map), FORMAT (truncated, corrupt, bad magic/version: err names which),
 * INVALID_ARG (compiled for another model: err names the field that differs). *out owned by
 * the caller; it keeps the mapping until nx_kv_block_free.
 */
NX_API nx_status nx_kv_block_load(const nx_model *model, const char *path, nx_kv_block **out,
                                  char *err, size_t errlen);
NX_API void nx_kv_block_free(nx_kv_block *b);
NX_API int32_t nx_kv_block_n_tokens(const nx_kv_block *b);
NX_API int32_t nx_kv_block_m0(const nx_kv_block *b);
/* The block's token ids (n_tokens), borrowed from the block. */
NX_API const nx_token *nx_kv_block_tokens(const nx_kv_block *b);
NX_API enum nx_type nx_kv_block_type(const nx_kv_block *b);
/* One-line description (fingerprint, m0, tokens, type, bytes) into buf; returns bytes needed
   (as snprintf). */
NX_API int nx_kv_block_desc(const nx_kv_block *b, char *buf, size_t len);

struct nx_splice_params {
    int32_t pos;          /* position of the block's first token; -1 = the context's n_past.
                             Must be >= n_past (positions in between stay empty) */
    bool pin;             /* eviction policies must keep the spliced tokens (default false:
                             they are ordinary cache entries) */
    bool repair;          /* depth-adaptive repair (default true): re-decode the block's last
                             ceil(n * R / 100) tokens instead of splicing them */
    int32_t repair_p;     /* P: R = repair_base while pos <= P (256) */
    float repair_base;    /* R_base, percent (5) */
    float repair_k;       /* K: beyond P, R = R_base + (pos - P) / (P (K - 1)) (100 - R_base),
                             clamped to 100 (4) */
    float repair_pct;     /* >= 0: use this R (percent) instead of the formula (-1) */
};
NX_API struct nx_splice_params nx_splice_default_params(void);
/* The repair fraction R (percent, 0..100) the parameters give for a splice at pos. */
NX_API double nx_splice_repair_pct(const struct nx_splice_params *p, int32_t pos);

/*
 * Splice block b into ctx at p->pos (NULL params: defaults). The first n - n_repair tokens'
 * rows are copied into the cache with keys re-rotated by delta = pos - m0 (a rotation by
 * delta * theta_i composed with the stored one, angle in double; exact up to the KV type's
 * rounding, for both RoPE pair layouts and the model's frequency scaling; delta = 0 copies
 * the rows bit for bit); the last n_repair tokens are then decoded normally (the logits of the
 * last one are available with nx_get_logits(ctx, -1)). Afterwards n_past = pos + n. With
 * R = 100 this is exactly a prefill of the block's tokens. *n_repaired (may be NULL) gets
 * n_repair. Errors (nothing changed): INVALID_ARG (other model, pos < n_past), KV_FULL
 * (pos + n > n_ctx or the pool is full), NOMEM; message in nx_ctx_last_error.
 */
NX_API nx_status nx_ctx_splice(nx_ctx *ctx, const nx_kv_block *b,
                               const struct nx_splice_params *p, int32_t *n_repaired);

/*
 * Position-range operations on a context's sequence 0, after llama.h's seq_rm / seq_add. A range
 * [p0, p1) with p0 < 0 means from 0, p1 < 0 means to the end.
 * nx_seq_rm: drop the cached tokens at positions in [p0, p1). If the range reaches the end
 *   (no cached token at or after p1), n_past becomes p0 (as nx_ctx_truncate).
 * nx_seq_shift: add delta to the positions in [p0, p1) and re-rotate their keys by delta
 *   (RoPE is relative, so this is exact up to rounding). The shifted tokens must stay after
 *   every token before p0 (INVALID_ARG otherwise: cache order is position order) and, for a
 *   range that does not reach the end, before every token at or after p1. When the range
 *   reaches the end, n_past moves by delta too (on an empty context, nx_seq_shift(ctx, 0, -1,
 *   d) just starts the sequence at position d). Positions must stay in [0, n_ctx].
 * Both: OK, INVALID_ARG (bad range; nothing changed), KV_FULL (no free block to copy a block
 * shared with the sequence cache). The last logits are forgotten.
 */
NX_API nx_status nx_seq_rm(nx_ctx *ctx, nx_pos p0, nx_pos p1);
NX_API nx_status nx_seq_shift(nx_ctx *ctx, nx_pos p0, nx_pos p1, nx_pos delta);
/* nx_seq_cp: append src's cached tokens at positions [p0, p1) (rows copied as they are,
 * converted when the KV types differ) to dst, at the same positions; dst's n_past must be
 * <= p0 and becomes the last copied position + 1. Same model (fingerprint) required. src is
 * only read. Errors (dst unchanged): INVALID_ARG (same context, other model, bad range,
 * n_past > p0), KV_FULL, NOMEM; message in nx_ctx_last_error(dst). */
NX_API nx_status nx_seq_cp(nx_ctx *dst, const nx_ctx *src, nx_pos p0, nx_pos p1);

/* ---------------------------------------------------------------------------------------------
 * Sequence cache: up to 32 warm sequences of one context (their KV blocks, shared with
 * reference counts, never copied except a partly filled last block). A request reuses the
 * longest exact-token common prefix of any cached sequence and prefills only the rest. The
 * cached blocks live in the context's pool: the context needs kv_extra_tokens > 0 for room (a
 * slot whose blocks the live sequences do not share counts against it; the least recently
 * used slots are dropped to keep within). Any sequence of the context may store into and
 * reuse from the cache; a sequence with an eviction budget shares cached blocks like any
 * other (they stay immutable: its eviction copies a shared block before rewriting it, and
 * only ever frees its own references). Lookups allocate nothing. Free the cache before its
 * context. One thread at a time, with its context.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_seqcache nx_seqcache;

/* n_slots in [1, 32]. Errors: INVALID_ARG (bad n_slots), NOMEM. */
NX_API nx_status nx_seqcache_init(nx_ctx *ctx, int32_t n_slots, nx_seqcache **out);
NX_API void nx_seqcache_free(nx_seqcache *sc);
/*
 * Reset sequence 0 (only), reuse the longest cached prefix of tokens[0..n) (at most n - 1 tokens,
 * so the last one is decoded), decode the rest (logits of the last token, or of every decoded
 * token with all_logits: nx_get_logits index i is token n_reused + i). *n_reused (may be NULL)
 * gets the tokens taken from the cache. Errors as nx_decode.
 */
NX_API nx_status nx_seqcache_prefill(nx_seqcache *sc, const nx_token *tokens, int32_t n,
                                     bool all_logits, int32_t *n_reused);
/*
 * Keep the context's current sequence, whose tokens are tokens[0..n) (n = n_past; the caller
 * vouches that they are the tokens decoded), in a slot (the least recently used one when all
 * are taken; nothing when a slot already holds all of it). INVALID_ARG when the cache does not
 * hold exactly positions 0 .. n-1 (after eviction, rm or splices with gaps).
 */
NX_API nx_status nx_seqcache_store(nx_seqcache *sc, const nx_token *tokens, int32_t n);
/* The same for sequence seq of the context (prefill resets only that sequence; errors as
 * above, and INVALID_ARG for seq out of range). */
NX_API nx_status nx_seqcache_prefill_seq(nx_seqcache *sc, nx_seq_id seq, const nx_token *tokens,
                                         int32_t n, bool all_logits, int32_t *n_reused);
NX_API nx_status nx_seqcache_store_seq(nx_seqcache *sc, nx_seq_id seq, const nx_token *tokens,
                                       int32_t n);

struct nx_seqcache_stats {
    int64_t lookups;
    int64_t hits;            /* lookups that reused at least one token */
    int64_t tokens_reused;
    int64_t tokens_prefilled;
    int64_t slots_used;
    int64_t slots_dropped;   /* dropped to make room, or replaced */
    double lookup_seconds;   /* total time of the prefix lookups (trie walk) */
    double lookup_max_seconds;
};
NX_API void nx_seqcache_stats(const nx_seqcache *sc, struct nx_seqcache_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Chat templates: a conversation rendered into a prompt with the model's own Jinja template
 * (GGUF tokenizer.chat_template), exactly as Hugging Face transformers' apply_chat_template
 * renders it with Python's jinja2 (sandboxed, trim_blocks, lstrip_blocks, loop controls,
 * {% generation %}, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).
 * A template using a construct Nexus does not implement is refused with a message naming it
 * and its line. Templates are immutable once parsed: one may be rendered by several threads.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_chat_template nx_chat_template;

/* tokenizer.chat_template of a loaded model (NUL-terminated, lives with the model), or NULL. */
NX_API const char *nx_model_chat_template(const nx_model *model);

/*
 * Parse template source (len bytes, UTF-8). *out owned by the caller (nx_chat_template_free).
 * Errors (*out NULL, err names the problem and its line): FORMAT (Jinja syntax error),
 * UNSUPPORTED (a construct Nexus refuses, e.g. "line 3: unsupported construct: the 'call' tag"),
 * INVALID_ARG (NULL source, or source over 4 MiB or nested too deeply), NOMEM.
 */
NX_API nx_status nx_chat_template_parse(const char *source, size_t len, nx_chat_template **out,
                                        char *err, size_t errlen);
/*
 * A template by spec: a built-in name ("chatml", "llama3", "mistral"), otherwise a file path
 * (read whole). Errors as nx_chat_template_parse, plus IO and NOT_FOUND (neither a built-in
 * name nor a readable file).
 */
NX_API nx_status nx_chat_template_open(const char *spec, nx_chat_template **out, char *err,
                                       size_t errlen);
/* The model's own template; NOT_FOUND when the GGUF carries none (then use a built-in). */
NX_API nx_status nx_chat_template_from_model(const nx_model *model, nx_chat_template **out,
                                             char *err, size_t errlen);
NX_API void nx_chat_template_free(nx_chat_template *t);

struct nx_chat_params {
    const char *messages_json; /* JSON array of {"role", "content", "tool_calls", ...} (required) */
    const char *tools_json;    /* JSON array of tool definitions; NULL: tools = None */
    const char *extra_json;    /* JSON object of further template variables (e.g.
                                  {"enable_thinking": false}); NULL: none */
    bool add_generation_prompt;
    const char *bos_token;     /* the model's special token texts; NULL: undefined */
    const char *eos_token;
    int64_t now;               /* time strftime_now formats (Unix seconds, UTC); 0: current time */
    size_t max_output;         /* most bytes of output (0: 4 MiB) */
    int64_t max_steps;         /* most loop iterations + macro calls (0: 1,000,000) */
};
NX_API struct nx_chat_params nx_chat_default_params(void);

/*
 * Render. On success *out is a NUL-terminated string owned by the caller (nx_chat_free_string),
 * *out_len (may be NULL) its length. On failure *out is NULL and err holds "KIND: message":
 * KIND is "raise" (the template called raise_exception; message is its argument), "undefined"
 * (jinja2's UndefinedError), "security" (jinja2's SecurityError: a mutating method), "python"
 * (an error Python raises inside the template, e.g. "TypeError: 'NoneType' object is not
 * iterable"), "template", "unsupported", "limit" (output, steps, nesting or memory cap), "json"
 * (the messages/tools/extra JSON is malformed). Status: INVALID_ARG for template errors and
 * bad input, UNSUPPORTED, NOMEM.
 */
NX_API nx_status nx_chat_render(const nx_chat_template *t, const struct nx_chat_params *p,
                                char **out, size_t *out_len, char *err, size_t errlen);
NX_API void nx_chat_free_string(char *s);

/* ---------------------------------------------------------------------------------------------
 * Tool calls in model output. Families: Hermes / Qwen (<tool_call>{"name":..,"arguments":..}
 * </tool_call>, or inside the tags Qwen3-Coder's <function=NAME><parameter=K>V</parameter>
 * </function>), Llama 3.x (a JSON object {"name":..,"parameters":..}, optionally after
 * <|python_tag|>, several separated by ';'; functionary's <function=NAME>{..}</function>), Mistral ([TOOL_CALLS][{...}] and the newer
 * [TOOL_CALLS]name[ARGS]{...}), and the generic form (a JSON object {"tool_call": {...}} or
 * {"tool_calls": [...]}, or {"name":..,"arguments":..}); DeepSeek and the model-specific
 * families after it, each named with its forms below.
 * ------------------------------------------------------------------------------------------- */
enum nx_tool_format {
    NX_TOOL_FORMAT_NONE = 0, /* the template shows no tool calls */
    NX_TOOL_FORMAT_HERMES = 1,
    NX_TOOL_FORMAT_LLAMA3 = 2,
    NX_TOOL_FORMAT_MISTRAL = 3,
    NX_TOOL_FORMAT_GENERIC = 4,
    NX_TOOL_FORMAT_DEEPSEEK = 5, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}
                                   <｜tool▁call▁end｜>..<｜tool▁calls▁end｜> (V3.1), and R1's
                                   function<｜tool▁sep｜>NAME ```json {..} ``` */
    NX_TOOL_FORMAT_TAGGED_JSON = 6, /* JSON calls (objects or an array) between a model's own tags:
                                       <tool_calls>, <TOOLCALL>, <seed:tool_call> (XML inside),
                                       Cohere's <|START_ACTION|>, GigaChat's <|function_call|>,
                                       Apertus' <|tools_prefix|>[{NAME: {..}}] */
    NX_TOOL_FORMAT_XML_INVOKE = 7,  /* <invoke name="N"><parameter name="K">V</parameter></invoke>
                                       and its relatives: MiniMax-M2, DeepSeek V3.2/V4 DSML, muse
                                       <atem:invoke>, MiniCPM <function name=..><param name=..>,
                                       Kimi-K3 <|open|>call tool=".." */
    NX_TOOL_FORMAT_KIMI = 8,        /* Kimi-K2 <|tool_calls_section_begin|><|tool_call_begin|>
                                       functions.NAME:I<|tool_call_argument_begin|>{..}.. */
    NX_TOOL_FORMAT_SOLAR = 9,       /* <|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{..} */
    NX_TOOL_FORMAT_HARMONY = 10,    /* gpt-oss: to=functions.NAME<|channel|>..<|message|>{..}<|call|> */
    NX_TOOL_FORMAT_GEMMA4 = 11,     /* <|tool_call>call:NAME{k:v,..}<tool_call|>, strings <|"|>..<|"|> */
    NX_TOOL_FORMAT_HY = 12,         /* Hunyuan <tool_call:opensource>NAME<tool_sep:opensource> and
                                       <arg_key:opensource>K</..><arg_value:opensource>V</..> pairs */
    NX_TOOL_FORMAT_PYTHONIC = 13,   /* LFM2.5 <|tool_call_start|>[NAME(k='v', n=3), ..]<|tool_call_end|> */
    NX_TOOL_FORMAT_FUNCTIONARY = 14, /* functionary v3.2: >>>NAME\n{..} segments, >>>all\n text */
    NX_TOOL_FORMAT_MINIMAX_M3 = 15   /* ]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="N">
                                        ]<]minimax[>[<KEY>V]<]minimax[>[</KEY>..]<]minimax[>[</invoke>
                                        ..]<]minimax[>[</tool_call>, nested values as elements
                                        (<item> for list entries) */
};
/* The family a template's text shows (detected once at parse). */
NX_API enum nx_tool_format nx_chat_template_tool_format(const nx_chat_template *t);
/* "none", "hermes", "llama3", "mistral", "generic", "deepseek", "tagged-json", "xml-invoke",
 * "kimi", "solar", "harmony", "gemma4", "hy", "pythonic", "functionary", "minimax-m3". Static. */
NX_API const char *nx_tool_format_name(enum nx_tool_format f);
/* The text that begins a tool call in that family: "<tool_call>" (hermes), "{\"name\""
 * (llama3; also "<|python_tag|>" and functionary's "<function=" are parsed), "[TOOL_CALLS]"
 * (mistral), "{\"" (generic), "<｜tool▁calls▁begin｜>" (deepseek), and for the later families
 * the opening marker of the form their templates render (one of several for tagged-json and
 * xml-invoke, whose parsers accept them all), "" (none); for lazy grammars: generation is free
 * until it appears. Static. */
NX_API const char *nx_tool_format_trigger(enum nx_tool_format f);

struct nx_tool_call {
    const char *name;
    const char *arguments; /* compact JSON object text */
    const char *id;        /* "" when the output gave none */
};
typedef struct nx_tool_calls nx_tool_calls;
/*
 * Parse model output text. Text without any tool call parses to zero calls, with all of it as
 * content. *out owned by the caller (nx_tool_calls_free). Errors (*out NULL, err says what and
 * where): FORMAT (a call that begins but is truncated or malformed: bad JSON, missing name,
 * arguments not an object), INVALID_ARG (NULL text, unknown family), NOMEM.
 */
NX_API nx_status nx_tool_calls_parse(enum nx_tool_format f, const char *text, size_t len,
                                     nx_tool_calls **out, char *err, size_t errlen);
/*
 * As nx_tool_calls_parse, with the tools the calls were made against (tools_json: a JSON array
 * of OpenAI {"type":"function","function":{"name","parameters"}} or bare {"name","parameters"}
 * entries; NULL: none). The families that write parameter values as raw text (hermes' XML and
 * GLM forms, xml-invoke, hy, minimax-m3) decode a value as JSON when it is JSON, which would
 * turn a string parameter "3" into a number: with the tools, a value whose property schema has
 * "type": "string" stays text verbatim (others still decode). Extra error: INVALID_ARG when
 * tools_json is not a JSON array.
 */
NX_API nx_status nx_tool_calls_parse_with_tools(enum nx_tool_format f, const char *text, size_t len,
                                                const char *tools_json, nx_tool_calls **out,
                                                char *err, size_t errlen);
NX_API int32_t nx_tool_calls_count(const nx_tool_calls *c);
/* Call i (0 <= i < count), borrowed, lives with c; NULL when out of range. */
NX_API const struct nx_tool_call *nx_tool_calls_get(const nx_tool_calls *c, int32_t i);
/* The text outside tool calls, trimmed (may be ""). */
NX_API const char *nx_tool_calls_content(const nx_tool_calls *c);
NX_API void nx_tool_calls_free(nx_tool_calls *c);

/* ---------------------------------------------------------------------------------------------
 * Grammars: constrained decoding. A grammar (from GBNF text or a JSON Schema) is compiled once
 * into a byte-level pushdown automaton (UTF-8 aware: character classes match whole code points,
 * never invalid UTF-8). A grammar vocabulary indexes a model's tokens (their bytes, in a trie;
 * built once per vocabulary, read-only after, shareable by threads). A matcher follows one
 * generation: it gives the mask of allowed tokens at each step and advances on the chosen one.
 * nx_grammar and nx_grammar_vocab are immutable and thread-safe; a matcher (and a sampler that
 * carries one) is used by one thread at a time. Limits: stacks deeper than 256 frames (nesting)
 * die; at most 128 ambiguous parses are followed at once (further ones are dropped, but whether
 * the text may end here stays exact), and building one parse state expands at most 32768 partial
 * parses (each once, however many derivations reach it: nested nullable repetitions such as
 * "x"???? cost linear work; parses beyond the limit are dropped). Masks are computed per parse
 * through a cache; once a parse was dropped, that can allow a token the whole state refuses, so
 * a matcher that has dropped one (or whose accept refused a token of its mask) computes every
 * later mask by feeding the vocabulary through the automaton: exact, within the work bound.
 * ------------------------------------------------------------------------------------------- */
typedef struct nx_grammar nx_grammar;
typedef struct nx_grammar_vocab nx_grammar_vocab;
typedef struct nx_grammar_matcher nx_grammar_matcher;

/*
 * Compile GBNF (llama.cpp's format: `name ::= ...`, | ( ) * + ? {m} {m,} {m,n}, "literals"
 * with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, [a-z] [^...] classes, `.`, # comments).
 * root: the start rule (NULL = "root"). Errors (message in err, with line:column): FORMAT
 * (syntax, undefined rule, left recursion, token references <...> which are unsupported),
 * NOMEM. *out owned by the caller (nx_grammar_free).
 */
NX_API nx_status nx_grammar_from_gbnf(const char *text, size_t len, const char *root,
                                      nx_grammar **out, char *err, size_t errlen);
/* As nx_grammar_from_gbnf, also accepting the %jstr{m,n} element nx_grammar_source writes (a
 * JSON string body of m..n characters and its closing quote), so that schema sources (rules
 * renamed apart) can be combined into one grammar. */
NX_API nx_status nx_grammar_from_schema_gbnf(const char *text, size_t len, const char *root,
                                             nx_grammar **out, char *err, size_t errlen);

struct nx_json_schema_params {
    int32_t max_string_chars; /* strings without maxLength get this cap (0: none, default) */
    int32_t max_items;        /* arrays without maxItems get this cap (0: none, default) */
    bool bfcl_types;          /* accept BFCL's type names as BFCL's converter maps them: dict
                                 -> object, float/double -> number, tuple/list -> array, any ->
                                 string, ...; and its "optional" key as an annotation */
};
NX_API struct nx_json_schema_params nx_json_schema_default_params(void);
/*
 * Compile a JSON Schema (subset) to a grammar producing compact JSON (no whitespace):
 * type (or a list), properties (required first, then optional, each in schema order),
 * required, additionalProperties (absent = false as llama.cpp; true or a schema: extra keys
 * [A-Za-z0-9_-]{1,32} other than the declared ones), items, minItems, maxItems, enum / const
 * (any JSON value), anyOf, oneOf (treated as anyOf), local $ref / $defs / definitions,
 * minLength, maxLength, format "date", minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (integers: exact; numbers: integers in range plus n.ffffff fractions
 * with 0 <= n, n + 1 <= maximum). Without bounds integers have at most 16 digits, numbers 16
 * integer and 6 fraction digits. Annotations ignored: description, title, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly. Any other keyword: UNSUPPORTED
 * with its name and the schema path in err (fail closed). FORMAT: not JSON. NULL params:
 * defaults.
 */
NX_API nx_status nx_grammar_from_json_schema(const char *json, size_t len,
                                             const struct nx_json_schema_params *params,
                                             nx_grammar **out, char *err, size_t errlen);
NX_API void nx_grammar_free(nx_grammar *g);
/* The compiled grammar as GBNF-like text (helper rules included); returns the length, or
 * -needed when len is too small. */
NX_API int32_t nx_grammar_print(const nx_grammar *g, char *buf, int32_t len);
/* The GBNF text a JSON schema compiles to (before compilation), or NULL for GBNF grammars.
 * Borrowed from g. */
NX_API const char *nx_grammar_source(const nx_grammar *g);

/* Index the model's vocabulary (token bytes as nx_token_to_piece gives them without special
 * rendering; control tokens have none and are never allowed; end-of-generation tokens are
 * allowed exactly when the grammar may end). Errors: INVALID_ARG, NOMEM. */
NX_API nx_status nx_grammar_vocab_init(const nx_model *model, nx_grammar_vocab **out);
NX_API void nx_grammar_vocab_free(nx_grammar_vocab *v);

/* A matcher at the grammar's start. g and v must outlive it. Errors: NOMEM. */
NX_API nx_status nx_grammar_matcher_init(const nx_grammar *g, const nx_grammar_vocab *v,
                                         nx_grammar_matcher **out);
NX_API void nx_grammar_matcher_free(nx_grammar_matcher *m);
/* Back to the start (the mask cache is kept: it depends only on grammar and vocabulary). */
NX_API void nx_grammar_matcher_reset(nx_grammar_matcher *m);
/*
 * Allowed tokens now: bits has ceil(n_vocab / 64) words, bit t of word t/64 set when token t
 * is allowed. force: only tokens that begin the shortest completion (EOG tokens when the
 * grammar is complete), to close the output within a token budget. Returns the number of
 * allowed tokens (0: none, e.g. after the end), or NX_STATUS_NOMEM. Allocates only while
 * filling its caches (first visit of a grammar position) and scratch growth.
 * One mask spends a bounded amount of work (far above what real schemas need: see the README's
 * constrained decoding section). A grammar that needs more, such as deeply nested ambiguous
 * repetitions that keep most tokens alive, gets a partial mask: only tokens proven allowed
 * within the budget (each one is accepted), or, when none was proven, the tokens that begin the
 * shortest completion. nx_grammar_matcher_mask_partial says when that happened.
 */
NX_API int32_t nx_grammar_matcher_mask(nx_grammar_matcher *m, uint64_t *bits, bool force);
/* Whether the last mask was partial (a subset of the allowed tokens, cut by the work bound). */
NX_API bool nx_grammar_matcher_mask_partial(const nx_grammar_matcher *m);
/* Advance by token t. INVALID_ARG (state unchanged) when t is not allowed. An EOG token ends
 * the matcher (finished). A token of the last mask is refused only past the 128-parse limit
 * (see above); the next mask then leaves it out (the sampler masks and picks again). */
NX_API nx_status nx_grammar_matcher_accept(nx_grammar_matcher *m, nx_token t);
/* Advance by raw UTF-8 bytes (e.g. a forced prefix); INVALID_ARG when rejected (unchanged). */
NX_API nx_status nx_grammar_matcher_accept_text(nx_grammar_matcher *m, const char *s, size_t n);
/* Undo the last n accepted steps (up to 32 are kept); returns how many were undone. */
NX_API int32_t nx_grammar_matcher_rollback(nx_grammar_matcher *m, int32_t n);
NX_API bool nx_grammar_matcher_can_end(const nx_grammar_matcher *m);
NX_API bool nx_grammar_matcher_is_finished(const nx_grammar_matcher *m);
/* Bytes of the shortest completion from here (0: may end now; -1: none). */
NX_API int64_t nx_grammar_matcher_completion_bytes(const nx_grammar_matcher *m);

/*
 * Give the sampler a grammar (NULL g: remove it). The mask is applied before sampling
 * (disallowed tokens excluded), and each sampled token advances the grammar. trigger (may be
 * NULL or ""): lazy mode, text is free until the sampled tokens' text (special tokens rendered)
 * contains trigger; the grammar then applies to the text after it (the rest of that token is
 * fed to it). max_tokens > 0: token budget from activation; when the remaining budget gets
 * down to the shortest completion (+1 for the end token), only tokens that begin that
 * completion are allowed, and a free token that would leave more to close than the budget
 * allows is undone and replaced by one of them, so the output (given a budget above the
 * grammar's shortest string) ends with an end token within max_tokens. g and v are borrowed
 * and must outlive the sampler or the next call. When no token is allowed (after the grammar
 * ended, or the text after a trigger was rejected) the sampler returns the vocabulary's first
 * end-of-generation token (or -1 when it has none). Errors: INVALID_ARG (vocabulary size is
 * not the sampler's), NOMEM.
 */
NX_API nx_status nx_sampler_set_grammar(nx_sampler *s, const nx_grammar *g,
                                        const nx_grammar_vocab *v, const char *trigger,
                                        int32_t max_tokens);
/* Start the grammar over for a new output (matcher at the start, budget and trigger rearmed);
 * the matcher's mask cache is kept, so reuse one sampler for many outputs of one grammar. */
NX_API void nx_sampler_grammar_reset(nx_sampler *s);
/* True when the grammar applies now (set, and triggered when lazy). */
NX_API bool nx_sampler_grammar_active(const nx_sampler *s);
/* The sampler's matcher (NULL without grammar); borrowed. */
NX_API nx_grammar_matcher *nx_sampler_grammar_matcher(nx_sampler *s);

NX_API const char *nx_version(void);

#ifdef __cplusplus
}
#endif
#endif
