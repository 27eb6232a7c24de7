/*
 * probe.c - the attention probe of a context (model/context.h): per layer, the last step
 * entry's query, attention output and the positions its attention read, for the eval harness's
 * attention-level fidelity (src/eval/fidelity.c). DESIGN: the buffers are sized once, when the
 * probe is enabled (max_tokens positions per table); forward.c calls probe_capture on thread 0
 * between a layer's attention and its output projection, so the copy sees exactly what that
 * attention computed and read, and nothing in the step depends on whether the probe is on.
 */
#include <string.h>

#include "core/alloc.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "model/ctx_impl.h"
#include "model/model.h"

nx_status ctx_attn_probe_enable(nx_ctx *c) {
    if (c->probe) return NX_STATUS_OK;
    const struct nx_hparams *hp = &c->model->hp;
    struct ctx_attn_probe *p = nx_calloc(1, sizeof *p);
    if (!p) return ctx_set_error(c, NX_STATUS_NOMEM, "attention probe: out of memory");
    size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim;
    size_t tabs = (size_t)hp->n_layer * (size_t)hp->n_head_kv;
    *p = (struct ctx_attn_probe){.n_layer = hp->n_layer, .n_head = hp->n_head,
                                 .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                 .cap = c->max_tokens, .step_pos = -1};
    p->q = nx_malloc(sizeof(float) * qd * (size_t)hp->n_layer);
    p->out = nx_malloc(sizeof(float) * qd * (size_t)hp->n_layer);
    p->pos = nx_malloc(sizeof(int32_t) * tabs * (size_t)c->max_tokens);
    p->n_pos = nx_calloc(tabs, sizeof(int64_t));
    c->probe = p;
    if (!p->q || !p->out || !p->pos || !p->n_pos) {
        probe_free(c);
        return ctx_set_error(c, NX_STATUS_NOMEM,
                             "attention probe: out of memory for %zu tables of %lld positions",
                             tabs, (long long)c->max_tokens);
    }
    return NX_STATUS_OK;
}

const struct ctx_attn_probe *ctx_attn_probe_get(const nx_ctx *c) { return c->probe; }

void probe_capture(struct nx_ctx *c, int il) {
    struct ctx_attn_probe *p = c->probe;
    const struct kv_cache *kv = c->kv;
    const int64_t t = c->job_n - 1, hd = p->head_dim, qd = (int64_t)p->n_head * hd;
    const int64_t B = kv->p.block;
    memcpy(p->q + il * qd, c->q + t * qd, sizeof(float) * (size_t)qd);
    memcpy(p->out + il * qd, c->xn + t * qd, sizeof(float) * (size_t)qd);
    for (int h = 0; h < p->n_head_kv; h++) {
        const struct kv_table *tab = &kv->tables[(size_t)c->job_seq[t] * (size_t)kv->n_tables_seq +
                                                 (size_t)il * (size_t)p->n_head_kv + (size_t)h];
        int64_t ntok = tab->n_tokens - c->job_tail[t];
        int32_t *dst = p->pos + ((size_t)il * (size_t)p->n_head_kv + (size_t)h) * (size_t)p->cap;
        for (int64_t j0 = 0; j0 < ntok; j0 += B)
            memcpy(dst + j0, kv_block_pos(kv, tab->blocks[j0 / B]),
                   sizeof(int32_t) * (size_t)NX_MIN(B, ntok - j0));
        p->n_pos[il * p->n_head_kv + h] = ntok;
    }
    p->step_pos = c->job_pos[t];
}

void probe_free(struct nx_ctx *c) {
    struct ctx_attn_probe *p = c->probe;
    if (!p) return;
    nx_free(p->q);
    nx_free(p->out);
    nx_free(p->pos);
    nx_free(p->n_pos);
    nx_free(p);
    c->probe = NULL;
}
