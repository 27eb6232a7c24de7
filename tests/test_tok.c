/*
 * test_tok.c - tokenizers: the reference vectors of every shared vocabulary (llama.cpp's
 * test-tokenizer-0 files, produced by the Hugging Face tokenizers), stories260K against its
 * golden generation, special tokens and BOS/EOS/EOG rules, encode/decode round trips on hard
 * text (for SPM decode gives " " + text: the "▁" prefix; BERT only for lowercase words), speed on
 * ~10 KB, concurrent use, hostile metadata written with the GGUF writer, and allocation-failure
 * injection.
 *
 * Vector files: NAME.gguf.inp holds the inputs, each followed by "\n__ggml_vocab_test__\n";
 * NAME.gguf.out holds one line per input with the expected ids (no BOS: add_special = false).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "test.h"
#include "tok/tok.h"

/* ---- helpers ---- */

static char *shared_path(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/models/%s", test_shared(), rel);
    return buf;
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

/* Loads a vocab from a GGUF file; the gguf_file is closed before returning (vocab_load copies). */
static struct nx_vocab *load_vocab_path(const char *path) {
    struct gguf_file *f = NULL;
    struct nx_err err = {{0}};
    if (gguf_open(path, &f, &err) != NX_STATUS_OK) {
        fprintf(stderr, "  gguf_open %s: %s\n", path, err.msg);
        return NULL;
    }
    struct nx_vocab *v = NULL;
    nx_status st = vocab_load(f, &v, &err);
    gguf_close(f);
    if (st != NX_STATUS_OK) fprintf(stderr, "  vocab_load %s: %s\n", path, err.msg);
    return v;
}

static struct nx_vocab *load_vocab(const char *rel) {
    char path[512];
    return load_vocab_path(shared_path(path, sizeof path, rel));
}

/* Tokenizes into a malloc'd array (*n tokens); NULL on failure. */
static nx_token *tokenize(const struct nx_vocab *v, const char *s, size_t len, bool add_special,
                          bool parse_special, int32_t *n) {
    int32_t need = vocab_tokenize(v, s, len, NULL, 0, add_special, parse_special);
    if (need == INT32_MIN) return NULL;
    if (need < 0) need = -need;
    nx_token *ids = malloc(((size_t)need + 1) * sizeof *ids);
    int32_t got = vocab_tokenize(v, s, len, ids, need, add_special, parse_special);
    if (got != need) {
        free(ids);
        return NULL;
    }
    *n = got;
    return ids;
}

/* Concatenated pieces, malloc'd and NUL-terminated (*len bytes). */
static char *detokenize(const struct nx_vocab *v, const nx_token *ids, int32_t n, bool special,
                        size_t *len) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    for (int32_t i = 0; i < n; i++) {
        char buf[512];
        int32_t k = vocab_token_to_piece(v, ids[i], buf, sizeof buf, special);
        if (k < 0) k = 0;
        while (used + (size_t)k + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + used, buf, (size_t)k);
        used += (size_t)k;
    }
    out[used] = '\0';
    *len = used;
    return out;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- reference vectors ---- */

#define SEP "\n__ggml_vocab_test__\n"

/* Runs NAME.gguf against NAME.gguf.inp/.out; returns matched lines, *total the line count. */
static int run_vectors(const char *name, int *total) {
    char path[512], rel[256];
    *total = -1;
    snprintf(rel, sizeof rel, "vocab/%s.gguf", name);
    struct nx_vocab *v = load_vocab(rel);
    if (!v) return -1;
    snprintf(rel, sizeof rel, "vocab/%s.gguf.inp", name);
    size_t inp_len;
    char *inp = read_file(shared_path(path, sizeof path, rel), &inp_len);
    snprintf(rel, sizeof rel, "vocab/%s.gguf.out", name);
    char *outf = read_file(shared_path(path, sizeof path, rel), NULL);
    if (!inp || !outf) {
        free(inp);
        free(outf);
        vocab_free(v);
        return -1;
    }
    int matched = 0, count = 0;
    char *pos = inp, *line = outf;
    for (;;) {
        char *hit = strstr(pos, SEP);
        if (!hit || !*line) break;
        size_t in_len = (size_t)(hit - pos);
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';

        nx_token expect[512];
        int n_expect = 0;
        for (char *p = line, *end; n_expect < 512; p = end) {
            long id = strtol(p, &end, 10);
            if (end == p) break;
            expect[n_expect++] = (nx_token)id;
        }
        int32_t n_got = 0;
        nx_token *got = tokenize(v, pos, in_len, false, false, &n_got);
        bool ok = got && n_got == n_expect &&
                  (n_got == 0 || memcmp(got, expect, (size_t)n_got * sizeof *got) == 0);
        if (ok) {
            matched++;
        } else {
            fprintf(stderr, "  %s #%d \"%.*s\"\n    want:%s\n    got: ", name, count,
                    (int)NX_MIN(in_len, 80), pos, line);
            for (int32_t i = 0; got && i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        free(got);
        count++;
        pos = hit + strlen(SEP);
        line = eol ? eol + 1 : line + strlen(line);
    }
    printf("  %s: %d/%d lines match\n", name, matched, count);
    free(inp);
    free(outf);
    vocab_free(v);
    *total = count;
    return matched;
}

#define VECTOR_TEST(tname, file, expect_lines) \
    TEST(tname) { \
        int total; \
        int matched = run_vectors(file, &total); \
        ASSERT_EQ(total, expect_lines); \
        ASSERT_EQ(matched, total); \
    }

VECTOR_TEST(vectors_llama_spm, "ggml-vocab-llama-spm", 46)
VECTOR_TEST(vectors_llama_bpe, "ggml-vocab-llama-bpe", 46)
VECTOR_TEST(vectors_qwen2, "ggml-vocab-qwen2", 46)
VECTOR_TEST(vectors_gpt2, "ggml-vocab-gpt-2", 46)
VECTOR_TEST(vectors_bert_bge, "ggml-vocab-bert-bge", 46)

/* ---- stories260K ---- */

TEST(stories260k_golden) {
    struct nx_vocab *v = load_vocab("stories260K/stories260K.gguf");
    ASSERT_TRUE(v != NULL);
    ASSERT_EQ(vocab_n_tokens(v), 512);
    ASSERT_EQ(vocab_bos(v), 1);
    ASSERT_EQ(vocab_eos(v), 2);
    ASSERT_TRUE(vocab_is_eog(v, 2));
    ASSERT_TRUE(!vocab_is_eog(v, 1));
    ASSERT_TRUE(vocab_is_control(v, 1));
    ASSERT_STR_EQ(vocab_token_text(v, 0), "<unk>");
    ASSERT_TRUE(vocab_token_text(v, 512) == NULL);

    char path[512];
    json_error_t jerr;
    json_t *root = json_load_file(
        shared_path(path, sizeof path, "stories260K/golden_greedy_from_bos.json"), 0, &jerr);
    ASSERT_TRUE(root != NULL);
    json_t *jids = json_object_get(root, "generated_ids");
    const char *text = json_string_value(json_object_get(root, "generated_text"));
    ASSERT_TRUE(json_is_array(jids) && text != NULL);
    int32_t n = (int32_t)json_array_size(jids);
    nx_token *ids = malloc((size_t)n * sizeof *ids);
    for (int32_t i = 0; i < n; i++) ids[i] = (nx_token)json_integer_value(json_array_get(jids, i));

    /* decoding the generated ids gives the generated text exactly */
    size_t dlen;
    char *dec = detokenize(v, ids, n, false, &dlen);
    bool same_text = strcmp(dec, text) == 0;

    /* re-encoding the text (its leading space is the SPM prefix) gives the same ids */
    ASSERT_TRUE(text[0] == ' ');
    int32_t m = 0;
    nx_token *re = tokenize(v, text + 1, strlen(text) - 1, false, false, &m);
    bool same_ids = re && m == n && memcmp(re, ids, (size_t)n * sizeof *ids) == 0;

    /* with add_special: BOS first, no EOS */
    int32_t m2 = 0;
    nx_token *re2 = tokenize(v, text + 1, strlen(text) - 1, true, false, &m2);
    bool bos_ok = re2 && m2 == n + 1 && re2[0] == 1 && memcmp(re2 + 1, ids, (size_t)n * 4) == 0;

    free(re2);
    free(re);
    free(dec);
    free(ids);
    json_decref(root);

    /* "Once upon a time" uses the merged word tokens, not characters */
    int32_t k = 0;
    nx_token *once = tokenize(v, "Once upon a time", 16, true, false, &k);
    bool once_ok = once && k == 5 && once[0] == 1;
    size_t olen = 0;
    char *once_dec = once ? detokenize(v, once, k, false, &olen) : NULL;
    bool once_rt = once_dec && strcmp(once_dec, " Once upon a time") == 0;
    free(once_dec);
    free(once);
    vocab_free(v);
    ASSERT_TRUE(same_text);
    ASSERT_TRUE(same_ids);
    ASSERT_TRUE(bos_ok);
    ASSERT_TRUE(once_ok);
    ASSERT_TRUE(once_rt);
}

TEST(llama2_tiny_random_vocab) {
    /* the 32k Llama-2 vocabulary of a model file tokenizes like the llama-spm vocab file */
    struct nx_vocab *a = load_vocab("llama-2-tiny-random/llama-2-tiny-random.gguf");
    struct nx_vocab *b = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(a && b);
    ASSERT_EQ(vocab_n_tokens(a), 32000);
    const char *s = "Hello world! This is a test of the 32k vocabulary: 3.14, naïve café 日本語.";
    int32_t na = 0, nb = 0;
    nx_token *ta = tokenize(a, s, strlen(s), true, false, &na);
    nx_token *tb = tokenize(b, s, strlen(s), true, false, &nb);
    bool same = ta && tb && na == nb && memcmp(ta, tb, (size_t)na * sizeof *ta) == 0;
    bool bos = ta && ta[0] == 1;
    /* " Hello" -> "▁Hello" = 15043 */
    bool hello = ta && na > 1 && ta[1] == 15043;
    free(ta);
    free(tb);
    vocab_free(a);
    vocab_free(b);
    ASSERT_TRUE(same);
    ASSERT_TRUE(bos);
    ASSERT_TRUE(hello);
}

/* ---- special tokens, BOS/EOS, EOG ---- */

TEST(special_tokens_llama_bpe) {
    struct nx_vocab *v = load_vocab("vocab/ggml-vocab-llama-bpe.gguf");
    ASSERT_TRUE(v != NULL);
    ASSERT_EQ(vocab_bos(v), 128000);
    ASSERT_EQ(vocab_eos(v), 128001);
    ASSERT_TRUE(vocab_is_eog(v, 128001));
    ASSERT_TRUE(vocab_is_eog(v, 128009)); /* <|eot_id|> by text */
    ASSERT_TRUE(!vocab_is_eog(v, 128000));
    ASSERT_TRUE(vocab_is_control(v, 128009));

    const char *s = "<|begin_of_text|>Hello<|eot_id|><|eot_id|> world";
    int32_t n = 0;
    nx_token *t = tokenize(v, s, strlen(s), false, true, &n);
    nx_token want[] = {128000, 9906, 128009, 128009, 1917};
    bool parsed = t && n == 5 && memcmp(t, want, sizeof want) == 0;
    free(t);

    /* without parse_special the texts are ordinary text */
    t = tokenize(v, s, strlen(s), false, false, &n);
    bool plain = t && n > 5;
    for (int32_t i = 0; t && i < n; i++) plain = plain && t[i] < 128000;
    free(t);

    /* add_special: BOS (Llama 3 default), no EOS */
    t = tokenize(v, "Hello", 5, true, false, &n);
    bool bos = t && n == 2 && t[0] == 128000 && t[1] == 9906;
    free(t);

    /* control tokens render only when asked */
    char buf[64];
    int32_t k0 = vocab_token_to_piece(v, 128009, buf, sizeof buf, false);
    int32_t k1 = vocab_token_to_piece(v, 128009, buf, sizeof buf, true);
    bool render = k0 == 0 && k1 == 10 && memcmp(buf, "<|eot_id|>", 10) == 0;
    /* too small a buffer: -needed */
    int32_t k2 = vocab_token_to_piece(v, 128009, buf, 3, true);
    int32_t k3 = vocab_token_to_piece(v, 9906, buf, sizeof buf, false);
    bool hello = k3 == 5 && memcmp(buf, "Hello", 5) == 0;
    int32_t k4 = vocab_token_to_piece(v, 1917, buf, sizeof buf, false);
    bool world = k4 == 6 && memcmp(buf, " world", 6) == 0;
    /* too small an output array: -needed */
    nx_token small[2];
    int32_t r = vocab_tokenize(v, "Hello world again", 17, small, 2, false, false);
    vocab_free(v);
    ASSERT_TRUE(parsed);
    ASSERT_TRUE(plain);
    ASSERT_TRUE(bos);
    ASSERT_TRUE(render);
    ASSERT_EQ(k2, -10);
    ASSERT_TRUE(hello);
    ASSERT_TRUE(world);
    ASSERT_EQ(r, -3);
}

TEST(special_tokens_qwen2_gpt2) {
    struct nx_vocab *q = load_vocab("vocab/ggml-vocab-qwen2.gguf");
    struct nx_vocab *g = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    ASSERT_TRUE(q && g);
    ASSERT_TRUE(vocab_is_eog(q, 151643)); /* <|endoftext|> = eos */
    ASSERT_TRUE(vocab_is_eog(q, 151645)); /* <|im_end|> */
    ASSERT_TRUE(!vocab_is_eog(q, 151644));
    ASSERT_TRUE(vocab_is_eog(g, 50256));

    /* qwen2: no BOS by default; user-defined tokens ([PAD151646]) match even without
     * parse_special, control tokens only with it */
    const char *s = "<|im_start|>user\nhi[PAD151646]<|im_end|>";
    int32_t n = 0;
    nx_token *t = tokenize(q, s, strlen(s), true, true, &n);
    bool parsed = t && n >= 5 && t[0] == 151644 && t[n - 1] == 151645 && t[n - 2] == 151646;
    free(t);
    t = tokenize(q, s, strlen(s), true, false, &n);
    bool user = false, ctrl = false;
    for (int32_t i = 0; t && i < n; i++) {
        user |= t[i] == 151646;
        ctrl |= t[i] == 151644 || t[i] == 151645;
    }
    free(t);

    /* gpt-2: no BOS added */
    t = tokenize(g, "Hello world", 11, true, false, &n);
    bool gpt2 = t && n == 2 && t[0] == 15496 && t[1] == 995;
    free(t);
    vocab_free(q);
    vocab_free(g);
    ASSERT_TRUE(parsed);
    ASSERT_TRUE(user);
    ASSERT_TRUE(!ctrl);
    ASSERT_TRUE(gpt2);
}

TEST(special_tokens_spm_bert) {
    struct nx_vocab *v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(v != NULL);
    /* a special token in the middle: the text after it gets the "▁" prefix again */
    int32_t n = 0;
    nx_token *t = tokenize(v, "Hello</s>world", 14, true, true, &n);
    nx_token want[] = {1, 15043, 2, 3186};
    bool spm = t && n == 4 && memcmp(t, want, sizeof want) == 0;
    free(t);
    /* byte-fallback tokens decode to their byte */
    char buf[8];
    int32_t k = vocab_token_to_piece(v, 13, buf, sizeof buf, false);
    bool byte = k == 1 && buf[0] == '\n';
    vocab_free(v);

    struct nx_vocab *b = load_vocab("vocab/ggml-vocab-bert-bge.gguf");
    ASSERT_TRUE(b != NULL);
    t = tokenize(b, "Hello world", 11, true, false, &n);
    bool bert = t && n == 4 && t[0] == 101 && t[1] == 7592 && t[2] == 2088 && t[3] == 102;
    free(t);
    t = tokenize(b, "hello [SEP] world", 17, false, true, &n);
    bool bert_special = t && n == 3 && t[1] == 102;
    free(t);
    ASSERT_EQ(vocab_bos(b), 101);
    ASSERT_EQ(vocab_eos(b), -1);
    vocab_free(b);
    ASSERT_TRUE(spm);
    ASSERT_TRUE(byte);
    ASSERT_TRUE(bert);
    ASSERT_TRUE(bert_special);
}

/* ---- round trips on hard text ---- */

static const char *const k_hard[] = {
    "Hello, world!",
    "  leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n\n\n  mixed \t\n",
    "multi-byte: naïve café Ærøskøbing Straße ĳ ǅ",
    "emoji: 🦙🚀 👩‍👩‍👧‍👦 🏳️‍🌈 ✅",
    "CJK: 日本語のテキスト 中文文本 한국어 텍스트",
    "digits 0 12 345 6789 1234567890 3.14159 1e-10 ١٢٣ ٣",
    "symbols ''''```\"\"\"......!!!!!!?????? <>[]{}()",
    "contractions: I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "Ελληνικά русский עברית العربية हिन्दी ไทย",
    "\xe2\x80\x8b zero width \xef\xbb\xbf bom \xc2\xa0 nbsp \xe3\x80\x80 ideographic space",
    "combining: e\xcc\x81 a\xcc\x8a o\xcc\x88",
    "x",
    " ",
    "\n",
};

/* Invalid UTF-8: must not crash; SPM and BPE keep every byte. */
static const char k_invalid[] = "bad \xff\xfe bytes \xc3 trunc \xe2\x82 \x80\x80 over\xc0\xaf"
                                 " sur\xed\xa0\x80 end\xf4\x90\x80\x80 \xe4";

static bool round_trip(const struct nx_vocab *v, const char *s, size_t len, bool spm) {
    int32_t n = 0;
    nx_token *t = tokenize(v, s, len, false, false, &n);
    if (!t) return false;
    for (int32_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= vocab_n_tokens(v)) {
            free(t);
            return false;
        }
    size_t dlen;
    char *d = detokenize(v, t, n, false, &dlen);
    bool ok;
    if (spm)
        ok = len == 0 ? dlen == 0 : dlen == len + 1 && d[0] == ' ' && !memcmp(d + 1, s, len);
    else
        ok = dlen == len && !memcmp(d, s, len);
    if (!ok) fprintf(stderr, "  round trip failed: \"%s\" -> \"%s\"\n", s, d);
    free(d);
    free(t);
    return ok;
}

static void round_trips_for(const char *rel, bool spm) {
    struct nx_vocab *v = load_vocab(rel);
    ASSERT_TRUE(v != NULL);
    int bad = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(k_hard); i++)
        bad += !round_trip(v, k_hard[i], strlen(k_hard[i]), spm);
    bad += !round_trip(v, k_invalid, sizeof k_invalid - 1, spm);
    /* every single byte value on its own */
    for (int c = 1; c < 256; c++) {
        char s[2] = {(char)c, 0};
        if (spm && c == ' ') continue; /* " " -> "▁▁" decodes to two spaces: that's the rule */
        bad += !round_trip(v, s, 1, spm);
    }
    vocab_free(v);
    ASSERT_EQ(bad, 0);
}

TEST(round_trip_llama_spm) { round_trips_for("vocab/ggml-vocab-llama-spm.gguf", true); }
TEST(round_trip_stories260k) { round_trips_for("stories260K/stories260K.gguf", true); }
TEST(round_trip_llama_bpe) { round_trips_for("vocab/ggml-vocab-llama-bpe.gguf", false); }
TEST(round_trip_qwen2) { round_trips_for("vocab/ggml-vocab-qwen2.gguf", false); }
TEST(round_trip_gpt2) { round_trips_for("vocab/ggml-vocab-gpt-2.gguf", false); }

/* Random strings built from ASCII, multi-byte characters, whitespace and invalid bytes. */
static size_t random_text(uint32_t *seed, char *buf, size_t cap) {
    static const char *const parts[] = {
        "a", "Z", "7", "42", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", ".", "!?", "é", "ß",
        "日", "本", "🦙", "\xcc\x81", "\xe2\x96\x81", "\xff", "\xc3", "\xe2\x82", "\x80", "<s>",
        "<|", "|>", "\xc4\xa0", "\x01", "\x7f"};
    size_t n = 0;
    for (;;) {
        *seed = *seed * 1103515245u + 12345u;
        const char *p = parts[(*seed >> 16) % NX_ARRAY_LEN(parts)];
        size_t l = strlen(p);
        if (n + l >= cap || ((*seed >> 8) & 31) == 0) break;
        memcpy(buf + n, p, l);
        n += l;
    }
    buf[n] = '\0';
    return n;
}

static void fuzz_round_trips(const char *rel, bool spm) {
    struct nx_vocab *v = load_vocab(rel);
    ASSERT_TRUE(v != NULL);
    uint32_t seed = 12345;
    int bad = 0;
    char buf[256];
    for (int i = 0; i < 300; i++) {
        size_t n = random_text(&seed, buf, sizeof buf);
        if (!spm) {
            bad += !round_trip(v, buf, n, false);
            continue;
        }
        /* SPM: decode gives " " + text, and a literal "▁" also decodes as " " */
        char want[260];
        size_t wn = 0;
        want[wn++] = ' ';
        for (size_t k = 0; k < n;) {
            if (k + 3 <= n && !memcmp(buf + k, "\xe2\x96\x81", 3)) {
                want[wn++] = ' ';
                k += 3;
            } else {
                want[wn++] = buf[k++];
            }
        }
        int32_t nt = 0;
        nx_token *t = tokenize(v, buf, n, false, false, &nt);
        size_t dlen = 0;
        char *d = t ? detokenize(v, t, nt, false, &dlen) : NULL;
        bool ok = n == 0 ? d && dlen == 0 : d && dlen == wn && !memcmp(d, want, wn);
        if (!ok) fprintf(stderr, "  SPM round trip failed: \"%s\" -> \"%s\"\n", buf, d ? d : "");
        bad += !ok;
        free(d);
        free(t);
    }
    vocab_free(v);
    ASSERT_EQ(bad, 0);
}

TEST(fuzz_round_trip_spm) { fuzz_round_trips("vocab/ggml-vocab-llama-spm.gguf", true); }
TEST(fuzz_round_trip_llama_bpe) { fuzz_round_trips("vocab/ggml-vocab-llama-bpe.gguf", false); }
TEST(fuzz_round_trip_qwen2) { fuzz_round_trips("vocab/ggml-vocab-qwen2.gguf", false); }
TEST(fuzz_round_trip_gpt2) { fuzz_round_trips("vocab/ggml-vocab-gpt-2.gguf", false); }

TEST(bert_hard_text) {
    struct nx_vocab *v = load_vocab("vocab/ggml-vocab-bert-bge.gguf");
    ASSERT_TRUE(v != NULL);
    /* lowercase words with single spaces: decode gives " " + text */
    const char *s = "the quick brown fox jumps over the lazy dog unbelievably";
    ASSERT_TRUE(round_trip(v, s, strlen(s), true));
    /* accents stripped, case folded, punctuation split */
    int32_t n1 = 0, n2 = 0;
    const char *s1 = "Café, NAÏVE!", *s2 = "cafe , naive !";
    nx_token *a = tokenize(v, s1, strlen(s1), false, false, &n1);
    nx_token *b = tokenize(v, s2, strlen(s2), false, false, &n2);
    bool same = a && b && n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof *a) == 0;
    free(a);
    free(b);
    /* hard text: no crash, ids in range */
    int bad = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(k_hard); i++) {
        int32_t n = 0;
        nx_token *t = tokenize(v, k_hard[i], strlen(k_hard[i]), true, true, &n);
        bad += !t;
        for (int32_t j = 0; t && j < n; j++) bad += t[j] < 0 || t[j] >= vocab_n_tokens(v);
        free(t);
    }
    int32_t n = 0;
    nx_token *t = tokenize(v, k_invalid, sizeof k_invalid - 1, false, false, &n);
    bad += !t;
    free(t);
    /* a word over 100 characters is [UNK] */
    char longw[160];
    memset(longw, 'a', 150);
    longw[150] = 0;
    t = tokenize(v, longw, 150, false, false, &n);
    bool unk = t && n == 1 && t[0] == 100;
    free(t);
    vocab_free(v);
    ASSERT_TRUE(same);
    ASSERT_EQ(bad, 0);
    ASSERT_TRUE(unk);
}

TEST(empty_and_null_input) {
    struct nx_vocab *v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(v != NULL);
    nx_token t[4];
    ASSERT_EQ(vocab_tokenize(v, "", 0, t, 4, false, false), 0);
    ASSERT_EQ(vocab_tokenize(v, NULL, 0, t, 4, true, false), 1);
    ASSERT_EQ(t[0], 1);
    ASSERT_EQ(vocab_tokenize(v, NULL, 5, t, 4, true, false), INT32_MIN);
    ASSERT_EQ(vocab_tokenize(v, "abc", 3, NULL, 0, false, false) < 0, 1);
    ASSERT_EQ(vocab_token_to_piece(v, -1, (char *)t, 4, true), 0);
    ASSERT_EQ(vocab_token_to_piece(v, 32000, (char *)t, 4, true), 0);
    vocab_free(v);
    vocab_free(NULL);
}

/* ---- speed ---- */

static char *make_10k(void) {
    size_t cap = 11000, n = 0;
    char *s = malloc(cap);
    for (size_t i = 0; n < 10000; i = (i + 1) % NX_ARRAY_LEN(k_hard)) {
        size_t l = strlen(k_hard[i]);
        if (n + l + 1 >= cap) break;
        memcpy(s + n, k_hard[i], l);
        n += l;
        s[n++] = ' ';
    }
    s[n] = '\0';
    return s;
}

TEST(speed_10k) {
    const char *names[] = {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-bpe.gguf",
                           "vocab/ggml-vocab-qwen2.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf"};
    char *text = make_10k();
    size_t len = strlen(text);
    /* worst cases for the merge loops: one 10 KB word, and 10 KB of spaces */
    char *word = malloc(10001), *spaces = malloc(10001);
    for (int i = 0; i < 10000; i++) word[i] = "abcdefghij"[i % 10];
    memset(spaces, ' ', 10000);
    word[10000] = spaces[10000] = 0;
    double worst = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(names); i++) {
        struct nx_vocab *v = load_vocab(names[i]);
        ASSERT_TRUE(v != NULL);
        const char *inputs[] = {text, word, spaces};
        for (int k = 0; k < 3; k++) {
            size_t l = k == 0 ? len : 10000;
            double t0 = now_ms();
            int32_t n = 0;
            nx_token *t = tokenize(v, inputs[k], l, true, true, &n);
            double ms = now_ms() - t0;
            free(t);
            if (k == 0) printf("  %s: %zu bytes -> %d tokens in %.2f ms\n", names[i], l, n, ms);
            if (ms > worst) worst = ms;
        }
        vocab_free(v);
    }
    free(word);
    free(spaces);
    free(text);
    printf("  slowest 10 KB tokenization: %.2f ms\n", worst);
    ASSERT_TRUE(worst < 500); /* milliseconds in a normal build; generous for sanitizers */
}

/* ---- concurrency ---- */

struct thread_arg {
    const struct nx_vocab *v;
    const char *text;
    const nx_token *want;
    int32_t n_want;
    int bad;
};

static void *tok_thread(void *p) {
    struct thread_arg *a = p;
    for (int it = 0; it < 20; it++) {
        int32_t n = 0;
        nx_token *t = tokenize(a->v, a->text, strlen(a->text), true, true, &n);
        if (!t || n != a->n_want || memcmp(t, a->want, (size_t)n * sizeof *t)) a->bad++;
        free(t);
    }
    return NULL;
}

TEST(concurrent_tokenize) {
    const char *names[] = {"vocab/ggml-vocab-llama-bpe.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf"};
    for (size_t k = 0; k < NX_ARRAY_LEN(names); k++) {
        struct nx_vocab *v = load_vocab(names[k]);
        ASSERT_TRUE(v != NULL);
        const char *text = k_hard[4];
        int32_t n = 0;
        nx_token *want = tokenize(v, text, strlen(text), true, true, &n);
        ASSERT_TRUE(want != NULL);
        pthread_t th[4];
        struct thread_arg args[4];
        for (int i = 0; i < 4; i++) {
            args[i] = (struct thread_arg){v, text, want, n, 0};
            pthread_create(&th[i], NULL, tok_thread, &args[i]);
        }
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            bad += args[i].bad;
        }
        free(want);
        vocab_free(v);
        ASSERT_EQ(bad, 0);
    }
}

/* ---- hostile metadata ---- */

/* A tiny vocabulary written with the GGUF writer; `mutate` alters the keys before writing. */
enum mut {
    MUT_NONE,
    MUT_TOKENS_I32,
    MUT_TOKENS_MISSING,
    MUT_SCORES_SHORT,
    MUT_SCORES_STRING,
    MUT_TYPES_SHORT,
    MUT_TYPES_BAD_VALUE,
    MUT_TYPES_FLOAT,
    MUT_BOS_RANGE,
    MUT_BOS_STRING,
    MUT_BOS_NONE,
    MUT_ADD_BOS_U32,
    MUT_MODEL_MISSING,
    MUT_MODEL_UNKNOWN,
    MUT_MODEL_INT,
    MUT_EMPTY_TOKEN,
    MUT_BPE,
    MUT_BPE_MERGE_NOSPACE,
    MUT_BPE_MERGE_EMPTY_SIDE,
    MUT_BPE_MERGES_MISSING,
    MUT_BPE_MERGES_I32,
    MUT_BPE_PRE_UNKNOWN,
    MUT_BPE_PRE_MISSING,
    MUT_BPE_MERGE_UNRESOLVED,
    MUT_BPE_PRE_NAMED, /* tokenizer.ggml.pre = g_pre_name */
};
static const char *g_pre_name = "gpt-2";

static const char *const k_tiny_tokens[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
                                            "\u2581a", "ab", "<0x0A>", "<|eot_id|>"};
static const float k_tiny_scores[] = {0, 0, 0, -1, -2, -3, -0.5f, -0.7f, 0, 0};
static const int32_t k_tiny_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 6, 3};
/* BPE: byte-level characters: "Ġ" is the space */
static const char *const k_bpe_tokens[] = {"a", "b", "\xc4\xa0", "ab", "\u0120a",
                                           "\u0120ab", "<|endoftext|>"};

static nx_status write_and_load(enum mut m, struct nx_vocab **out, struct nx_err *err) {
    struct gguf_writer *w = gguf_writer_init();
    bool bpe = m >= MUT_BPE;
    if (m != MUT_MODEL_MISSING) {
        if (m == MUT_MODEL_INT)
            gguf_writer_add_u32(w, "tokenizer.ggml.model", 1);
        else
            gguf_writer_add_str(w, "tokenizer.ggml.model",
                                m == MUT_MODEL_UNKNOWN ? "t5" : bpe ? "gpt2" : "llama");
    }
    const char *const *toks = bpe ? k_bpe_tokens : k_tiny_tokens;
    uint64_t nt = bpe ? NX_ARRAY_LEN(k_bpe_tokens) : NX_ARRAY_LEN(k_tiny_tokens);
    const char *empty_tokens[NX_ARRAY_LEN(k_tiny_tokens)];
    if (m == MUT_EMPTY_TOKEN) {
        memcpy(empty_tokens, k_tiny_tokens, sizeof empty_tokens);
        empty_tokens[5] = "";
        toks = empty_tokens;
    }
    if (m == MUT_TOKENS_I32)
        gguf_writer_add_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_I32, k_tiny_types, nt);
    else if (m != MUT_TOKENS_MISSING)
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, nt);
    if (!bpe) {
        if (m == MUT_SCORES_STRING)
            gguf_writer_add_arr_str(w, "tokenizer.ggml.scores", k_tiny_tokens, nt);
        else
            gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, k_tiny_scores,
                                m == MUT_SCORES_SHORT ? nt - 1 : nt);
        int32_t types[NX_ARRAY_LEN(k_tiny_types)];
        memcpy(types, k_tiny_types, sizeof types);
        if (m == MUT_TYPES_BAD_VALUE) types[4] = 9;
        if (m == MUT_TYPES_FLOAT)
            gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_F32, k_tiny_scores,
                                nt);
        else
            gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types,
                                m == MUT_TYPES_SHORT ? nt - 1 : nt);
    } else {
        const char *merges[] = {"\xc4\xa0 a", "\u0120a b", "a b", "b a"};
        if (m == MUT_BPE_MERGE_NOSPACE) merges[1] = "\u0120a";
        if (m == MUT_BPE_MERGE_EMPTY_SIDE) merges[1] = "a ";
        if (m == MUT_BPE_MERGES_I32)
            gguf_writer_add_arr(w, "tokenizer.ggml.merges", GGUF_VTYPE_I32, k_tiny_types, 3);
        else if (m != MUT_BPE_MERGES_MISSING)
            gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges,
                                    m == MUT_BPE_MERGE_UNRESOLVED ? 4 : 3);
        if (m != MUT_BPE_PRE_MISSING)
            gguf_writer_add_str(w, "tokenizer.ggml.pre",
                                m == MUT_BPE_PRE_UNKNOWN ? "no-such-pre"
                                : m == MUT_BPE_PRE_NAMED ? g_pre_name
                                                         : "gpt-2");
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 6);
    }
    if (m == MUT_BOS_RANGE) gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 10);
    if (m == MUT_BOS_STRING) gguf_writer_add_str(w, "tokenizer.ggml.bos_token_id", "1");
    if (m == MUT_BOS_NONE) gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    if (m == MUT_ADD_BOS_U32) gguf_writer_add_u32(w, "tokenizer.ggml.add_bos_token", 1);

    char path[64];
    snprintf(path, sizeof path, "/tmp/nx_test_tok_%d.gguf", (int)getpid());
    nx_status st = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    if (st != NX_STATUS_OK) {
        fprintf(stderr, "  writer: %s\n", err->msg);
        return NX_STATUS_IO;
    }
    struct gguf_file *f = NULL;
    st = gguf_open(path, &f, err);
    unlink(path);
    if (st != NX_STATUS_OK) return st;
    st = vocab_load(f, out, err);
    gguf_close(f);
    return st;
}

/* Expects status st and a message containing `needle`. */
static bool expect_fail(enum mut m, nx_status want, const char *needle) {
    struct nx_err err = {{0}};
    struct nx_vocab *v = (struct nx_vocab *)&err; /* must be reset to NULL */
    nx_status st = write_and_load(m, &v, &err);
    bool ok = st == want && v == NULL && strstr(err.msg, needle) != NULL;
    if (!ok) fprintf(stderr, "  mutation %d: status %d msg \"%s\"\n", (int)m, (int)st, err.msg);
    if (st == NX_STATUS_OK) vocab_free(v);
    return ok;
}

TEST(hostile_metadata) {
    ASSERT_TRUE(expect_fail(MUT_TOKENS_I32, NX_STATUS_FORMAT, "tokenizer.ggml.tokens"));
    ASSERT_TRUE(expect_fail(MUT_TOKENS_MISSING, NX_STATUS_FORMAT, "tokenizer.ggml.tokens"));
    ASSERT_TRUE(expect_fail(MUT_SCORES_SHORT, NX_STATUS_FORMAT, "tokenizer.ggml.scores"));
    ASSERT_TRUE(expect_fail(MUT_SCORES_STRING, NX_STATUS_FORMAT, "tokenizer.ggml.scores"));
    ASSERT_TRUE(expect_fail(MUT_TYPES_SHORT, NX_STATUS_FORMAT, "tokenizer.ggml.token_type"));
    ASSERT_TRUE(expect_fail(MUT_TYPES_BAD_VALUE, NX_STATUS_FORMAT, "tokenizer.ggml.token_type"));
    ASSERT_TRUE(expect_fail(MUT_TYPES_FLOAT, NX_STATUS_FORMAT, "tokenizer.ggml.token_type"));
    ASSERT_TRUE(expect_fail(MUT_BOS_RANGE, NX_STATUS_FORMAT, "tokenizer.ggml.bos_token_id"));
    ASSERT_TRUE(expect_fail(MUT_BOS_STRING, NX_STATUS_FORMAT, "tokenizer.ggml.bos_token_id"));
    ASSERT_TRUE(expect_fail(MUT_ADD_BOS_U32, NX_STATUS_FORMAT, "tokenizer.ggml.add_bos_token"));
    ASSERT_TRUE(expect_fail(MUT_MODEL_MISSING, NX_STATUS_FORMAT, "tokenizer.ggml.model"));
    ASSERT_TRUE(expect_fail(MUT_MODEL_INT, NX_STATUS_FORMAT, "tokenizer.ggml.model"));
    ASSERT_TRUE(expect_fail(MUT_MODEL_UNKNOWN, NX_STATUS_UNSUPPORTED, "'t5'"));
    ASSERT_TRUE(expect_fail(MUT_BPE_MERGE_NOSPACE, NX_STATUS_FORMAT, "tokenizer.ggml.merges[1]"));
    ASSERT_TRUE(
        expect_fail(MUT_BPE_MERGE_EMPTY_SIDE, NX_STATUS_FORMAT, "tokenizer.ggml.merges[1]"));
    ASSERT_TRUE(expect_fail(MUT_BPE_MERGES_MISSING, NX_STATUS_FORMAT, "tokenizer.ggml.merges"));
    ASSERT_TRUE(expect_fail(MUT_BPE_MERGES_I32, NX_STATUS_FORMAT, "tokenizer.ggml.merges"));
    ASSERT_TRUE(expect_fail(MUT_BPE_PRE_UNKNOWN, NX_STATUS_UNSUPPORTED, "no-such-pre"));
}

TEST(tiny_vocabs_load_and_tokenize) {
    struct nx_err err = {{0}};
    struct nx_vocab *v = NULL;
    nx_token t[16];
    int level = NX_LOG_INFO;
    nx_log_set_level(NX_LOG_ERROR); /* the lenient cases warn */

    /* SPM: "▁ab▁a\n": "▁a" (score -0.5) beats "ab" (-0.7); "\n" falls back to <0x0A>; the
     * control token is matched with parse_special */
    ASSERT_OK(write_and_load(MUT_NONE, &v, &err));
    int32_t n = vocab_tokenize(v, "ab a\n<|eot_id|>", 15, t, 16, true, true);
    nx_token want[] = {1, 6, 5, 6, 8, 9};
    ASSERT_EQ(n, 6);
    ASSERT_TRUE(memcmp(t, want, sizeof want) == 0);
    ASSERT_EQ(vocab_is_eog(v, 9), 1); /* <|eot_id|> by text */
    ASSERT_EQ(vocab_is_eog(v, 2), 1);
    vocab_free(v);

    /* 0xFFFFFFFF: no BOS, add_bos has nothing to add */
    ASSERT_OK(write_and_load(MUT_BOS_NONE, &v, &err));
    ASSERT_EQ(vocab_bos(v), -1);
    n = vocab_tokenize(v, "a", 1, t, 16, true, false);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(t[0], 6);
    vocab_free(v);

    /* an empty token text is accepted and never produced */
    ASSERT_OK(write_and_load(MUT_EMPTY_TOKEN, &v, &err));
    n = vocab_tokenize(v, "abab", 4, t, 16, false, false);
    ASSERT_TRUE(n > 0);
    for (int32_t i = 0; i < n; i++) ASSERT_NE(t[i], 5);
    vocab_free(v);

    /* BPE: " ab" -> "Ġab" through "Ġ a" then "Ġa b"; "ba": no merge ("b a" gives no token
     * and is ignored); missing pre -> GPT-2 regex */
    enum mut bpes[] = {MUT_BPE, MUT_BPE_PRE_MISSING, MUT_BPE_MERGE_UNRESOLVED};
    for (size_t i = 0; i < NX_ARRAY_LEN(bpes); i++) {
        ASSERT_OK(write_and_load(bpes[i], &v, &err));
        n = vocab_tokenize(v, "ab ab ba", 8, t, 16, false, false);
        nx_token want_bpe[] = {3, 5, 2, 1, 0}; /* ab, Ġab, Ġ b a */
        ASSERT_EQ(n, 5);
        ASSERT_TRUE(memcmp(t, want_bpe, sizeof want_bpe) == 0);
        char buf[8];
        ASSERT_EQ(vocab_token_to_piece(v, 5, buf, 8, false), 3);
        ASSERT_TRUE(memcmp(buf, " ab", 3) == 0);
        ASSERT_TRUE(vocab_is_eog(v, 6));
        vocab_free(v);
    }
    /* every pre-tokenizer family compiles and splits "ab ab ba" the same way */
    const char *pres[] = {"default", "llama-bpe", "qwen2", "starcoder", "gpt-4o", "mpt"};
    for (size_t i = 0; i < NX_ARRAY_LEN(pres); i++) {
        g_pre_name = pres[i];
        ASSERT_OK(write_and_load(MUT_BPE_PRE_NAMED, &v, &err));
        n = vocab_tokenize(v, "ab ab ba", 8, t, 16, false, false);
        nx_token want_bpe[] = {3, 5, 2, 1, 0};
        ASSERT_EQ(n, 5);
        ASSERT_TRUE(memcmp(t, want_bpe, sizeof want_bpe) == 0);
        vocab_free(v);
    }
    nx_log_set_level(level);
}

/* ---- allocation failures ---- */

/* For one tokenizer: every allocation of the load fails in turn (until a load makes fewer
 * allocations than the failure point), then every allocation of tokenizing a hard text:
 * NX_STATUS_NOMEM / INT32_MIN, nothing leaked, and a tokenization that succeeds despite an
 * injected failure (none should) gives exactly the tokens of an undisturbed run. */
static void alloc_failures_for(const char *rel) {
    char path[512];
    shared_path(path, sizeof path, rel);
    struct gguf_file *f = NULL;
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_open(path, &f, &err));
    size_t base = nx_alloc_bytes();
    int failures = 0;
    long k;
    for (k = 1; k < 100000; k++) {
        struct nx_vocab *v = NULL;
        size_t fails = nx_alloc_failures();
        nx_alloc_fail_after(k);
        nx_status st = vocab_load(f, &v, &err);
        nx_alloc_fail_after(0);
        bool injected = nx_alloc_failures() != fails;
        if (st == NX_STATUS_OK) {
            vocab_free(v);
            ASSERT_EQ(nx_alloc_bytes(), base);
            if (!injected) break;
            continue;
        }
        failures++;
        if (!injected) FAILF("%s: load failed without an injected failure: %s", rel, err.msg);
        ASSERT_EQ(st, NX_STATUS_NOMEM);
        ASSERT_TRUE(v == NULL);
        ASSERT_EQ(nx_alloc_bytes(), base);
    }
    ASSERT_TRUE(failures > 3);
    struct nx_vocab *v = NULL;
    ASSERT_OK(vocab_load(f, &v, &err));
    gguf_close(f);
    const char *s = k_hard[8];
    nx_token ref[512], t[512];
    int32_t nref = vocab_tokenize(v, s, strlen(s), ref, 512, true, true);
    ASSERT_TRUE(nref > 0);
    size_t before = nx_alloc_bytes();
    int tok_failures = 0;
    for (k = 1; k < 100000; k++) {
        size_t fails = nx_alloc_failures();
        nx_alloc_fail_after(k);
        int32_t n = vocab_tokenize(v, s, strlen(s), t, 512, true, true);
        nx_alloc_fail_after(0);
        bool injected = nx_alloc_failures() != fails;
        ASSERT_EQ(nx_alloc_bytes(), before);
        if (n == INT32_MIN) {
            if (!injected) FAILF("%s: tokenize failed without an injected failure", rel);
            tok_failures++;
            continue;
        }
        ASSERT_EQ(n, nref);
        for (int32_t i = 0; i < n; i++) ASSERT_EQ(t[i], ref[i]);
        if (!injected) break;
    }
    vocab_free(v);
    printf("  %s: load failed cleanly %d times, tokenize %d times\n", rel, failures, tok_failures);
}

TEST(alloc_failures) {
    alloc_failures_for("vocab/ggml-vocab-qwen2.gguf");
    alloc_failures_for("vocab/ggml-vocab-llama-spm.gguf");
    alloc_failures_for("vocab/ggml-vocab-bert-bge.gguf");
    alloc_failures_for("stories260K/stories260K.gguf");
}

TEST_MAIN
