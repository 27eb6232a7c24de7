/*
 * test_model2vec.c - the model2vec static embedder (src/route/embed_model2vec.c), its
 * safetensors reader (src/route/safetensors.c) and tokenizer.json Unigram tokenizer
 * (src/route/hftok.c).
 *
 * DESIGN
 * - Reference: ../shared/models/model2vec-fixture/reference_embedding_hello_x1000.json, the
 *   embedding Python model2vec gives "hello" x1000 joined by spaces (PROVENANCE.txt there).
 *   Tolerance 1e-6 absolute per component: we pool in double like numpy and round once to
 *   float at the end (|x| <= 1, so the float rounding is <= 6e-8); 1e-6 leaves room for the
 *   summation order and nothing more.
 * - Tokenization: expected ids read off the fixture's vocabulary by hand (the piece strings and
 *   ids are in the comments; every expected piece has the best score of its alternatives).
 * - Pooling semantics (weights indexed by token id, mapping token id -> row, mean, norm) on a
 *   synthetic model whose expected vector is worked out in the comment.
 * - Corrupt safetensors: one hand-built file per defect; each must be refused with a message
 *   naming it. Files go to the per-process temporary directory (support/tmpdir.h).
 */
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "route/embed.h"
#include "route/hftok.h"
#include "route/model2vec.h"
#include "route/safetensors.h"
#include "support/tmpdir.h"
#include "test.h"

static const char *fixture_dir(void) {
    static char buf[PATH_MAX - 128];
    snprintf(buf, sizeof buf, "%s/models/model2vec-fixture", test_shared());
    return buf;
}


static int write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* A safetensors file: 8-byte length, header text verbatim, then dlen data bytes (pattern). */
static int write_st(const char *path, uint64_t hlen_field, const char *header, const void *data,
                    size_t dlen) {
    size_t hn = strlen(header);
    size_t n = 8 + hn + dlen;
    uint8_t *b = malloc(n);
    if (!b) return -1;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(b + 8, header, hn);
    if (dlen) {
        if (data) memcpy(b + 8 + hn, data, dlen);
        else
            for (size_t i = 0; i < dlen; i++) b[8 + hn + i] = (uint8_t)i;
    }
    int rc = write_file(path, b, n);
    free(b);
    return rc;
}

/* st_open on a file with the given header and dlen data bytes must fail with `want` in err. */
static int expect_st_error(const char *header, size_t dlen, const char *want) {
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/bad.safetensors", test_tmpdir());
    if (write_st(path, strlen(header), header, NULL, dlen) != 0) return 0;
    st_file *f = NULL;
    st_open(path, &f, err, sizeof err);
    if (f) {
        st_close(f);
        fprintf(stderr, "  accepted corrupt header %s\n", header);
        return 0;
    }
    if (!strstr(err, want)) {
        fprintf(stderr, "  error \"%s\" does not contain \"%s\"\n", err, want);
        return 0;
    }
    return 1;
}

/* ---- safetensors ---------------------------------------------------------------------- */

TEST(st_fixture_header) {
    char path[PATH_MAX], err[512] = "";
    snprintf(path, sizeof path, "%s/model.safetensors", fixture_dir());
    st_file *f = NULL;
    st_open(path, &f, err, sizeof err);
    if (!f) FAILF("%s", err);
    /* header.txt: weights F64 [29524] [0,236192]; embeddings F32 [128,64] [236192,268960];
     * mapping I32 [29524] [268960,387056] */
    ASSERT_EQ(st_n_tensors(f), 3);
    const struct st_tensor *w = st_find(f, "weights"), *e = st_find(f, "embeddings"),
                           *m = st_find(f, "mapping");
    ASSERT_TRUE(w && e && m);
    ASSERT_EQ(w->dtype, ST_F64);
    ASSERT_EQ(w->n_dims, 1);
    ASSERT_EQ(w->shape[0], 29524);
    ASSERT_EQ(w->offset, 0);
    ASSERT_EQ(e->dtype, ST_F32);
    ASSERT_EQ(e->shape[0], 128);
    ASSERT_EQ(e->shape[1], 64);
    ASSERT_EQ(e->offset, 236192);
    ASSERT_EQ(e->nbytes, 268960 - 236192);
    ASSERT_EQ(m->dtype, ST_I32);
    ASSERT_EQ(m->offset, 268960);
    for (uint64_t i = 0; i < m->n_elem; i++) {
        int64_t r = st_get_i64(m, i);
        if (r < 0 || r >= 128) FAILF("mapping[%llu] = %lld", (unsigned long long)i, (long long)r);
    }
    ASSERT_TRUE(st_find(f, "nope") == NULL);
    st_close(f);
}

TEST(st_dtypes_and_values) {
    /* one tensor per dtype, values written by hand, little-endian */
    uint8_t data[64];
    size_t o = 0;
    double d = -2.5;
    memcpy(data + o, &d, 8); /* F64 [1] at [0,8) */
    o += 8;
    float fl = 0.75f;
    memcpy(data + o, &fl, 4); /* F32 [1] at [8,12) */
    o += 4;
    data[o++] = 0x00; /* F16 1.0 = 0x3C00 at [12,14) */
    data[o++] = 0x3C;
    data[o++] = 0x80; /* BF16 -1.0 = 0xBF80 at [14,16) */
    data[o++] = 0xBF;
    int32_t i32 = -7;
    memcpy(data + o, &i32, 4); /* I32 at [16,20) */
    o += 4;
    int64_t i64 = 1234567890123LL;
    memcpy(data + o, &i64, 8); /* I64 at [20,28) */
    o += 8;
    data[o++] = 0xFE; /* I8 -2 at [28,29) */
    data[o++] = 1;    /* BOOL at [29,30) */
    const char *hdr =
        "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
        "\"c\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[12,14]},"
        "\"d\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[14,16]},"
        "\"e\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[16,20]},"
        "\"f\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[20,28]},"
        "\"g\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[28,29]},"
        "\"h\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[29,30]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[30,30]},"
        "\"__metadata__\":{\"format\":\"pt\"}}   ";
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/ok.safetensors", test_tmpdir());
    ASSERT_OK(write_st(path, strlen(hdr), hdr, data, o));
    st_file *f = NULL;
    st_open(path, &f, err, sizeof err);
    if (!f) FAILF("%s", err);
    ASSERT_EQ(st_n_tensors(f), 9);
    ASSERT_STR_EQ(st_tensor_at(f, 0)->name, "a"); /* header order kept */
    ASSERT_TRUE(st_get_f64(st_find(f, "a"), 0) == -2.5);
    ASSERT_TRUE(st_get_f64(st_find(f, "b"), 0) == 0.75);
    ASSERT_TRUE(st_get_f64(st_find(f, "c"), 0) == 1.0);
    ASSERT_TRUE(st_get_f64(st_find(f, "d"), 0) == -1.0);
    ASSERT_EQ(st_find(f, "e")->n_dims, 0); /* a scalar: one element */
    ASSERT_EQ(st_get_i64(st_find(f, "e"), 0), -7);
    ASSERT_EQ(st_get_i64(st_find(f, "f"), 0), 1234567890123LL);
    ASSERT_EQ(st_get_i64(st_find(f, "g"), 0), -2);
    ASSERT_EQ(st_get_i64(st_find(f, "h"), 0), 1);
    ASSERT_EQ(st_find(f, "z")->n_elem, 0);
    ASSERT_STR_EQ(st_metadata(f, "format"), "pt");
    ASSERT_TRUE(st_metadata(f, "other") == NULL);
    st_close(f);
}

TEST(st_corrupt_files) {
    char path[PATH_MAX + 32], err[512] = "";
    st_file *f = NULL;
    const char *T = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    /* empty file and a file shorter than the length field */
    snprintf(path, sizeof path, "%s/short.safetensors", test_tmpdir());
    ASSERT_OK(write_file(path, "", 0));
    ASSERT_EQ(st_open(path, &f, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "too short") != NULL);
    ASSERT_OK(write_file(path, "\x10\0\0", 3));
    ASSERT_EQ(st_open(path, &f, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "too short") != NULL);
    /* header length past EOF, and a 2^64-1 one (no overflow in the check) */
    ASSERT_OK(write_st(path, 1000000, T, NULL, 8));
    ASSERT_EQ(st_open(path, &f, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "past the end of the file") != NULL);
    ASSERT_OK(write_st(path, UINT64_MAX, T, NULL, 8));
    ASSERT_EQ(st_open(path, &f, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "past the end of the file") != NULL);
    /* the error names the file */
    ASSERT_TRUE(strstr(err, "short.safetensors") != NULL);
    /* the good one is accepted (the helpers are right) */
    ASSERT_OK(write_st(path, strlen(T), T, NULL, 8));
    st_file *ok = NULL;
    st_open(path, &ok, err, sizeof err);
    if (!ok) FAILF("%s", err);
    st_close(ok);

    ASSERT_TRUE(expect_st_error(T, 4, "past the data buffer"));     /* truncated data */
    ASSERT_TRUE(expect_st_error(T, 12, "trailing bytes"));          /* unindexed tail */
    ASSERT_TRUE(expect_st_error("{\"t\": [", 0, "header JSON invalid"));
    ASSERT_TRUE(expect_st_error("[1, 2]", 0, "JSON object"));
    ASSERT_TRUE(expect_st_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                8, "header JSON invalid")); /* duplicate key */
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                12, "overlaps"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8,
                                "past the data buffer"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                                "holes"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                                "unknown dtype 'F17'"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                                "needs 12"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                                "shape[0]"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904,8],"
                                "\"data_offsets\":[0,8]}}",
                                8, "overflows"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                                "begin 8 > end 0"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets"));
    ASSERT_TRUE(expect_st_error("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype"));
    ASSERT_TRUE(expect_st_error("{\"a\":7}", 0, "not an object"));
    ASSERT_TRUE(expect_st_error("{\"__metadata__\":{\"k\":1}}", 0, "not a string"));

    /* the fixture cut short anywhere: always refused, never a crash */
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/model.safetensors", fixture_dir());
    FILE *fp = fopen(src, "rb");
    ASSERT_TRUE(fp != NULL);
    uint8_t *buf = malloc(387288);
    size_t n = fread(buf, 1, 387288, fp);
    fclose(fp);
    ASSERT_EQ(n, 387288);
    const size_t cuts[] = {0, 7, 8, 100, 300, 1000, 236200, 387287};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ASSERT_OK(write_file(path, buf, cuts[i]));
        f = NULL;
        if (st_open(path, &f, err, sizeof err) != NX_STATUS_FORMAT || f) {
            st_close(f);
            free(buf);
            FAILF("truncated to %zu bytes accepted", cuts[i]);
        }
    }
    /* a flipped length byte */
    buf[2] ^= 0x40;
    st_file *f2 = NULL;
    nx_status st = st_open_mem(buf, n, &f2, err, sizeof err);
    free(buf);
    ASSERT_EQ(st, NX_STATUS_FORMAT);
    ASSERT_TRUE(f2 == NULL);
    ASSERT_TRUE(strstr(err, "past the end") != NULL);
}

/* ---- tokenizer -------------------------------------------------------------------------- */

static hf_tok *load_fixture_tok(void) {
    char path[PATH_MAX], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", fixture_dir());
    hf_tok *t = NULL;
    hf_tok_load(path, &t, err, sizeof err);
    if (!t) fprintf(stderr, "  %s\n", err);
    return t;
}

static int ids_equal(const hf_tok *t, const char *text, const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    char err[256] = "";
    int n = hf_tok_encode(t, text, strlen(text), &ids, err, sizeof err);
    int ok = n == n_want;
    for (int i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    if (!ok) {
        fprintf(stderr, "  \"%s\": got %d ids:", text, n);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d(%s)", ids[i], hf_tok_piece(t, ids[i]));
        fprintf(stderr, " %s\n", err);
    }
    nx_free(ids);
    return ok;
}

TEST(tok_normalize_pretokenize) {
    hf_tok *t = load_fixture_tok();
    ASSERT_TRUE(t != NULL);
    char err[256];
    /* BertNormalizer (lowercase, accents stripped, \t -> space), Replace " , " etc., \s+ -> " ",
     * Strip, then Metaspace "always" without split: one piece */
    char *s = hf_tok_debug_pretokenize(t, "  H\xc3\xa9llo,\tWORLD!! ", err, sizeof err);
    ASSERT_TRUE(s != NULL);
    ASSERT_STR_EQ(s, "\xe2\x96\x81hello\xe2\x96\x81,\xe2\x96\x81world\xe2\x96\x81!\xe2\x96\x81!");
    nx_free(s);
    /* control characters dropped, CJK spaced */
    s = hf_tok_debug_pretokenize(t, "a\x01" "b\xe6\x97\xa5" "c", err, sizeof err);
    ASSERT_STR_EQ(s, "\xe2\x96\x81" "ab\xe2\x96\x81\xe6\x97\xa5\xe2\x96\x81" "c");
    nx_free(s);
    /* empty and all-space text: nothing */
    s = hf_tok_debug_pretokenize(t, " \t\n ", err, sizeof err);
    ASSERT_STR_EQ(s, "");
    nx_free(s);
    hf_tok_free(t);
}

TEST(tok_ids_by_hand) {
    hf_tok *t = load_fixture_tok();
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(hf_tok_n_vocab(t), 29524);
    ASSERT_EQ(hf_tok_unk_id(t), 1);
    ASSERT_STR_EQ(hf_tok_piece(t, 6594), "\xe2\x96\x81hello");
    /* vocab: ▁hello 6594, ▁world 1091 (both -10.367); "▁hell"+"o" etc. score lower */
    ASSERT_TRUE(ids_equal(t, "hello", (int32_t[]){6594}, 1));
    ASSERT_TRUE(ids_equal(t, "Hello  World", (int32_t[]){6594, 1091}, 2));
    /* ▁the 999, ▁quick 3250, ▁brown 1831, ▁fox 3421 */
    ASSERT_TRUE(ids_equal(t, "The quick brown fox", (int32_t[]){999, 3250, 1831, 3421}, 4));
    /* ▁get 1134, ▁weather 3635, ▁forecast 18941 */
    ASSERT_TRUE(ids_equal(t, "get weather forecast", (int32_t[]){1134, 3635, 18941}, 3));
    /* "_" is split out by the Replace normalizer: ▁get ▁_ ▁weather */
    int32_t *ids = NULL;
    char err[256];
    int n = hf_tok_encode(t, "get_weather", 11, &ids, err, sizeof err);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(ids[0], 1134);
    ASSERT_STR_EQ(hf_tok_piece(t, ids[1]), "\xe2\x96\x81_");
    ASSERT_EQ(ids[2], 3635);
    nx_free(ids);
    /* "▁tokenization" is not a piece: ▁token 18206 + ization 2991 */
    ASSERT_TRUE(ids_equal(t, "Tokenization", (int32_t[]){18206, 2991}, 2));
    /* accents stripped: naïve -> ▁naive 14745 */
    ASSERT_TRUE(ids_equal(t, "na\xc3\xafve", (int32_t[]){14745}, 1));
    /* punctuation: ▁hello ▁, ▁world ▁! = 6594 13 1091 2 */
    ASSERT_TRUE(ids_equal(t, "hello,world!", (int32_t[]){6594, 13, 1091, 2}, 4));
    /* no piece covers "▁😀😀" ("▁" alone is not a piece): one fused [UNK] */
    ASSERT_TRUE(ids_equal(t, "hello \xf0\x9f\x98\x80\xf0\x9f\x98\x80", (int32_t[]){6594, 1}, 2));
    /* the added token [PAD] is matched in the raw text */
    ASSERT_TRUE(ids_equal(t, "hello[PAD]world", (int32_t[]){6594, 0, 1091}, 3));
    /* invalid UTF-8 reads as U+FFFD, which clean_text drops */
    ASSERT_TRUE(ids_equal(t, "hello\xff\xfe world", (int32_t[]){6594, 1091}, 2));
    ASSERT_TRUE(ids_equal(t, "", NULL, 0));
    /* model2vec's pre-truncation length: median piece length in code points */
    ASSERT_EQ(hf_tok_median_token_chars(t), 7);
    hf_tok_free(t);
}

TEST(tok_bad_files) {
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    struct {
        const char *json, *want;
    } cases[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", "model type 'BPE'"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "non-empty array"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}", "model.vocab[0]"},
        {"{\"model\": {\"type\": \"Unigram\", \"unk_id\": 5, \"vocab\": [[\"a\", -1]]}}", "unk_id 5"},
        {"{\"normalizer\": {\"type\": \"Precompiled\"}, \"model\": {\"type\": \"Unigram\", "
         "\"vocab\": [[\"a\", -1]]}}",
         "normalizer type 'Precompiled'"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"Unigram\", "
         "\"vocab\": [[\"a\", -1]]}}",
         "pre_tokenizer type 'ByteLevel'"},
        {"{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, \"content\": \"\"},"
         " \"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1]]}}",
         "regex"},
        {"{\"model\": ", "line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_OK(write_file(path, cases[i].json, strlen(cases[i].json)));
        hf_tok *t = NULL;
        hf_tok_load(path, &t, err, sizeof err);
        if (t) {
            hf_tok_free(t);
            FAILF("accepted: %s", cases[i].json);
        }
        if (!strstr(err, cases[i].want)) FAILF("error \"%s\" lacks \"%s\"", err, cases[i].want);
    }
    /* no unk_id and an uncovered character: a clear error, not a crash */
    const char *j = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1], [\"b\", -2]]}}";
    ASSERT_OK(write_file(path, j, strlen(j)));
    hf_tok *t = NULL;
    hf_tok_load(path, &t, err, sizeof err);
    if (!t) FAILF("%s", err);
    int32_t *ids;
    ASSERT_EQ(hf_tok_encode(t, "ab", 2, &ids, err, sizeof err), 2);
    ASSERT_EQ(ids[0], 0);
    ASSERT_EQ(ids[1], 1);
    nx_free(ids);
    ASSERT_EQ(hf_tok_encode(t, "ac", 2, &ids, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "no unk_id") != NULL);
    hf_tok_free(t);
}

TEST(tok_viterbi_and_byte_fallback) {
    /* pieces: a(-1) b(-1) ab(-1.5) abc(-5) c(-1); "abc": ab+c = -2.5 beats abc = -5 and
     * a+b+c = -3. Byte fallback: "é" = C3 A9 -> <0xC3> <0xA9>. */
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    const char *j = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true,"
                    " \"vocab\": [[\"<unk>\", 0], [\"a\", -1], [\"b\", -1], [\"ab\", -1.5],"
                    " [\"abc\", -5], [\"c\", -1], [\"<0xC3>\", -9], [\"<0xA9>\", -9]]}}";
    ASSERT_OK(write_file(path, j, strlen(j)));
    hf_tok *t = NULL;
    hf_tok_load(path, &t, err, sizeof err);
    if (!t) FAILF("%s", err);
    ASSERT_TRUE(ids_equal(t, "abc", (int32_t[]){3, 5}, 2));
    ASSERT_TRUE(ids_equal(t, "cab", (int32_t[]){5, 3}, 2));
    ASSERT_TRUE(ids_equal(t, "a\xc3\xa9" "b", (int32_t[]){1, 6, 7, 2}, 4));
    /* a character with no byte pieces: [unk] */
    ASSERT_TRUE(ids_equal(t, "a\xc3\xa8", (int32_t[]){1, 0}, 2));
    hf_tok_free(t);
}

TEST(tok_pretokenizer_variants) {
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    struct {
        const char *norm, *pre, *in, *want;
    } cases[] = {
        /* WhitespaceSplit then Metaspace "first" with split: only the text's first piece gets ▁ */
        {"null",
         "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},"
         "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true}]}",
         "Hello  big\tWorld", "\xe2\x96\x81Hello|big|World"},
        /* Metaspace always + split: every word starts with ▁ */
        {"null", "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"add_prefix_space\":true}",
         "hello big world", "\xe2\x96\x81hello|\xe2\x96\x81" "big|\xe2\x96\x81world"},
        /* Metaspace never, no split */
        {"null",
         "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"never\",\"split\":false}",
         "a b", "a\xe2\x96\x81" "b"},
        /* Replace with a regex, NFKC (ﬁ -> fi), Lowercase, Prepend */
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Lowercase\"},"
         "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[0-9]+\"},\"content\":\"#\"},"
         "{\"type\":\"Prepend\",\"prepend\":\">\"}]}",
         "null", "A12\xef\xac\x81" "B3", ">a#fib#"},
        /* StripAccents after NFD; Strip right only */
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},"
         "{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}]}",
         "null", "  caf\xc3\xa9  ", "  cafe"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"normalizer\": %s, \"pre_tokenizer\": %s, \"model\": {\"type\": \"Unigram\", "
                 "\"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1]]}}",
                 cases[i].norm, cases[i].pre);
        ASSERT_OK(write_file(path, json, strlen(json)));
        hf_tok *t = NULL;
        hf_tok_load(path, &t, err, sizeof err);
        if (!t) FAILF("case %zu: %s", i, err);
        char *got = hf_tok_debug_pretokenize(t, cases[i].in, err, sizeof err);
        hf_tok_free(t);
        if (!got) FAILF("case %zu: %s", i, err);
        if (strcmp(got, cases[i].want) != 0) {
            fprintf(stderr, "  case %zu: \"%s\" != \"%s\"\n", i, got, cases[i].want);
            nx_free(got);
            FAILF("pre-tokenization differs");
        }
        nx_free(got);
    }
}

/* A hostile normalizer chain: each Replace doubles the text ("a" -> "aa"), 24 of them would
 * turn "aaaa" into 64 MiB. It fails with a message naming the growth, well before that (the
 * limit is 64x the segment + 64 KiB), and a real chain of the same length (Lowercase) passes. */
TEST(tok_normalizer_growth_is_bounded) {
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    for (int hostile = 1; hostile >= 0; hostile--) {
        char json[8192];
        int k = snprintf(json, sizeof json, "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [");
        for (int i = 0; i < 24; i++)
            k += snprintf(json + k, sizeof json - (size_t)k, "%s%s", i ? "," : "",
                          hostile ? "{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"aa\"}"
                                  : "{\"type\":\"Lowercase\"}");
        snprintf(json + k, sizeof json - (size_t)k,
                 "]}, \"model\": {\"type\": \"Unigram\", \"unk_id\": 0,"
                 " \"vocab\": [[\"<unk>\", 0], [\"a\", -1]]}}");
        ASSERT_OK(write_file(path, json, strlen(json)));
        hf_tok *t = NULL;
        hf_tok_load(path, &t, err, sizeof err);
        if (!t) FAILF("%s", err);
        int32_t *ids = NULL;
        err[0] = 0;
        int n = hf_tok_encode(t, "aaaa", 4, &ids, err, sizeof err);
        nx_free(ids);
        char *pre = hf_tok_debug_pretokenize(t, "aaaa", err, sizeof err);
        hf_tok_free(t);
        if (hostile) {
            ASSERT_EQ(n, (int)NX_STATUS_FORMAT);
            ASSERT_TRUE(pre == NULL);
            if (!strstr(err, "normalizers grow the text past")) FAILF("message: %s", err);
        } else {
            ASSERT_EQ(n, 4);
            ASSERT_TRUE(pre != NULL && strcmp(pre, "aaaa") == 0);
        }
        nx_free(pre);
    }
}

#define WP_JSON                                                                                     \
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"[UNK]\"}],"                                    \
    " \"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": true},"                        \
    " \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},"                                        \
    " \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\","                              \
    " \"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": 100,"                   \
    " \"vocab\": {\"[UNK]\": 0, \"[PAD]\": 1, \"un\": 2, \"##aff\": 3, \"##able\": 4, \"hello\": 5," \
    " \",\": 6, \"world\": 7, \"!\": 8, \"##s\": 9, \"a\": 10, \"##a\": 11}}}"

TEST(tok_wordpiece) {
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    ASSERT_OK(write_file(path, WP_JSON, strlen(WP_JSON)));
    hf_tok *t = NULL;
    hf_tok_load(path, &t, err, sizeof err);
    if (!t) FAILF("%s", err);
    ASSERT_EQ(hf_tok_n_vocab(t), 12);
    ASSERT_EQ(hf_tok_unk_id(t), 0);
    /* whitespace dropped, punctuation isolated, greedy longest match with ## continuations */
    char *pre = hf_tok_debug_pretokenize(t, "Unaff\xc3\xa1" "ble, Worlds!", err, sizeof err);
    ASSERT_STR_EQ(pre, "unaffable|,|worlds|!");
    nx_free(pre);
    ASSERT_TRUE(ids_equal(t, "Unaff\xc3\xa1" "ble, Worlds!", (int32_t[]){2, 3, 4, 6, 7, 9, 8}, 7));
    /* a word that cannot be covered is one [UNK], the rest is unaffected */
    ASSERT_TRUE(ids_equal(t, "xyz hello", (int32_t[]){0, 5}, 2));
    ASSERT_TRUE(ids_equal(t, "helloz", (int32_t[]){0}, 1));
    /* 100 characters: a + 99 x ##a; 101: [UNK] */
    char w[102];
    memset(w, 'a', 101);
    w[100] = 0;
    int32_t *ids;
    ASSERT_EQ(hf_tok_encode(t, w, 100, &ids, err, sizeof err), 100);
    ASSERT_EQ(ids[0], 10);
    ASSERT_EQ(ids[99], 11);
    nx_free(ids);
    w[100] = 'a';
    w[101] = 0;
    ASSERT_TRUE(ids_equal(t, w, (int32_t[]){0}, 1));
    hf_tok_free(t);
    /* bad WordPiece files */
    const char *bad[][2] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0, \"b\": 0}}}", "used twice"},
        {"{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"a\": 0}}}",
         "unk_token '[UNK]' is not in the vocab"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": -3}}}", "not an id"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": [[\"a\", 0]]}}", "{token: id}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_OK(write_file(path, bad[i][0], strlen(bad[i][0])));
        hf_tok *b = NULL;
        hf_tok_load(path, &b, err, sizeof err);
        if (b) {
            hf_tok_free(b);
            FAILF("accepted %s", bad[i][0]);
        }
        if (!strstr(err, bad[i][1])) FAILF("\"%s\" lacks \"%s\"", err, bad[i][1]);
    }
}

TEST(tok_random_bytes_never_fail) {
    hf_tok *t = load_fixture_tok();
    ASSERT_TRUE(t != NULL);
    uint64_t s = 12345;
    char buf[256];
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 0;
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        n = (size_t)(s >> 33) % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            /* half the trials printable ASCII, half any byte */
            buf[i] = (char)(trial % 2 ? (s >> 56) : 32 + (s >> 33) % 95);
        }
        int32_t *ids = NULL;
        char err[256];
        int k = hf_tok_encode(t, buf, n, &ids, err, sizeof err);
        if (k < 0) FAILF("trial %d: %s", trial, err);
        for (int i = 0; i < k; i++)
            if (ids[i] < 0 || ids[i] >= hf_tok_n_vocab(t)) FAILF("trial %d: id %d", trial, ids[i]);
        nx_free(ids);
    }
    hf_tok_free(t);
}

TEST(st_random_header_corruption) {
    /* random byte changes in a valid file's header: refused with a message, or, when the
     * result is still valid, every tensor inside the buffer */
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}";
    size_t hn = strlen(hdr), n = 8 + hn + 32;
    uint8_t *good = malloc(n), *b = malloc(n);
    for (int i = 0; i < 8; i++) good[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(good + 8, hdr, hn);
    memset(good + 8 + hn, 0x11, 32);
    const char digits[] = "0123456789[]{}\",:-e.FIU";
    uint64_t s = 99;
    int refused = 0, accepted = 0;
    for (int trial = 0; trial < 4000; trial++) {
        memcpy(b, good, n);
        for (int k = 0; k < 1 + trial % 3; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(s >> 33) % (8 + hn);
            b[at] = (uint8_t)(at < 8 ? (s >> 20) : (uint8_t)digits[(s >> 20) % (sizeof digits - 1)]);
        }
        char err[512] = "";
        st_file *f = NULL;
        st_open_mem(b, n, &f, err, sizeof err);
        if (!f) {
            if (!err[0]) FAILF("trial %d: refused without a message", trial);
            refused++;
            continue;
        }
        accepted++;
        for (int i = 0; i < st_n_tensors(f); i++) {
            const struct st_tensor *t = st_tensor_at(f, i);
            if (t->data < b + 8 || t->data + t->nbytes > b + n) FAILF("trial %d: tensor outside", trial);
        }
        st_close(f);
    }
    free(good);
    free(b);
    ASSERT_TRUE(refused > 1000 && accepted > 0);
}

/* ---- the embedder ---------------------------------------------------------------------- */

TEST(m2v_reference_hello_x1000) {
    char path[PATH_MAX], err[512] = "";
    snprintf(path, sizeof path, "%s/reference_embedding_hello_x1000.json", fixture_dir());
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) FAILF("%s: %s", path, je.text);
    json_t *row = json_array_get(ref, 0);
    ASSERT_EQ(json_array_size(row), 64);

    rt_embedder *e = NULL;

    rt_embedder_open(fixture_dir(), &e, err, sizeof err);
    if (!e) {
        json_decref(ref);
        FAILF("%s", err);
    }
    ASSERT_EQ(e->dim, 64);
    ASSERT_STR_EQ(e->name, "model2vec");
    char *text = malloc(6000);
    size_t o = 0;
    for (int i = 0; i < 1000; i++) o += (size_t)sprintf(text + o, i ? " hello" : "hello");
    float out[64];
    ASSERT_OK(e->embed(e, text, RT_QUERY, out, err, sizeof err));
    double maxd = 0, ss = 0;
    for (int d = 0; d < 64; d++) {
        double r = json_number_value(json_array_get(row, (size_t)d));
        maxd = fmax(maxd, fabs(out[d] - r));
        ss += (double)out[d] * out[d];
    }
    printf("  model2vec reference: max |diff| = %.3g over 64 dims\n", maxd);
    ASSERT_TRUE(maxd <= 1e-6);
    ASSERT_NEAR(ss, 1.0, 1e-6);
    /* 512 * 7 code points -> 597 words + "he"; 598 ids, cut to 512, all ▁hello */
    int32_t *ids;
    int n = rt_model2vec_ids(e, text, &ids, err, sizeof err);
    ASSERT_EQ(n, 512);
    for (int i = 0; i < n; i++)
        if (ids[i] != 6594) FAILF("id %d = %d", i, ids[i]);
    nx_free(ids);
    /* query and document embed the same */
    float out2[64];
    ASSERT_OK(e->embed(e, text, RT_DOCUMENT, out2, err, sizeof err));
    ASSERT_TRUE(memcmp(out, out2, sizeof out) == 0);
    /* no token at all: the zero vector */
    ASSERT_OK(e->embed(e, "  \xf0\x9f\x98\x80 ", RT_QUERY, out, err, sizeof err));
    for (int d = 0; d < 64; d++) ASSERT_TRUE(out[d] == 0.0f);
    ASSERT_OK(e->embed(e, "", RT_QUERY, out, err, sizeof err));
    ASSERT_TRUE(out[0] == 0.0f);
    free(text);
    json_decref(ref);
    rt_embedder_free(e);
}

TEST(m2v_truncation_cuts_text_then_ids) {
    char err[512] = "";
    rt_embedder *e = NULL;
    rt_embedder_open(fixture_dir(), &e, err, sizeof err);
    if (!e) FAILF("%s", err);
    /* 600 x "hello world": the 512 ids are 256 x (▁hello, ▁world), the rest is cut */
    char *text = malloc(600 * 12 + 1);
    size_t o = 0;
    for (int i = 0; i < 600; i++) o += (size_t)sprintf(text + o, "hello world ");
    int32_t *ids;
    int n = rt_model2vec_ids(e, text, &ids, err, sizeof err);
    ASSERT_EQ(n, 512);
    ASSERT_EQ(ids[510], 6594);
    ASSERT_EQ(ids[511], 1091);
    nx_free(ids);
    /* a single 5000-character word: cut to 3584 characters before tokenizing, its pieces then
     * cut to 512 */
    memset(text, 'a', 5000);
    text[5000] = 0;
    n = rt_model2vec_ids(e, text, &ids, err, sizeof err);
    ASSERT_TRUE(n > 0 && n <= 512);
    nx_free(ids);
    free(text);
    rt_embedder_free(e);
}

/* Write dir/model.safetensors from (name, dtype, shape, data) tensors. */
struct tspec {
    const char *name, *dtype, *shape;
    const void *data;
    size_t nbytes;
};
static int write_model(const char *dir, const struct tspec *t, int n) {
    char hdr[4096];
    size_t off = 0, h = 0, total = 0;
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "{");
    for (int i = 0; i < n; i++) {
        h += (size_t)snprintf(hdr + h, sizeof hdr - h,
                              "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", t[i].name, t[i].dtype, t[i].shape, off, off + t[i].nbytes);
        off += t[i].nbytes;
    }
    snprintf(hdr + h, sizeof hdr - h, "}");
    total = off;
    uint8_t *data = malloc(total ? total : 1);
    off = 0;
    for (int i = 0; i < n; i++) {
        memcpy(data + off, t[i].data, t[i].nbytes);
        off += t[i].nbytes;
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = write_st(path, strlen(hdr), hdr, data, total);
    free(data);
    return rc;
}

static int setup_model_dir(const char *normalize_json) {
    char src[PATH_MAX], dst[PATH_MAX + 32], real[PATH_MAX];
    snprintf(src, sizeof src, "%s/tokenizer.json", fixture_dir());
    if (!realpath(src, real)) return -1;
    snprintf(dst, sizeof dst, "%s/tokenizer.json", test_tmpdir());
    unlink(dst);
    if (symlink(real, dst) != 0) return -1;
    snprintf(dst, sizeof dst, "%s/config.json", test_tmpdir());
    return write_file(dst, normalize_json, strlen(normalize_json));
}

#define NV 29524

TEST(m2v_pooling_weights_mapping) {
    /* rows: r0 = (1, 0), r1 = (0, 1); mapping: every token -> r0, except ▁world (1091) -> r1;
     * weights: 1, except ▁hello (6594) = 3 (indexed by token id, not by row).
     * "hello world": mean((3, 0), (0, 1)) = (1.5, 0.5); normalized (3, 1) / sqrt(10).
     * "world world hello": mean((0,1), (0,1), (3,0)) = (1, 2/3). */
    ASSERT_OK(setup_model_dir("{\"normalize\": true}"));
    float emb[4] = {1, 0, 0, 1};
    static int32_t map[NV];
    static double w[NV];
    for (int i = 0; i < NV; i++) {
        map[i] = 0;
        w[i] = 1;
    }
    map[1091] = 1;
    w[6594] = 3;
    struct tspec ts[] = {{"embeddings", "F32", "[2,2]", emb, sizeof emb},
                         {"mapping", "I32", "[29524]", map, sizeof map},
                         {"weights", "F64", "[29524]", w, sizeof w}};
    ASSERT_OK(write_model(test_tmpdir(), ts, 3));
    char err[512] = "";
    rt_embedder *e = NULL;
    rt_embedder_open(test_tmpdir(), &e, err, sizeof err);
    if (!e) FAILF("%s", err);
    ASSERT_EQ(e->dim, 2);
    double mean[2];
    int norm = 0;
    ASSERT_OK(rt_model2vec_mean(e, "hello world", mean, &norm, err, sizeof err));
    ASSERT_EQ(norm, 1);
    ASSERT_TRUE(mean[0] == 1.5 && mean[1] == 0.5);
    ASSERT_OK(rt_model2vec_mean(e, "world world hello", mean, NULL, err, sizeof err));
    ASSERT_NEAR(mean[0], 1.0, 1e-15);
    ASSERT_NEAR(mean[1], 2.0 / 3.0, 1e-15);
    float out[2];
    ASSERT_OK(e->embed(e, "hello world", RT_QUERY, out, err, sizeof err));
    ASSERT_NEAR(out[0], 3 / sqrt(10.0), 1e-7);
    ASSERT_NEAR(out[1], 1 / sqrt(10.0), 1e-7);
    rt_embedder_free(e);

    /* no mapping: rows must equal the vocabulary */
    ASSERT_OK(write_model(test_tmpdir(), ts, 1));
    rt_embedder_open(test_tmpdir(), &e, err, sizeof err);
    ASSERT_TRUE(e == NULL);
    ASSERT_TRUE(strstr(err, "2 embedding rows for 29524 tokens") != NULL);
}

TEST(m2v_wordpiece_model) {
    /* a WordPiece model2vec directory, no mapping or weights: rows = tokens.
     * "Hello, world! qqq": ids hello 5, "," 6, world 7, "!" 8, [UNK] dropped ->
     * mean of rows 5..8 = ((1+0+1+0)/4, (0+1+2+3)/4) = (0.5, 1.5) with row r = (r % 2 == 1, r - 5) */
    char path[PATH_MAX + 32], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", test_tmpdir());
    unlink(path);
    ASSERT_OK(write_file(path, WP_JSON, strlen(WP_JSON)));
    snprintf(path, sizeof path, "%s/config.json", test_tmpdir());
    ASSERT_OK(write_file(path, "{\"normalize\": false}", 20));
    float emb[24];
    for (int r = 0; r < 12; r++) {
        emb[2 * r] = (float)(r % 2 == 1);
        emb[2 * r + 1] = (float)(r - 5);
    }
    struct tspec ts[] = {{"embeddings", "F32", "[12,2]", emb, sizeof emb}};
    ASSERT_OK(write_model(test_tmpdir(), ts, 1));
    rt_embedder *e = NULL;
    rt_embedder_open(test_tmpdir(), &e, err, sizeof err);
    if (!e) FAILF("%s", err);
    double mean[2];
    int norm = 1;
    ASSERT_OK(rt_model2vec_mean(e, "Hello, world! qqq", mean, &norm, err, sizeof err));
    ASSERT_EQ(norm, 0);
    ASSERT_TRUE(mean[0] == 0.5 && mean[1] == 1.5);
    rt_embedder_free(e);
}

TEST(m2v_bad_models) {
    ASSERT_OK(setup_model_dir("{\"normalize\": true}"));
    float emb[4] = {1, 0, 0, 1};
    static int32_t map[NV];
    static float mapf[NV];
    memset(map, 0, sizeof map);
    char err[512] = "";
    struct {
        struct tspec t[2];
        int n;
        const char *want;
    } cases[] = {
        {{{"embeddings", "F32", "[2,2]", emb, sizeof emb}, {"mapping", "F32", "[29524]", mapf, sizeof mapf}},
         2, "'mapping' must be a 1-D integer"},
        {{{"embeddings", "F32", "[4]", emb, sizeof emb}, {"mapping", "I32", "[29524]", map, sizeof map}},
         2, "must be 2-D"},
        {{{"emb", "F32", "[2,2]", emb, sizeof emb}, {"mapping", "I32", "[29524]", map, sizeof map}},
         2, "no \"embeddings\" tensor"},
        {{{"embeddings", "F32", "[2,2]", emb, sizeof emb}, {"mapping", "I32", "[100]", map, 400}},
         2, "'mapping' must be a 1-D integer [29524]"},
        {{{"embeddings", "F8_E4M3", "[2,2]", emb, 4}, {"mapping", "I32", "[29524]", map, sizeof map}},
         2, "dtype F8_E4M3 is not supported"},
        {{{"embeddings", "F32", "[2,2]", emb, sizeof emb}, {"weights", "F32", "[29524,1]", mapf, sizeof mapf}},
         2, "'weights' must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_OK(write_model(test_tmpdir(), cases[i].t, cases[i].n));
        rt_embedder *e = NULL;
        rt_embedder_open(test_tmpdir(), &e, err, sizeof err);
        if (e) {
            rt_embedder_free(e);
            FAILF("case %zu accepted", i);
        }
        if (!strstr(err, cases[i].want)) FAILF("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].want);
    }
    /* a mapping row out of range */
    rt_embedder *e = NULL;
    map[77] = 2;
    struct tspec t2[] = {{"embeddings", "F32", "[2,2]", emb, sizeof emb},
                         {"mapping", "I32", "[29524]", map, sizeof map}};
    ASSERT_OK(write_model(test_tmpdir(), t2, 2));
    ASSERT_EQ(rt_embedder_open(test_tmpdir(), &e, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "token 77 maps to row 2") != NULL);
    map[77] = 0;
    /* a NaN in the embeddings */
    float bad[4] = {1, NAN, 0, 1};
    struct tspec t3[] = {{"embeddings", "F32", "[2,2]", bad, sizeof bad},
                         {"mapping", "I32", "[29524]", map, sizeof map}};
    ASSERT_OK(write_model(test_tmpdir(), t3, 2));
    ASSERT_EQ(rt_embedder_open(test_tmpdir(), &e, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "not finite") != NULL);
    /* a weight whose product with its row overflows a float (fuzz_model2vec: 7e295 on a row
       holding 3e29 made every embedding NaN); 1e30 on a row of ones still fits */
    static double wts[NV];
    for (int i = 0; i < NV; i++) wts[i] = 1;
    wts[5] = 1e300;
    struct tspec t4[] = {{"embeddings", "F32", "[2,2]", emb, sizeof emb},
                         {"weights", "F64", "[29524]", wts, sizeof wts},
                         {"mapping", "I32", "[29524]", map, sizeof map}};
    ASSERT_OK(write_model(test_tmpdir(), t4, 3));
    ASSERT_EQ(rt_embedder_open(test_tmpdir(), &e, err, sizeof err), NX_STATUS_FORMAT);
    if (!strstr(err, "'weights': element 5") || !strstr(err, "overflows a float")) FAILF("%s", err);
    wts[5] = 1e30;
    ASSERT_OK(write_model(test_tmpdir(), t4, 3));
    ASSERT_OK(rt_embedder_open(test_tmpdir(), &e, err, sizeof err));
    rt_embedder_free(e);
    e = NULL;
    /* config.json that is not an object, then a missing model.safetensors */
    ASSERT_OK(setup_model_dir("[true]"));
    ASSERT_EQ(rt_embedder_open(test_tmpdir(), &e, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "config.json") != NULL);
    ASSERT_OK(setup_model_dir("{}"));
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/model.safetensors", test_tmpdir());
    unlink(p);
    ASSERT_EQ(rt_embedder_open(test_tmpdir(), &e, err, sizeof err), NX_STATUS_NOT_FOUND);
    ASSERT_TRUE(e == NULL);
    ASSERT_TRUE(strstr(err, "model.safetensors") != NULL && strstr(err, "cannot open") != NULL);
    /* a directory without tokenizer.json */
    ASSERT_EQ(rt_embedder_open("/", &e, err, sizeof err), NX_STATUS_NOT_FOUND);
    ASSERT_TRUE(strstr(err, "tokenizer.json") != NULL);
}

TEST(m2v_latency_preliminary) {
    /* informational (a busy shared machine): embedding a short query end to end */
    char err[512] = "";
    rt_embedder *e = NULL;
    rt_embedder_open(fixture_dir(), &e, err, sizeof err);
    if (!e) FAILF("%s", err);
    float out[64];
    const int reps = 2000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < reps; i++)
        ASSERT_OK(e->embed(e, "get the weather forecast for Paris tomorrow", RT_QUERY, out, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps;
    printf("  model2vec embed of a 43-byte query: %.1f us (preliminary)\n", us);
    rt_embedder_free(e);
}


TEST_MAIN
