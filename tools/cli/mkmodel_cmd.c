/*
 * mkmodel_cmd.c - `nexus mkmodel`: parse the flags into struct mkmodel_params, write the model
 * (src/model/mkmodel.c) and print a one-line summary read back with the GGUF reader.
 */
#include "mkmodel_cmd.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core/nx_base.h"
#include "gguf/gguf.h"
#include "kern/types.h"
#include "model/mkmodel.h"

static void mk_usage(FILE *f) {
    fprintf(f,
            "usage: nexus mkmodel -o OUT.gguf [options]\n"
            "  --preset NAME      tiny (default) | llama-3.2-1b (applied first; options override)\n"
            "  --arch A           llama | mistral | qwen2 | qwen3 | bert | nomic-bert\n"
            "  --rerank           bert: add the classification head (cls, cls.output; rank pooling)\n"
            "  --qkv-fused        bert: one attn_qkv tensor instead of attn_q/k/v\n"
            "  --pooling P        encoders: mean (default) | cls\n"
            "  --layers N  --embd N  --heads N  --heads-kv N  --head-dim N  --ff N\n"
            "  --vocab N          (default with --tokenizer: its token count)\n"
            "  --ctx N            trained context length (metadata only)\n"
            "  --type T           f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m\n"
            "  --seed S           same seed, same bytes\n"
            "  --tied             no output.weight (token_embd reused)\n"
            "  --llama3-rope      write rope_freqs.weight (Llama-3.1 rope scaling)\n"
            "  --rope-base F      0 = omit the key (engine default 10000)\n"
            "  --eps F            RMSNorm epsilon\n"
            "  --tokenizer GGUF   copy tokenizer.* keys from this file\n"
            "  --scale F          weight standard deviation multiplier\n"
            "  --threads N        generation threads (default: all CPUs)\n"
            "  --name S           general.name\n"
            "  -q, --quiet        no progress\n");
}

/* Print a one-paragraph summary of the written file (read back with the GGUF reader). */
static void mk_summary(const char *path, double secs) {
    struct gguf_file *f = NULL;
    struct nx_err err;
    if (gguf_open(path, &f, &err) != NX_STATUS_OK) {
        fprintf(stderr, "mkmodel: warning: cannot read back %s: %s\n", path, err.msg);
        return;
    }
    int count[NX_TYPE_COUNT] = {0};
    uint64_t params = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if ((int)t->type >= 0 && (int)t->type < NX_TYPE_COUNT) count[t->type]++;
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    const char *arch = "?";
    size_t alen = 1;
    gguf_get_str(f, "general.architecture", &arch, &alen);
    printf("wrote %s: %.*s, %lld tensors, %.2f M parameters, %.1f MiB, %.1f s; types:", path,
           (int)alen, arch, (long long)gguf_n_tensors(f), (double)params / 1e6,
           (double)gguf_file_size(f) / (1024.0 * 1024.0), secs);
    for (int t = 0; t < NX_TYPE_COUNT; t++) {
        if (count[t]) printf(" %s x%d", nx_type_name((enum nx_type)t), count[t]);
    }
    printf("\n");
    gguf_close(f);
}

int mkmodel_main(int argc, char **argv) {
    struct mkmodel_params p;
    struct nx_err err;
    mkmodel_default_params(&p);
    p.progress = true;
    const char *out = NULL, *preset = NULL;

    /* presets first, so that explicit options override them */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) {
            if (mkmodel_preset(&p, argv[i + 1], &err) != NX_STATUS_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 2;
            }
            p.progress = true;
        }
    }
    static const char *const poolings[] = {"mean", "cls", NULL};
    int pooling = 0;
    bool quiet = false, vocab_seen = false, pooling_seen = false;
    const struct arg tab[] = {
        A_STR("-o", "--output", &out),
        A_STR("--preset", NULL, &preset),
        A_STR("--arch", NULL, &p.arch),
        A_FLAG("--tied", NULL, &p.tied_output),
        A_FLAG("--rerank", NULL, &p.rerank),
        A_FLAG("--qkv-fused", NULL, &p.qkv_fused),
        A_FLAG("--llama3-rope", NULL, &p.llama3_rope_scaling),
        A_FLAG("-q", "--quiet", &quiet),
        A_INT("--layers", NULL, &p.n_layer, 0, 1 << 30),
        A_INT("--embd", NULL, &p.n_embd, 0, 1 << 30),
        A_INT("--heads", NULL, &p.n_head, 0, 1 << 30),
        A_INT("--heads-kv", NULL, &p.n_head_kv, 0, 1 << 30),
        A_INT("--head-dim", NULL, &p.head_dim, 0, 1 << 30),
        A_INT("--ff", NULL, &p.n_ff, 0, 1 << 30),
        A_INT("--vocab", NULL, &p.n_vocab, 0, 1 << 30, .seen = &vocab_seen),
        A_INT("--ctx", NULL, &p.n_ctx_train, 0, 1 << 30),
        A_STR("--type", NULL, &p.wtype),
        A_U64("--seed", NULL, &p.seed, 0, 0),
        A_FLOAT("--rope-base", NULL, &p.rope_base),
        A_FLOAT("--eps", NULL, &p.rms_eps),
        A_FLOAT("--scale", NULL, &p.weight_scale),
        A_INT("--threads", NULL, &p.n_threads, 0, 1 << 30),
        A_STR("--tokenizer", NULL, &p.tokenizer_from),
        A_STR("--name", NULL, &p.name),
        A_CHOICE("--pooling", NULL, &pooling, poolings, .seen = &pooling_seen),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int rc = args_parse(tabs, argc, argv, 1, "mkmodel", true, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        mk_usage(stdout);
        return 0;
    }
    if (rc != ARGS_OK) {
        mk_usage(stderr);
        return 2;
    }
    if (quiet) p.progress = false;
    if (pooling_seen) p.pooling = pooling == 1 ? 2 : 1;
    /* the synthetic default vocab size does not apply to a copied tokenizer */
    if (p.tokenizer_from && !vocab_seen) p.n_vocab = 0;
    if (!out) {
        fprintf(stderr, "mkmodel: -o OUT is required\n");
        mk_usage(stderr);
        return 2;
    }
    double t0 = nx_time_s();
    if (mkmodel_write(&p, out, &err) != NX_STATUS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mk_summary(out, nx_time_s() - t0);
    return 0;
}
