/*
 * bpe.c - DESIGN: byte-level BPE (tokenizer.ggml.model = "gpt2"), as GPT-2, Llama 3 and Qwen2
 * use it, giving the same ids as the Hugging Face tokenizers.
 *
 *   1. Pre-tokenize: the regex (or sequence of regexes) named by tokenizer.ggml.pre splits the
 *      text into pieces; text between matches is a piece of its own (HF "isolated" split). Each
 *      regex of a sequence splits the pieces of the previous one. PCRE2 with UTF + UCP and
 *      MATCH_INVALID_UTF: invalid UTF-8 never matches and ends up in gap pieces, so every byte
 *      of the input is tokenized (and decodes back) unchanged.
 *   2. Each input byte is one symbol whose token is the GPT-2 byte-to-unicode character of that
 *      byte. Llama-3 style vocabularies first look the whole piece up (ignore_merges).
 *   3. Merge: candidates are adjacent symbol pairs (left id, right id) found in the merge table,
 *      ranked by their line in tokenizer.ggml.merges; the lowest rank (ties: leftmost) merges
 *      first, stale candidates are skipped, the two new neighbour pairs are queued. The merge
 *      table maps id pairs to (rank, merged id) in an open-addressing hash, so the loop does no
 *      string work. Merges whose parts or result are not tokens can never apply (HF refuses
 *      such vocabularies); they are counted and ignored.
 *   4. Emit the symbols' ids; a byte whose character is not a token gives UNK (or nothing).
 *
 * Pre-tokenizer names (tokenizer.ggml.pre): absent -> GPT-2 regex with a warning; an unknown
 * name -> NX_STATUS_UNSUPPORTED naming it. Tested against the reference vectors: "llama-bpe",
 * "qwen2", "gpt-2". The other names in k_pre come from the same model families' published
 * regexes and are not covered by vectors here.
 *
 * Regexes are compiled (and JIT-compiled when available) once per vocab; match data is
 * created per call, so tokenizing is thread-safe.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "tok/tok_impl.h"

#define KEY_MERGES "tokenizer.ggml.merges"
#define KEY_PRE "tokenizer.ggml.pre"
#define MAX_REGEX 3

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|" \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* A pre-tokenizer: the names that select it, its regex sequence, and whether it is Llama-3
 * style (whole-piece lookup before merging, BOS added by default). */
struct pre_def {
    const char *names[8];
    const char *re[MAX_REGEX];
    bool llama3;
};
static const struct pre_def k_pre[] = {
    {{"default", "gpt-2", "gpt2", "phi-2", "roberta-bpe", "jina-es", "jina-de", "gigachat"},
     {RE_GPT2},
     false},
    {{"jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "mpt", "olmo", "jais",
      "trillion"},
     {RE_GPT2},
     false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {RE_LLAMA3}, true},
    {{"qwen2", "deepseek-r1-qwen"}, {RE_QWEN2}, false},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
     {"\\p{N}", RE_GPT2},
     false},
    {{"gpt-4o"}, {RE_GPT4O}, false},
};

struct merge_slot {
    uint32_t key_a; /* left id + 1; 0 = empty */
    uint32_t key_b; /* right id */
    int32_t rank;
    nx_token result;
};

struct bpe_state {
    struct merge_slot *slots;
    uint64_t mask;
    pcre2_code *re[MAX_REGEX];
    int n_re;
    bool ignore_merges;
    nx_token byte_id[256]; /* token of each byte's byte-level character, -1 if none */
};

/* ------------------------------------------------------------------------------------------
 * GPT-2 byte <-> unicode map: printable bytes (33..126, 161..172, 174..255) stand for
 * themselves; the other 68 bytes map, in increasing order, to U+0100..U+0143.
 * ---------------------------------------------------------------------------------------- */

static bool byte_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* The non-printable bytes in increasing order are 0..32, 127..160 and 173. */
static uint32_t byte_to_cp(unsigned b) {
    if (byte_printable(b)) return b;
    if (b <= 32) return 256 + b;
    if (b <= 160) return 256 + 33 + (b - 127);
    return 256 + 67; /* 173 */
}

/* -1 when cp is not the image of a byte */
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
    uint32_t k = cp - 256;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(127 + k - 33);
    if (k == 67) return 173;
    return -1;
}

size_t bpe_decode_text(const char *s, size_t n, char *dst) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tok_utf8_decode(s + i, n - i, &cp);
        int b = cp_to_byte(cp);
        if (b >= 0 && len >= 1) {
            dst[out++] = (char)b; /* every image is 1-2 UTF-8 bytes: never grows */
        } else {
            memcpy(dst + out, s + i, len);
            out += len;
        }
        i += len;
    }
    return out;
}

/* ------------------------------------------------------------------------------------------
 * Merge table
 * ---------------------------------------------------------------------------------------- */

static uint64_t pair_hash(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 32) | b;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static const struct merge_slot *merge_find(const struct bpe_state *b, nx_token l, nx_token r) {
    uint64_t i = pair_hash((uint32_t)l, (uint32_t)r) & b->mask;
    for (;;) {
        const struct merge_slot *s = &b->slots[i];
        if (s->key_a == 0) return NULL;
        if (s->key_a == (uint32_t)l + 1 && s->key_b == (uint32_t)r) return s;
        i = (i + 1) & b->mask;
    }
}

static nx_status load_merges(struct nx_vocab *v, struct bpe_state *b, const struct gguf_file *f,
                             struct nx_err *err) {
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    if (gguf_find_key(f, KEY_MERGES) < 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: missing (needed by gpt2 tokenizers)",
                          KEY_MERGES);
    if (!gguf_get_arr(f, KEY_MERGES, &et, &n, &data) || et != GGUF_VTYPE_STRING)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected an array of strings", KEY_MERGES);
    if (n >= (uint64_t)INT32_MAX)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: too many merges", KEY_MERGES);
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    b->slots = nx_calloc((size_t)cap, sizeof *b->slots);
    if (!b->slots) return nx_err_set(err, NX_STATUS_NOMEM, "%s: out of memory", KEY_MERGES);
    b->mask = cap - 1;

    char *tmp = nx_malloc((size_t)v->max_len + 1);
    if (!tmp) return nx_err_set(err, NX_STATUS_NOMEM, "%s: out of memory", KEY_MERGES);
    uint64_t unresolved = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        const char *sp = NULL;
        if (gguf_arr_str(f, KEY_MERGES, i, &s, &len) && len >= 3)
            sp = memchr(s + 1, ' ', len - 1); /* the first space after position 0 */
        if (!sp || sp == s + len - 1) {
            nx_free(tmp);
            return nx_err_set(err, NX_STATUS_FORMAT, "%s[%llu]: not a \"left right\" pair",
                              KEY_MERGES, (unsigned long long)i);
        }
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        nx_token a = tok_find(v, s, la), c = tok_find(v, sp + 1, lb), r = -1;
        if (a >= 0 && c >= 0 && la + lb <= v->max_len) {
            memcpy(tmp, s, la);
            memcpy(tmp + la, sp + 1, lb);
            r = tok_find(v, tmp, la + lb);
        }
        if (r < 0) {
            unresolved++;
            continue;
        }
        uint64_t k = pair_hash((uint32_t)a, (uint32_t)c) & b->mask;
        for (;;) {
            struct merge_slot *slot = &b->slots[k];
            if (slot->key_a == 0) {
                *slot = (struct merge_slot){(uint32_t)a + 1, (uint32_t)c, (int32_t)i, r};
                break;
            }
            if (slot->key_a == (uint32_t)a + 1 && slot->key_b == (uint32_t)c) break; /* first */
            k = (k + 1) & b->mask;
        }
    }
    nx_free(tmp);
    if (unresolved)
        NX_LOGW("tokenizer: %llu of %llu merges reference texts that are not tokens; ignored",
                (unsigned long long)unresolved, (unsigned long long)n);
    return NX_STATUS_OK;
}

/* ------------------------------------------------------------------------------------------
 * Init
 * ---------------------------------------------------------------------------------------- */

static const struct pre_def *find_pre(const char *name, size_t len) {
    for (size_t i = 0; i < NX_ARRAY_LEN(k_pre); i++)
        for (size_t j = 0; j < NX_ARRAY_LEN(k_pre[i].names) && k_pre[i].names[j]; j++)
            if (strlen(k_pre[i].names[j]) == len && memcmp(k_pre[i].names[j], name, len) == 0)
                return &k_pre[i];
    return NULL;
}

nx_status bpe_init(struct nx_vocab *v, const struct gguf_file *f, struct nx_err *err) {
    struct bpe_state *b = nx_calloc(1, sizeof *b);
    if (!b) return nx_err_set(err, NX_STATUS_NOMEM, "tokenizer: out of memory");
    v->bpe = b;

    const struct pre_def *pre = &k_pre[0];
    if (gguf_find_key(f, KEY_PRE) >= 0) {
        const char *name;
        size_t len;
        if (!gguf_get_str(f, KEY_PRE, &name, &len))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected a string", KEY_PRE);
        pre = find_pre(name, len);
        if (!pre)
            return nx_err_set(err, NX_STATUS_UNSUPPORTED, "%s: unknown pre-tokenizer '%.*s'",
                              KEY_PRE, (int)NX_MIN(len, 64), name);
    } else {
        NX_LOGW("tokenizer: %s missing, using the GPT-2 pre-tokenizer", KEY_PRE);
    }
    b->ignore_merges = pre->llama3;
    if (pre->llama3) v->add_bos = true; /* the add_bos_token key, if any, overrides */

    for (int i = 0; i < MAX_REGEX && pre->re[i]; i++) {
        int code;
        PCRE2_SIZE at;
        b->re[i] = pcre2_compile((PCRE2_SPTR)pre->re[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at,
                                 NULL);
        if (!b->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            return nx_err_set(err, NX_STATUS_UNSUPPORTED, "%s: regex %d: %s at %zu", KEY_PRE, i,
                              (const char *)msg, (size_t)at);
        }
        b->n_re = i + 1;
        (void)pcre2_jit_compile(b->re[i], PCRE2_JIT_COMPLETE); /* falls back to interpreter */
    }

    for (unsigned c = 0; c < 256; c++) {
        char buf[4];
        size_t len = tok_utf8_encode(byte_to_cp(c), buf);
        b->byte_id[c] = tok_find(v, buf, len);
    }
    return load_merges(v, b, f, err);
}

void bpe_free(struct bpe_state *b) {
    if (!b) return;
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    nx_free(b->slots);
    nx_free(b);
}

/* ------------------------------------------------------------------------------------------
 * Tokenize
 * ---------------------------------------------------------------------------------------- */

struct bpe_sym {
    int32_t prev, next;
    uint32_t n; /* input bytes covered; 0 once merged into the left neighbour */
    nx_token id;
};

/* Per-call state, sized for the longest piece (the whole fragment at most). */
struct bpe_call {
    const struct nx_vocab *v;
    const char *text;
    pcre2_match_data *md[MAX_REGEX];
    struct bpe_sym *syms;
    char *enc; /* byte-level encoding of a piece, 2 bytes per input byte at most */
    struct tok_heap heap;
    struct tok_out *out;
    bool ok;
};

static void push_pair(struct bpe_call *c, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const struct bpe_sym *l = &c->syms[left], *r = &c->syms[right];
    if (l->id < 0 || r->id < 0) return;
    const struct merge_slot *m = merge_find(c->v->bpe, l->id, r->id);
    if (!m) return;
    struct tok_bigram bg = {.prio = -(double)m->rank, .left = left, .right = right,
                            .size = l->n + r->n, .id = m->result};
    if (!tok_heap_push(&c->heap, bg)) c->ok = false;
}

/* One pre-tokenized piece: text[off..off+len). */
static void bpe_word(struct bpe_call *c, size_t off, size_t len) {
    const struct nx_vocab *v = c->v;
    const struct bpe_state *b = v->bpe;
    const unsigned char *s = (const unsigned char *)c->text + off;
    if (len == 1) {
        nx_token t = b->byte_id[s[0]];
        if (t < 0) t = v->unk;
        if (t >= 0) tok_out_push(c->out, t);
        return;
    }
    if (b->ignore_merges && len <= v->max_len) {
        size_t n = 0;
        for (size_t i = 0; i < len; i++) n += tok_utf8_encode(byte_to_cp(s[i]), c->enc + n);
        nx_token t = tok_find(v, c->enc, n);
        if (t >= 0) {
            tok_out_push(c->out, t);
            return;
        }
    }
    int32_t n_syms = (int32_t)len;
    for (int32_t i = 0; i < n_syms; i++)
        c->syms[i] = (struct bpe_sym){i - 1, i + 1 == n_syms ? -1 : i + 1, 1, b->byte_id[s[i]]};
    c->heap.n = 0;
    for (int32_t i = 1; i < n_syms; i++) push_pair(c, i - 1, i);

    struct tok_bigram bg;
    while (c->ok && tok_heap_pop(&c->heap, &bg)) {
        struct bpe_sym *l = &c->syms[bg.left], *r = &c->syms[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue; /* stale */
        l->n += r->n;
        l->id = bg.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) c->syms[r->next].prev = bg.left;
        push_pair(c, l->prev, bg.left);
        push_pair(c, bg.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = c->syms[i].next) {
        nx_token t = c->syms[i].id >= 0 ? c->syms[i].id : v->unk;
        if (t >= 0) tok_out_push(c->out, t);
    }
}

/* Splits text[off..off+len) with regex `level` and passes every match and every gap on to the
 * next level (or to bpe_word after the last). */
static void split(struct bpe_call *c, int level, size_t off, size_t len) {
    const struct bpe_state *b = c->v->bpe;
    if (!c->ok || len == 0) return;
    if (level == b->n_re) {
        bpe_word(c, off, len);
        return;
    }
    PCRE2_SPTR subj = (PCRE2_SPTR)(c->text + off);
    size_t pos = 0;
    while (pos < len && c->ok) {
        int rc = pcre2_match(b->re[level], subj, len, pos, 0, c->md[level], NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its frames on the heap */
            rc = pcre2_match(b->re[level], subj, len, pos, PCRE2_NO_JIT, c->md[level], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            NX_LOGE("tokenizer: pre-tokenizer regex failed (PCRE2 error %d)", rc);
            c->ok = false;
            return;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md[level]);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* an empty match (the built-in regexes give none): the character there becomes part
             * of the gap, and matching resumes after it */
            if (ms >= len) break;
            size_t next = ms + NX_MIN(tok_utf8_len(subj[ms]), len - ms);
            split(c, level + 1, off + pos, next - pos);
            pos = next;
            continue;
        }
        if (ms > pos) split(c, level + 1, off + pos, ms - pos); /* gap */
        split(c, level + 1, off + ms, me - ms);
        pos = me;
    }
    if (pos < len) split(c, level + 1, off + pos, len - pos);
}

bool bpe_tokenize(const struct nx_vocab *v, const char *text, size_t n, struct tok_out *out) {
    const struct bpe_state *b = v->bpe;
    if (n == 0) return true;
    if (n >= (size_t)INT32_MAX / 2) return false;
    struct bpe_call c = {.v = v, .text = text, .out = out, .ok = true};
    c.syms = nx_malloc(n * sizeof *c.syms);
    c.enc = nx_malloc(2 * n);
    for (int i = 0; i < b->n_re; i++) {
        c.md[i] = pcre2_match_data_create_from_pattern(b->re[i], NULL);
        if (!c.md[i]) c.ok = false;
    }
    if (!c.syms || !c.enc) c.ok = false;
    if (c.ok) split(&c, 0, 0, n);
    for (int i = 0; i < b->n_re; i++) pcre2_match_data_free(c.md[i]);
    tok_heap_free(&c.heap);
    nx_free(c.enc);
    nx_free(c.syms);
    return c.ok && !out->oom;
}
