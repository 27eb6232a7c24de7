/*
 * encoder_load.c - DESIGN: loading of BERT-family encoder GGUFs ("bert", "nomic-bert") into an
 * nx_model (hp, tok_embd, vocab) plus its nx_encoder (everything else; see encoder.h for the
 * tensor names). Tensors are first bound as views into the file mapping, every shape and type
 * checked with an error naming the tensor; without use_mmap the bound tensors are then copied
 * into one anonymous mapping (m->weight_buf) and the views moved there, so the file can be
 * closed. Never asserts on file contents.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "gguf/gguf.h"
#include "kern/types.h"
#include "model/encoder.h"
#include "tok/tok.h"

bool encoder_is_encoder_arch(const char *arch, size_t len) {
    return (len == 4 && memcmp(arch, "bert", 4) == 0) ||
           (len == 10 && memcmp(arch, "nomic-bert", 10) == 0);
}

/* ---- metadata ---- */

/* Encoder keys may be 0 (checked where they are used). */
static nx_status key_i32(const struct gguf_file *f, const char *arch, const char *suffix,
                         int32_t *out, bool required, struct nx_err *err) {
    return model_key_i32(f, arch, suffix, out, required, 0, err);
}

static nx_status load_hparams(const struct gguf_file *f, const char *arch, struct nx_model *m,
                              struct nx_encoder *enc, struct nx_err *err) {
    struct nx_hparams *hp = &m->hp;
    nx_status st;
    hp->n_ctx_train = enc->nomic ? 2048 : 0;
    if ((st = key_i32(f, arch, "embedding_length", &hp->n_embd, true, err)) ||
        (st = key_i32(f, arch, "block_count", &hp->n_layer, true, err)) ||
        (st = key_i32(f, arch, "feed_forward_length", &hp->n_ff, true, err)) ||
        (st = key_i32(f, arch, "attention.head_count", &hp->n_head, true, err)) ||
        (st = key_i32(f, arch, "context_length", &hp->n_ctx_train, !enc->nomic, err)))
        return st;
    if (hp->n_embd < 1 || hp->n_layer < 1 || hp->n_ff < 1 || hp->n_head < 1 ||
        hp->n_ctx_train < 1)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "%s: embedding_length, block_count, feed_forward_length, head_count and "
                          "context_length must be positive", arch);
    if (hp->n_layer > 4096 || hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) ||
        hp->n_head > 4096 || hp->n_ctx_train > (1 << 24))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: implausible model dimensions", arch);
    hp->n_head_kv = hp->n_head;
    if ((st = key_i32(f, arch, "attention.head_count_kv", &hp->n_head_kv, false, err))) return st;
    if (hp->n_head_kv != hp->n_head)
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "%s.attention.head_count_kv (%d) differs from head_count (%d): encoders "
                          "with grouped-query attention are not supported", arch, hp->n_head_kv,
                          hp->n_head);
    if (hp->n_embd % hp->n_head != 0)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "%s.embedding_length (%d) is not a multiple of head_count (%d)", arch,
                          hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = enc->nomic ? hp->head_dim : 0;
    if (enc->nomic) {
        if ((st = key_i32(f, arch, "rope.dimension_count", &hp->n_rot, false, err))) return st;
        if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
            return nx_err_set(err, NX_STATUS_FORMAT,
                              "%s.rope.dimension_count (%d) must be even and <= head size (%d)",
                              arch, hp->n_rot, hp->head_dim);
    }
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", arch);
    if (gguf_find_key(f, key) < 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "missing metadata key '%s'", key);
    if (!gguf_get_f32(f, key, &enc->eps) || !(enc->eps > 0) || !(enc->eps < 1))
        return nx_err_set(err, NX_STATUS_FORMAT, "metadata key '%s' must be a float in (0, 1)",
                          key);
    hp->rms_eps = enc->eps;
    snprintf(key, sizeof key, "%s.attention.causal", arch);
    bool causal = false;
    if (gguf_find_key(f, key) >= 0 && (!gguf_get_bool(f, key, &causal) || causal))
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "metadata key '%s' must be false: causal encoders are not supported",
                          key);
    hp->rope_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_neox = enc->nomic;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if (enc->nomic && gguf_find_key(f, key) >= 0 &&
        (!gguf_get_f32(f, key, &hp->rope_base) || !(hp->rope_base > 1.0f)))
        return nx_err_set(err, NX_STATUS_FORMAT, "metadata key '%s' must be a float > 1", key);
    enc->pooling = -1; /* decided after the tensors: RANK when a head is present */
    int32_t pool;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    if (gguf_find_key(f, key) >= 0) {
        if (!gguf_get_i32(f, key, &pool) || pool < 0 || pool > 4)
            return nx_err_set(err, NX_STATUS_FORMAT,
                              "metadata key '%s' must be 0..4 (none, mean, cls, last, rank)", key);
        enc->pooling = pool;
    }
    return NX_STATUS_OK;
}

/* ---- tensor binding ---- */

struct ebind {
    const struct gguf_file *f;
    struct nx_err *err;
    nx_status st;
    /* bound tensors and where their data pointer lives (one of the two slots is set) */
    struct eslot {
        const struct gguf_tensor *t;
        const void **w; /* nx_weight.data */
        const float **v; /* F32 vector */
    } *slots;
    int n, cap;
};

static void eb_record(struct ebind *b, const struct gguf_tensor *t, const void **w,
                      const float **v) {
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        struct eslot *s = nx_realloc(b->slots, (size_t)cap * sizeof *s);
        if (!s) {
            b->st = nx_err_set(b->err, NX_STATUS_NOMEM, "out of memory");
            return;
        }
        b->slots = s;
        b->cap = cap;
    }
    b->slots[b->n++] = (struct eslot){t, w, v};
}

static const struct gguf_tensor *eb_find(struct ebind *b, const char *name, bool required) {
    if (b->st) return NULL;
    const struct gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t && required) b->st = nx_err_set(b->err, NX_STATUS_FORMAT, "missing tensor '%s'", name);
    return t;
}

static const float *eb_vec(struct ebind *b, const char *name, int64_t n, bool required,
                           const float **slot) {
    const struct gguf_tensor *t = eb_find(b, name, required);
    if (!t || (b->st = model_check_vec(t, name, n, b->err)) != NX_STATUS_OK) return NULL;
    *slot = t->data;
    eb_record(b, t, NULL, slot);
    return t->data;
}

static void eb_mat(struct ebind *b, struct nx_weight *w, const char *name, int64_t ne0,
                   int64_t ne1, bool required) {
    const struct gguf_tensor *t = eb_find(b, name, required);
    if (!t || (b->st = model_check_mat(t, name, ne0, ne1, w, b->err)) != NX_STATUS_OK) return;
    w->data = t->data;
    eb_record(b, t, &w->data, NULL);
}

#define VEC(b, slot, name, n, req) eb_vec(b, name, n, req, &(slot))

static nx_status bind_all(struct ebind *b, struct nx_model *m, struct nx_encoder *enc) {
    const struct nx_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    char name[96];
    eb_mat(b, &m->tok_embd, "token_embd.weight", E, 0, true);
    eb_mat(b, &enc->type_embd, "token_types.weight", E, 0, false);
    if (!enc->nomic) eb_mat(b, &enc->pos_embd, "position_embd.weight", E, 0, true);
    VEC(b, enc->tok_norm_w, "token_embd_norm.weight", E, true);
    VEC(b, enc->tok_norm_b, "token_embd_norm.bias", E, true);
    if (!enc->nomic) {
        eb_mat(b, &enc->cls, "cls.weight", E, E, false);
        VEC(b, enc->cls_b, "cls.bias", E, enc->cls.data != NULL);
        eb_mat(b, &enc->cls_out, "cls.output.weight", E, 0, false);
        if (!b->st && enc->cls_out.data) {
            VEC(b, enc->cls_out_b, "cls.output.bias", enc->cls_out.ne1, true);
            if (!b->st && !enc->cls.data)
                b->st = nx_err_set(b->err, NX_STATUS_UNSUPPORTED,
                                   "tensor 'cls.output.weight' without 'cls.weight': a "
                                   "classification head without its dense layer is not "
                                   "supported");
        }
    }
    for (int il = 0; il < hp->n_layer && !b->st; il++) {
        struct nx_enc_layer *L = &enc->layers[il];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
        if (gguf_find_tensor(b->f, NAME("attn_qkv.weight"))) {
            eb_mat(b, &L->wqkv, NAME("attn_qkv.weight"), E, 3 * E, true);
            VEC(b, L->bqkv, NAME("attn_qkv.bias"), 3 * E, false);
        } else {
            eb_mat(b, &L->wq, NAME("attn_q.weight"), E, E, true);
            eb_mat(b, &L->wk, NAME("attn_k.weight"), E, E, true);
            eb_mat(b, &L->wv, NAME("attn_v.weight"), E, E, true);
            VEC(b, L->bq, NAME("attn_q.bias"), E, false);
            VEC(b, L->bk, NAME("attn_k.bias"), E, false);
            VEC(b, L->bv, NAME("attn_v.bias"), E, false);
        }
        eb_mat(b, &L->wo, NAME("attn_output.weight"), E, E, true);
        VEC(b, L->bo, NAME("attn_output.bias"), E, false);
        VEC(b, L->attn_norm_w, NAME("attn_output_norm.weight"), E, true);
        VEC(b, L->attn_norm_b, NAME("attn_output_norm.bias"), E, true);
        eb_mat(b, &L->up, NAME("ffn_up.weight"), E, F, true);
        VEC(b, L->bup, NAME("ffn_up.bias"), F, false);
        if (enc->nomic) eb_mat(b, &L->gate, NAME("ffn_gate.weight"), E, F, true);
        eb_mat(b, &L->down, NAME("ffn_down.weight"), F, E, true);
        VEC(b, L->bdown, NAME("ffn_down.bias"), E, false);
        VEC(b, L->out_norm_w, NAME("layer_output_norm.weight"), E, true);
        VEC(b, L->out_norm_b, NAME("layer_output_norm.bias"), E, true);
#undef NAME
    }
    return b->st;
}

/* Copy every bound tensor into one anonymous mapping and move the views there. */
static nx_status copy_weights(struct ebind *b, struct nx_model *m, struct nx_err *err) {
    size_t total = 0, data = 0;
    for (int i = 0; i < b->n; i++) {
        total = nx_align_up(total, 64) + b->slots[i].t->nbytes;
        data += b->slots[i].t->nbytes;
    }
    size_t n = nx_align_up(total ? total : 1, 4096);
    void *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return nx_err_set(err, NX_STATUS_NOMEM, "cannot allocate %zu bytes for weights", n);
    m->weight_buf = buf;
    m->weight_map_bytes = n;
    size_t off = 0;
    for (int i = 0; i < b->n; i++) {
        const struct eslot *s = &b->slots[i];
        off = nx_align_up(off, 64);
        unsigned char *dst = (unsigned char *)buf + off;
        memcpy(dst, s->t->data, s->t->nbytes);
        if (s->w) *s->w = dst;
        if (s->v) *s->v = (const float *)(void *)dst;
        off += s->t->nbytes;
    }
    m->weight_bytes = data;
    return NX_STATUS_OK;
}

nx_status encoder_load(const struct gguf_file *f, struct nx_model *m, bool use_mmap,
                       struct nx_err *err) {
    const char *s;
    size_t len;
    if (!gguf_get_str(f, "general.architecture", &s, &len) || !encoder_is_encoder_arch(s, len))
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "not an encoder architecture");
    char arch[16];
    memcpy(arch, s, len);
    arch[len] = 0;
    struct nx_encoder *enc = nx_calloc(1, sizeof *enc);
    if (!enc) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
    m->enc = enc;
    enc->nomic = len == 10;
    m->hp.arch = enc->nomic ? NX_ARCH_NOMIC_BERT : NX_ARCH_BERT;
    nx_status st = load_hparams(f, arch, m, enc, err);
    if (st) return st;
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) return nx_err_set(err, NX_STATUS_FORMAT, "missing tensor 'token_embd.weight'");
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX)
        return nx_err_set(err, NX_STATUS_FORMAT, "tensor 'token_embd.weight': bad vocab size");
    m->hp.n_vocab = (int32_t)te->ne[1];
    if ((st = vocab_load(f, &m->vocab, err))) return st;
    if (vocab_n_tokens(m->vocab) > m->hp.n_vocab)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "tokenizer has %d tokens but token_embd.weight has %d rows",
                          vocab_n_tokens(m->vocab), m->hp.n_vocab);
    enc->layers = nx_calloc((size_t)m->hp.n_layer, sizeof *enc->layers);
    if (!enc->layers) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
    struct ebind b = {.f = f, .err = err};
    st = bind_all(&b, m, enc);
    if (!st && !enc->nomic && enc->pos_embd.ne1 < m->hp.n_ctx_train)
        st = nx_err_set(err, NX_STATUS_FORMAT,
                        "tensor 'position_embd.weight' has %lld rows, fewer than %s.context_length"
                        " (%d)", (long long)enc->pos_embd.ne1, arch, m->hp.n_ctx_train);
    if (!st) {
        enc->n_types = enc->type_embd.data ? (int32_t)enc->type_embd.ne1 : 0;
        enc->n_cls_out = enc->cls_out.data ? (int32_t)enc->cls_out.ne1 : 0;
        enc->n_max_tokens = m->hp.n_ctx_train;
        if (enc->pooling < 0) enc->pooling = enc->n_cls_out > 0 ? 4 : 1; /* rank : mean */
        if (enc->pooling == 4 && enc->n_cls_out == 0)
            st = nx_err_set(err, NX_STATUS_FORMAT,
                            "%s.pooling_type is rank but the file has no classification head "
                            "(cls.weight, cls.output.weight)", arch);
    }
    if (!st) {
        if (use_mmap) {
            for (int i = 0; i < gguf_n_tensors(f); i++) m->weight_bytes += gguf_tensor(f, i)->nbytes;
        } else {
            st = copy_weights(&b, m, err);
        }
    }
    nx_free(b.slots);
    if (st) return st;
    const struct nx_weight *w0 = enc->layers[0].wqkv.data ? &enc->layers[0].wqkv
                                                          : &enc->layers[0].wq;
    const char *tn = nx_type_name(w0->type);
    static const char *const pool_names[] = {"none", "mean", "cls", "last", "rank"};
    snprintf(m->desc, sizeof m->desc, "%s %dL %dd %dh ff%d %s vocab %d, %s pooling%s", arch,
             m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_ff, tn ? tn : "?",
             m->hp.n_vocab, pool_names[enc->pooling], enc->n_cls_out ? ", classifier head" : "");
    /* encoders have no decoder contexts: nx_ctx_init refuses models without decoder weights */
    m->vocab_only = true;
    return NX_STATUS_OK;
}

void encoder_free(struct nx_encoder *enc) {
    if (!enc) return;
    nx_free(enc->layers);
    nx_free(enc);
}
