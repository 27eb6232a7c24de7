/*
 * test_grammar.c - grammar engine: GBNF features and errors, JSON-schema keywords (accepted
 * and rejected strings), refusal of unsupported keywords by name, token masks against a
 * brute-force oracle on the Llama-3 vocabulary, rollback, EOS, forced closure, lazy triggers.
 */
#include <stdbool.h>

#include "core/alloc.h"
#include "grammar/gbnf.h"
#include "grammar/mask.h"
#include "grammar/schema.h"
#include "nexus.h"
#include "test.h"

/* A byte vocabulary: token i < 256 is byte i, token 256 is the end token. */
static struct gvocab *byte_vocab(void) {
    static struct gvocab *v;
    if (v) return v;
    char bytes[256];
    const char *p[257];
    int32_t lens[257];
    bool eog[257] = {0};
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        p[i] = &bytes[i];
        lens[i] = 1;
    }
    p[256] = "";
    lens[256] = 0;
    eog[256] = true;
    struct nx_err e;
    if (gvocab_build(257, p, lens, eog, &v, &e) != NX_STATUS_OK) return NULL;
    return v;
}

static struct gram *compile_gbnf(const char *text, bool internal, struct nx_err *e) {
    struct gbuilder b;
    gram_builder_init(&b);
    struct gram *g = NULL;
    if (gbnf_parse(&b, text, strlen(text), internal, e) == NX_STATUS_OK) gram_finish(&b, "root", &g, e);
    gram_builder_free(&b);
    return g;
}

static struct gram *compile_schema(const char *json, bool bfcl, struct nx_err *e) {
    char *gb = NULL;
    struct nx_json_schema_params p = nx_json_schema_default_params();
    p.bfcl_types = bfcl;
    if (schema_to_gbnf(json, strlen(json), &p, &gb, e) != NX_STATUS_OK) return NULL;
    struct gram *g = compile_gbnf(gb, true, e);
    nx_free(gb);
    return g;
}

/* Whole-string acceptance through the automaton. */
static bool accepts(const struct gram *g, const char *s) {
    struct gmatcher *m;
    if (gmatcher_init(g, byte_vocab(), &m) != NX_STATUS_OK) return false;
    bool ok = gmatcher_accept_bytes(m, s, strlen(s)) == NX_STATUS_OK && gmatcher_can_end(m);
    gmatcher_free(m);
    return ok;
}

#define ACCEPT(g, s) \
    do { \
        if (!accepts(g, s)) FAILF("should accept: %s", s); \
    } while (0)
#define REJECT(g, s) \
    do { \
        if (accepts(g, s)) FAILF("should reject: %s", s); \
    } while (0)

TEST(gbnf_features) {
    struct nx_err e = {{0}};
    struct gram *g = compile_gbnf(
        "# a comment\n"
        "root ::= greet (\" \" name)? tail  # trailing comment\n"
        "greet ::= \"hi\" | \"hello\"\n"
        "name ::= [A-Z] [a-z]* \n"
        "tail ::= \"!\"{1,3} digits\n"
        "digits ::= ( [0-9] [0-9] )+ | \"\"\n",
        false, &e);
    if (!g) FAILF("%s", e.msg);
    ACCEPT(g, "hi!");
    ACCEPT(g, "hello Bob!!!");
    ACCEPT(g, "hi X!1234");
    REJECT(g, "hi!!!!");
    REJECT(g, "hi bob!");
    REJECT(g, "hi!123");
    REJECT(g, "hey!");
    gram_free(g);
    /* classes: negation, ranges, escapes, UTF-8, dot, multi-line alternatives */
    g = compile_gbnf("root ::= [^a-c\\n] x . \"\\u00e9\\x41\\t\" [\\u0400-\\u04FF]\n"
                     "x ::=\n  \"1\" |\n  \"2\"\n",
                     false, &e);
    if (!g) FAILF("%s", e.msg);
    ACCEPT(g, "d1z\xc3\xa9" "A\t\xd0\x96");
    ACCEPT(g, "\xe2\x82\xac" "2\xf0\x9f\x98\x80\xc3\xa9" "A\t\xd1\x8f");
    REJECT(g, "a1z\xc3\xa9" "A\t\xd0\x96");
    REJECT(g, "d3z\xc3\xa9" "A\t\xd0\x96");
    REJECT(g, "d1z\xc3\xa9" "A\tZ");
    REJECT(g, "d1\xc3\xc3\xa9" "A\t\xd0\x96"); /* invalid UTF-8 for . */
    REJECT(g, "d1\xed\xa0\x80\xc3\xa9" "A\t\xd0\x96"); /* surrogate */
    gram_free(g);
    g = compile_gbnf("root ::= \"a\"{2} \"b\"{2,} \"c\"{0,2}\n", false, &e);
    if (!g) FAILF("%s", e.msg);
    ACCEPT(g, "aabb");
    ACCEPT(g, "aabbbbbcc");
    REJECT(g, "abb");
    REJECT(g, "aab");
    REJECT(g, "aabbccc");
    gram_free(g);
}

/* Nested nullable repetitions reach the same stacks along exponentially many derivations: the
 * memo expands each stack once, so the work is linear in the grammar. More distinct stacks than
 * a state holds are dropped, but whether the grammar may end stays exact. */
TEST(gram_ambiguity_bounded) {
    struct nx_err e = {{0}};
    /* x ::= ((("a")?)?)... 10 deep; root ::= x x x x x x x x "b": 10^8 derivations */
    char text[512] = "x ::= ";
    for (int i = 0; i < 10; i++) strcat(text, "(");
    strcat(text, "\"a\"");
    for (int i = 0; i < 10; i++) strcat(text, ")?");
    strcat(text, "\nroot ::= x x x x x x x x \"b\"\n");
    struct gram *g = compile_gbnf(text, false, &e);
    if (!g) FAILF("%s", e.msg);
    struct gmemo memo = {0};
    struct gstate st = {0};
    ASSERT_TRUE(gram_init_state(g, &memo, &st));
    ASSERT_TRUE(st.a[1] == 9); /* "a" of each x, or "b" */
    if (st.expansions > 1000) FAILF("%d expansion steps for 9 stacks", st.expansions);
    ACCEPT(g, "b");
    ACCEPT(g, "ab");
    ACCEPT(g, "aaaaaaaab");
    REJECT(g, "aaaaaaaaab");
    REJECT(g, "");
    gram_free(g);

    /* full states (128 stacks), one that may end and one that may not */
    for (int bang = 0; bang < 2; bang++) {
        g = compile_gbnf(bang ? "root ::= [a-z]*{900} \"!\"\n" : "root ::= [a-z]*{900}\n", false,
                         &e);
        if (!g) FAILF("%s", e.msg);
        ASSERT_TRUE(gram_init_state(g, &memo, &st));
        ASSERT_TRUE(st.a[1] == GRAM_MAX_STACKS && ((st.a[0] & GS_ACCEPT) != 0) == !bang);
        if (bang) {
            REJECT(g, "");
            REJECT(g, "abc");
        } else {
            ACCEPT(g, "");
            ACCEPT(g, "abc");
            REJECT(g, "ab1");
        }
        gram_free(g);
    }
    gstate_free(&st);
    gmemo_free(&memo);
}

/* Every allocation of a matcher's life (init, masks, bytes that grow the memo) fails in turn: a
 * clean NX_STATUS_NOMEM, the matcher still usable and unchanged after a failed step, nothing
 * left allocated. */
TEST(gram_matcher_allocation_failures) {
    struct nx_err e = {{0}};
    struct gram *g = compile_gbnf("x ::= (((((\"a\")?)?)?)?)?\n"
                                  "root ::= x x x x x x (\"b\" | [c-z]*{40} \"!\")\n",
                                  false, &e);
    if (!g) FAILF("%s", e.msg);
    uint64_t bits[5], want[5];
    /* the undisturbed run */
    struct gmatcher *m;
    ASSERT_OK(gmatcher_init(g, byte_vocab(), &m));
    int32_t want0 = gmatcher_mask(m, want, false);
    ASSERT_OK(gmatcher_accept_bytes(m, "aacd", 4));
    int32_t want1 = gmatcher_mask(m, want, false);
    gmatcher_free(m);
    ASSERT_TRUE(want0 > 2 && want1 > 2);
    int failures = 0;
    for (long i = 1; i < 2000; i++) {
        size_t before = nx_alloc_bytes();
        m = NULL;
        int step = 0; /* the step that failed: 1 init, 2 first mask, 3 accept, 4 second mask */
        int32_t c0 = 0, c1 = 0;
        nx_alloc_fail_after(i);
        nx_status st = gmatcher_init(g, byte_vocab(), &m);
        if (st != NX_STATUS_OK) step = 1;
        if (!step && (c0 = gmatcher_mask(m, bits, false)) < 0) step = 2;
        if (!step && (st = gmatcher_accept_bytes(m, "aacd", 4)) != NX_STATUS_OK) step = 3;
        if (!step && (c1 = gmatcher_mask(m, bits, false)) < 0) step = 4;
        nx_alloc_fail_after(0);
        if (!step) {
            ASSERT_EQ(c0, want0);
            ASSERT_EQ(c1, want1);
            gmatcher_free(m);
            ASSERT_EQ(nx_alloc_bytes(), before);
            break;
        }
        ASSERT_EQ(step == 2 ? c0 : step == 4 ? c1 : st, NX_STATUS_NOMEM);
        ASSERT_TRUE(step == 1 ? m == NULL : m != NULL);
        /* a failed step left the matcher as it was: redone without failures, it and the
           steps after it give the undisturbed results */
        if (step == 2) ASSERT_EQ(gmatcher_mask(m, bits, false), want0);
        if (step == 2 || step == 3) ASSERT_OK(gmatcher_accept_bytes(m, "aacd", 4));
        if (step >= 2) ASSERT_EQ(gmatcher_mask(m, bits, false), want1);
        gmatcher_free(m);
        ASSERT_EQ(nx_alloc_bytes(), before);
        failures++;
    }
    ASSERT_TRUE(failures >= 5);
    gram_free(g);
}

/* Bytes, an end token, and every string of 2-4 characters over "ab!1": tokens that run past
 * the end of a rule, so masks walk context-dependent tokens with the whole stack. */
#define WV_N (257 + 16 + 64 + 256)
#define WV_W ((WV_N + 63) / 64)
static struct gvocab *word_vocab(void) {
    static struct gvocab *v;
    static char pool[256 + 16 * 2 + 64 * 3 + 256 * 4];
    if (v) return v;
    const char *p[WV_N];
    int32_t lens[WV_N], n = 0, o = 0;
    bool eog[WV_N] = {0};
    for (; n < 256; n++) {
        pool[o] = (char)n;
        p[n] = pool + o++;
        lens[n] = 1;
    }
    p[n] = "";
    lens[n] = 0;
    eog[n++] = true;
    for (int len = 2; len <= 4; len++)
        for (int c = 0; c < 1 << (2 * len); c++) {
            p[n] = pool + o;
            lens[n++] = len;
            for (int i = 0, x = c; i < len; i++, x >>= 2) pool[o++] = "ab!1"[x & 3];
        }
    struct nx_err e;
    if (gvocab_build(n, p, lens, eog, &v, &e) != NX_STATUS_OK) return NULL;
    return v;
}

/* One mask spends at most the matcher's work budget. Past it the mask is partial: a subset of
 * the exact mask (every token in it accepted), the tokens that begin the shortest completion
 * when nothing was proven, and nothing cut short stays in the cache. The grammar has the shape
 * of the fuzz finding (a class under nested +): 128 stacks per state. */
static struct gram *nested_plus(int depth, struct nx_err *e) {
    char text[256] = "root ::= [a-z]";
    for (int i = 0; i < depth; i++) strcat(text, "+");
    strcat(text, "{3} \"!\" [0-9]\n");
    return compile_gbnf(text, false, e);
}

static bool bits_subset(const uint64_t *a, const uint64_t *b, int nw) {
    for (int w = 0; w < nw; w++)
        if (a[w] & ~b[w]) return false;
    return true;
}

TEST(mask_work_bound) {
    struct nx_err e = {{0}};
    struct gram *g = nested_plus(8, &e);
    if (!g) FAILF("%s", e.msg);
    const char *prefix = "abcdefghij";
    uint64_t exact[WV_W], forced[WV_W], bits[WV_W];
    struct gmatcher *m;
    ASSERT_OK(gmatcher_init(g, word_vocab(), &m));
    gmatcher_set_budget(m, INT64_MAX);
    ASSERT_OK(gmatcher_accept_bytes(m, prefix, strlen(prefix)));
    int32_t n_exact = gmatcher_mask(m, exact, false);
    ASSERT_TRUE(!gmatcher_mask_partial(m));
    ASSERT_TRUE(n_exact > 26); /* a-z, and "!" with the tokens that begin with it */
    ASSERT_TRUE(gmatcher_mask(m, forced, true) >= 1);
    struct gmatcher_stats st;
    gmatcher_stats(m, &st);
    int64_t need = st.max_work;
    ASSERT_TRUE(need > 10000); /* far from free: 128 stacks per state */
    gmatcher_free(m);
    int n_proper = 0; /* partial masks with some but not all allowed tokens proven */
    for (int64_t budget = 0; budget <= 2 * need; budget = budget ? budget * 3 : 1) {
        ASSERT_OK(gmatcher_init(g, word_vocab(), &m));
        gmatcher_set_budget(m, budget);
        ASSERT_OK(gmatcher_accept_bytes(m, prefix, strlen(prefix)));
        int32_t n = gmatcher_mask(m, bits, false);
        bool partial = gmatcher_mask_partial(m);
        gmatcher_stats(m, &st);
        /* the walks stop once the budget is spent: at most one state's build beyond it */
        if (st.last_work > budget + GRAM_MAX_EXPANSIONS + GRAM_MAX_STACKS * GRAM_MAX_DEPTH)
            FAILF("budget %lld: %lld work units", (long long)budget, (long long)st.last_work);
        ASSERT_EQ(partial, st.last_work >= budget);
        ASSERT_TRUE(n > 0);
        ASSERT_TRUE(bits_subset(bits, exact, WV_W));
        int32_t seen = 0;
        for (int t = 0; t < WV_N; t++)
            if ((bits[t >> 6] >> (t & 63)) & 1) {
                seen++;
                if (!gmatcher_allows_slow(m, t)) FAILF("budget %lld: token %d", (long long)budget, t);
            }
        ASSERT_EQ(seen, n);
        if (!partial) ASSERT_TRUE(n == n_exact);
        if (budget == 0) ASSERT_TRUE(partial && !memcmp(bits, forced, sizeof bits));
        n_proper += partial && n < n_exact && memcmp(bits, forced, sizeof bits) != 0;
        /* with the budget lifted, the same matcher gives the exact mask: no cut entry was kept */
        gmatcher_set_budget(m, INT64_MAX);
        ASSERT_EQ(gmatcher_mask(m, bits, false), n_exact);
        ASSERT_TRUE(!gmatcher_mask_partial(m) && !memcmp(bits, exact, sizeof bits));
        gmatcher_free(m);
    }
    ASSERT_TRUE(n_proper > 0);
    gram_free(g);

    /* a grammar whose first state is already lossy (128 stacks): the first mask is exact too */
    g = compile_gbnf("root ::= [a-z]*{900} \"!\" [0-9]\n", false, &e);
    if (!g) FAILF("%s", e.msg);
    ASSERT_OK(gmatcher_init(g, word_vocab(), &m));
    int32_t n = gmatcher_mask(m, bits, false), seen = 0;
    for (int t = 0; t < WV_N; t++)
        if ((bits[t >> 6] >> (t & 63)) & 1) {
            seen++;
            if (!gmatcher_allows_slow(m, t)) FAILF("first state: token %d allowed, refused", t);
        }
    ASSERT_TRUE(n == seen && n >= 26);
    gmatcher_free(m);
    gram_free(g);
}

TEST(gbnf_errors) {
    struct {
        const char *text, *msg;
    } cases[] = {
        {"root ::= \"abc\n", "1:14: newline inside a literal"},
        {"root ::= foo\n", "1:10: undefined rule 'foo'"},
        {"root ::= [ab\n", "unterminated character class"},
        {"root ::= (\"a\" | \"b\"\n", "expected ')'"},
        {"root ::= \"a\"\n\nroot ::= \"b\"\n", "3:1: rule 'root' defined twice"},
        {"root = \"a\"\n", "1:6: expected '::='"},
        {"root ::= \"a\"{3,1}\n", "max below min"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= x\nx ::= x \"a\" | \"b\"\n", "left recursion"},
        {"root ::= <[1000]>\n", "token references"},
        {"root ::= [z-a]\n", "out of order"},
        {"other ::= \"a\"\n", "no rule 'root'"},
        {"root ::= \"a\" )\n", "unmatched ')'"},
        {"root ::= %jstr{1,2}\n", "unexpected character '%'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct nx_err e = {{0}};
        struct gram *g = compile_gbnf(cases[i].text, false, &e);
        if (g) {
            gram_free(g);
            FAILF("grammar %zu accepted", i);
        }
        ASSERT_CONTAINS(e.msg, cases[i].msg);
    }
    /* the public entry points: plain GBNF refuses %jstr, the schema-source one takes it */
    const char *js = "root ::= \"\\\"\" %jstr{1,2}\n";
    nx_grammar *pg = NULL;
    char err[256];
    ASSERT_TRUE(nx_grammar_from_gbnf(js, strlen(js), NULL, &pg, err, sizeof err) == NX_STATUS_FORMAT);
    ASSERT_TRUE(pg == NULL);
    ASSERT_OK(nx_grammar_from_schema_gbnf(js, strlen(js), NULL, &pg, err, sizeof err));
    nx_grammar_free(pg);
}

struct schema_case {
    const char *schema;
    const char *ok[8];
    const char *bad[8];
};

TEST(schema_keywords) {
    static const struct schema_case cases[] = {
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
         {"\"ab\"", "\"abc\"", "\"\\n\\u00e9\"", "\"\xc3\xa9\xc3\xa9\""},
         {"\"a\"", "\"abcd\"", "\"a\nb\"", "abc", "\"\\x\""}},
        {"{\"enum\":[\"red\",1,null,{\"a\":[true]}]}",
         {"\"red\"", "1", "null", "{\"a\":[true]}"},
         {"\"blue\"", "2", "{\"a\":[false]}"}},
        {"{\"const\":\"x\\\"y\"}", {"\"x\\\"y\""}, {"\"xy\""}},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}",
         {"-12", "-1", "0", "9", "99", "305", "120"},
         {"-13", "306", "1000", "01", "-0x", "3.5"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":5}", {"6", "100000"}, {"5", "-1", "0"}},
        {"{\"type\":\"number\"}", {"0", "-1.5", "3.14159", "10"}, {"1.", ".5", "01", "1e5"}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":2}", {"0", "1.5", "2", "0.25"},
         {"2.5", "-1", "3"}},
        {"{\"type\":\"boolean\"}", {"true", "false"}, {"True", "1"}},
        {"{\"type\":\"null\"}", {"null"}, {"nil"}},
        {"{\"type\":[\"string\",\"null\"]}", {"null", "\"s\""}, {"1"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
         {"[1]", "[1,2,3]"},
         {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}", {"[]", "[true,false,true]"}, {"[1]"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
         "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         {"{\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"a\":1,\"c\":true}",
          "{\"b\":\"x\",\"c\":false}"},
         {"{}", "{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\",\"d\":1}", "{\"b\":1}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
         {"{}", "{\"a\":5}"},
         {"{\"a\":5,}", "{\"b\":5}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":"
         "{\"type\":\"boolean\"}}",
         {"{}", "{\"a\":1,\"x\":true}", "{\"ab\":false}", "{\"x\":true,\"y\":false}"},
         {"{\"a\":true}", "{\"x\":1}", "{\"a\":1,\"a\":true}"}},
        {"{\"type\":\"object\",\"additionalProperties\":true}", {"{}", "{\"k\":[1,{\"z\":null}]}"},
         {"{\"k\":}"}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}",
         {"5", "\"a\""},
         {"\"ab\"", "true"}},
        {"{\"oneOf\":[{\"const\":1},{\"const\":2}]}", {"1", "2"}, {"3"}},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}}}},"
         "\"$ref\":\"#/$defs/n\"}",
         {"{}", "{\"next\":{\"next\":{}}}"},
         {"{\"next\":1}"}},
        {"{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"array\",\"items\":{\"$ref\":"
         "\"#/definitions/s\"}}",
         {"[\"a\",\"b\"]"},
         {"[1]"}},
        {"{\"type\":\"string\",\"format\":\"date\",\"description\":\"d\",\"title\":\"t\","
         "\"default\":\"x\",\"examples\":[\"y\"]}",
         {"\"2024-02-28\"", "\"1999-12-01\""},
         {"\"2024-13-01\"", "\"2024-1-1\"", "\"x\""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct nx_err e = {{0}};
        struct gram *g = compile_schema(cases[i].schema, false, &e);
        if (!g) FAILF("schema %zu: %s", i, e.msg);
        for (int k = 0; k < 8 && cases[i].ok[k]; k++)
            if (!accepts(g, cases[i].ok[k])) {
                gram_free(g);
                FAILF("schema %zu should accept %s", i, cases[i].ok[k]);
            }
        for (int k = 0; k < 8 && cases[i].bad[k]; k++)
            if (accepts(g, cases[i].bad[k])) {
                gram_free(g);
                FAILF("schema %zu should reject %s", i, cases[i].bad[k]);
            }
        gram_free(g);
    }
}

TEST(schema_bfcl_types) {
    struct nx_err e = {{0}};
    const char *s = "{\"type\":\"dict\",\"properties\":{\"x\":{\"type\":\"float\"},\"t\":{\"type\":"
                    "\"tuple\",\"items\":{\"type\":\"integer\"}},\"a\":{\"type\":\"any\"}},"
                    "\"required\":[\"x\",\"t\",\"a\"],\"optional\":true}";
    struct gram *g = compile_schema("{\"type\":\"dict\"}", false, &e);
    ASSERT_TRUE(g == NULL);
    ASSERT_CONTAINS(e.msg, "unsupported type 'dict'");
    g = compile_schema(s, false, &e);
    ASSERT_TRUE(g == NULL);
    ASSERT_CONTAINS(e.msg, "unsupported keyword 'optional'");
    g = compile_schema(s, true, &e);
    if (!g) FAILF("%s", e.msg);
    ACCEPT(g, "{\"x\":1.5,\"t\":[1,2],\"a\":\"s\"}");
    REJECT(g, "{\"x\":1.5,\"t\":[1,2],\"a\":5}"); /* any -> string, as BFCL maps it */
    gram_free(g);
}

TEST(schema_refuses_unsupported) {
    struct {
        const char *schema, *msg;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a$\"}", "unsupported keyword 'pattern'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":true}}}",
         "unsupported keyword 'uniqueItems' (at /properties/a)"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", "unsupported keyword 'allOf'"},
        {"{\"not\":{}}", "unsupported keyword 'not'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "unsupported format 'email'"},
        {"{\"$ref\":\"http://x/y.json\"}", "only local $ref"},
        {"{\"type\":\"object\",\"required\":[\"q\"]}", "required property 'q'"},
        {"{\"type\":\"float\"}", "unsupported type 'float'"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "unsupported keyword 'patternProperties'"},
        {"{\"if\":{},\"then\":{}}", "unsupported keyword"},
        {"[1,2", "json schema: "},
        /* bounds beyond the 16 digits generated (fuzz_schema_grammar: UB converting 4.4e45) */
        {"{\"type\":\"number\",\"exclusiveMinimum\":4.4e45}", "no number in [4.4e+45, 1e+16]"},
        {"{\"type\":\"integer\",\"minimum\":1e17}", "no integer in [1e+17, 1e+16]"},
        {"{\"type\":\"integer\",\"maximum\":-1e300}", "no integer in [-1e+16, -1e+300]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct nx_err e = {{0}};
        struct gram *g = compile_schema(cases[i].schema, false, &e);
        if (g) {
            gram_free(g);
            FAILF("schema %zu compiled", i);
        }
        ASSERT_CONTAINS(e.msg, cases[i].msg);
    }
}

/* ---- masks on the Llama-3 vocabulary vs the brute-force oracle ---- */

static nx_model *g_vocab_model;
static nx_grammar_vocab *g_gvocab;

static bool load_llama3(void) {
    if (g_gvocab) return true;
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-llama-bpe.gguf", test_shared());
    if (nx_model_load(path, NULL, &g_vocab_model, err, sizeof err) != NX_STATUS_OK) return false;
    return nx_grammar_vocab_init(g_vocab_model, &g_gvocab) == NX_STATUS_OK;
}

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random walk: at every step the mask must equal the oracle for every token. */
static int check_mask_walk(nx_grammar *gr, int steps, uint64_t seed, char *why, size_t whylen) {
    nx_grammar_matcher *m;
    if (nx_grammar_matcher_init(gr, g_gvocab, &m) != NX_STATUS_OK) return -1;
    struct gmatcher *gm = (struct gmatcher *)m;
    int32_t n = nx_model_n_vocab(g_vocab_model), nw = (n + 63) / 64;
    uint64_t *bits = calloc((size_t)nw, 8);
    int32_t *allowed = calloc((size_t)n, sizeof *allowed);
    int rc = 0;
    for (int s = 0; s < steps && !nx_grammar_matcher_is_finished(m); s++) {
        int32_t k = nx_grammar_matcher_mask(m, bits, false), na = 0;
        if (nx_grammar_matcher_mask_partial(m)) { /* real schemas stay far below the bound */
            snprintf(why, whylen, "step %d: mask cut short by the work bound", s);
            rc = 1;
            goto done;
        }
        for (int32_t t = 0; t < n; t++) {
            bool a = (bits[t >> 6] >> (t & 63)) & 1, o = gmatcher_allows_slow(gm, t);
            if (a != o) {
                snprintf(why, whylen, "step %d token %d: mask %d oracle %d", s, t, a, o);
                rc = 1;
                goto done;
            }
            if (a) allowed[na++] = t;
        }
        if (k != na || na == 0) {
            snprintf(why, whylen, "step %d: count %d vs %d", s, k, na);
            rc = na == 0 ? 0 : 1;
            goto done;
        }
        /* prefer non-end tokens so walks go deep; sometimes pick a closing-quote token */
        int32_t t = allowed[rng_next(&seed) % (uint64_t)na];
        if (nx_grammar_matcher_accept(m, t) != NX_STATUS_OK) {
            snprintf(why, whylen, "step %d: allowed token %d not accepted", s, t);
            rc = 1;
            goto done;
        }
    }
done:
    free(bits);
    free(allowed);
    nx_grammar_matcher_free(m);
    return rc;
}

TEST(mask_matches_oracle) {
    if (!load_llama3()) FAILF("cannot load the Llama-3 vocabulary");
    const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
        "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":1200},\"tags\":{\"type\":\"array\","
        "\"items\":{\"enum\":[\"a\",\"bc\",\"\\u00e9t\\u00e9\"]},\"maxItems\":4},\"ok\":{\"type\":"
        "\"boolean\"},\"x\":{\"type\":\"number\"}},\"required\":[\"name\",\"n\"]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":5}}",
        "{\"type\":\"object\",\"additionalProperties\":true}",
    };
    const char *gbnf[] = {
        "root ::= (word \" \")* word \".\"\nword ::= [a-zA-Z\\u00C0-\\u00FF]+ | [0-9]{1,3}\n",
        "root ::= \"<\" [^<>]* \">\" ( \"\\n\" root )?\n",
    };
    char why[256];
    for (size_t i = 0; i < 3 + 2; i++) {
        nx_grammar *g;
        char err[256];
        nx_status st = i < 3 ? nx_grammar_from_json_schema(schemas[i], strlen(schemas[i]), NULL, &g,
                                                           err, sizeof err)
                             : nx_grammar_from_gbnf(gbnf[i - 3], strlen(gbnf[i - 3]), NULL, &g, err,
                                                    sizeof err);
        if (st != NX_STATUS_OK) FAILF("grammar %zu: %s", i, err);
        for (uint64_t seed = 1; seed <= (i == 0 ? 2u : 1u); seed++) {
            int rc = check_mask_walk(g, 8, seed * 7919 + i, why, sizeof why);
            if (rc != 0) {
                nx_grammar_free(g);
                FAILF("grammar %zu seed %llu: %s", i, (unsigned long long)seed, why);
            }
        }
        nx_grammar_free(g);
    }
}

TEST(eos_rollback_force) {
    struct nx_err e = {{0}};
    struct gram *g = compile_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
                                    "\"required\":[\"a\"]}", false, &e);
    if (!g) FAILF("%s", e.msg);
    struct gmatcher *m;
    ASSERT_OK(gmatcher_init(g, byte_vocab(), &m));
    uint64_t bits[5];
    gmatcher_mask(m, bits, false);
    ASSERT_EQ(bits[4] & 1, 0);                 /* no EOS before the end */
    ASSERT_EQ((bits['{' >> 6] >> ('{' & 63)) & 1, 1);
    ASSERT_EQ(gmatcher_accept(m, 256), NX_STATUS_INVALID_ARG);
    ASSERT_OK(gmatcher_accept_bytes(m, "{\"a\":\"xy", 8));
    ASSERT_EQ(gmatcher_completion_cost(m), 2); /* "} */
    /* forced: only the first byte of the shortest completion */
    ASSERT_EQ(gmatcher_mask(m, bits, true), 1);
    ASSERT_EQ((bits['"' >> 6] >> ('"' & 63)) & 1, 1);
    ASSERT_OK(gmatcher_accept(m, '"'));
    ASSERT_OK(gmatcher_accept(m, '}'));
    gmatcher_mask(m, bits, false);
    ASSERT_EQ(bits[4] & 1, 1);                 /* EOS now */
    ASSERT_EQ(__builtin_popcountll(bits[0]) + __builtin_popcountll(bits[1]), 0);
    ASSERT_OK(gmatcher_accept(m, 256));
    ASSERT_TRUE(gmatcher_finished(m));
    ASSERT_EQ(gmatcher_rollback(m, 3), 3);     /* EOS, }, " undone */
    ASSERT_TRUE(!gmatcher_finished(m));
    ASSERT_EQ(gmatcher_completion_cost(m), 2);
    ASSERT_EQ(gmatcher_accept(m, '\n'), NX_STATUS_INVALID_ARG); /* raw control char in a string */
    ASSERT_OK(gmatcher_accept(m, '}'));                          /* '}' inside the string */
    gmatcher_free(m);
    gram_free(g);
}

/* Lazy trigger: free text until "<tool_call>", then the grammar applies. */
TEST(sampler_trigger_lazy) {
    if (!load_llama3()) FAILF("cannot load the Llama-3 vocabulary");
    int32_t n = nx_model_n_vocab(g_vocab_model);
    const char *text = "Sure <tool_call>";
    nx_token toks[32];
    int32_t nt = nx_tokenize(g_vocab_model, text, strlen(text), toks, 32, false, false);
    ASSERT_TRUE(nt > 1);
    nx_token bad[4];
    ASSERT_EQ(nx_tokenize(g_vocab_model, "hello", 5, bad, 4, false, false), 1);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"integer\"}},"
                         "\"required\":[\"q\"]}";
    nx_grammar *g;
    char err[256];
    ASSERT_OK(nx_grammar_from_json_schema(schema, strlen(schema), NULL, &g, err, sizeof err));
    struct nx_sampler_params p = nx_sampler_default_params();
    p.temp = 0;
    nx_sampler *s;
    ASSERT_OK(nx_sampler_init(&p, n, &s));
    ASSERT_OK(nx_sampler_set_grammar(s, g, g_gvocab, "<tool_call>", 64));
    float *logits = calloc((size_t)n, sizeof *logits);
    for (int32_t i = 0; i < nt; i++) { /* the free text, token by token, as the argmax */
        ASSERT_TRUE(!nx_sampler_grammar_active(s));
        memset(logits, 0, sizeof *logits * (size_t)n);
        logits[toks[i]] = 10;
        ASSERT_EQ(nx_sampler_sample(s, logits), toks[i]);
    }
    ASSERT_TRUE(nx_sampler_grammar_active(s));
    /* "hello" is the argmax now, but the grammar only allows an object start */
    memset(logits, 0, sizeof *logits * (size_t)n);
    logits[bad[0]] = 10;
    nx_token t = nx_sampler_sample(s, logits);
    char piece[64];
    int32_t k = nx_token_to_piece(g_vocab_model, t, piece, sizeof piece, false);
    ASSERT_TRUE(k >= 1 && piece[0] == '{');
    /* then it must finish within the budget and end with EOS */
    int steps = 0;
    char out[512] = "";
    size_t on = 0;
    memcpy(out, piece, (size_t)k);
    on = (size_t)k;
    for (; steps < 64; steps++) {
        for (int32_t i = 0; i < n; i++) logits[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
        t = nx_sampler_sample(s, logits);
        if (nx_token_is_eog(g_vocab_model, t)) break;
        k = nx_token_to_piece(g_vocab_model, t, piece, sizeof piece, false);
        if (on + (size_t)k < sizeof out) {
            memcpy(out + on, piece, (size_t)k);
            on += (size_t)k;
        }
    }
    out[on] = 0;
    ASSERT_TRUE(steps < 64);
    ASSERT_TRUE(strncmp(out, "{\"q\":", 5) == 0);
    ASSERT_TRUE(out[on - 1] == '}');
    free(logits);
    nx_sampler_free(s);
    nx_grammar_free(g);
}

/* The budget holds even when a free token opens more than is left to close (optional
 * properties with long minimums): every output ends with EOS within max_tokens. */
TEST(sampler_budget_always_closes) {
    if (!load_llama3()) FAILF("cannot load the Llama-3 vocabulary");
    int32_t n = nx_model_n_vocab(g_vocab_model);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                         "\"b\":{\"type\":\"string\",\"minLength\":400},\"c\":{\"type\":\"array\","
                         "\"items\":{\"type\":\"string\",\"minLength\":20},\"minItems\":2}}}";
    nx_grammar *g;
    char err[256];
    ASSERT_OK(nx_grammar_from_json_schema(schema, strlen(schema), NULL, &g, err, sizeof err));
    struct nx_sampler_params p = nx_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 5;
    nx_sampler *s;
    ASSERT_OK(nx_sampler_init(&p, n, &s));
    const int budget = 40;
    ASSERT_OK(nx_sampler_set_grammar(s, g, g_gvocab, NULL, budget));
    float *logits = calloc((size_t)n, sizeof *logits);
    uint64_t x = 99;
    for (int gen = 0; gen < 30; gen++) {
        nx_sampler_grammar_reset(s);
        bool ended = false;
        for (int step = 0; step < budget && !ended; step++) {
            for (int32_t i = 0; i < n; i++) logits[i] = (float)(rng_next(&x) % 1000) / 250.0f;
            ended = nx_token_is_eog(g_vocab_model, nx_sampler_sample(s, logits));
        }
        if (!ended) {
            free(logits);
            nx_sampler_free(s);
            nx_grammar_free(g);
            FAILF("generation %d did not end within %d tokens", gen, budget);
        }
    }
    free(logits);
    nx_sampler_free(s);
    nx_grammar_free(g);
}

TEST_MAIN
