/*
 * test_gguf.c - GGUF reader and writer: the shared models, writer round trips (every value
 * type, arrays, alignment 64, a byte-identical rewrite of stories260K), one handcrafted corrupt
 * file per defect (built in memory with a byte builder; some through real files in /tmp), every
 * truncation of small valid files, and allocation-failure injection during open and add.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "gguf/gguf.h"
#include "support/tmpdir.h"
#include "test.h"

/* ---- helpers ---- */

static char *model_path(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/models/%s", test_shared(), rel);
    return buf;
}

/* Growable byte buffer for handcrafted files. */
struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_raw(struct bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_raw(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_raw(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_raw(b, &v, 8); }
static void bb_strn(struct bb *b, const void *s, size_t n) {
    bb_u64(b, n);
    bb_raw(b, s, n);
}
static void bb_str(struct bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_zeros(struct bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}
static void bb_pad(struct bb *b, size_t a) { bb_zeros(b, (a - b->n % a) % a); }
static void bb_free(struct bb *b) {
    free(b->p);
    *b = (struct bb){0};
}

static void hdr(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_raw(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void kv_u32(struct bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, GGUF_VTYPE_U32);
    bb_u32(b, v);
}
static void kv_str(struct bb *b, const char *key, const char *v) {
    bb_str(b, key);
    bb_u32(b, GGUF_VTYPE_STRING);
    bb_str(b, v);
}
static void tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* Open b; true when the status is `want` and (for errors) the message contains every needle. */
static bool expect(const struct bb *b, nx_status want, const char *n1, const char *n2) {
    struct gguf_file *f = (struct gguf_file *)1;
    struct nx_err err = {{0}};
    nx_status st = gguf_open_buffer(b->p, b->n, &f, &err);
    bool ok = st == want;
    if (st == NX_STATUS_OK) {
        gguf_close(f);
    } else {
        ok = ok && f == NULL;
        if (n1 && !strstr(err.msg, n1)) ok = false;
        if (n2 && !strstr(err.msg, n2)) ok = false;
    }
    if (!ok)
        fprintf(stderr, "  got %s \"%s\", want %s with \"%s\" \"%s\"\n", nx_status_name(st),
                err.msg, nx_status_name(want), n1 ? n1 : "", n2 ? n2 : "");
    return ok;
}

/* A small valid file: 3 kvs, 2 F32 tensors whose data ends exactly at the end of the file. */
static void small_valid(struct bb *b, uint32_t version) {
    hdr(b, version, 2, 3);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.block_count", 5);
    bb_str(b, "tokenizer.ggml.tokens");
    bb_u32(b, GGUF_VTYPE_ARRAY);
    bb_u32(b, GGUF_VTYPE_STRING);
    bb_u64(b, 3);
    bb_str(b, "<unk>");
    bb_str(b, "");
    bb_str(b, "hello");
    uint64_t ne_a[1] = {8}, ne_b[2] = {4, 2};
    tinfo(b, "a", 1, ne_a, 0, 0);
    tinfo(b, "b", 2, ne_b, 0, 32);
    bb_pad(b, 32);
    for (uint32_t i = 0; i < 16; i++) {
        float v = (float)i;
        bb_raw(b, &v, 4);
    }
}


static bool write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = fwrite(p, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && fread(p, 1, (size_t)len, fp) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(fp);
    *n = (size_t)len;
    return p;
}

/* Entries of dir whose name contains `part`. */
static int count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

/* ---- the shared models ---- */

TEST(stories260k) {
    char path[512];
    struct gguf_file *f;
    struct nx_err err = {{0}};
    size_t before = nx_alloc_bytes();
    ASSERT_OK(gguf_open(model_path(path, sizeof path, "stories260K/stories260K.gguf"), &f, &err));
    ASSERT_EQ(gguf_version(f), 3);
    ASSERT_EQ(gguf_n_tensors(f), 48);
    ASSERT_EQ(gguf_n_kv(f), 19);
    ASSERT_EQ(gguf_alignment(f), 32);
    ASSERT_EQ(gguf_file_size(f), 1185376);
    ASSERT_EQ(gguf_data_offset(f), 14176);
    uint32_t u = 0;
    ASSERT_TRUE(gguf_get_u32(f, "llama.block_count", &u));
    ASSERT_EQ(u, 5);
    ASSERT_TRUE(gguf_get_u32(f, "llama.embedding_length", &u));
    ASSERT_EQ(u, 64);
    ASSERT_TRUE(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u));
    ASSERT_EQ(u, 4294967295u);
    int32_t i32 = 7;
    ASSERT_TRUE(!gguf_get_i32(f, "tokenizer.ggml.padding_token_id", &i32)); /* does not fit */
    ASSERT_EQ(i32, 7);
    float eps = 0;
    ASSERT_TRUE(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps));
    ASSERT_NEAR(eps, 1e-5, 1e-9);
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(f, "general.architecture", &s, &len));
    ASSERT_EQ(len, 5);
    ASSERT_TRUE(memcmp(s, "llama", 5) == 0);
    int64_t ki = gguf_find_key(f, "general.architecture");
    ASSERT_TRUE(ki >= 0);
    ASSERT_STR_EQ(gguf_kv_key(f, ki), "general.architecture");
    ASSERT_EQ(gguf_kv_type(f, ki), GGUF_VTYPE_STRING);
    ASSERT_EQ(gguf_find_key(f, "no.such.key"), -1);
    ASSERT_TRUE(gguf_kv_key(f, 19) == NULL);
    ASSERT_EQ(gguf_kv_type(f, -1), GGUF_VTYPE_COUNT);

    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    ASSERT_TRUE(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &data));
    ASSERT_EQ(et, GGUF_VTYPE_STRING);
    ASSERT_EQ(n, 512);
    ASSERT_TRUE(data == NULL);
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 1, &s, &len));
    ASSERT_EQ(len, 3);
    ASSERT_TRUE(memcmp(s, "<s>", 3) == 0);
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 0, &s, &len));
    ASSERT_TRUE(len == 5 && memcmp(s, "<unk>", 5) == 0);
    ASSERT_TRUE(!gguf_arr_str(f, "tokenizer.ggml.tokens", 512, &s, &len));
    ASSERT_TRUE(gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n, &data));
    ASSERT_EQ(et, GGUF_VTYPE_I32);
    ASSERT_EQ(n, 512);
    int64_t tt = 0;
    ASSERT_TRUE(gguf_arr_i64(f, "tokenizer.ggml.token_type", 0, &tt));
    ASSERT_EQ(tt, 2);
    ASSERT_TRUE(gguf_arr_i64(f, "tokenizer.ggml.token_type", 3, &tt));
    ASSERT_EQ(tt, 6);
    double sc = 1;
    ASSERT_TRUE(gguf_arr_f64(f, "tokenizer.ggml.scores", 0, &sc));
    ASSERT_NEAR(sc, 0.0, 0);

    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_STR_EQ(t->name, "token_embd.weight");
    ASSERT_EQ(t->type, NX_TYPE_F32);
    ASSERT_EQ(t->n_dims, 2);
    ASSERT_EQ(t->ne[0], 64);
    ASSERT_EQ(t->ne[1], 512);
    ASSERT_EQ(t->ne[2], 1);
    ASSERT_EQ(t->ne[3], 1);
    ASSERT_EQ(t->nbytes, 64 * 512 * 4);
    ASSERT_TRUE(gguf_tensor(f, 0) == t);
    const struct gguf_tensor *t2 = gguf_find_tensor(f, "blk.0.ffn_down.weight");
    ASSERT_TRUE(t2 != NULL);
    ASSERT_EQ(t2->ne[0], 172);
    ASSERT_EQ(t2->ne[1], 64);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.5.ffn_down.weight") == NULL);
    ASSERT_TRUE(gguf_tensor(f, 48) == NULL);
    /* every tensor findable by its name, data inside the file and aligned */
    size_t end_max = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *ti = gguf_tensor(f, i);
        ASSERT_TRUE(gguf_find_tensor(f, ti->name) == ti);
        ASSERT_EQ(ti->offset % 32, 0);
        size_t end = gguf_data_offset(f) + ti->offset + ti->nbytes;
        ASSERT_TRUE(end <= gguf_file_size(f));
        if (end > end_max) end_max = end;
        float v;
        memcpy(&v, ti->data, 4);
        ASSERT_TRUE(isfinite(v));
    }
    ASSERT_EQ(end_max, 1185376);
    gguf_close(f);
    ASSERT_EQ(nx_alloc_bytes(), before);
}

TEST(llama2_tiny_random) {
    char path[512];
    struct gguf_file *f;
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_open(model_path(path, sizeof path,
                                   "llama-2-tiny-random/llama-2-tiny-random.gguf"), &f, &err));
    ASSERT_EQ(gguf_version(f), 3);
    ASSERT_EQ(gguf_n_tensors(f), 12);
    ASSERT_EQ(gguf_n_kv(f), 18);
    ASSERT_EQ(gguf_alignment(f), 32);
    ASSERT_EQ(gguf_data_offset(f), 724416);
    ASSERT_EQ(gguf_file_size(f), 1750560);
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(f, "general.name", &s, &len));
    ASSERT_TRUE(len == 8 && memcmp(s, "LLaMA v2", 8) == 0);
    uint32_t u;
    ASSERT_TRUE(gguf_get_u32(f, "llama.context_length", &u));
    ASSERT_EQ(u, 4096);
    ASSERT_TRUE(gguf_get_u32(f, "general.file_type", &u));
    ASSERT_EQ(u, 1);
    uint64_t n;
    enum gguf_vtype et;
    ASSERT_TRUE(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, NULL));
    ASSERT_EQ(et, GGUF_VTYPE_STRING);
    ASSERT_EQ(n, 32000);
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 2, &s, &len));
    ASSERT_TRUE(len == 4 && memcmp(s, "</s>", 4) == 0);
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 3, &s, &len));
    ASSERT_TRUE(len == 6 && memcmp(s, "<0x00>", 6) == 0);
    /* every element reachable; the strings tile the array's bytes */
    for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s,
                                                              &len));
    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->type, NX_TYPE_F16);
    ASSERT_EQ(t->ne[0], 8);
    ASSERT_EQ(t->ne[1], 32000);
    ASSERT_EQ(t->nbytes, 8 * 32000 * 2);
    t = gguf_find_tensor(f, "output_norm.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->type, NX_TYPE_F32);
    ASSERT_EQ(t->n_dims, 1);
    ASSERT_EQ(t->ne[0], 8);
    t = gguf_find_tensor(f, "output.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(gguf_data_offset(f) + t->offset + t->nbytes, 1750560);
    gguf_close(f);
}

TEST(v1_refused) {
    char path[512];
    struct gguf_file *f = (struct gguf_file *)1;
    struct nx_err err = {{0}};
    nx_status st = gguf_open(model_path(path, sizeof path,
                                        "stories260K-v1/tinyllamas-stories-260k-f32.gguf"),
                             &f, &err);
    ASSERT_EQ(st, NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(f == NULL);
    ASSERT_TRUE(strstr(err.msg, "v1") != NULL);
    ASSERT_TRUE(strstr(err.msg, "not supported") != NULL);
}

/* ---- writer ---- */

TEST(writer_round_trip_all_types) {
    size_t before = nx_alloc_bytes();
    struct gguf_writer *w = gguf_writer_init();
    ASSERT_TRUE(w != NULL);
    gguf_writer_set_alignment(w, 64);
    ASSERT_OK(gguf_writer_add_u8(w, "t.u8", 200));
    ASSERT_OK(gguf_writer_add_i8(w, "t.i8", -100));
    ASSERT_OK(gguf_writer_add_u16(w, "t.u16", 60000));
    ASSERT_OK(gguf_writer_add_i16(w, "t.i16", -30000));
    ASSERT_OK(gguf_writer_add_u32(w, "t.u32", 4000000000u));
    ASSERT_OK(gguf_writer_add_i32(w, "t.i32", -2000000000));
    ASSERT_OK(gguf_writer_add_f32(w, "t.f32", 1.5f));
    ASSERT_OK(gguf_writer_add_bool(w, "t.bool", true));
    ASSERT_OK(gguf_writer_add_str(w, "t.str", "hello"));
    ASSERT_OK(gguf_writer_add_str(w, "t.empty", ""));
    ASSERT_OK(gguf_writer_add_u64(w, "t.u64", (1ull << 60) + 1));
    ASSERT_OK(gguf_writer_add_i64(w, "t.i64", -(1ll << 60)));
    ASSERT_OK(gguf_writer_add_f64(w, "t.f64", 3.25));
    uint8_t a_u8[] = {1, 2, 255};
    int8_t a_i8[] = {-1, 0, 127};
    uint16_t a_u16[] = {1, 65535};
    int16_t a_i16[] = {-32768, 5};
    uint32_t a_u32[] = {7, 8, 9, 4294967295u};
    int32_t a_i32[] = {-7, 2147483647};
    float a_f32[] = {0.5f, 2.0f, -1e30f};
    uint8_t a_bool[] = {1, 0, 1};
    uint64_t a_u64[] = {UINT64_MAX, 3};
    int64_t a_i64[] = {INT64_MIN, 42};
    double a_f64[] = {2.5, -0.125};
    ASSERT_OK(gguf_writer_add_arr(w, "a.u8", GGUF_VTYPE_U8, a_u8, 3));
    ASSERT_OK(gguf_writer_add_arr(w, "a.i8", GGUF_VTYPE_I8, a_i8, 3));
    ASSERT_OK(gguf_writer_add_arr(w, "a.u16", GGUF_VTYPE_U16, a_u16, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.i16", GGUF_VTYPE_I16, a_i16, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.u32", GGUF_VTYPE_U32, a_u32, 4));
    ASSERT_OK(gguf_writer_add_arr(w, "a.i32", GGUF_VTYPE_I32, a_i32, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.f32", GGUF_VTYPE_F32, a_f32, 3));
    ASSERT_OK(gguf_writer_add_arr(w, "a.bool", GGUF_VTYPE_BOOL, a_bool, 3));
    ASSERT_OK(gguf_writer_add_arr(w, "a.u64", GGUF_VTYPE_U64, a_u64, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.i64", GGUF_VTYPE_I64, a_i64, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.f64", GGUF_VTYPE_F64, a_f64, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "a.empty", GGUF_VTYPE_U32, NULL, 0));
    const char *strs[] = {"a", "", "ccc", "\xe2\x96\x81the"};
    ASSERT_OK(gguf_writer_add_arr_str(w, "a.str", strs, 4));
    ASSERT_OK(gguf_writer_add_arr_str(w, "a.str_empty", NULL, 0));

    float f32d[6] = {1, 2, 3, 4, 5, 6};
    uint16_t f16d[5] = {0x3c00, 0x4000, 0, 0x8000, 0x7bff};
    uint8_t q8d[2 * 2 * 34], q4kd[144], f4d[2 * 3 * 4 * 5 * 4];
    for (size_t i = 0; i < sizeof q8d; i++) q8d[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof q4kd; i++) q4kd[i] = (uint8_t)(i * 13 + 1);
    for (size_t i = 0; i < sizeof f4d; i++) f4d[i] = (uint8_t)i;
    int64_t ne_f32[2] = {3, 2}, ne_f16[1] = {5}, ne_q8[2] = {64, 2}, ne_q4k[1] = {256};
    int64_t ne_4d[4] = {2, 3, 4, 5}, ne_zero[2] = {0, 4};
    ASSERT_OK(gguf_writer_add_tensor(w, "f32.t", NX_TYPE_F32, 2, ne_f32, f32d, sizeof f32d));
    ASSERT_OK(gguf_writer_add_tensor(w, "f16.t", NX_TYPE_F16, 1, ne_f16, f16d, sizeof f16d));
    ASSERT_OK(gguf_writer_add_tensor(w, "q8.t", NX_TYPE_Q8_0, 2, ne_q8, q8d, sizeof q8d));
    ASSERT_OK(gguf_writer_add_tensor(w, "zero.t", NX_TYPE_F32, 2, ne_zero, NULL, 0));
    ASSERT_OK(gguf_writer_add_tensor(w, "q4k.t", NX_TYPE_Q4_K, 1, ne_q4k, q4kd, sizeof q4kd));
    ASSERT_OK(gguf_writer_add_tensor(w, "4d.t", NX_TYPE_F32, 4, ne_4d, f4d, sizeof f4d));
    char path[256];
    snprintf(path, sizeof path, "%s/all_types.gguf", test_tmpdir());
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_writer_write(w, path, &err));
    gguf_writer_free(w);
    ASSERT_EQ(count_entries(test_tmpdir(), ".tmp."), 0);
    struct stat sb;
    ASSERT_EQ(stat(path, &sb), 0);
    ASSERT_EQ(sb.st_mode & 0777, 0644);

    struct gguf_file *f;
    ASSERT_OK(gguf_open(path, &f, &err));
    ASSERT_EQ(gguf_version(f), 3);
    ASSERT_EQ(gguf_alignment(f), 64);
    ASSERT_EQ(gguf_n_kv(f), 1 + 13 + 14);
    ASSERT_STR_EQ(gguf_kv_key(f, 0), "general.alignment");
    ASSERT_STR_EQ(gguf_kv_key(f, 1), "t.u8");
    ASSERT_STR_EQ(gguf_kv_key(f, 27), "a.str_empty");
    uint32_t u = 0;
    ASSERT_TRUE(gguf_get_u32(f, "general.alignment", &u));
    ASSERT_EQ(u, 64);
    ASSERT_EQ(gguf_data_offset(f) % 64, 0);
    ASSERT_EQ(gguf_file_size(f) % 64, 0);
    ASSERT_EQ(gguf_file_size(f), (size_t)sb.st_size);

    /* scalars: every type, exact value */
    const char *keys[] = {"t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32", "t.f32",
                          "t.bool", "t.str", "t.u64", "t.i64", "t.f64"};
    enum gguf_vtype types[] = {GGUF_VTYPE_U8, GGUF_VTYPE_I8, GGUF_VTYPE_U16, GGUF_VTYPE_I16,
                               GGUF_VTYPE_U32, GGUF_VTYPE_I32, GGUF_VTYPE_F32, GGUF_VTYPE_BOOL,
                               GGUF_VTYPE_STRING, GGUF_VTYPE_U64, GGUF_VTYPE_I64,
                               GGUF_VTYPE_F64};
    for (size_t i = 0; i < NX_ARRAY_LEN(keys); i++)
        ASSERT_EQ(gguf_kv_type(f, gguf_find_key(f, keys[i])), types[i]);
    ASSERT_TRUE(gguf_get_u32(f, "t.u8", &u));
    ASSERT_EQ(u, 200);
    int32_t i32 = 0;
    ASSERT_TRUE(gguf_get_i32(f, "t.i8", &i32));
    ASSERT_EQ(i32, -100);
    ASSERT_TRUE(gguf_get_u32(f, "t.u16", &u));
    ASSERT_EQ(u, 60000);
    ASSERT_TRUE(gguf_get_i32(f, "t.i16", &i32));
    ASSERT_EQ(i32, -30000);
    ASSERT_TRUE(gguf_get_u32(f, "t.u32", &u));
    ASSERT_EQ(u, 4000000000u);
    ASSERT_TRUE(gguf_get_i32(f, "t.i32", &i32));
    ASSERT_EQ(i32, -2000000000);
    float fl = 0;
    ASSERT_TRUE(gguf_get_f32(f, "t.f32", &fl));
    ASSERT_EQ(fl, 1.5f);
    bool bv = false;
    ASSERT_TRUE(gguf_get_bool(f, "t.bool", &bv));
    ASSERT_TRUE(bv);
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(f, "t.str", &s, &len));
    ASSERT_TRUE(len == 5 && memcmp(s, "hello", 5) == 0);
    ASSERT_TRUE(gguf_get_str(f, "t.empty", &s, &len));
    ASSERT_EQ(len, 0);
    uint64_t u64 = 0;
    ASSERT_TRUE(gguf_get_u64(f, "t.u64", &u64));
    ASSERT_TRUE(u64 == (1ull << 60) + 1);
    ASSERT_TRUE(gguf_get_f32(f, "t.f64", &fl));
    ASSERT_EQ(fl, 3.25f);

    /* conversions and refusals (out untouched on false) */
    u = 77;
    ASSERT_TRUE(!gguf_get_u32(f, "t.i32", &u));   /* negative */
    ASSERT_TRUE(!gguf_get_u32(f, "t.u64", &u));   /* too large */
    ASSERT_TRUE(!gguf_get_u32(f, "t.f32", &u));   /* float */
    ASSERT_TRUE(!gguf_get_u32(f, "t.bool", &u));  /* bool */
    ASSERT_TRUE(!gguf_get_u32(f, "missing", &u));
    ASSERT_EQ(u, 77);
    ASSERT_TRUE(!gguf_get_i32(f, "t.u32", &i32)); /* 4e9 does not fit */
    ASSERT_TRUE(gguf_get_i32(f, "t.u16", &i32));
    ASSERT_EQ(i32, 60000);
    ASSERT_TRUE(!gguf_get_u64(f, "t.i64", &u64));
    ASSERT_TRUE(gguf_get_u64(f, "t.u8", &u64));
    ASSERT_EQ(u64, 200);
    ASSERT_TRUE(!gguf_get_f32(f, "t.u32", &fl));
    ASSERT_TRUE(!gguf_get_bool(f, "t.u8", &bv));
    ASSERT_TRUE(!gguf_get_str(f, "t.u8", &s, &len));
    ASSERT_TRUE(!gguf_get_arr(f, "t.str", NULL, NULL, NULL));
    ASSERT_TRUE(!gguf_get_u32(f, "a.u32", &u));

    /* arrays */
    struct {
        const char *key;
        enum gguf_vtype et;
        const void *data;
        uint64_t n;
        size_t esz;
    } arrs[] = {
        {"a.u8", GGUF_VTYPE_U8, a_u8, 3, 1},       {"a.i8", GGUF_VTYPE_I8, a_i8, 3, 1},
        {"a.u16", GGUF_VTYPE_U16, a_u16, 2, 2},    {"a.i16", GGUF_VTYPE_I16, a_i16, 2, 2},
        {"a.u32", GGUF_VTYPE_U32, a_u32, 4, 4},    {"a.i32", GGUF_VTYPE_I32, a_i32, 2, 4},
        {"a.f32", GGUF_VTYPE_F32, a_f32, 3, 4},    {"a.bool", GGUF_VTYPE_BOOL, a_bool, 3, 1},
        {"a.u64", GGUF_VTYPE_U64, a_u64, 2, 8},    {"a.i64", GGUF_VTYPE_I64, a_i64, 2, 8},
        {"a.f64", GGUF_VTYPE_F64, a_f64, 2, 8},    {"a.empty", GGUF_VTYPE_U32, NULL, 0, 4},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(arrs); i++) {
        enum gguf_vtype et;
        uint64_t n;
        const void *data;
        ASSERT_TRUE(gguf_get_arr(f, arrs[i].key, &et, &n, &data));
        ASSERT_EQ(et, arrs[i].et);
        ASSERT_EQ(n, arrs[i].n);
        ASSERT_EQ(gguf_vtype_size(et), arrs[i].esz);
        ASSERT_TRUE(data != NULL);
        if (n) ASSERT_TRUE(memcmp(data, arrs[i].data, n * arrs[i].esz) == 0);
    }
    int64_t iv = 0;
    double dv = 0;
    ASSERT_TRUE(gguf_arr_i64(f, "a.u8", 2, &iv));
    ASSERT_EQ(iv, 255);
    ASSERT_TRUE(gguf_arr_i64(f, "a.i16", 0, &iv));
    ASSERT_EQ(iv, -32768);
    ASSERT_TRUE(gguf_arr_i64(f, "a.i64", 0, &iv));
    ASSERT_TRUE(iv == INT64_MIN);
    ASSERT_TRUE(!gguf_arr_i64(f, "a.u64", 0, &iv)); /* UINT64_MAX does not fit */
    ASSERT_TRUE(gguf_arr_i64(f, "a.u64", 1, &iv));
    ASSERT_EQ(iv, 3);
    ASSERT_TRUE(gguf_arr_i64(f, "a.f32", 1, &iv)); /* 2.0 is integral */
    ASSERT_EQ(iv, 2);
    ASSERT_TRUE(!gguf_arr_i64(f, "a.f32", 0, &iv)); /* 0.5 is not */
    ASSERT_TRUE(!gguf_arr_i64(f, "a.f32", 2, &iv)); /* -1e30 out of range */
    ASSERT_TRUE(gguf_arr_f64(f, "a.f64", 1, &dv));
    ASSERT_EQ(dv, -0.125);
    ASSERT_TRUE(gguf_arr_f64(f, "a.i32", 0, &dv));
    ASSERT_EQ(dv, -7);
    ASSERT_TRUE(gguf_arr_f64(f, "a.f32", 2, &dv));
    ASSERT_EQ(dv, (double)-1e30f);
    ASSERT_TRUE(!gguf_arr_f64(f, "a.bool", 0, &dv)); /* not numeric */
    ASSERT_TRUE(!gguf_arr_f64(f, "a.str", 0, &dv));
    ASSERT_TRUE(!gguf_arr_f64(f, "a.u32", 4, &dv)); /* index out of range */
    ASSERT_TRUE(!gguf_arr_f64(f, "t.u32", 0, &dv)); /* not an array */
    ASSERT_TRUE(!gguf_arr_str(f, "a.u32", 0, &s, &len));
    enum gguf_vtype et;
    uint64_t n;
    const void *data = (const void *)1;
    ASSERT_TRUE(gguf_get_arr(f, "a.str", &et, &n, &data));
    ASSERT_EQ(et, GGUF_VTYPE_STRING);
    ASSERT_EQ(n, 4);
    ASSERT_TRUE(data == NULL);
    for (uint64_t i = 0; i < 4; i++) {
        ASSERT_TRUE(gguf_arr_str(f, "a.str", i, &s, &len));
        ASSERT_EQ(len, strlen(strs[i]));
        ASSERT_TRUE(memcmp(s, strs[i], len) == 0);
    }
    ASSERT_TRUE(!gguf_arr_str(f, "a.str", 4, &s, &len));
    ASSERT_TRUE(gguf_get_arr(f, "a.str_empty", &et, &n, NULL));
    ASSERT_EQ(n, 0);
    ASSERT_TRUE(!gguf_arr_str(f, "a.str_empty", 0, &s, &len));

    /* tensors */
    ASSERT_EQ(gguf_n_tensors(f), 6);
    struct {
        const char *name;
        enum nx_type type;
        int n_dims;
        const int64_t *ne;
        const void *data;
        size_t nbytes;
    } ts[] = {
        {"f32.t", NX_TYPE_F32, 2, ne_f32, f32d, sizeof f32d},
        {"f16.t", NX_TYPE_F16, 1, ne_f16, f16d, sizeof f16d},
        {"q8.t", NX_TYPE_Q8_0, 2, ne_q8, q8d, sizeof q8d},
        {"zero.t", NX_TYPE_F32, 2, ne_zero, NULL, 0},
        {"q4k.t", NX_TYPE_Q4_K, 1, ne_q4k, q4kd, sizeof q4kd},
        {"4d.t", NX_TYPE_F32, 4, ne_4d, f4d, sizeof f4d},
    };
    for (int i = 0; i < 6; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        ASSERT_TRUE(t == gguf_find_tensor(f, ts[i].name));
        ASSERT_STR_EQ(t->name, ts[i].name);
        ASSERT_EQ(t->type, ts[i].type);
        ASSERT_EQ(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < 4; d++) ASSERT_EQ(t->ne[d], d < ts[i].n_dims ? ts[i].ne[d] : 1);
        ASSERT_EQ(t->nbytes, ts[i].nbytes);
        ASSERT_EQ(t->offset % 64, 0);
        ASSERT_EQ((uintptr_t)t->data % 64, 0); /* the mapping is page-aligned */
        if (t->nbytes) ASSERT_TRUE(memcmp(t->data, ts[i].data, t->nbytes) == 0);
    }
    gguf_close(f);
    ASSERT_EQ(nx_alloc_bytes(), before);
    unlink(path);
}

TEST(writer_default_alignment_and_overwrite) {
    char path[256];
    snprintf(path, sizeof path, "%s/default_align.gguf", test_tmpdir());
    struct nx_err err = {{0}};
    for (int round = 0; round < 2; round++) { /* the second write replaces the first */
        struct gguf_writer *w = gguf_writer_init();
        ASSERT_TRUE(w != NULL);
        ASSERT_OK(gguf_writer_add_u32(w, "general.alignment", 32)); /* same as set_alignment */
        ASSERT_OK(gguf_writer_add_str(w, "general.architecture", round ? "second" : "first"));
        float d[3] = {1, 2, 3};
        int64_t ne[1] = {3};
        ASSERT_OK(gguf_writer_add_tensor(w, "t", NX_TYPE_F32, 1, ne, d, sizeof d));
        ASSERT_OK(gguf_writer_write(w, path, &err));
        gguf_writer_free(w);
    }
    struct gguf_file *f;
    ASSERT_OK(gguf_open(path, &f, &err));
    ASSERT_EQ(gguf_alignment(f), 32);
    ASSERT_EQ(gguf_n_kv(f), 1); /* no general.alignment key at the default */
    ASSERT_EQ(gguf_find_key(f, "general.alignment"), -1);
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(f, "general.architecture", &s, &len));
    ASSERT_TRUE(len == 6 && memcmp(s, "second", 6) == 0);
    ASSERT_EQ(gguf_file_size(f) % 32, 0);
    gguf_close(f);
    ASSERT_EQ(count_entries(test_tmpdir(), ".tmp."), 0);
    unlink(path);
}

TEST(writer_rejects_bad_input) {
    size_t before = nx_alloc_bytes();
    struct gguf_writer *w = gguf_writer_init();
    ASSERT_TRUE(w != NULL);
    ASSERT_OK(gguf_writer_add_u32(w, "k", 1));
    ASSERT_EQ(gguf_writer_add_u32(w, "k", 2), NX_STATUS_INVALID_ARG);   /* duplicate */
    ASSERT_EQ(gguf_writer_add_str(w, "k", "x"), NX_STATUS_INVALID_ARG); /* any type */
    ASSERT_EQ(gguf_writer_add_u32(w, "", 2), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_u32(w, NULL, 2), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_str(w, "s", NULL), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_i32(w, "general.alignment", 64), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_u32(w, "general.alignment", 3), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_u32(w, "general.alignment", 0), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_STRING, "x", 1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_ARRAY, "x", 1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_COUNT, "x", 1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_U32, NULL, 1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_U64, "x", UINT64_MAX),
              NX_STATUS_INVALID_ARG);
    uint8_t badbool[2] = {1, 2};
    ASSERT_EQ(gguf_writer_add_arr(w, "a", GGUF_VTYPE_BOOL, badbool, 2), NX_STATUS_INVALID_ARG);
    const char *strs[2] = {"x", NULL};
    ASSERT_EQ(gguf_writer_add_arr_str(w, "a", strs, 2), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_arr_str(w, "a", NULL, 1), NX_STATUS_INVALID_ARG);
    char *longkey = malloc(GGUF_MAX_NAME + 2);
    memset(longkey, 'k', GGUF_MAX_NAME + 1);
    longkey[GGUF_MAX_NAME + 1] = '\0';
    ASSERT_EQ(gguf_writer_add_u8(w, longkey, 1), NX_STATUS_INVALID_ARG);
    longkey[GGUF_MAX_NAME] = '\0'; /* exactly the limit is fine */
    ASSERT_OK(gguf_writer_add_u8(w, longkey, 1));

    float d[8] = {0};
    int64_t ne[4] = {8, 1, 1, 1};
    ASSERT_OK(gguf_writer_add_tensor(w, "t", NX_TYPE_F32, 1, ne, d, sizeof d));
    ASSERT_EQ(gguf_writer_add_tensor(w, "t", NX_TYPE_F32, 1, ne, d, sizeof d),
              NX_STATUS_INVALID_ARG); /* duplicate name */
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 1, ne, d, 31), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 0, ne, d, 32), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 5, ne, d, 32), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", (enum nx_type)4, 1, ne, d, 32),
              NX_STATUS_INVALID_ARG); /* removed Q4_2: not in the type table */
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_Q8_0, 1, ne, d, 32),
              NX_STATUS_INVALID_ARG); /* 8 is not a multiple of the block size 32 */
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 1, ne, NULL, 32),
              NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_writer_add_tensor(w, "", NX_TYPE_F32, 1, ne, d, 32), NX_STATUS_INVALID_ARG);
    int64_t neg[1] = {-8};
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 1, neg, d, 32),
              NX_STATUS_INVALID_ARG);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    ASSERT_EQ(gguf_writer_add_tensor(w, "u", NX_TYPE_F32, 2, huge, d, 32),
              NX_STATUS_INVALID_ARG);

    char path[256];
    snprintf(path, sizeof path, "%s/bad_align.gguf", test_tmpdir());
    struct nx_err err = {{0}};
    gguf_writer_set_alignment(w, 3);
    ASSERT_EQ(gguf_writer_write(w, path, &err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err.msg, "general.alignment") != NULL);
    gguf_writer_set_alignment(w, 0);
    ASSERT_EQ(gguf_writer_write(w, path, &err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(access(path, F_OK) != 0);
    ASSERT_EQ(gguf_writer_write(w, "/nonexistent-dir-nx/x.gguf", &err), NX_STATUS_INVALID_ARG);
    gguf_writer_set_alignment(w, 16);
    ASSERT_EQ(gguf_writer_write(w, "/nonexistent-dir-nx/x.gguf", &err), NX_STATUS_IO);
    ASSERT_TRUE(strstr(err.msg, "/nonexistent-dir-nx/x.gguf") != NULL);
    /* the rejected calls left the writer intact: it still writes a valid file */
    ASSERT_OK(gguf_writer_write(w, path, &err));
    gguf_writer_free(w);
    struct gguf_file *f;
    ASSERT_OK(gguf_open(path, &f, &err));
    ASSERT_EQ(gguf_alignment(f), 16);
    ASSERT_EQ(gguf_n_kv(f), 3); /* general.alignment, k, the long key */
    ASSERT_TRUE(gguf_find_key(f, longkey) >= 0);
    ASSERT_EQ(gguf_n_tensors(f), 1);
    gguf_close(f);
    free(longkey);
    unlink(path);
    ASSERT_EQ(count_entries(test_tmpdir(), ".tmp."), 0);
    ASSERT_EQ(nx_alloc_bytes(), before);
}

/* Copy every kv and tensor of a file through the writer (the test's own generic copier). */
static nx_status copy_through_writer(const struct gguf_file *f, struct gguf_writer *w) {
    nx_status st = NX_STATUS_OK;
    for (int64_t i = 0; i < gguf_n_kv(f) && !st; i++) {
        const char *k = gguf_kv_key(f, i);
        enum gguf_vtype t = gguf_kv_type(f, i);
        int64_t idx = gguf_find_key(f, k);
        if (idx != i) return NX_STATUS_FORMAT;
        if (t == GGUF_VTYPE_STRING) {
            const char *s;
            size_t len;
            gguf_get_str(f, k, &s, &len);
            char *c = malloc(len + 1);
            memcpy(c, s, len);
            c[len] = '\0';
            st = gguf_writer_add_str(w, k, c);
            free(c);
        } else if (t == GGUF_VTYPE_ARRAY) {
            enum gguf_vtype et;
            uint64_t n;
            const void *data;
            gguf_get_arr(f, k, &et, &n, &data);
            if (et == GGUF_VTYPE_STRING) {
                char **v = calloc(n ? n : 1, sizeof *v);
                for (uint64_t j = 0; j < n; j++) {
                    const char *s;
                    size_t len;
                    gguf_arr_str(f, k, j, &s, &len);
                    v[j] = malloc(len + 1);
                    memcpy(v[j], s, len);
                    v[j][len] = '\0';
                }
                st = gguf_writer_add_arr_str(w, k, (const char *const *)v, n);
                for (uint64_t j = 0; j < n; j++) free(v[j]);
                free(v);
            } else {
                st = gguf_writer_add_arr(w, k, et, data, n);
            }
        } else if (t == GGUF_VTYPE_U32) {
            uint32_t v;
            gguf_get_u32(f, k, &v);
            st = gguf_writer_add_u32(w, k, v);
        } else if (t == GGUF_VTYPE_F32) {
            float v;
            gguf_get_f32(f, k, &v);
            st = gguf_writer_add_f32(w, k, v);
        } else if (t == GGUF_VTYPE_I32) {
            int32_t v;
            gguf_get_i32(f, k, &v);
            st = gguf_writer_add_i32(w, k, v);
        } else {
            return NX_STATUS_UNSUPPORTED; /* not used by the shared models */
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(f) && !st; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        st = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
    }
    return st;
}

/* The writer reproduces the shared models byte for byte (same layout rules as ggml). */
TEST(writer_rewrites_models_byte_identical) {
    const char *models[] = {"stories260K/stories260K.gguf",
                            "llama-2-tiny-random/llama-2-tiny-random.gguf"};
    for (size_t m = 0; m < NX_ARRAY_LEN(models); m++) {
        char src[512], dst[256];
        model_path(src, sizeof src, models[m]);
        snprintf(dst, sizeof dst, "%s/rewrite%zu.gguf", test_tmpdir(), m);
        struct gguf_file *f;
        struct nx_err err = {{0}};
        ASSERT_OK(gguf_open(src, &f, &err));
        struct gguf_writer *w = gguf_writer_init();
        ASSERT_TRUE(w != NULL);
        ASSERT_OK(copy_through_writer(f, w));
        ASSERT_OK(gguf_writer_write(w, dst, &err));
        gguf_writer_free(w);
        gguf_close(f);
        size_t na, nb;
        uint8_t *a = read_file(src, &na), *b = read_file(dst, &nb);
        ASSERT_TRUE(a && b);
        ASSERT_EQ(na, nb);
        size_t first = 0;
        while (first < na && a[first] == b[first]) first++;
        if (first != na) fprintf(stderr, "  %s: first difference at byte %zu\n", models[m], first);
        ASSERT_EQ(first, na);
        free(a);
        free(b);
        unlink(dst);
    }
}

/* ---- valid handcrafted files ---- */

TEST(small_valid_v2_and_v3) {
    for (uint32_t v = 2; v <= 3; v++) {
        struct bb b = {0};
        small_valid(&b, v);
        struct gguf_file *f;
        struct nx_err err = {{0}};
        ASSERT_OK(gguf_open_buffer(b.p, b.n, &f, &err));
        ASSERT_EQ(gguf_version(f), v);
        ASSERT_EQ(gguf_n_kv(f), 3);
        ASSERT_EQ(gguf_n_tensors(f), 2);
        const char *s;
        size_t len;
        ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 1, &s, &len));
        ASSERT_EQ(len, 0);
        ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 2, &s, &len));
        ASSERT_TRUE(len == 5 && memcmp(s, "hello", 5) == 0);
        const struct gguf_tensor *t = gguf_find_tensor(f, "b");
        ASSERT_TRUE(t != NULL);
        float x;
        memcpy(&x, (const uint8_t *)t->data + 4, 4);
        ASSERT_EQ(x, 9.0f);
        gguf_close(f);
        bb_free(&b);
    }
}

TEST(no_tensors_and_no_kvs) {
    struct bb b = {0};
    hdr(&b, 3, 0, 0);
    ASSERT_TRUE(expect(&b, NX_STATUS_OK, NULL, NULL));
    struct gguf_file *f;
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_open_buffer(b.p, b.n, &f, &err));
    ASSERT_EQ(gguf_n_kv(f), 0);
    ASSERT_EQ(gguf_n_tensors(f), 0);
    ASSERT_EQ(gguf_find_key(f, "x"), -1);
    ASSERT_TRUE(gguf_find_tensor(f, "x") == NULL);
    ASSERT_TRUE(!gguf_get_u32(f, "x", NULL));
    ASSERT_TRUE(gguf_data_offset(f) <= gguf_file_size(f));
    gguf_close(f);
    bb_free(&b);
}

TEST(nested_arrays) {
    struct bb b = {0};
    hdr(&b, 3, 0, 2);
    bb_str(&b, "nested");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_ARRAY); /* array of 2 arrays: [u32 x2], [string x1] */
    bb_u64(&b, 2);
    bb_u32(&b, GGUF_VTYPE_U32);
    bb_u64(&b, 2);
    bb_u32(&b, 1);
    bb_u32(&b, 2);
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, 1);
    bb_str(&b, "x");
    kv_u32(&b, "after", 9);
    struct gguf_file *f;
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_open_buffer(b.p, b.n, &f, &err));
    enum gguf_vtype et;
    uint64_t n;
    const void *data = (const void *)1;
    ASSERT_TRUE(gguf_get_arr(f, "nested", &et, &n, &data));
    ASSERT_EQ(et, GGUF_VTYPE_ARRAY);
    ASSERT_EQ(n, 2);
    ASSERT_TRUE(data == NULL);
    ASSERT_TRUE(!gguf_arr_str(f, "nested", 0, NULL, NULL));
    ASSERT_TRUE(!gguf_arr_f64(f, "nested", 0, NULL));
    uint32_t u;
    ASSERT_TRUE(gguf_get_u32(f, "after", &u));
    ASSERT_EQ(u, 9);
    gguf_close(f);
    bb_free(&b);

    /* exactly the depth limit is accepted, one deeper is refused */
    for (int depth = GGUF_MAX_ARRAY_DEPTH; depth <= GGUF_MAX_ARRAY_DEPTH + 1; depth++) {
        struct bb c = {0};
        hdr(&c, 3, 0, 1);
        bb_str(&c, "deep");
        bb_u32(&c, GGUF_VTYPE_ARRAY);
        for (int d = 1; d < depth; d++) {
            bb_u32(&c, GGUF_VTYPE_ARRAY);
            bb_u64(&c, 1);
        }
        bb_u32(&c, GGUF_VTYPE_U8);
        bb_u64(&c, 1);
        bb_u8(&c, 5);
        if (depth == GGUF_MAX_ARRAY_DEPTH)
            ASSERT_TRUE(expect(&c, NX_STATUS_OK, NULL, NULL));
        else
            ASSERT_TRUE(expect(&c, NX_STATUS_FORMAT, "kv 'deep'", "nested deeper"));
        bb_free(&c);
    }
}

/* ---- truncation: every prefix of small valid files fails cleanly ---- */

static bool all_prefixes_fail(const uint8_t *p, size_t n) {
    for (size_t len = 0; len < n; len++) {
        /* a fresh exact-size copy so ASan catches any read past the prefix */
        uint8_t *c = malloc(len ? len : 1);
        memcpy(c, p, len);
        struct gguf_file *f = (struct gguf_file *)1;
        struct nx_err err = {{0}};
        nx_status st = gguf_open_buffer(c, len, &f, &err);
        free(c);
        if (st != NX_STATUS_FORMAT || f != NULL || !err.msg[0]) {
            fprintf(stderr, "  prefix %zu of %zu: %s \"%s\"\n", len, n, nx_status_name(st),
                    err.msg);
            if (st == NX_STATUS_OK) gguf_close(f);
            return false;
        }
    }
    return true;
}

TEST(truncated_every_prefix) {
    struct bb b = {0};
    small_valid(&b, 3);
    ASSERT_TRUE(expect(&b, NX_STATUS_OK, NULL, NULL));
    ASSERT_TRUE(all_prefixes_fail(b.p, b.n));
    bb_free(&b);

    /* the writer's output, with every value type and a nested-free layout */
    struct gguf_writer *w = gguf_writer_init();
    ASSERT_TRUE(w != NULL);
    gguf_writer_set_alignment(w, 64);
    ASSERT_OK(gguf_writer_add_str(w, "s", "abc"));
    ASSERT_OK(gguf_writer_add_u64(w, "u", 1));
    ASSERT_OK(gguf_writer_add_bool(w, "b", true));
    const char *strs[] = {"x", "yy"};
    ASSERT_OK(gguf_writer_add_arr_str(w, "as", strs, 2));
    int16_t a16[3] = {1, 2, 3};
    ASSERT_OK(gguf_writer_add_arr(w, "ai", GGUF_VTYPE_I16, a16, 3));
    float d[16] = {0};
    int64_t ne[2] = {4, 4};
    ASSERT_OK(gguf_writer_add_tensor(w, "t0", NX_TYPE_F32, 2, ne, d, sizeof d)); /* 64 bytes */
    ASSERT_OK(gguf_writer_add_tensor(w, "t1", NX_TYPE_F32, 2, ne, d, sizeof d));
    char path[256];
    snprintf(path, sizeof path, "%s/trunc.gguf", test_tmpdir());
    struct nx_err err = {{0}};
    ASSERT_OK(gguf_writer_write(w, path, &err));
    gguf_writer_free(w);
    size_t n;
    uint8_t *p = read_file(path, &n);
    ASSERT_TRUE(p != NULL);
    ASSERT_TRUE(all_prefixes_fail(p, n));

    /* and through real files: a few cut points, including an empty file */
    size_t cuts[] = {0, 3, 4, 23, 24, n / 2, n - 1};
    for (size_t i = 0; i < NX_ARRAY_LEN(cuts); i++) {
        ASSERT_TRUE(write_file(path, p, cuts[i]));
        struct gguf_file *f = (struct gguf_file *)1;
        ASSERT_EQ(gguf_open(path, &f, &err), NX_STATUS_FORMAT);
        ASSERT_TRUE(f == NULL);
    }
    ASSERT_TRUE(write_file(path, p, 0));
    struct gguf_file *f;
    ASSERT_EQ(gguf_open(path, &f, &err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err.msg, "truncated") != NULL);
    free(p);
    unlink(path);
}

/*
 * Random corruption: flip bytes of small valid files (fixed seed). Every open must either fail
 * with a message or succeed with every accessor usable (ASan checks the reads).
 */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static bool walk_all(const struct gguf_file *f) {
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *k = gguf_kv_key(f, i);
        if (!k || gguf_find_key(f, k) != i) return false;
        const char *s;
        size_t len;
        if (gguf_get_str(f, k, &s, &len) && len) sink ^= (uint8_t)s[len - 1];
        enum gguf_vtype et;
        uint64_t n;
        const void *data;
        if (gguf_get_arr(f, k, &et, &n, &data)) {
            for (uint64_t j = 0; j < n; j++) {
                double d;
                if (gguf_arr_str(f, k, j, &s, &len) && len) sink ^= (uint8_t)s[len - 1];
                gguf_arr_f64(f, k, j, &d);
            }
            if (data && n) sink ^= ((const uint8_t *)data)[n * gguf_vtype_size(et) - 1];
        }
        uint64_t u;
        gguf_get_u64(f, k, &u);
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if (gguf_find_tensor(f, t->name) != t) return false;
        const uint8_t *d = t->data;
        if (t->nbytes) sink ^= d[0] ^ d[t->nbytes - 1];
    }
    (void)sink;
    return true;
}

TEST(random_corruption) {
    struct bb b = {0};
    small_valid(&b, 3);
    size_t before = nx_alloc_bytes();
    int n_ok = 0, n_err = 0;
    for (int it = 0; it < 20000; it++) {
        uint8_t *c = malloc(b.n);
        memcpy(c, b.p, b.n);
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = rnd() % b.n;
            switch (rnd() % 4) {
            case 0: c[at] = (uint8_t)rnd(); break;
            case 1: c[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
            case 2: c[at] = 0xff; break;
            default: c[at] = 0; break;
            }
        }
        size_t len = rnd() % 8 == 0 ? rnd() % b.n : b.n;
        struct gguf_file *f = (struct gguf_file *)1;
        struct nx_err err = {{0}};
        nx_status st = gguf_open_buffer(c, len, &f, &err);
        if (st == NX_STATUS_OK) {
            n_ok++;
            ASSERT_TRUE(walk_all(f));
            gguf_close(f);
        } else {
            n_err++;
            ASSERT_TRUE(st == NX_STATUS_FORMAT || st == NX_STATUS_UNSUPPORTED);
            ASSERT_TRUE(f == NULL && err.msg[0]);
        }
        free(c);
    }
    ASSERT_TRUE(n_ok > 0 && n_err > 0);
    ASSERT_EQ(nx_alloc_bytes(), before);
    bb_free(&b);
}

/* ---- one corrupt file per defect ---- */

TEST(corrupt_bad_magic) {
    struct bb b = {0};
    small_valid(&b, 3);
    b.p[3] = 'X';
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "magic", NULL));
    /* the same through a real file on disk */
    char path[256];
    snprintf(path, sizeof path, "%s/bad_magic.gguf", test_tmpdir());
    ASSERT_TRUE(write_file(path, b.p, b.n));
    struct gguf_file *f = (struct gguf_file *)1;
    struct nx_err err = {{0}};
    ASSERT_EQ(gguf_open(path, &f, &err), NX_STATUS_FORMAT);
    ASSERT_TRUE(f == NULL);
    ASSERT_TRUE(strstr(err.msg, "magic") != NULL);
    unlink(path);
    bb_free(&b);
}

TEST(corrupt_unsupported_version) {
    uint32_t versions[] = {0, 4, 1000};
    for (size_t i = 0; i < NX_ARRAY_LEN(versions); i++) {
        struct bb b = {0};
        small_valid(&b, versions[i]);
        char want[32];
        snprintf(want, sizeof want, "version %u", versions[i]);
        ASSERT_TRUE(expect(&b, NX_STATUS_UNSUPPORTED, want, "not supported"));
        bb_free(&b);
    }
    struct bb b = {0};
    small_valid(&b, 1);
    ASSERT_TRUE(expect(&b, NX_STATUS_UNSUPPORTED, "v1", NULL));
    bb_free(&b);
}

TEST(corrupt_big_endian) {
    struct bb b = {0};
    small_valid(&b, __builtin_bswap32(3)); /* version field as a big-endian writer puts it */
    ASSERT_TRUE(expect(&b, NX_STATUS_UNSUPPORTED, "big-endian", "version"));
    bb_free(&b);
}

TEST(corrupt_duplicate_key) {
    struct bb b = {0};
    hdr(&b, 3, 0, 3);
    kv_u32(&b, "llama.block_count", 1);
    kv_str(&b, "general.name", "x");
    kv_u32(&b, "llama.block_count", 2);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'llama.block_count'", "duplicate key"));
    bb_free(&b);
}

TEST(corrupt_duplicate_tensor_name) {
    struct bb b = {0};
    hdr(&b, 3, 2, 0);
    uint64_t ne[1] = {8};
    tinfo(&b, "blk.0.attn_q.weight", 1, ne, 0, 0);
    tinfo(&b, "blk.0.attn_q.weight", 1, ne, 0, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'blk.0.attn_q.weight'", "duplicate tensor name"));
    bb_free(&b);
}

TEST(corrupt_unknown_value_type) {
    struct bb b = {0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "weird.key");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'weird.key'", "unknown value type 13"));
    bb_free(&b);
    hdr(&b, 3, 0, 1);
    bb_str(&b, "weird.arr");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, 0xffffffffu);
    bb_u64(&b, 0);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'weird.arr'", "unknown array element type"));
    bb_free(&b);
}

TEST(corrupt_unknown_tensor_type) {
    uint32_t types[] = {4, 5, 16, 29, 39, 40, 99, 0x7fffffffu, 0xffffffffu};
    for (size_t i = 0; i < NX_ARRAY_LEN(types); i++) {
        struct bb b = {0};
        hdr(&b, 3, 1, 0);
        uint64_t ne[1] = {256};
        tinfo(&b, "tok_embd", 1, ne, types[i], 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 2048);
        char want[48];
        snprintf(want, sizeof want, "unknown tensor type %u", types[i]);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'tok_embd'", want));
        bb_free(&b);
    }
}

TEST(corrupt_bad_n_dims) {
    uint32_t nds[] = {0, 5, 0xffffffffu};
    for (size_t i = 0; i < NX_ARRAY_LEN(nds); i++) {
        struct bb b = {0};
        hdr(&b, 3, 1, 0);
        uint64_t ne[5] = {8, 1, 1, 1, 1};
        bb_str(&b, "t.dims");
        bb_u32(&b, nds[i]);
        for (int d = 0; d < 5; d++) bb_u64(&b, ne[d]);
        bb_u32(&b, 0);
        bb_u64(&b, 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 64);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'t.dims'", "n_dims"));
        bb_free(&b);
    }
}

TEST(corrupt_misaligned_offset) {
    struct bb b = {0};
    hdr(&b, 3, 1, 0);
    uint64_t ne[1] = {8};
    tinfo(&b, "blk.0.attn_q.weight", 1, ne, 0, 33);
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT,
                       "tensor 'blk.0.attn_q.weight': offset 33 not aligned to 32", NULL));
    bb_free(&b);
    /* with a custom alignment, 32 is misaligned to 64 */
    hdr(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 64);
    tinfo(&b, "w", 1, ne, 0, 32);
    bb_pad(&b, 64);
    bb_zeros(&b, 128);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "tensor 'w': offset 32 not aligned to 64", NULL));
    bb_free(&b);
}

TEST(corrupt_data_out_of_range) {
    uint64_t offs[] = {32, 64, 1ull << 40, UINT64_MAX - 31};
    for (size_t i = 0; i < NX_ARRAY_LEN(offs); i++) {
        struct bb b = {0};
        hdr(&b, 3, 1, 0);
        uint64_t ne[1] = {8};
        tinfo(&b, "output.weight", 1, ne, 0, offs[i]);
        bb_pad(&b, 32);
        bb_zeros(&b, 32); /* room for exactly one 32-byte tensor at offset 0 */
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "tensor 'output.weight'", "out of file range"));
        bb_free(&b);
    }
    /* the data section itself starts past the end of the file */
    struct bb b = {0};
    hdr(&b, 3, 1, 0);
    uint64_t ne[1] = {8};
    tinfo(&b, "x", 1, ne, 0, 0);
    /* header ends unaligned (57 bytes), nothing after it */
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "data section", NULL));
    bb_free(&b);
}

TEST(corrupt_overlapping_tensors) {
    struct bb b = {0};
    hdr(&b, 3, 3, 0);
    uint64_t ne16[1] = {16}, ne8[1] = {8};
    tinfo(&b, "first", 1, ne16, 0, 0);    /* [0, 64) */
    tinfo(&b, "third", 1, ne8, 0, 96);    /* [96, 128) */
    tinfo(&b, "second", 1, ne8, 0, 32);   /* [32, 64): inside "first" */
    bb_pad(&b, 32);
    bb_zeros(&b, 128);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'second'", "overlaps tensor 'first'"));
    bb_free(&b);
    /* same offset twice */
    hdr(&b, 3, 2, 0);
    tinfo(&b, "p", 1, ne8, 0, 0);
    tinfo(&b, "q", 1, ne8, 0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "overlaps", "'p'"));
    bb_free(&b);
    /* zero-size tensors overlap nothing */
    hdr(&b, 3, 2, 0);
    uint64_t ne0[1] = {0};
    tinfo(&b, "z", 1, ne0, 0, 0);
    tinfo(&b, "p", 1, ne8, 0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 32);
    ASSERT_TRUE(expect(&b, NX_STATUS_OK, NULL, NULL));
    bb_free(&b);
}

TEST(corrupt_huge_counts) {
    struct bb b = {0};
    uint64_t huge[] = {1ull << 63, UINT64_MAX, UINT64_MAX / 13, 1ull << 32};
    for (size_t i = 0; i < NX_ARRAY_LEN(huge); i++) {
        hdr(&b, 3, 0, huge[i]);
        kv_u32(&b, "a", 1);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "n_kv", NULL));
        bb_free(&b);
        hdr(&b, 3, huge[i], 0);
        bb_zeros(&b, 64);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "n_tensors", NULL));
        bb_free(&b);
    }
    /* key string length near 2^64 */
    hdr(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_raw(&b, "abc", 3);
    bb_zeros(&b, 16); /* enough bytes left that n_kv = 1 is plausible */
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "kv #0 key", "length 18446744073709551615"));
    bb_free(&b);
    /* string value length near 2^64 */
    hdr(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, UINT64_MAX - 1);
    bb_raw(&b, "abc", 3);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'general.name'", "string length"));
    bb_free(&b);
    /* array lengths near 2^64, for scalar, string and nested element types */
    enum gguf_vtype ets[] = {GGUF_VTYPE_U8, GGUF_VTYPE_U32, GGUF_VTYPE_F64, GGUF_VTYPE_STRING,
                             GGUF_VTYPE_ARRAY};
    uint64_t lens[] = {UINT64_MAX, 1ull << 62, (1ull << 61) + 1};
    for (size_t i = 0; i < NX_ARRAY_LEN(ets); i++) {
        for (size_t j = 0; j < NX_ARRAY_LEN(lens); j++) {
            hdr(&b, 3, 0, 1);
            bb_str(&b, "tokenizer.ggml.scores");
            bb_u32(&b, GGUF_VTYPE_ARRAY);
            bb_u32(&b, ets[i]);
            bb_u64(&b, lens[j]);
            bb_zeros(&b, 40);
            ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'tokenizer.ggml.scores'",
                               "array length"));
            bb_free(&b);
        }
    }
    /* a string element length near 2^64 inside a string array */
    hdr(&b, 3, 0, 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 16);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'tokenizer.ggml.tokens'", "string element 1"));
    bb_free(&b);
    /* tensor name length near 2^64 */
    hdr(&b, 3, 1, 0);
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 64);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "tensor #0 name", "length"));
    bb_free(&b);
}

TEST(corrupt_bad_alignment) {
    uint32_t vals[] = {0, 3, 48, 0xffffffffu};
    for (size_t i = 0; i < NX_ARRAY_LEN(vals); i++) {
        struct bb b = {0};
        hdr(&b, 3, 0, 1);
        kv_u32(&b, "general.alignment", vals[i]);
        char want[32];
        snprintf(want, sizeof want, "%u is not", vals[i]);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "general.alignment", want));
        bb_free(&b);
    }
    struct bb b = {0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_VTYPE_U64);
    bb_u64(&b, 32);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "general.alignment", "expected u32"));
    bb_free(&b);
    /* a valid alignment of 1 is accepted */
    hdr(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 1);
    uint64_t ne[1] = {1};
    tinfo(&b, "t", 1, ne, 0, 3);
    bb_zeros(&b, 7);
    ASSERT_TRUE(expect(&b, NX_STATUS_OK, NULL, NULL));
    bb_free(&b);
}

TEST(corrupt_element_count_overflow) {
    struct {
        uint32_t n_dims;
        uint64_t ne[4];
        const char *needle;
    } cases[] = {
        {2, {1ull << 32, 1ull << 32}, "element count overflows"},
        {4, {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16}, "element count overflows"},
        {3, {1ull << 62, 0, 4}, "element count overflows"},
        {1, {1ull << 63}, "negative"},
        {2, {8, UINT64_MAX}, "ne[1] = -1 is negative"},
        {2, {1ull << 40, 1ull << 22}, "data size overflows"}, /* 2^62 elements * 4 bytes */
        {1, {33}, "block size"}, /* Q8_0 below */
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        struct bb b = {0};
        hdr(&b, 3, 1, 0);
        uint32_t type = i + 1 == NX_ARRAY_LEN(cases) ? NX_TYPE_Q8_0 : NX_TYPE_F32;
        tinfo(&b, "big.weight", cases[i].n_dims, cases[i].ne, type, 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 64);
        ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'big.weight'", cases[i].needle));
        bb_free(&b);
    }
}

TEST(corrupt_names) {
    struct bb b = {0};
    /* key with a NUL byte */
    hdr(&b, 3, 0, 1);
    bb_strn(&b, "bad\0key", 7);
    bb_u32(&b, GGUF_VTYPE_U8);
    bb_u8(&b, 1);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "kv #0 key 'bad?key'", "NUL"));
    bb_free(&b);
    /* empty key */
    hdr(&b, 3, 0, 1);
    bb_str(&b, "");
    bb_u32(&b, GGUF_VTYPE_U8);
    bb_u8(&b, 1);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "kv #0 key", "empty"));
    bb_free(&b);
    /* key longer than the limit */
    size_t n = GGUF_MAX_NAME + 1;
    char *longname = malloc(n);
    memset(longname, 'a', n);
    hdr(&b, 3, 0, 1);
    bb_strn(&b, longname, n);
    bb_u32(&b, GGUF_VTYPE_U8);
    bb_u8(&b, 1);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "kv #0 key", "exceeds the limit"));
    bb_free(&b);
    /* tensor name with NUL, and too long */
    uint64_t ne[1] = {8};
    hdr(&b, 3, 1, 0);
    bb_strn(&b, "w\0", 2);
    bb_u32(&b, 1);
    bb_u64(&b, 8);
    bb_u32(&b, 0);
    bb_u64(&b, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 32);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "tensor #0 name", "NUL"));
    bb_free(&b);
    hdr(&b, 3, 1, 0);
    bb_strn(&b, longname, n);
    bb_u32(&b, 1);
    bb_u64(&b, ne[0]);
    bb_u32(&b, 0);
    bb_u64(&b, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 32);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "tensor #0 name", "exceeds the limit"));
    bb_free(&b);
    free(longname);
}

TEST(corrupt_bool_values) {
    struct bb b = {0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "flag");
    bb_u32(&b, GGUF_VTYPE_BOOL);
    bb_u8(&b, 2);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'flag'", "bool"));
    bb_free(&b);
    hdr(&b, 3, 0, 1);
    bb_str(&b, "flags");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_BOOL);
    bb_u64(&b, 3);
    bb_u8(&b, 0);
    bb_u8(&b, 1);
    bb_u8(&b, 255);
    ASSERT_TRUE(expect(&b, NX_STATUS_FORMAT, "'flags'", "bool element 2"));
    bb_free(&b);
}

TEST(open_errors) {
    struct gguf_file *f = (struct gguf_file *)1;
    struct nx_err err = {{0}};
    ASSERT_EQ(gguf_open("/nonexistent-nx/model.gguf", &f, &err), NX_STATUS_IO);
    ASSERT_TRUE(f == NULL);
    ASSERT_TRUE(strstr(err.msg, "/nonexistent-nx/model.gguf") != NULL);
    ASSERT_EQ(gguf_open(test_tmpdir(), &f, &err), NX_STATUS_IO);
    ASSERT_TRUE(strstr(err.msg, "not a regular file") != NULL);
    ASSERT_EQ(gguf_open_buffer(NULL, 0, &f, &err), NX_STATUS_FORMAT);
    ASSERT_EQ(gguf_open_buffer(NULL, 10, &f, &err), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_open_buffer("GGUF", 4, NULL, NULL), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(gguf_open_buffer("GGUF", 4, &f, NULL), NX_STATUS_FORMAT); /* err may be NULL */
    gguf_close(NULL);
}

/* ---- allocation failures ---- */

TEST(fault_injection_open) {
    char path[512];
    model_path(path, sizeof path, "stories260K/stories260K.gguf");
    size_t before = nx_alloc_bytes();
    bool opened = false;
    long n;
    for (n = 1; n <= 1000 && !opened; n++) {
        struct gguf_file *f = (struct gguf_file *)1;
        struct nx_err err = {{0}};
        nx_alloc_fail_after(n);
        nx_status st = gguf_open(path, &f, &err);
        nx_alloc_fail_after(0);
        if (st == NX_STATUS_OK) {
            opened = true;
            ASSERT_EQ(gguf_n_tensors(f), 48);
            gguf_close(f);
        } else {
            ASSERT_EQ(st, NX_STATUS_NOMEM);
            ASSERT_TRUE(f == NULL);
            ASSERT_TRUE(strstr(err.msg, "out of memory") != NULL);
        }
        ASSERT_EQ(nx_alloc_bytes(), before);
    }
    ASSERT_TRUE(opened);
    ASSERT_TRUE(n > 3); /* several allocations were exercised */
}

TEST(fault_injection_writer) {
    size_t before = nx_alloc_bytes();
    bool done = false;
    for (long n = 1; n <= 200 && !done; n++) {
        nx_alloc_fail_after(n);
        struct gguf_writer *w = gguf_writer_init();
        nx_status st = w ? NX_STATUS_OK : NX_STATUS_NOMEM;
        const char *strs[] = {"a", "b"};
        float d[8] = {0};
        int64_t ne[1] = {8};
        char path[256];
        snprintf(path, sizeof path, "%s/fault.gguf", test_tmpdir());
        struct nx_err err = {{0}};
        for (int i = 0; i < 40 && !st; i++) {
            char key[32];
            snprintf(key, sizeof key, "k%d", i);
            st = gguf_writer_add_u32(w, key, (uint32_t)i);
        }
        if (!st) st = gguf_writer_add_arr_str(w, "s", strs, 2);
        for (int i = 0; i < 20 && !st; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d", i);
            st = gguf_writer_add_tensor(w, name, NX_TYPE_F32, 1, ne, d, sizeof d);
        }
        if (!st) st = gguf_writer_write(w, path, &err);
        nx_alloc_fail_after(0);
        if (st == NX_STATUS_OK) done = true;
        else ASSERT_EQ(st, NX_STATUS_NOMEM);
        gguf_writer_free(w);
        ASSERT_EQ(nx_alloc_bytes(), before);
        ASSERT_EQ(count_entries(test_tmpdir(), ".tmp."), 0);
        unlink(path);
    }
    ASSERT_TRUE(done);
}

TEST_MAIN
