/*
 * fingerprint.c - DESIGN: a model's KV fingerprint (kv/kvblock.h's struct kv_fingerprint:
 * architecture, head layout, RoPE parameters and frequencies, a hash of the weights as the
 * file holds them), computed here where the model's layout is known and passed down to kv/,
 * which never reads a model. Also the public nx_kv_block_load, which checks a block file
 * against a model.
 */
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"
#include "kv/kvblock.h"
#include "model/fingerprint.h"
#include "model/model.h"

/* Over the weights as the file holds them, so a model loaded with or without mmap (whose
 * in-memory layouts may differ, kern.h) has one fingerprint. */
static uint64_t hash_weight(uint64_t h, const struct nx_weight *w) {
    enum nx_type ft = nx_type_in_file(w->type);
    uint64_t meta[3] = {(uint64_t)ft, (uint64_t)w->ne0, (uint64_t)w->ne1};
    h = kv_hash64(meta, sizeof meta, h);
    size_t n = w->row_bytes * (size_t)w->ne1;
    if (ft == w->type) return kv_hash64(w->data, n, h);
    /* block by block back to the file layout */
    struct kv_hasher s;
    kvh_init(&s, h);
    if (nx_type_is_x4(w->type)) { /* rows interleaved by fours: row by row, 128 elements at once */
        uint16_t row[128];
        for (int64_t r = 0; r < w->ne1; r++) {
            for (int64_t i = 0; i < w->ne0; i += 128) {
                int64_t m = NX_MIN((int64_t)128, w->ne0 - i);
                quant_x4_get_ref(w->data, w->ne0, r, i, m, row);
                kvh_update(&s, row, (size_t)m * sizeof row[0]);
            }
        }
        return kvh_final(&s);
    }
    size_t bs = nx_type_info_get(ft)->type_size;
    unsigned char blk[256];
    NX_ASSERT(bs <= sizeof blk);
    for (size_t off = 0; off < n; off += bs) {
        kern_repack(w->type, ft, (const unsigned char *)w->data + off, blk, 1);
        kvh_update(&s, blk, bs);
    }
    return kvh_final(&s);
}
static uint64_t hash_vec(uint64_t h, const float *v, int64_t n) {
    if (!v) return kv_hash64("-", 1, h);
    return kv_hash64(v, sizeof(float) * (size_t)n, h);
}

static uint64_t weights_hash(const struct nx_model *m) {
    const struct nx_hparams *hp = &m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    uint64_t h = hash_weight(0, &m->tok_embd);
    h = hash_weight(h, &m->output);
    h = hash_vec(h, m->output_norm, hp->n_embd);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        h = hash_vec(h, L->attn_norm, hp->n_embd);
        h = hash_weight(h, &L->wq);
        h = hash_weight(h, &L->wk);
        h = hash_weight(h, &L->wv);
        h = hash_weight(h, &L->wo);
        h = hash_vec(h, L->bq, qd);
        h = hash_vec(h, L->bk, kvd);
        h = hash_vec(h, L->bv, kvd);
        h = hash_vec(h, L->q_norm, hp->head_dim);
        h = hash_vec(h, L->k_norm, hp->head_dim);
        h = hash_vec(h, L->ffn_norm, hp->n_embd);
        h = hash_weight(h, &L->gate);
        h = hash_weight(h, &L->up);
        h = hash_weight(h, &L->down);
    }
    return h ? h : 1; /* 0 means "not computed yet" */
}

void kv_fingerprint_of(const struct nx_model *m, struct kv_fingerprint *fp) {
    const struct nx_hparams *hp = &m->hp;
    memset(fp, 0, sizeof *fp);
    fp->arch = (uint32_t)hp->arch;
    fp->n_layer = hp->n_layer;
    fp->n_head = hp->n_head;
    fp->n_head_kv = hp->n_head_kv;
    fp->head_dim = hp->head_dim;
    fp->n_rot = hp->n_rot;
    fp->n_embd = hp->n_embd;
    fp->n_vocab = hp->n_vocab;
    fp->rope_neox = hp->rope_neox;
    fp->rope_base = hp->rope_base;
    fp->rope_freq_scale = hp->rope_freq_scale;
    fp->rope_hash = kv_hash64(m->rope_inv_freq, sizeof(float) * (size_t)(hp->n_rot / 2), 0);
    /* the model is shared and immutable: racing first users compute the same value */
    uint64_t wh = __atomic_load_n(&((struct nx_model *)m)->weight_hash, __ATOMIC_ACQUIRE);
    if (!wh) {
        wh = weights_hash(m);
        __atomic_store_n(&((struct nx_model *)m)->weight_hash, wh, __ATOMIC_RELEASE);
    }
    fp->weight_hash = wh;
}

nx_status nx_kv_block_load(const nx_model *model, const char *path, nx_kv_block **out,
                           char *errbuf, size_t errlen) {
    struct kv_fingerprint fp;
    if (model) kv_fingerprint_of(model, &fp);
    return kvblock_open(path, model ? &fp : NULL, model ? model->hp.n_vocab : 0, out, errbuf,
                        errlen);
}
