/*
 * test_route.c - tests of the tool-routing core: registry shapes and type mapping, signature
 * rules, BM25 on a hand-computed case, the INT8 SLB (quantization error bound, SIMD == scalar
 * including an emulated AVX-512 VNNI kernel, top-k and margin), reciprocal rank fusion, Wilson
 * intervals, calibration helpers, the router with a tiny embedder and reranker written here, and
 * the eval-routing / signatures entry points on small fixtures and malformed input.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "eval/routing_run.h"
#include "nexus.h"
#include "route/bm25.h"
#include "route/registry.h"
#include "route/router.h"
#include "route/signature.h"
#include "route/slb.h"
#include "support/tmpdir.h"
#include "test.h"
#include "model/mkmodel.h"
#include "support/cli.h"

/* The AVX-512 VNNI kernel, compiled here on the plain-C emulation of its intrinsics. */
#define NX_SLB_AVX512_EMULATE
#define RT_SLB_AVX512_NAME slb_dots_avx512_emulated
#include "../src/route/slb_avx512.c"

/* ---- helpers ---- */

static char g_made[128][64];
static char g_paths[128][320];
static int g_n_made;

/* A path in this run's temporary directory (stable for the run; removed at exit). */
static const char *tmp_path(const char *name) {
    for (int i = 0; i < g_n_made; i++)
        if (strcmp(g_made[i], name) == 0) return g_paths[i];
    if (g_n_made == 128 || strlen(name) >= 64) abort();
    snprintf(g_made[g_n_made], 64, "%s", name);
    snprintf(g_paths[g_n_made], sizeof g_paths[0], "%.200s/%.63s", test_tmpdir(), name);
    return g_paths[g_n_made++];
}

static const char *write_tmp(const char *name, const char *text) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
    return p;
}

static int load_str(rt_registry *r, const char *name, const char *text, char *err, size_t n) {
    return rt_registry_load_file(r, write_tmp(name, text), err, n);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { /* xorshift64*, seeded */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* ---- registry ---- */

TEST(registry_shapes_and_types) {
    char err[512];
    rt_registry r;
    rt_registry_init(&r);
    /* MCP tools/list object */
    ASSERT_EQ(load_str(&r, "mcp.json",
                       "{\"server\":\"x\",\"tools\":[{\"name\":\"zeta\",\"description\":\"Z\","
                       "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                       "\"string\"}}}}]}", err, sizeof err), 1);
    /* OpenAI function shape in a bare array, plus a plain function */
    ASSERT_EQ(load_str(&r, "oai.json",
                       "[{\"type\":\"function\",\"function\":{\"name\":\"alpha\",\"description\":"
                       "\"A\",\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                       "\"integer\"}},\"required\":[\"n\"]}}},{\"name\":\"mid\"}]", err, sizeof err), 2);
    /* BFCL JSON Lines with its non-standard types, nested */
    const char *bfcl =
        "{\"id\":\"q1\",\"question\":[],\"function\":[{\"name\":\"Ch.drink\",\"description\":\"D\","
        "\"parameters\":{\"type\":\"dict\",\"required\":[\"p\"],\"properties\":{\"p\":{\"type\":"
        "\"dict\",\"properties\":{\"f\":{\"type\":\"float\"},\"t\":{\"type\":\"tuple\",\"items\":"
        "{\"type\":\"integer\"}}}},\"x\":{\"type\":\"any\"},\"b\":{\"type\":\"boolean\"}}}}]}\n"
        "\n"
        "{\"id\":\"q2\",\"question\":[],\"function\":[{\"name\":\"Ch.drink\",\"description\":\"other\"}]}\n";
    /* BFCL question lines: first definition wins even under the default (error) policy */
    ASSERT_EQ(load_str(&r, "bfcl.json", bfcl, err, sizeof err), 1); /* second definition dropped */
    ASSERT_EQ(r.dup, RT_DUP_ERROR);
    rt_registry_sort(&r);
    ASSERT_EQ(r.n, 4);
    /* bytewise order: uppercase before lowercase */
    ASSERT_STR_EQ(r.tools[0].name, "Ch.drink");
    ASSERT_STR_EQ(r.tools[1].name, "alpha");
    ASSERT_STR_EQ(r.tools[2].name, "mid");
    ASSERT_STR_EQ(r.tools[3].name, "zeta");
    ASSERT_EQ(rt_registry_find(&r, "mid"), 2);
    ASSERT_EQ(rt_registry_find(&r, "nope"), -1);
    ASSERT_STR_EQ(r.tools[0].description, "D");
    ASSERT_STR_EQ(r.tools[3].source, "mcp");
    json_t *s = r.tools[0].schema;
    ASSERT_STR_EQ(json_string_value(json_object_get(s, "type")), "object");
    json_t *p = json_object_get(json_object_get(s, "properties"), "p");
    ASSERT_STR_EQ(json_string_value(json_object_get(p, "type")), "object");
    json_t *pp = json_object_get(p, "properties");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(pp, "f"), "type")), "number");
    json_t *t = json_object_get(pp, "t");
    ASSERT_STR_EQ(json_string_value(json_object_get(t, "type")), "array");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(t, "items"), "type")), "integer");
    /* any: no type constraint left */
    ASSERT_TRUE(json_object_get(json_object_get(json_object_get(s, "properties"), "x"), "type") == NULL);
    /* a tool without parameters gets an empty object schema; raw JSON kept as given */
    ASSERT_STR_EQ(json_string_value(json_object_get(r.tools[2].schema, "type")), "object");
    ASSERT_STR_EQ(r.tools[2].raw_json, "{\"name\":\"mid\"}");
    ASSERT_STR_EQ(rt_map_type("HashMap"), "object");
    ASSERT_STR_EQ(rt_map_type("double"), "number");
    ASSERT_STR_EQ(rt_map_type("any"), "");
    ASSERT_TRUE(rt_map_type("vector3") == NULL);
    rt_registry_free(&r);
}

TEST(registry_duplicates) {
    char err[512];
    rt_registry r;
    rt_registry_init(&r);
    const char *a = "[{\"name\":\"get\",\"description\":\"one\"},{\"name\":\"get\",\"description\":\"one\"}]";
    ASSERT_EQ(load_str(&r, "srvA.json", a, err, sizeof err), 1); /* identical: merged */
    /* different definition, same source: error naming the tool */
    const char *b = "[{\"name\":\"put\",\"description\":\"x\"},{\"name\":\"put\",\"description\":\"y\"}]";
    ASSERT_EQ(load_str(&r, "srvA2.json", b, err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "duplicate tool name 'put'") != NULL);
    ASSERT_TRUE(strstr(err, "element[1]") != NULL);
    /* different definition from another source: both prefixed with their source */
    ASSERT_EQ(load_str(&r, "srvB.json", "[{\"name\":\"get\",\"description\":\"two\"}]", err, sizeof err), 1);
    rt_registry_sort(&r);
    int ia = rt_registry_find(&r, "srvA.get"), ib = rt_registry_find(&r, "srvB.get");
    ASSERT_TRUE(ia >= 0 && ib >= 0);
    ASSERT_STR_EQ(r.tools[ia].call_name, "get");
    ASSERT_STR_EQ(r.tools[ib].description, "two");
    rt_registry_free(&r);
}

TEST(registry_malformed) {
    char err[512];
    rt_registry r;
    rt_registry_init(&r);
    ASSERT_EQ(load_str(&r, "bad1.json", "{\"tools\": [", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "bad1.json:1:") != NULL && strstr(err, "invalid JSON") != NULL);
    ASSERT_EQ(load_str(&r, "bad2.json", "{\"name\":\"a\"}\n{\"name\":\"b\"}\n{\"name\":\n", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "bad2.json:3") != NULL);
    ASSERT_EQ(load_str(&r, "bad3.json", "{\"tools\":[{\"description\":\"x\"}]}", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "tools[0] has no string 'name'") != NULL);
    ASSERT_EQ(load_str(&r, "bad4.json", "[{\"name\":\"a\",\"parameters\":{\"properties\":{\"q\":{\"type\":\"vector3\"}}}}]", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "unknown type 'vector3'") != NULL && strstr(err, "parameters.q") != NULL);
    ASSERT_EQ(load_str(&r, "bad5.json", "[{\"name\":\"a\",\"parameters\":{\"required\":\"q\"}}]", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "'required' is not a list") != NULL);
    ASSERT_EQ(load_str(&r, "bad6.json", "[{\"name\":\"a b\"}]", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "whitespace") != NULL);
    ASSERT_EQ(load_str(&r, "bad7.json", "42", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_EQ(load_str(&r, "bad8.json", "{\"tools\":{}}", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_TRUE(strstr(err, "'tools' is not a list") != NULL);
    ASSERT_EQ(load_str(&r, "bad9.json", "[{\"type\":\"custom\",\"function\":{\"name\":\"a\"}}]", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_EQ(load_str(&r, "bad10.json", "", err, sizeof err), NX_STATUS_FORMAT);
    ASSERT_EQ(rt_registry_load_file(&r, tmp_path("does-not-exist.json"), err, sizeof err), NX_STATUS_IO);
    ASSERT_TRUE(strstr(err, "cannot open") != NULL);
    /* deeply nested schema: an error, not a stack overflow */
    size_t depth = 200, cap = depth * 40 + 64, o = 0;
    char *deep = malloc(cap);
    o += (size_t)snprintf(deep + o, cap - o, "[{\"name\":\"d\",\"parameters\":");
    for (size_t i = 0; i < depth; i++) o += (size_t)snprintf(deep + o, cap - o, "{\"items\":");
    o += (size_t)snprintf(deep + o, cap - o, "{}");
    for (size_t i = 0; i < depth; i++) deep[o++] = '}';
    snprintf(deep + o, cap - o, "}]");
    ASSERT_EQ(load_str(&r, "deep.json", deep, err, sizeof err), NX_STATUS_FORMAT);
    free(deep);
    ASSERT_TRUE(strstr(err, "deeper than") != NULL);
    ASSERT_EQ(r.n, 0);
    rt_registry_free(&r);
}

TEST(registry_shared_data) {
    char err[512], path[512];
    const char *servers[] = {"playwright-mcp", "server-everything", "server-filesystem",
                             "server-github", "server-memory", "server-sequential-thinking"};
    rt_registry r;
    rt_registry_init(&r);
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/data/mcp/%s.json", test_shared(), servers[i]);
        int n = rt_registry_load_file(&r, path, err, sizeof err);
        if (n < 0) FAILF("%s", err);
    }
    rt_registry_sort(&r);
    ASSERT_EQ(r.n, 88); /* ROUTING.md §3: 6 servers, 88 tools, no name shared */
    for (int i = 1; i < r.n; i++) ASSERT_TRUE(strcmp(r.tools[i - 1].name, r.tools[i].name) < 0);
    rt_registry_free(&r);
    rt_registry_init(&r);
    r.dup = RT_DUP_KEEP_FIRST;
    snprintf(path, sizeof path, "%s/data/bfcl/BFCL_v4_live_multiple.json", test_shared());
    int n = rt_registry_load_file(&r, path, err, sizeof err);
    if (n < 0) FAILF("%s", err);
    ASSERT_EQ(r.n, 457); /* ROUTING.md §4: 457 distinct names */
    rt_registry_free(&r);
}

/* ---- signatures ---- */

static char *sig_of(const char *tool_json) {
    char err[256];
    rt_registry r;
    rt_registry_init(&r);
    json_error_t je;
    json_t *j = json_loads(tool_json, 0, &je);
    if (!j || rt_registry_add_json(&r, j, "test", "t", err, sizeof err) != 1) {
        fprintf(stderr, "  sig_of: %s %s\n", je.text, err);
        json_decref(j);
        rt_registry_free(&r);
        return NULL;
    }
    json_decref(j);
    char *s = rt_signature(&r.tools[0]);
    rt_registry_free(&r);
    return s;
}

TEST(signature_rules) {
    /* field order: required identifiers (list order), optional identifiers, payload fields,
     * other required, other optional (schema order within the last two) */
    char *s = sig_of(
        "{\"name\":\"create_or_update_file\",\"inputSchema\":{\"type\":\"object\",\"properties\":{"
        "\"extra\":{\"type\":\"string\"},\"message\":{\"type\":\"string\"},"
        "\"content\":{\"type\":\"string\"},\"sha\":{\"type\":\"string\"},"
        "\"branch\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},"
        "\"repo\":{\"type\":\"string\"},\"owner\":{\"type\":\"string\"},"
        "\"force\":{\"type\":\"boolean\"},\"count\":{\"type\":\"integer\"}},"
        "\"required\":[\"owner\",\"repo\",\"path\",\"content\",\"message\",\"branch\",\"count\"]}}");
    ASSERT_TRUE(s != NULL);
    ASSERT_STR_EQ(s, "create_or_update_file(owner: string, repo: string, path: string, branch: "
                     "string, sha?: string, message: string, content: string, count: int, "
                     "extra?: string, force?: bool)");
    nx_free(s);
    /* enums, arrays, nested objects, unions, const, no items, BFCL types */
    s = sig_of("{\"name\":\"f\",\"parameters\":{\"type\":\"dict\",\"required\":[\"mode\",\"tags\"],"
               "\"properties\":{\"mode\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},"
               "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
               "\"opts\":{\"type\":\"dict\",\"properties\":{\"k\":{\"type\":\"float\"}}},"
               "\"lv\":{\"type\":\"array\",\"items\":{\"enum\":[1,2]}},"
               "\"u\":{\"type\":[\"string\",\"null\"]},"
               "\"o\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"type\":\"number\"}}]},"
               "\"c\":{\"const\":\"x\"},\"raw\":{\"type\":\"array\"},\"any\":{\"type\":\"any\"},"
               "\"grid\":{\"type\":\"tuple\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}}}");
    ASSERT_TRUE(s != NULL);
    ASSERT_STR_EQ(s, "f(mode: \"a\"|\"b\", tags: string[], opts?: object, lv?: (1|2)[], "
                     "u?: string|null, o?: int|number[], c?: \"x\", raw?: any[], any?: any, "
                     "grid?: int[][])");
    nx_free(s);
    s = sig_of("{\"name\":\"noargs\"}");
    ASSERT_STR_EQ(s, "noargs()");
    nx_free(s);
}

/* ---- BM25 ---- */

struct toks {
    char t[16][64];
    int n;
};
static void collect(const char *tok, size_t len, void *ud) {
    struct toks *c = ud;
    if (c->n < 16) {
        memcpy(c->t[c->n], tok, len);
        c->t[c->n++][len] = 0;
    }
}

TEST(lex_tokens) {
    struct toks c = {0};
    /* UTF-8 bytes stay in the token, not lower-cased */
    ASSERT_EQ(rt_lex_tokens("getHTMLParser snake_case-kebab.dot x2y \xc3\x84\xc3\x96!", collect, &c), 9);
    const char *want[] = {"get", "html", "parser", "snake", "case", "kebab", "dot", "x2y", "\xc3\x84\xc3\x96"};
    for (int i = 0; i < 9; i++) ASSERT_STR_EQ(c.t[i], want[i]);
    ASSERT_EQ(c.n, 9);
}

TEST(bm25_hand) {
    /* docs: d0 = "apple banana" (2 tokens), d1 = "apple apple cherry" (3), d2 = "date" (1).
     * N = 3, avgdl = 2, k1 = 1.2, b = 0.75.
     * idf(apple) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6) = 0.470003629245736
     * idf(cherry) = ln(1 + 2.5 / 1.5) = ln(8/3) = 0.980829253011726
     * query "apple cherry":
     *   d0: apple tf 1, dl 2: 1 * 2.2 / (1 + 1.2 * 1) = 1;  score = 0.470003629245736
     *   d1: apple tf 2, dl 3: norm = 1 - 0.75 + 0.75 * 1.5 = 1.375, K = 1.65;
     *       apple: 2 * 2.2 / 3.65 = 1.205479452054795 -> 0.566579718049244
     *       cherry: 1 * 2.2 / 2.65 = 0.830188679245283 -> 0.814273342877093
     *       score = 1.380853060926337
     *   d2: 0 */
    rt_bm25 *bm = rt_bm25_new(1.2f, 0.75f);
    ASSERT_OK(rt_bm25_add(bm, "apple banana"));
    ASSERT_OK(rt_bm25_add(bm, "Apple apple cherry"));
    ASSERT_OK(rt_bm25_add(bm, "date"));
    float sc[3];
    ASSERT_EQ(rt_bm25_score(bm, "apple, CHERRY?", sc), 2);
    ASSERT_NEAR(sc[0], 0.470003629245736, 1e-6);
    ASSERT_NEAR(sc[1], 1.380853060926337, 1e-6);
    ASSERT_NEAR(sc[2], 0.0, 0);
    /* a repeated query token counts twice */
    ASSERT_EQ(rt_bm25_score(bm, "date date", sc), 2);
    /* idf(date) = ln(8/3); d2: tf 1, dl 1: norm = 0.625, K = 0.75, 2.2 / 1.75 = 1.257142857 */
    ASSERT_NEAR(sc[2], 2 * 0.980829253011726 * 2.2 / 1.75, 1e-6);
    ASSERT_EQ(rt_bm25_score(bm, "zebra", sc), 0);
    ASSERT_NEAR(sc[0] + sc[1] + sc[2], 0.0, 0);
    rt_bm25_free(bm);
}

/* ---- SLB ---- */

/* The bound of slb.h: |x.y - s_x s_y q_x.q_y| <= s_x s_y (sum|q_x|/2 + sum|q_y|/2 + n/4),
 * plus float rounding of the reference dot (double here) and of the score product (3 ulp). */
static double quant_bound(const int8_t *qx, float sx, const int8_t *qy, float sy, int n) {
    double ax = 0, ay = 0;
    for (int i = 0; i < n; i++) {
        ax += abs(qx[i]);
        ay += abs(qy[i]);
    }
    return (double)sx * sy * (0.5 * ax + 0.5 * ay + 0.25 * n);
}

TEST(slb_quantization_bound) {
    const int dims[] = {1, 3, 63, 64, 65, 384, 383, 1000};
    char err[128];
    double worst_ratio = 0;
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        int d = dims[di];
        rt_slb *s = NULL;
        rt_slb_new(d, &s, err, sizeof err);
        ASSERT_TRUE(s != NULL);
        float *v = malloc(sizeof *v * (size_t)d * 20), *q = malloc(sizeof *q * (size_t)d);
        for (int r = 0; r < 20; r++) {
            for (int i = 0; i < d; i++) v[r * d + i] = rndf() * (r % 3 == 0 ? 100.0f : 1.0f);
            ASSERT_EQ(rt_slb_add(s, v + r * d), r);
        }
        for (int i = 0; i < d; i++) q[i] = rndf();
        float sc[20];
        rt_slb_scores(s, q, sc, NULL);
        int8_t *qq = aligned_alloc(64, rt_slb_dim_pad(s));
        float qs = rt_slb_quantize(q, d, rt_slb_dim_pad(s), qq);
        for (int r = 0; r < 20; r++) {
            double ref = 0;
            for (int i = 0; i < d; i++) ref += (double)v[r * d + i] * q[i];
            double bound = quant_bound(rt_slb_row(s, r), rt_slb_scale(s, r), qq, qs, d);
            double tol = bound + 4e-7 * fabs(ref) + 1e-30;
            double e = fabs(ref - sc[r]);
            if (!(e <= tol)) FAILF("dim %d row %d: |%g - %g| = %g > bound %g", d, r, ref, sc[r], e, tol);
            if (bound > 0 && e / bound > worst_ratio) worst_ratio = e / bound;
        }
        free(qq);
        free(v);
        free(q);
        rt_slb_free(s);
    }
    /* the bound is not vacuous: it is reached within a factor of 100 somewhere */
    ASSERT_TRUE(worst_ratio > 0.01);
    /* quantizer hand case: max 2 -> scale 2/127; 1 -> round(63.5) = 64; -2 -> -127 */
    float x[3] = {1.0f, -2.0f, 0.0f};
    int8_t qx[64];
    ASSERT_NEAR(rt_slb_quantize(x, 3, 64, qx), 2.0 / 127.0, 1e-9);
    ASSERT_EQ(qx[0], 64);
    ASSERT_EQ(qx[1], -127);
    ASSERT_EQ(qx[2], 0);
    ASSERT_EQ(qx[63], 0);
    float z[2] = {0, 0};
    ASSERT_NEAR(rt_slb_quantize(z, 2, 64, qx), 0.0, 0);
}

static void fill_pattern(int8_t *m, size_t n, int kind) {
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: m[i] = (int8_t)((int)(rnd() % 255) - 127); break;
        case 1: m[i] = 127; break;
        case 2: m[i] = -127; break;
        case 3: m[i] = (i & 1) ? 127 : -127; break;
        case 4: m[i] = 0; break;
        default: m[i] = (rnd() & 1) ? 127 : -127; break;
        }
    }
}

TEST(slb_simd_equals_scalar) {
    rt_slb_dots_fn sets[3];
    const char *names[3];
    int ns = 0;
    if (rt_slb_kernel_by_name("avx2")) {
        sets[ns] = rt_slb_kernel_by_name("avx2");
        names[ns++] = "avx2";
    }
    if (rt_slb_kernel_by_name("avx512")) {
        sets[ns] = rt_slb_kernel_by_name("avx512");
        names[ns++] = "avx512";
    }
    sets[ns] = slb_dots_avx512_emulated;
    names[ns++] = "avx512-emulated";
    printf("  slb kernels: chosen %s; compared: ", rt_slb_kernel_name());
    for (int i = 0; i < ns; i++) printf("%s%s", i ? ", " : "", names[i]);
    printf("\n");
    ASSERT_TRUE(rt_slb_kernel_by_name("ref") == rt_slb_dots_ref);
    const size_t dps[] = {64, 128, 384, 448, 1024};
    for (size_t di = 0; di < sizeof dps / sizeof *dps; di++) {
        size_t dp = dps[di];
        for (int rows = 0; rows <= 7; rows += (rows < 3 ? 1 : 4)) {
            for (int kq = 0; kq < 6; kq++)
                for (int km = 0; km < 6; km++) {
                    int8_t *m = aligned_alloc(64, dp * (size_t)(rows + 1));
                    int8_t *q = aligned_alloc(64, dp);
                    fill_pattern(m, dp * (size_t)rows, km);
                    fill_pattern(q, dp, kq);
                    int32_t sums[8], ref[8], got[8];
                    for (int r = 0; r < rows; r++) {
                        sums[r] = 0;
                        for (size_t j = 0; j < dp; j++) sums[r] += m[r * dp + j];
                    }
                    rt_slb_dots_ref(m, dp, rows, dp, q, sums, ref);
                    if (km == 1 && kq == 1 && rows > 0) ASSERT_EQ(ref[0], 127 * 127 * (int32_t)dp);
                    if (km == 1 && kq == 2 && rows > 0) ASSERT_EQ(ref[0], -127 * 127 * (int32_t)dp);
                    for (int si = 0; si < ns; si++) {
                        memset(got, 0x5a, sizeof got);
                        sets[si](m, dp, rows, dp, q, sums, got);
                        for (int r = 0; r < rows; r++)
                            if (got[r] != ref[r])
                                FAILF("%s dp %zu rows %d pattern q%d m%d row %d: %d != %d", names[si],
                                      dp, rows, kq, km, r, got[r], ref[r]);
                    }
                    free(m);
                    free(q);
                }
        }
    }
    /* through the SLB with odd dimensions: every kernel gives the same scores */
    char err[128];
    const int dims[] = {1, 65, 383};
    for (int di = 0; di < 3; di++) {
        rt_slb *s = NULL;
        rt_slb_new(dims[di], &s, err, sizeof err);
        float *v = malloc(sizeof *v * (size_t)dims[di]);
        for (int r = 0; r < 37; r++) {
            for (int i = 0; i < dims[di]; i++) v[i] = rndf();
            rt_slb_add(s, v);
        }
        float a[37], b[37];
        rt_slb_set_kernel(s, rt_slb_dots_ref);
        rt_slb_scores(s, v, a, NULL);
        for (int si = 0; si < ns; si++) {
            rt_slb_set_kernel(s, sets[si]);
            rt_slb_scores(s, v, b, NULL);
            ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
        }
        free(v);
        rt_slb_free(s);
    }
}

TEST(slb_quantize_simd_equals_scalar) {
    if (!rt_slb_kernel_by_name("avx2")) {
        printf("  skipped: no AVX2\n");
        return;
    }
    const int dims[] = {1, 7, 8, 15, 16, 17, 64, 383, 384, 1000};
    int8_t a[1024], b[1024];
    float x[1000];
    for (int di = 0; di < 10; di++) {
        int d = dims[di];
        for (int kind = 0; kind < 6; kind++) {
            for (int i = 0; i < d; i++) {
                switch (kind) {
                case 0: x[i] = rndf(); break;
                case 1: x[i] = rndf() * 1e30f; break;
                case 2: x[i] = (float)(i % 255) * 0.5f - 63.5f; break; /* halfway cases, amax 63.5 */
                case 3: x[i] = (float)(i % 255) - 127.0f + 0.5f * (i & 1); break;
                case 4: x[i] = i == d / 2 ? NAN : rndf(); break;
                default: x[i] = i == d - 1 ? -INFINITY : rndf(); break;
                }
            }
            size_t dp = (size_t)(d + 63) / 64 * 64;
            memset(a, 0x11, sizeof a);
            memset(b, 0x22, sizeof b);
            float sa = rt_slb_quantize(x, d, dp, a), sb = rt_slb_quantize_avx2(x, d, dp, b);
            if (!(sa == sb) || memcmp(a, b, dp) != 0) FAILF("dim %d kind %d: scales %g %g or bytes differ", d, kind, sa, sb);
            for (size_t j = 0; j < dp; j++) ASSERT_TRUE(a[j] >= -127 && a[j] <= 127);
        }
    }
    /* round half away from zero: amax 2 -> inv 63.5: 1/63.5... use amax 127 (inv 1): 0.5 -> 1,
     * -0.5 -> -1, 1.5 -> 2, 126.5 -> 127 */
    float h[5] = {127.0f, 0.5f, -0.5f, 1.5f, 126.5f};
    rt_slb_quantize_avx2(h, 5, 64, b);
    ASSERT_EQ(b[1], 1);
    ASSERT_EQ(b[2], -1);
    ASSERT_EQ(b[3], 2);
    ASSERT_EQ(b[4], 127);
}

TEST(slb_topk_margin) {
    char err[128];
    rt_slb *s = NULL;
    rt_slb_new(2, &s, err, sizeof err);
    /* unit-ish rows; query (1, 0): scores are the quantized first components */
    float rows[5][2] = {{0.5f, 1.0f}, {1.0f, 0.0f}, {1.0f, 0.0f}, {-1.0f, 0.0f}, {0.0f, 1.0f}};
    for (int i = 0; i < 5; i++) rt_slb_add(s, rows[i]);
    float q[2] = {1.0f, 0.0f};
    struct rt_hit h[RT_SLB_KMAX];
    float margin;
    int n = rt_slb_topk(s, q, 3, h, &margin, NULL);
    ASSERT_EQ(n, 3);
    /* rows 1 and 2 tie at 127*127*(1/127)^2 = 1: lower id first; row 0: q = (64, 127), scale
     * 1/127: 64 * 127 / 127^2 = 0.503937 */
    ASSERT_EQ(h[0].id, 1);
    ASSERT_EQ(h[1].id, 2);
    ASSERT_EQ(h[2].id, 0);
    ASSERT_NEAR(h[0].score, 1.0, 1e-6);
    ASSERT_NEAR(h[2].score, 64.0 / 127.0, 1e-6);
    ASSERT_NEAR(margin, 0.0, 0);
    n = rt_slb_topk(s, q, 99, h, &margin, NULL); /* k clipped to the rows */
    ASSERT_EQ(n, 5);
    ASSERT_EQ(h[4].id, 3);
    rt_slb_free(s);
    rt_slb_new(2, &s, err, sizeof err);
    rt_slb_add(s, rows[0]);
    n = rt_slb_topk(s, q, 5, h, &margin, NULL);
    ASSERT_EQ(n, 1);
    ASSERT_TRUE(isinf(margin));
    rt_slb_free(s);
    ASSERT_EQ(rt_slb_new(0, &s, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(s == NULL);
    ASSERT_TRUE(strstr(err, "outside") != NULL);
}

/* ---- fusion, statistics ---- */

TEST(rrf_hand) {
    /* ranking A = [2, 0, 1], ranking B = [0, 3] over 4 docs, k = 60:
     * d0 = 1/62 + 1/61, d1 = 1/63, d2 = 1/61, d3 = 1/62 */
    int32_t a[3] = {2, 0, 1}, b[2] = {0, 3};
    const int32_t *rk[2] = {a, b};
    int lens[2] = {3, 2};
    float f[4];
    rt_rrf(rk, lens, 2, 4, 60, f);
    ASSERT_NEAR(f[0], 1.0 / 62 + 1.0 / 61, 1e-7);
    ASSERT_NEAR(f[1], 1.0 / 63, 1e-7);
    ASSERT_NEAR(f[2], 1.0 / 61, 1e-7);
    ASSERT_NEAR(f[3], 1.0 / 62, 1e-7);
    int32_t order[4];
    rt_rank_scores(f, 4, order);
    ASSERT_EQ(order[0], 0);
    ASSERT_EQ(order[1], 2);
    ASSERT_EQ(order[2], 3);
    ASSERT_EQ(order[3], 1);
}

TEST(wilson_and_percentile) {
    double lo, hi;
    /* 8 of 10 at z = 1.96: centre (0.8 + 0.19208) / 1.38416 = 0.7167380; half-width
     * 1.96 sqrt(0.016 + 0.009604) / 1.38416 = 0.2265811 -> [0.4901568, 0.9433191] */
    rt_wilson(8, 10, 1.96, &lo, &hi);
    ASSERT_NEAR(lo, 0.4901568, 2e-7);
    ASSERT_NEAR(hi, 0.9433191, 2e-7);
    rt_wilson(0, 10, 1.96, &lo, &hi); /* [0, z^2/(n+z^2)] = [0, 3.8416/13.8416] */
    ASSERT_NEAR(lo, 0.0, 1e-12);
    ASSERT_NEAR(hi, 3.8416 / 13.8416, 1e-9);
    float v[5] = {5, 1, 4, 2, 3};
    ASSERT_NEAR(rt_percentile(v, 5, 0), 1.0, 0);
    ASSERT_NEAR(rt_percentile(v, 5, 50), 3.0, 0);
    ASSERT_NEAR(rt_percentile(v, 5, 20), 1.8, 1e-6); /* pos 0.8 between 1 and 2 */
    ASSERT_NEAR(rt_percentile(v, 5, 100), 5.0, 0);
    ASSERT_TRUE(isnan(rt_percentile(v, 0, 50)));
    ASSERT_EQ(v[0], 5); /* not modified */
    /* abstention: answerable tops {0.9, 0.8, 0.4}, unanswerable {0.3, 0.5}: t = 0.6 answers
     * 2/3 and abstains 2/2 (1.667); t = 0.35 answers 3/3, abstains 1/2 (1.5). Best: midpoint of
     * 0.5 and 0.8 = 0.65. */
    float pos[3] = {0.9f, 0.8f, 0.4f}, neg[2] = {0.3f, 0.5f};
    ASSERT_NEAR(rt_calibrate_abstain(pos, 3, neg, 2), 0.65, 1e-6);
    ASSERT_TRUE(isnan(rt_calibrate_abstain(pos, 3, neg, 0)));
}

/* ---- router with a tiny embedder and reranker ---- */

/* Bag of words hashed into 16 buckets, L2-normalised; deterministic. */
struct tiny_emb {
    rt_embedder base;
    int calls;
};
static void tiny_tok(const char *tok, size_t len, void *ud) {
    float *v = ud;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)tok[i]) * 16777619u;
    v[h % 16] += 1.0f;
}
static nx_status tiny_embed(rt_embedder *e, const char *text, enum rt_text_kind kind, float *out,
                            char *err, size_t errlen) {
    ((struct tiny_emb *)e)->calls++;
    if (strstr(text, "FAIL")) {
        snprintf(err, errlen, "tiny embedder: refused");
        return NX_STATUS_INVALID_ARG;
    }
    memset(out, 0, sizeof(float) * 16);
    rt_lex_tokens(text, tiny_tok, out);
    double n = 0;
    for (int i = 0; i < 16; i++) n += out[i] * out[i];
    if (n > 0)
        for (int i = 0; i < 16; i++) out[i] /= (float)sqrt(n);
    return 0;
}
static void tiny_free(rt_embedder *e) { (void)e; }

/* Reranker: score = length of the document (deterministic, unrelated to the first stage). */
static nx_status len_score(rt_reranker *r, const char *q, const char *doc, float *s, char *err,
                           size_t n) {
    *s = (float)strlen(doc);
    return 0;
}

static const char *k_tools =
    "[{\"name\":\"get_weather\",\"description\":\"Current weather for a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}},"
    "{\"name\":\"send_email\",\"description\":\"Send an email message to a recipient\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"to\":{\"type\":\"string\"},\"body\":{\"type\":\"string\"}}}},"
    "{\"name\":\"search_files\",\"description\":\"Search files in a directory by pattern\"},"
    "{\"name\":\"read_file\",\"description\":\"Read the contents of a file\"}]";

TEST(router_modes) {
    char err[256];
    rt_registry r;
    rt_registry_init(&r);
    ASSERT_EQ(load_str(&r, "tools.json", k_tools, err, sizeof err), 4);
    rt_registry_sort(&r); /* get_weather, read_file, search_files, send_email */
    struct tiny_emb te = {{"tiny", 16, tiny_embed, tiny_free}, 0};
    struct rt_router_params p = rt_router_default_params();
    struct rt_route out;
    /* BM25 */
    rt_router *rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    ASSERT_TRUE(rt != NULL);
    ASSERT_OK(rt_router_route(rt, "what is the weather in Paris", NULL, &out, err, sizeof err));
    ASSERT_EQ(out.chosen, rt_registry_find(&r, "get_weather"));
    ASSERT_EQ(out.n, 4);
    ASSERT_TRUE(out.margin > 0 && !out.gate && !out.undecided);
    rt_router_free(rt);
    /* dense mode needs an embedder */
    p.mode = RT_MODE_DENSE;
    ASSERT_TRUE(rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err) == NULL);
    ASSERT_TRUE(strstr(err, "embedding model") != NULL);
    /* hybrid = RRF of the BM25 ranking (lexical matches only) and the dense ranking; compare
     * against fusing both rankings by hand */
    p.embedder = &te.base;
    p.mode = RT_MODE_HYBRID;
    rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    ASSERT_TRUE(rt != NULL);
    ASSERT_EQ(te.calls, 4);
    const char *q = "read a file";
    ASSERT_OK(rt_router_route(rt, q, NULL, &out, err, sizeof err));
    {
        rt_bm25 *bm = rt_bm25_new(1.2f, 0.75f);
        rt_slb *s = NULL;
        rt_slb_new(16, &s, err, sizeof err);
        float v[16], bs[4], ds[4], f[4];
        for (int i = 0; i < 4; i++) {
            rt_bm25_add_tool(bm, &r.tools[i]);
            char *doc = rt_embed_document(&r.tools[i]);
            tiny_embed(&te.base, doc, RT_DOCUMENT, v, err, sizeof err);
            nx_free(doc);
            rt_slb_add(s, v);
        }
        rt_bm25_score(bm, q, bs);
        tiny_embed(&te.base, q, RT_QUERY, v, err, sizeof err);
        rt_slb_scores(s, v, ds, NULL);
        int32_t ra[4], rb[4];
        rt_rank_scores(bs, 4, ra);
        rt_rank_scores(ds, 4, rb);
        int la = 0;
        while (la < 4 && bs[ra[la]] > 0) la++;
        const int32_t *rk[2] = {ra, rb};
        int lens[2] = {la, 4};
        rt_rrf(rk, lens, 2, 4, 60, f);
        int32_t order[4];
        rt_rank_scores(f, 4, order);
        for (int i = 0; i < 4; i++) {
            ASSERT_EQ(out.hit[i].id, order[i]);
            ASSERT_NEAR(out.hit[i].score, f[order[i]], 1e-7);
        }
        ASSERT_NEAR(out.margin, f[order[0]] - f[order[1]], 1e-7);
        rt_bm25_free(bm);
        rt_slb_free(s);
    }
    ASSERT_EQ(out.chosen, rt_registry_find(&r, "read_file"));
    rt_router_free(rt);
    /* gate + reranker hook: tau above any margin fires the gate; the reranker (document length)
     * reorders the top k */
    struct rt_reranker rr = {"len", len_score, NULL};
    p.mode = RT_MODE_BM25;
    p.tau = 1e9f;
    p.k = 3;
    rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    ASSERT_OK(rt_router_route(rt, "file", NULL, &out, err, sizeof err));
    ASSERT_TRUE(out.gate && out.undecided && !out.reranked);
    rt_router_free(rt);
    p.reranker = &rr;
    rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    ASSERT_OK(rt_router_route(rt, "file", NULL, &out, err, sizeof err));
    ASSERT_TRUE(out.gate && out.reranked && !out.undecided);
    ASSERT_EQ(out.n_rerank, 3);
    for (int i = 1; i < out.n_rerank; i++) ASSERT_TRUE(out.rerank[i - 1].score >= out.rerank[i].score);
    ASSERT_EQ(out.chosen, out.rerank[0].id);
    /* the reranked set is the first-stage top 3 */
    for (int i = 0; i < 3; i++) {
        int found = 0;
        for (int j = 0; j < 3; j++) found |= out.rerank[i].id == out.hit[j].id;
        ASSERT_TRUE(found);
    }
    rt_router_free(rt);
    /* abstention and a subset */
    p.reranker = NULL;
    p.tau = 0;
    p.abstain_below = 0.5f;
    int sub[2] = {rt_registry_find(&r, "send_email"), rt_registry_find(&r, "get_weather")};
    rt = rt_router_new(&r, sub, 2, &p, NULL, err, sizeof err);
    ASSERT_OK(rt_router_route(rt, "zebra crossing", NULL, &out, err, sizeof err));
    ASSERT_TRUE(out.abstain);
    ASSERT_EQ(out.n, 2);
    ASSERT_EQ(out.chosen, sub[0]); /* all scores 0: ties go to the earlier subset entry */
    rt_router_free(rt);
    /* embedder failure is reported, not a crash */
    p.mode = RT_MODE_DENSE;
    p.embedder = &te.base;
    rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    ASSERT_TRUE(rt != NULL);
    ASSERT_EQ(rt_router_route(rt, "FAIL please", NULL, &out, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "refused") != NULL);
    rt_router_free(rt);
    p.k = 0;
    ASSERT_TRUE(rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err) == NULL);
    rt_registry_free(&r);
}

/* ---- CLI entry points on fixtures ---- */

#define FX "tests/fixtures/route/"

/* Runs `nexus ARGS...` (tests/support/cli.h) with stdout captured; returns its status, *out
 * (free) the text it printed. */
#define run_capture(fn, args, out) test_cli(args, false, out)
#define RUN(fn, args) test_cli(args, false, NULL)

TEST(eval_routing_custom) {
    const char *out = tmp_path("custom.json");
    const char *a[] = {"eval-routing", "--tools", FX "tools.json", FX "functions.json", "--queries",
                       FX "queries.jsonl", "--json", out, NULL};
    ASSERT_EQ(RUN(eval_routing_main, a), 0);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(j, "n_tools")), 7);
    ASSERT_EQ(json_integer_value(json_object_get(j, "n_queries")), 9); /* the blank line skipped */
    /* the last two queries share no word with their tool's document: BM25 misses exactly them */
    ASSERT_NEAR(json_real_value(json_object_get(j, "r1")), 7.0 / 9.0, 1e-12);
    ASSERT_TRUE(json_real_value(json_object_get(j, "r5")) >= 7.0 / 9.0);
    json_t *w = json_object_get(j, "wrong");
    ASSERT_EQ(json_array_size(w), 2);
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(w, 0), "line")), 9);
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(w, 1), "line")), 10);
    json_decref(j);
    const char *b[] = {"eval-routing", "--tools", FX "tools.json", "--queries", FX "bad_queries.jsonl", NULL};
    ASSERT_EQ(RUN(eval_routing_main, b), 1);
    const char *c[] = {"eval-routing", "--tools", FX "tools.json", "--queries", FX "unknown_tool.jsonl", NULL};
    ASSERT_EQ(RUN(eval_routing_main, c), 1);
    const char *d[] = {"eval-routing", "--tools", FX "tools.json", NULL};
    ASSERT_EQ(RUN(eval_routing_main, d), 2);
    const char *e[] = {"eval-routing", "--tools", FX "tools.json", "--queries", FX "queries.jsonl",
                       "--embedder", "dense", NULL};
    ASSERT_EQ(RUN(eval_routing_main, e), 1); /* needs --embed-model */
    const char *f[] = {"eval-routing", "--tools", FX "no-such.json", "--queries", FX "queries.jsonl", NULL};
    ASSERT_EQ(RUN(eval_routing_main, f), 1);
}

/* The library runner directly: the status names each failure (the CLI maps it to 0 / 1). */
TEST(eval_routing_run_statuses) {
    struct routing_eval_params p = {.embedders = {"bm25"},
                                    .n_emb = 1,
                                    .sizes = {10},
                                    .n_sizes = 1,
                                    .seed = 1,
                                    .gate_pct = 20,
                                    .tools = {FX "tools.json", FX "functions.json"},
                                    .n_tools = 2,
                                    .queries = FX "queries.jsonl"};
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_OK);
    p.queries = FX "bad_queries.jsonl";
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_FORMAT);
    p.queries = FX "unknown_tool.jsonl";
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_INVALID_ARG);
    p.queries = FX "no-such.jsonl";
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_IO);
    p.queries = FX "queries.jsonl";
    p.embedders[0] = "dense"; /* no embed_model */
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_INVALID_ARG);
    p.embedders[0] = "nosuch";
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_INVALID_ARG);
    p.embedders[0] = "bm25";
    p.queries = NULL; /* tools without queries */
    ASSERT_EQ(eval_routing_run(&p), NX_STATUS_INVALID_ARG);
    p.n_tools = 0;
    p.bfcl_dir = FX "no-such-dir";
    ASSERT_TRUE(eval_routing_run(&p) != NX_STATUS_OK);
}

TEST(eval_routing_bfcl_mini) {
    /* a 9-line BFCL-shaped fixture: pool = 5 distinct names over live_multiple + multiple */
    const char *out = tmp_path("bfcl.json"), *out2 = tmp_path("bfcl2.json"), *svg = tmp_path("bfcl.svg");
    const char *a[] = {"eval-routing", "--bfcl", FX "bfcl", "--sizes", "2,4,10", "--json", out,
                       "--svg", svg, NULL};
    ASSERT_EQ(RUN(eval_routing_main, a), 0);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    ASSERT_TRUE(j != NULL);
    json_t *e = json_array_get(json_object_get(j, "embedders"), 0);
    ASSERT_EQ(json_integer_value(json_object_get(e, "pool_tools")), 5);
    json_t *sw = json_object_get(e, "sweep");
    ASSERT_EQ(json_array_size(sw), 6);
    const int want_n[6] = {2, 4, 5, 2, 4, 5}, want_q[6] = {3, 3, 3, 2, 2, 2};
    for (int i = 0; i < 6; i++) {
        json_t *c = json_array_get(sw, (size_t)i);
        ASSERT_EQ(json_integer_value(json_object_get(c, "n_tools")), want_n[i]); /* N capped by the pool */
        ASSERT_EQ(json_integer_value(json_object_get(c, "n_queries")), want_q[i]);
        ASSERT_NEAR(json_real_value(json_object_get(c, "r1")), 1.0, 0); /* lexically obvious */
    }
    json_t *po = json_object_get(e, "pooled");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(po, 0), "n_tools")), 4);
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(po, 1), "n_tools")), 3);
    json_t *ab = json_object_get(e, "abstention");
    ASSERT_EQ(json_integer_value(json_object_get(ab, "n_cal_relevant")) +
                  json_integer_value(json_object_get(ab, "n_test_relevant")), 5);
    ASSERT_EQ(json_integer_value(json_object_get(ab, "n_cal_irrelevant")) +
                  json_integer_value(json_object_get(ab, "n_test_irrelevant")), 4);
    json_decref(j);
    FILE *f = fopen(svg, "rb");
    ASSERT_TRUE(f != NULL);
    char head[256] = {0};
    ASSERT_TRUE(fread(head, 1, sizeof head - 1, f) > 10);
    fclose(f);
    ASSERT_TRUE(strstr(head, "<svg") != NULL);
    /* same seed, same numbers */
    const char *b[] = {"eval-routing", "--bfcl", FX "bfcl", "--sizes", "2,4,10", "--json", out2, NULL};
    ASSERT_EQ(RUN(eval_routing_main, b), 0);
    size_t l1, l2;
    char err[256];
    char *t1 = nx_read_file(out, NX_READ_FILE_MAX, &l1, err, sizeof err), *t2 = nx_read_file(out2, NX_READ_FILE_MAX, &l2, err, sizeof err);
    ASSERT_TRUE(t1 && t2 && l1 == l2 && memcmp(t1, t2, l1) == 0);
    nx_free(t1);
    nx_free(t2);
    const char *c[] = {"eval-routing", "--bfcl", FX "no-such-dir", NULL};
    ASSERT_EQ(RUN(eval_routing_main, c), 1);
}

TEST(route_and_signatures_cli) {
    const char *a[] = {"route", "--tools", FX "tools.json", "what is the weather in Oslo", NULL};
    char *text;
    ASSERT_EQ(run_capture(route_main, a, &text), 0);
    ASSERT_TRUE(strstr(text, "chosen: get_weather\n") != NULL);
    ASSERT_TRUE(strstr(text, "gate: not fired") != NULL);
    ASSERT_TRUE(strstr(text, "signature: get_weather(city: string, units?: \"metric\"|\"imperial\")\n") != NULL);
    free(text);
    const char *b[] = {"route", "--tools", FX "tools.json", "--embedder", "hybrid", "q", NULL};
    ASSERT_EQ(RUN(route_main, b), 2);
    const char *c[] = {"route", "--tools", FX "tools.json", NULL};
    ASSERT_EQ(RUN(route_main, c), 2);
    const char *d[] = {"route", "--tools", FX "bad_queries.jsonl", "q", NULL};
    ASSERT_EQ(RUN(route_main, d), 1);
    /* the gate's fallbacks with a (tiny, story-trained) chat model: chat reranker, then
     * constrained name decoding; only that they run and pick a listed tool is checked here */
    char chat[512];
    snprintf(chat, sizeof chat, "%s/models/stories260K/stories260K.gguf", test_shared());
    const char *g[] = {"route", "--tools", FX "tools.json", "--chat-model", chat, "--tau", "1e9",
                       "--chat-tau", "1e9", "-k", "3", "weather in Oslo", NULL};
    ASSERT_EQ(RUN(route_main, g), 0);
    const char *h[] = {"route", "--tools", FX "tools.json", "--name-decode", "q", NULL};
    ASSERT_EQ(RUN(route_main, h), 2); /* needs --chat-model */
    char vocab[512];
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-llama-bpe.gguf", test_shared());
    const char *k[] = {"route", "--tools", FX "tools.json", "--chat-model", vocab, "--tau", "1e9", "q", NULL};
    ASSERT_EQ(RUN(route_main, k), 1); /* a vocabulary-only model cannot rerank: clear error */
    const char *out = tmp_path("sig.json");
    const char *e[] = {"signatures", "--tools", FX "tools.json", FX "functions.json", "-m", vocab,
                       "--json", out, NULL};
    ASSERT_EQ(RUN(signatures_main, e), 0);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(j, "n_tools")), 7);
    nx_model *m = NULL;
    char err[256];
    struct nx_model_params mp = nx_model_default_params();
    ASSERT_OK(nx_model_load(vocab, &mp, &m, err, sizeof err));
    json_t *tools = json_object_get(j, "tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *sig = json_string_value(json_object_get(t, "signature"));
        int32_t n = nx_tokenize(m, sig, strlen(sig), NULL, 0, false, false);
        ASSERT_EQ(json_integer_value(json_object_get(t, "sig_tokens")), n < 0 ? -n : n);
        ASSERT_TRUE(json_integer_value(json_object_get(t, "sig_tokens")) <
                    json_integer_value(json_object_get(t, "full_tokens")));
    }
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 2), "signature")),
                  "createIssue(owner: string, repo: string, title: string, labels?: string[])");
    nx_model_free(m);
    json_decref(j);
}

TEST(route_mcp_servers) {
    /* the router over live MCP servers (the npm servers `make test` installs for test_mcp) */
    if (access("build-npm/node_modules/.bin/mcp-server-filesystem", X_OK) != 0) {
        printf("  skipped: MCP test servers not installed (make npm-servers)\n");
        return;
    }
    const char *a[] = {"route", "--mcp", "tests/fixtures/mcp/servers.json",
                       "list the files in a directory", NULL};
    char *text;
    ASSERT_EQ(run_capture(route_main, a, &text), 0);
    ASSERT_TRUE(strstr(text, "chosen: list_directory\n") != NULL);
    free(text);
    const char *b[] = {"route", "--mcp", FX "no-such-config.json", "x", NULL};
    ASSERT_EQ(RUN(route_main, b), 1);
}

TEST(route_gguf_encoder_and_cross_encoder) {
    /* random-weight BERT embedder and cross-encoder from the model writer: the dense path, the
     * fusion and the cross-encoder rerank run end to end through the CLI (random weights say
     * nothing about quality) */
    char tok[512];
    snprintf(tok, sizeof tok, "%s/models/vocab/ggml-vocab-bert-bge.gguf", test_shared());
    const char *enc = tmp_path("enc.gguf"), *ce = tmp_path("ce.gguf");
    const char *m1[] = {"mkmodel", "-o", enc, "--arch", "bert", "--layers", "2", "--embd", "64",
                        "--heads", "4", "--ff", "128", "--ctx", "128", "--type", "f32",
                        "--tokenizer", tok, "--threads", "1", "-q", NULL};
    const char *m2[] = {"mkmodel", "-o", ce, "--arch", "bert", "--rerank", "--layers", "2",
                        "--embd", "64", "--heads", "4", "--ff", "128", "--ctx", "128", "--type",
                        "f32", "--tokenizer", tok, "--threads", "1", "-q", NULL};
    ASSERT_EQ(RUN(mkmodel_main, m1), 0);
    ASSERT_EQ(RUN(mkmodel_main, m2), 0);
    const char *a[] = {"route", "--tools", FX "tools.json", "--embedder", "hybrid", "--embed-model",
                       enc, "--rerank-model", ce, "--tau", "1e9", "-k", "3", "read a file", NULL};
    char *text;
    ASSERT_EQ(run_capture(route_main, a, &text), 0);
    ASSERT_TRUE(strstr(text, "tools: 5 (hybrid)") != NULL);
    ASSERT_TRUE(strstr(text, "gate: fired") != NULL);
    ASSERT_TRUE(strstr(text, "reranked (cross-encoder):") != NULL);
    free(text);
    const char *out = tmp_path("dense.json");
    const char *b[] = {"eval-routing", "--tools", FX "tools.json", FX "functions.json", "--queries",
                       FX "queries.jsonl", "--embedder", "dense", "--embed-model", enc, "--json",
                       out, NULL};
    ASSERT_EQ(RUN(eval_routing_main, b), 0);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(j, "n_queries")), 9);
    ASSERT_STR_EQ(json_string_value(json_object_get(j, "embedder")), "dense");
    json_decref(j);
    /* a cross-encoder path that is not a model: a clear error */
    const char *c[] = {"route", "--tools", FX "tools.json", "--rerank-model", FX "tools.json", "q", NULL};
    ASSERT_EQ(RUN(route_main, c), 1);
}

/* ---- allocation failures ---- */

/* Registry load, signatures, hybrid router build and one query; 0 when every step succeeded,
 * 1 when one failed cleanly (with a message). */
static int oom_run(struct tiny_emb *te) {
    char err[512];
    int failed = 0;
    rt_registry r;
    rt_registry_init(&r);
    if (rt_registry_load_file(&r, FX "tools.json", err, sizeof err) < 0 ||
        rt_registry_load_file(&r, FX "functions.json", err, sizeof err) < 0) {
        if (!strstr(err, "out of memory")) fprintf(stderr, "  unexpected: %s\n", err), abort();
        rt_registry_free(&r);
        return 1;
    }
    rt_registry_sort(&r);
    for (int i = 0; i < r.n; i++) {
        char *sig = rt_signature(&r.tools[i]);
        if (!sig) failed = 1;
        nx_free(sig);
    }
    struct rt_router_params p = rt_router_default_params();
    p.mode = RT_MODE_HYBRID;
    p.embedder = &te->base;
    rt_router *rt = rt_router_new(&r, NULL, 0, &p, NULL, err, sizeof err);
    if (!rt) {
        failed = 1;
    } else {
        struct rt_route out;
        if (rt_router_route(rt, "read the contents of a file", NULL, &out, err, sizeof err))
            failed = 1;
        else if (strcmp(r.tools[out.chosen].name, "read_file") != 0)
            abort(); /* a success must be the right answer */
        rt_router_free(rt);
    }
    float v[3] = {3, 1, 2};
    if (isnan(rt_percentile(v, 3, 50))) failed = 1;
    rt_registry_free(&r);
    return failed;
}

TEST(allocation_failures) {
    struct tiny_emb te = {{"tiny", 16, tiny_embed, tiny_free}, 0};
    size_t before = nx_alloc_bytes();
    long n;
    int clean_failures = 0;
    /* the n-th allocation fails, for n = 1, 2, ... until a run makes fewer than n allocations
     * (no failure injected): every run either fails cleanly or (where jansson shrugs off a
     * failed allocation, e.g. a hash table that does not grow) gives the right answer */
    for (n = 1; n <= 20000; n++) {
        size_t fails = nx_alloc_failures();
        nx_alloc_fail_after(n);
        int rc = oom_run(&te);
        nx_alloc_fail_after(0);
        ASSERT_EQ(nx_alloc_bytes(), before); /* nothing leaked on any path */
        if (nx_alloc_failures() == fails) {
            ASSERT_EQ(rc, 0);
            break;
        }
        clean_failures += rc;
    }
    printf("  a failure injected at each of the first %ld allocations (%d clean failures)\n", n - 1,
           clean_failures);
    ASSERT_TRUE(n > 20); /* many allocation sites were exercised */
    ASSERT_TRUE(clean_failures > 20);
}

TEST_MAIN
