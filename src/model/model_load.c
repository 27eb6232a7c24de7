/*
 * model_load.c - DESIGN: nx_model_load turns a validated GGUF file (gguf.c did every bounds
 * check) into an nx_model: hyperparameters from ARCH.* keys, shape-checked weight views, the
 * RoPE frequency table, and the vocab. By default tensor data is copied into one anonymous,
 * huge-page-advised buffer (streaming from ordinary memory is faster and steadier than from a
 * file mapping) and the file is closed; with use_mmap the views point into the read-only
 * mapping, which stays open for the model's life. Every failure names the key or tensor.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "kern/types.h"
#include "model/encoder.h"
#include "model/model.h"
#include "tok/tok.h"

static const char *arch_name(enum nx_arch a) {
    switch (a) {
    case NX_ARCH_LLAMA: return "llama";
    case NX_ARCH_MISTRAL: return "mistral";
    case NX_ARCH_QWEN2: return "qwen2";
    case NX_ARCH_QWEN3: return "qwen3";
    case NX_ARCH_BERT: return "bert";
    case NX_ARCH_NOMIC_BERT: return "nomic-bert";
    }
    return "?";
}

nx_status model_key_i32(const struct gguf_file *f, const char *arch, const char *suffix,
                        int32_t *out, bool required, int32_t min, struct nx_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_key(f, key) < 0) {
        if (!required) return NX_STATUS_OK;
        return nx_err_set(err, NX_STATUS_FORMAT, "missing metadata key '%s'", key);
    }
    int32_t v;
    if (!gguf_get_i32(f, key, &v) || v < min)
        return nx_err_set(err, NX_STATUS_FORMAT, "metadata key '%s' must be a %s integer", key,
                          min > 0 ? "positive" : "non-negative");
    *out = v;
    return NX_STATUS_OK;
}

/* Decoder keys are positive. */
static nx_status get_i32_key(const struct gguf_file *f, const char *arch, const char *suffix,
                             int32_t *out, bool required, struct nx_err *err) {
    return model_key_i32(f, arch, suffix, out, required, 1, err);
}

static nx_status load_hparams(const struct gguf_file *f, struct nx_hparams *hp,
                              struct nx_err *err) {
    const char *s;
    size_t len;
    if (!gguf_get_str(f, "general.architecture", &s, &len))
        return nx_err_set(err, NX_STATUS_FORMAT, "missing metadata key 'general.architecture'");
    char arch[32];
    if (len >= sizeof arch) len = sizeof arch - 1;
    memcpy(arch, s, len);
    arch[len] = 0;
    if (strcmp(arch, "llama") == 0)
        hp->arch = NX_ARCH_LLAMA;
    else if (strcmp(arch, "mistral") == 0)
        hp->arch = NX_ARCH_MISTRAL;
    else if (strcmp(arch, "qwen2") == 0)
        hp->arch = NX_ARCH_QWEN2;
    else if (strcmp(arch, "qwen3") == 0)
        hp->arch = NX_ARCH_QWEN3;
    else
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "unsupported architecture '%s' (supported: llama, mistral, qwen2, qwen3, "
                          "bert, nomic-bert)",
                          arch);
    nx_status st;
    if ((st = get_i32_key(f, arch, "embedding_length", &hp->n_embd, true, err))) return st;
    if ((st = get_i32_key(f, arch, "block_count", &hp->n_layer, true, err))) return st;
    if ((st = get_i32_key(f, arch, "feed_forward_length", &hp->n_ff, true, err))) return st;
    if ((st = get_i32_key(f, arch, "attention.head_count", &hp->n_head, true, err))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = get_i32_key(f, arch, "attention.head_count_kv", &hp->n_head_kv, false, err)))
        return st;
    hp->n_ctx_train = 2048;
    if ((st = get_i32_key(f, arch, "context_length", &hp->n_ctx_train, false, err))) return st;
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = get_i32_key(f, arch, "attention.key_length", &hp->head_dim, false, err))) return st;
    int32_t vlen = hp->head_dim;
    if ((st = get_i32_key(f, arch, "attention.value_length", &vlen, false, err))) return st;
    if (vlen != hp->head_dim)
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "%s.attention.value_length (%d) differs from key_length (%d)", arch,
                          vlen, hp->head_dim);
    hp->n_rot = hp->head_dim;
    if ((st = get_i32_key(f, arch, "rope.dimension_count", &hp->n_rot, false, err))) return st;
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "%s.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                          arch, hp->n_head, hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0 || hp->head_dim % 2 != 0)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "%s.rope.dimension_count (%d) must be even and <= head size (%d)", arch,
                          hp->n_rot, hp->head_dim);
    if (hp->n_layer > 4096 || hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) ||
        hp->head_dim > 4096 || hp->n_head > 4096)
        return nx_err_set(err, NX_STATUS_FORMAT, "implausible model dimensions");
    char key[128];
    hp->rms_eps = 1e-5f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (gguf_find_key(f, key) >= 0 && (!gguf_get_f32(f, key, &hp->rms_eps) || !(hp->rms_eps > 0)))
        return nx_err_set(err, NX_STATUS_FORMAT, "metadata key '%s' must be a positive float", key);
    hp->rope_base = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if (gguf_find_key(f, key) >= 0 &&
        (!gguf_get_f32(f, key, &hp->rope_base) || !(hp->rope_base > 1.0f)))
        return nx_err_set(err, NX_STATUS_FORMAT, "metadata key '%s' must be a float > 1", key);
    hp->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(f, key, &s, &len) && !(len == 4 && memcmp(s, "none", 4) == 0)) {
        if (!(len == 6 && memcmp(s, "linear", 6) == 0))
            return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                              "rope scaling type '%.*s' is not supported (none, linear)", (int)len,
                              s);
        float factor = 1.0f;
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        if (gguf_get_f32(f, key, &factor) && factor > 0) hp->rope_freq_scale = 1.0f / factor;
    } else {
        float factor;
        snprintf(key, sizeof key, "%s.rope.scale_linear", arch);
        if (gguf_get_f32(f, key, &factor) && factor > 0) hp->rope_freq_scale = 1.0f / factor;
    }
    hp->rope_neox = hp->arch == NX_ARCH_QWEN2 || hp->arch == NX_ARCH_QWEN3;
    return NX_STATUS_OK;
}

/* Tensor binding: look up, check type and shape, and record where its bytes will live. */
struct binder {
    const struct gguf_file *f;
    struct nx_err *err;
    nx_status st;
    bool use_mmap;
    unsigned char *buf; /* NULL on the sizing pass */
    size_t used;
};

/* Copies (or with mmap, points at) tensor t; `layout` is the in-memory type its blocks are
 * rewritten to (kern_weight_layout), t->type to copy as is. */
static const void *bind_data_as(struct binder *b, const struct gguf_tensor *t, enum nx_type layout) {
    if (b->use_mmap) return t->data;
    size_t off = nx_align_up(b->used, 64);
    b->used = off + t->nbytes;
    if (!b->buf) return NULL;
    if (layout != t->type) {
        kern_relayout(t->type, layout, t->data, b->buf + off, t->ne[0], t->ne[1]);
    } else {
        memcpy(b->buf + off, t->data, t->nbytes);
    }
    /* drop the copied file pages from this process (they stay in the page cache), so the peak
       resident size is the weights once, not twice */
    uintptr_t lo = ((uintptr_t)t->data + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~(uintptr_t)4095;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return b->buf + off;
}

static const void *bind_data(struct binder *b, const struct gguf_tensor *t) {
    return bind_data_as(b, t, t->type);
}

static const struct gguf_tensor *find(struct binder *b, const char *name, bool required) {
    if (b->st) return NULL;
    const struct gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t && required)
        b->st = nx_err_set(b->err, NX_STATUS_FORMAT, "missing tensor '%s'", name);
    return t;
}

nx_status model_check_vec(const struct gguf_tensor *t, const char *name, int64_t n,
                          struct nx_err *err) {
    if (t->type != NX_TYPE_F32 || t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != 1) {
        const char *tn = nx_type_name(t->type);
        return nx_err_set(err, NX_STATUS_FORMAT, "tensor '%s': expected F32 [%lld], got %s [%lld, %lld]",
                          name, (long long)n, tn ? tn : "?", (long long)t->ne[0], (long long)t->ne[1]);
    }
    return NX_STATUS_OK;
}

nx_status model_check_mat(const struct gguf_tensor *t, const char *name, int64_t ne0,
                          int64_t ne1, struct nx_weight *w, struct nx_err *err) {
    if (t->ne[0] != ne0 || (ne1 > 0 && t->ne[1] != ne1) || t->ne[1] < 1 ||
        t->ne[2] * t->ne[3] != 1)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "tensor '%s': expected shape [%lld, %lld], got [%lld, %lld, %lld]", name,
                          (long long)ne0, (long long)ne1, (long long)t->ne[0],
                          (long long)t->ne[1], (long long)t->ne[2]);
    const char *tn = nx_type_name(t->type);
    if (!nx_type_supported(t->type))
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "tensor '%s': weight type %s is not supported (F32 F16 BF16 Q8_0 Q4_0 "
                          "Q4_K Q5_K Q6_K)", name, tn ? tn : "?");
    if (!nx_row_bytes(t->type, ne0, &w->row_bytes))
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "tensor '%s': row length %lld is not a multiple of the %s block size",
                          name, (long long)ne0, tn);
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = t->ne[1];
    return NX_STATUS_OK;
}

static const float *bind_vec(struct binder *b, const char *name, int64_t n, bool required) {
    const struct gguf_tensor *t = find(b, name, required);
    if (!t || (b->st = model_check_vec(t, name, n, b->err)) != NX_STATUS_OK) return NULL;
    return bind_data(b, t);
}

static void bind_mat(struct binder *b, struct nx_weight *w, const char *name, int64_t ne0,
                     int64_t ne1, bool required) {
    const struct gguf_tensor *t = find(b, name, required);
    if (!t || (b->st = model_check_mat(t, name, ne0, ne1, w, b->err)) != NX_STATUS_OK) return;
    /* weights copied into memory take the kernels' preferred layout (same size, kern.h) */
    if (!b->use_mmap) w->type = kern_weight_layout(t->type, w->ne0, w->ne1);
    w->data = bind_data_as(b, t, w->type);
}

static nx_status bind_all(struct binder *b, struct nx_model *m) {
    const struct nx_hparams *hp = &m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    bind_mat(b, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, true);
    m->output_norm = bind_vec(b, "output_norm.weight", hp->n_embd, true);
    if (!b->st && gguf_find_tensor(b->f, "output.weight"))
        bind_mat(b, &m->output, "output.weight", hp->n_embd, hp->n_vocab, true);
    else
        m->output = m->tok_embd;
    for (int il = 0; il < hp->n_layer && !b->st; il++) {
        struct nx_layer *L = &m->layers[il];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
        L->attn_norm = bind_vec(b, NAME("attn_norm.weight"), hp->n_embd, true);
        bind_mat(b, &L->wq, NAME("attn_q.weight"), hp->n_embd, qd, true);
        bind_mat(b, &L->wk, NAME("attn_k.weight"), hp->n_embd, kvd, true);
        bind_mat(b, &L->wv, NAME("attn_v.weight"), hp->n_embd, kvd, true);
        bind_mat(b, &L->wo, NAME("attn_output.weight"), qd, hp->n_embd, true);
        bool bias = hp->arch == NX_ARCH_QWEN2;
        L->bq = bind_vec(b, NAME("attn_q.bias"), qd, bias);
        L->bk = bind_vec(b, NAME("attn_k.bias"), kvd, bias);
        L->bv = bind_vec(b, NAME("attn_v.bias"), kvd, bias);
        bool qk_norm = hp->arch == NX_ARCH_QWEN3;
        L->q_norm = bind_vec(b, NAME("attn_q_norm.weight"), hp->head_dim, qk_norm);
        L->k_norm = bind_vec(b, NAME("attn_k_norm.weight"), hp->head_dim, qk_norm);
        L->ffn_norm = bind_vec(b, NAME("ffn_norm.weight"), hp->n_embd, true);
        bind_mat(b, &L->gate, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, true);
        bind_mat(b, &L->up, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, true);
        bind_mat(b, &L->down, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, true);
#undef NAME
    }
    return b->st;
}

static nx_status build_rope(const struct gguf_file *f, struct nx_model *m, struct nx_err *err) {
    const struct nx_hparams *hp = &m->hp;
    int half = hp->n_rot / 2;
    m->rope_inv_freq = nx_malloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    if (!m->rope_inv_freq) return NX_STATUS_NOMEM;
    const struct gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    if (rf && (rf->type != NX_TYPE_F32 || rf->ne[0] != half || rf->ne[1] != 1))
        return nx_err_set(err, NX_STATUS_FORMAT, "tensor 'rope_freqs.weight': expected F32 [%d]",
                          half);
    for (int i = 0; i < half; i++) {
        double inv = pow((double)hp->rope_base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale;
        if (rf) {
            float div;
            memcpy(&div, (const char *)rf->data + 4 * (size_t)i, 4);
            if (!(div > 0))
                return nx_err_set(err, NX_STATUS_FORMAT,
                                  "tensor 'rope_freqs.weight': element %d is not positive", i);
            inv /= div;
        }
        m->rope_inv_freq[i] = (float)inv;
    }
    return NX_STATUS_OK;
}

struct nx_model_params nx_model_default_params(void) {
    struct nx_model_params p = {.use_mmap = false};
    return p;
}

static void copy_err(const struct nx_err *e, char *err, size_t errlen) {
    if (err && errlen > 0) snprintf(err, errlen, "%s", e->msg);
}

nx_status nx_model_load(const char *path, const struct nx_model_params *params, nx_model **out,
                        char *errbuf, size_t errlen) {
    struct nx_model_params p = params ? *params : nx_model_default_params();
    struct nx_err e = {{0}};
    struct nx_err *err = &e;
    *out = NULL;
    kern_init();
    struct gguf_file *f = NULL;
    nx_status st = gguf_open(path, &f, err);
    if (st) goto fail;
    struct nx_model *m = nx_calloc(1, sizeof *m);
    if (!m) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
        goto fail_close;
    }
    const char *tmpl_s;
    size_t tmpl_len;
    if (gguf_get_str(f, "tokenizer.chat_template", &tmpl_s, &tmpl_len)) {
        m->chat_template = nx_malloc(tmpl_len + 1);
        if (!m->chat_template) {
            st = nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
            goto fail_model;
        }
        memcpy(m->chat_template, tmpl_s, tmpl_len);
        m->chat_template[tmpl_len] = 0;
    }
    if (gguf_n_tensors(f) == 0) {
        /* a vocabulary-only file (tokenizer metadata, no weights): usable for tokenizing */
        if ((st = vocab_load(f, &m->vocab, err))) goto fail_model;
        m->vocab_only = true;
        m->hp.n_vocab = vocab_n_tokens(m->vocab);
        snprintf(m->desc, sizeof m->desc, "vocabulary only, %d tokens", m->hp.n_vocab);
        gguf_close(f);
        *out = m;
        return NX_STATUS_OK;
    }
    const char *arch_s;
    size_t arch_len;
    if (gguf_get_str(f, "general.architecture", &arch_s, &arch_len) &&
        encoder_is_encoder_arch(arch_s, arch_len)) {
        /* BERT-family encoders: their own loader (model/encoder_load.c) */
        if ((st = encoder_load(f, m, p.use_mmap, err))) goto fail_model;
        if (p.use_mmap) m->gguf = f;
        else gguf_close(f);
        *out = m;
        return NX_STATUS_OK;
    }
    if ((st = load_hparams(f, &m->hp, err))) goto fail_model;
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) {
        st = nx_err_set(err, NX_STATUS_FORMAT, "missing tensor 'token_embd.weight'");
        goto fail_model;
    }
    m->hp.n_vocab = (int32_t)te->ne[1];
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX) {
        st = nx_err_set(err, NX_STATUS_FORMAT, "tensor 'token_embd.weight': bad vocab size");
        goto fail_model;
    }
    if ((st = vocab_load(f, &m->vocab, err))) goto fail_model;
    if (vocab_n_tokens(m->vocab) != m->hp.n_vocab) {
        if (vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
            st = nx_err_set(err, NX_STATUS_FORMAT,
                            "tokenizer has %d tokens but token_embd.weight has %d rows",
                            vocab_n_tokens(m->vocab), m->hp.n_vocab);
            goto fail_model;
        }
        NX_LOGW("tokenizer has %d tokens, model %d rows (padding rows are never produced)",
                vocab_n_tokens(m->vocab), m->hp.n_vocab);
    }
    m->layers = nx_calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
        goto fail_model;
    }
    struct binder b = {.f = f, .err = err, .use_mmap = p.use_mmap};
    if ((st = bind_all(&b, m))) goto fail_model;
    if (!p.use_mmap) {
        size_t n = nx_align_up(b.used, 1 << 21);
        if (n == 0) n = 4096;
        void *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            st = nx_err_set(err, NX_STATUS_NOMEM, "cannot allocate %zu bytes for weights", n);
            goto fail_model;
        }
        nx_advise_huge(buf, n);
        m->weight_buf = buf;
        m->weight_map_bytes = n;
        b.buf = buf;
        b.used = 0;
        if ((st = bind_all(&b, m))) goto fail_model;
        m->weight_bytes = b.used;
    } else {
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) m->weight_bytes += gguf_tensor(f, i)->nbytes;
    }
    if ((st = build_rope(f, m, err))) goto fail_model;
    const char *tn = nx_type_name(nx_type_in_file(m->layers[0].wq.type));
    snprintf(m->desc, sizeof m->desc, "%s %dL %dd %dh/%dkv hd%d ff%d %s vocab %d",
             arch_name(m->hp.arch), m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv,
             m->hp.head_dim, m->hp.n_ff, tn ? tn : "?", m->hp.n_vocab);
    if (p.use_mmap) {
        m->gguf = f;
    } else {
        gguf_close(f);
    }
    *out = m;
    return NX_STATUS_OK;
fail_model:
    m->gguf = NULL;
    nx_model_free(m);
fail_close:
    gguf_close(f);
fail:
    if (st == NX_STATUS_NOMEM && !e.msg[0]) nx_err_set(err, st, "out of memory");
    copy_err(&e, errbuf, errlen);
    return st;
}

void nx_model_free(nx_model *m) {
    if (!m) return;
    if (m->weight_buf) munmap(m->weight_buf, m->weight_map_bytes);
    gguf_close(m->gguf);
    vocab_free(m->vocab);
    encoder_free(m->enc);
    nx_free(m->layers);
    nx_free(m->rope_inv_freq);
    nx_free(m->chat_template);
    nx_free(m);
}

const char *nx_model_chat_template(const nx_model *m) { return m ? m->chat_template : NULL; }

int32_t nx_model_n_vocab(const nx_model *m) { return m->hp.n_vocab; }
int32_t nx_model_n_ctx_train(const nx_model *m) { return m->hp.n_ctx_train; }
int32_t nx_model_n_embd(const nx_model *m) { return m->hp.n_embd; }
int32_t nx_model_n_layer(const nx_model *m) { return m->hp.n_layer; }
int32_t nx_model_n_head(const nx_model *m) { return m->hp.n_head; }
int32_t nx_model_n_head_kv(const nx_model *m) { return m->hp.n_head_kv; }
size_t nx_model_weight_bytes(const nx_model *m) { return m->weight_bytes; }
static size_t weight_size(const struct nx_weight *w) { return w->row_bytes * (size_t)w->ne1; }

size_t nx_model_decode_bytes(const nx_model *m) {
    if (m->enc || !m->layers) return m->weight_bytes; /* encoders: one pass reads everything */
    size_t n = weight_size(&m->output) + m->tok_embd.row_bytes;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        n += weight_size(&L->wq) + weight_size(&L->wk) + weight_size(&L->wv) +
             weight_size(&L->wo) + weight_size(&L->gate) + weight_size(&L->up) +
             weight_size(&L->down);
    }
    return n;
}

const char *nx_model_desc(const nx_model *m) { return m->desc; }
const char *nx_model_arch(const nx_model *m) {
    return m->vocab_only && !m->enc ? "" : arch_name(m->hp.arch);
}
