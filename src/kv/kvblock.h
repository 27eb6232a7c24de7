/*
 * kvblock.h - compiled KV blocks: the K and V rows of a run of tokens, taken from a context's
 * cache, with everything needed to check they belong to the model they are spliced into. The
 * public face is nx_kv_block in nexus.h; splicing is the model layer's splice.c.
 *
 * File format (version 1, little-endian; sizes in bytes):
 *
 *   offset  size  field
 *        0     8  magic "NXKVBLK\0"
 *        8     4  version (1)
 *       12     4  header size (256)
 *       16    64  model fingerprint: arch, n_layer, n_head, n_head_kv, head_dim, n_rot, n_embd,
 *                 n_vocab, rope layout (1 = NEOX halves, 0 = adjacent pairs), rope base,
 *                 rope freq scale (f32), reserved (0), hash of the per-pair RoPE frequencies
 *                 (covers rope_freqs / Llama-3 scaling), hash of the weights (u64 each)
 *       80     4  m0: position of the first token when compiled
 *       84     4  n_tokens
 *       88     4  dtype of K and V rows (nx_type: 1 = F16, 0 = F32)
 *       92     4  flags (0)
 *       96    40  offsets of the token ids, K and V; bytes of K (= bytes of V); file size
 *      136   112  reserved (0)
 *      248     8  checksum: kv_hash64 over bytes [0, 248), then the tokens, K and V sections
 *      256        token ids (i32 each)
 *     k_off       K rows, (n_layer, n_head_kv, n_tokens, head_dim) in dtype; k_off and v_off
 *     v_off       V rows, same shape        are multiples of 4096 (pages), gaps are zero
 *
 * Keys are stored after RoPE at positions m0 .. m0 + n_tokens - 1, exactly as the cache holds
 * them. Files are written atomically (temporary file in the same directory, fsync, rename,
 * fsync of the directory) and loaded by mmap, read-only; every field, every gap byte and the
 * checksum are verified before a block is handed out.
 */
#ifndef NX_KV_KVBLOCK_H
#define NX_KV_KVBLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

struct kv_fingerprint {
    uint32_t arch;
    int32_t n_layer, n_head, n_head_kv, head_dim, n_rot, n_embd, n_vocab;
    uint32_t rope_neox;
    float rope_base, rope_freq_scale;
    uint32_t reserved;
    uint64_t rope_hash;
    uint64_t weight_hash;
};

struct nx_kv_block {
    struct kv_fingerprint fp;
    int32_t m0;
    int32_t n_tokens;
    enum nx_type type;    /* NX_TYPE_F16 or NX_TYPE_F32 */
    size_t row_bytes;     /* head_dim * element size */
    const nx_token *tokens;
    const unsigned char *k; /* (n_layer, n_head_kv, n_tokens, row_bytes) */
    const unsigned char *v;
    void *map;            /* loaded: the file mapping; compiled: the owned buffer */
    size_t map_len;       /* 0 when map is a heap buffer */
};

/* A streaming kv_hash64: init, update with the bytes in pieces, final = kv_hash64 of them all. */
struct kv_hasher {
    uint64_t h[4];
    unsigned char buf[32]; /* the bytes of an unfinished stripe */
    size_t nbuf, n;
};
void kvh_init(struct kv_hasher *s, uint64_t seed);
void kvh_update(struct kv_hasher *s, const void *p, size_t n);
uint64_t kvh_final(struct kv_hasher *s);
/* 64-bit hash of n bytes (not cryptographic; every single-bit change changes it). */
uint64_t kv_hash64(const void *p, size_t n, uint64_t seed);
/* OK when fp matches the model's fingerprint (model_fp, from the model layer's
   kv_fingerprint_of); otherwise NX_STATUS_INVALID_ARG with a message naming the first field
   that differs. */
nx_status kv_fingerprint_check(const struct kv_fingerprint *fp,
                               const struct kv_fingerprint *model_fp, struct nx_err *err);

/* An empty block with owned buffers for n tokens of the model with fingerprint fp (tokens, K,
   V uninitialised). */
nx_status kvblock_alloc(const struct kv_fingerprint *fp, enum nx_type type, int32_t n,
                        int32_t m0, struct nx_kv_block **out);
/* nx_kv_block_load with the model given as its fingerprint and vocabulary size (model_fp NULL:
   no model check). */
nx_status kvblock_open(const char *path, const struct kv_fingerprint *model_fp,
                       int32_t n_vocab, struct nx_kv_block **out, char *errbuf, size_t errlen);
/* K / V row of token i of (layer, head). */
static inline const unsigned char *kvblock_k_row(const struct nx_kv_block *b, int layer, int head,
                                                 int32_t i) {
    size_t idx = ((size_t)layer * (size_t)b->fp.n_head_kv + (size_t)head) * (size_t)b->n_tokens +
                 (size_t)i;
    return b->k + idx * b->row_bytes;
}
static inline const unsigned char *kvblock_v_row(const struct nx_kv_block *b, int layer, int head,
                                                 int32_t i) {
    size_t idx = ((size_t)layer * (size_t)b->fp.n_head_kv + (size_t)head) * (size_t)b->n_tokens +
                 (size_t)i;
    return b->v + idx * b->row_bytes;
}

/* Test hook: called after every chunk the writer writes with the bytes written so far (the
   tests kill a child process mid-write with it). NULL in normal use. */
extern void (*kvblock_write_hook)(size_t written);

#endif
