/*
 * ruler.c - RULER-style synthetic tasks: generator and scorer (see ruler.h).
 *
 * DESIGN: every task is a function build(n) that writes the whole prompt for a haystack of n
 * units (noise lines, distractor needles, uncommon words or coded words) from a generator
 * re-seeded with (seed, task), so keys and values do not depend on n and build(n) is a pure
 * function. ruler_generate finds the largest n whose prompt fits (tokens + max_new <= target)
 * by doubling, then bisection; the token count is monotone in n up to tokenizer merges at the
 * seams, which can cost at most a unit of slack. Needles go at uniformly drawn line positions
 * (in order for the variable chain). The word lists below are written for this file.
 */
#include "eval/ruler.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static const char *const TASK_NAMES[RULER_N_TASKS] = {
    "niah_single_1",         "niah_multikey_1_noise", "niah_multikey_2",
    "niah_multikey_3",       "niah_multivalue_noise", "niah_multiquery_noise",
    "vt",                    "cwe",                   "fwe"};

const char *const ruler_left_out[] = {
    "niah_single_2: needs the Paul Graham essays haystack",
    "niah_single_3: needs the Paul Graham essays haystack",
    "niah_multikey_1: needs the Paul Graham essays haystack (run here as niah_multikey_1_noise)",
    "niah_multivalue: needs the Paul Graham essays haystack (run here as niah_multivalue_noise)",
    "niah_multiquery: needs the Paul Graham essays haystack (run here as niah_multiquery_noise)",
    "qa_1: needs SQuAD v2 dev",
    "qa_2: needs HotpotQA dev-distractor"};
const int ruler_n_left_out = (int)(sizeof ruler_left_out / sizeof ruler_left_out[0]);

static const char *const ADJ[] = {
    "brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "kind", "lively", "merry",
    "nice", "proud", "silly", "witty", "zesty", "bright", "quiet", "rapid", "shiny", "sleepy",
    "tiny", "huge", "fuzzy", "golden", "hollow", "icy", "lucky", "misty", "noisy", "odd",
    "plain", "rusty", "sandy", "tall", "warm", "wild", "young", "dusty", "grumpy", "humble"};
static const char *const NOUN[] = {
    "apple", "badger", "cactus", "dragon", "engine", "falcon", "garden", "hammer", "island",
    "jacket", "kettle", "lemon", "meadow", "needle", "orange", "pencil", "quilt", "rabbit",
    "saddle", "tiger", "umbrella", "violin", "wagon", "yogurt", "zebra", "anchor", "basket",
    "candle", "dolphin", "feather", "guitar", "helmet", "igloo", "jungle", "kitten", "ladder",
    "mirror", "nest", "otter", "parrot"};
/* words for the common-words list */
static const char *const WORDS[] = {
    "ball", "tree", "house", "river", "cloud", "stone", "bread", "chair", "clock", "door",
    "field", "flower", "grass", "horse", "lamp", "moon", "ocean", "paper", "road", "school",
    "shoe", "spoon", "star", "table", "train", "window", "boat", "bird", "cake", "coat",
    "dog", "drum", "egg", "fish", "frog", "gate", "hat", "hill", "key", "kite", "leaf", "milk",
    "nose", "park", "pig", "plate", "rain", "ring", "rock", "sand", "ship", "sock", "sun",
    "toy", "truck", "wall", "wheel", "wind", "bell", "bench", "book", "bottle", "box", "bridge",
    "brush", "button", "car", "castle", "coin", "cup", "desk", "duck", "fence", "fire", "fork",
    "glass", "glove", "honey", "jar", "juice", "king", "knife", "lake", "map", "mouse", "nut",
    "owl", "pear", "pen", "queen", "rope", "sheep", "shell", "snow", "soap", "tent", "tooth",
    "towel", "vase", "whale"};
#define N_ADJ ((int)(sizeof ADJ / sizeof ADJ[0]))
#define N_NOUN ((int)(sizeof NOUN / sizeof NOUN[0]))
#define N_WORDS ((int)(sizeof WORDS / sizeof WORDS[0]))

static const char NOISE[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

const char *ruler_task_name(enum ruler_task t) {
    return (unsigned)t < RULER_N_TASKS ? TASK_NAMES[t] : "?";
}

int ruler_task_from_name(const char *name) {
    for (int i = 0; name && i < RULER_N_TASKS; i++)
        if (!strcmp(name, TASK_NAMES[i])) return i;
    return -1;
}

int ruler_task_max_new(enum ruler_task t) {
    switch (t) {
    case RULER_VT: return 30;
    case RULER_CWE: return 120;
    case RULER_FWE: return 50;
    default: return 128;
    }
}

/* ---- generator state ---- */

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rnd(uint64_t *s, uint32_t n) { return (uint32_t)(mix(s) % n); }

struct sb {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_addn(struct sb *b, const char *s, size_t k) {
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (b->n + k + 1 > c) c *= 2;
        char *np = nx_realloc(b->p, c);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = c;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}
static void sb_add(struct sb *b, const char *s) { sb_addn(b, s, strlen(s)); }
__attribute__((format(printf, 2, 3))) static void sb_addf(struct sb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_addn(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void word_key(uint64_t *r, char *out, size_t n) {
    snprintf(out, n, "%s-%s", ADJ[rnd(r, N_ADJ)], NOUN[rnd(r, N_NOUN)]);
}
static void uuid4(uint64_t *r, char *out, size_t n) {
    uint64_t a = mix(r), b = mix(r);
    a = (a & ~0xF000ull) | 0x4000ull;                  /* version 4 */
    b = (b & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull; /* variant 10 */
    snprintf(out, n, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
             (unsigned)((a >> 16) & 0xFFFF), (unsigned)(a & 0xFFFF), (unsigned)(b >> 48),
             (unsigned long long)(b & 0xFFFFFFFFFFFFull));
}
static void number7(uint64_t *r, char *out, size_t n) {
    snprintf(out, n, "%u", 1000000u + rnd(r, 9000000u));
}

/* ---- NIAH ---- */

struct niah_cfg {
    int keys, values, queries;
    int uuid_keys, uuid_values;
    int needle_haystack; /* haystack of distractor needles instead of noise lines */
};

static struct niah_cfg niah_config(enum ruler_task t) {
    switch (t) {
    case RULER_NIAH_MULTIKEY_1_NOISE: return (struct niah_cfg){4, 1, 1, 0, 0, 0};
    case RULER_NIAH_MULTIKEY_2: return (struct niah_cfg){1, 1, 1, 0, 0, 1};
    case RULER_NIAH_MULTIKEY_3: return (struct niah_cfg){1, 1, 1, 1, 1, 1};
    case RULER_NIAH_MULTIVALUE_NOISE: return (struct niah_cfg){1, 4, 1, 0, 0, 0};
    case RULER_NIAH_MULTIQUERY_NOISE: return (struct niah_cfg){4, 1, 4, 0, 0, 0};
    default: return (struct niah_cfg){1, 1, 1, 0, 0, 0};
    }
}

static void make_key(uint64_t *r, int uuid, char *out, size_t n) {
    if (uuid)
        uuid4(r, out, n);
    else
        word_key(r, out, n);
}
static void make_value(uint64_t *r, int uuid, char *out, size_t n) {
    if (uuid)
        uuid4(r, out, n);
    else
        number7(r, out, n);
}

static void needle_text(struct sb *b, int uuid_values, const char *key, const char *value) {
    sb_addf(b, "One of the special magic %s for %s is: %s.\n", uuid_values ? "uuids" : "numbers",
            key, value);
}

static void build_niah(enum ruler_task t, int n, uint64_t seed, struct sb *b,
                       struct ruler_sample *s) {
    struct niah_cfg c = niah_config(t);
    uint64_t r = seed;
    char keys[4][RULER_ANSWER_LEN], vals[4][4][RULER_ANSWER_LEN];
    for (int k = 0; k < c.keys; k++) {
        int fresh;
        do { /* distinct keys */
            make_key(&r, c.uuid_keys, keys[k], sizeof keys[k]);
            fresh = 1;
            for (int j = 0; j < k; j++) fresh &= strcmp(keys[j], keys[k]) != 0;
        } while (!fresh);
        for (int v = 0; v < c.values; v++) make_value(&r, c.uuid_values, vals[k][v], RULER_ANSWER_LEN);
    }
    /* needles: key k value v, placed at a haystack position in [0, n] */
    int nn = c.keys * c.values, pos[16];
    for (int i = 0; i < nn; i++) pos[i] = (int)rnd(&r, (uint32_t)n + 1);
    uint64_t rh = mix(&r); /* distractor stream */
    const char *type = c.uuid_values ? "uuids" : "numbers";
    sb_addf(b, "Some special magic %s are hidden within the following text. Make sure to "
               "memorize it. I will quiz you about the %s afterwards.\n", type, type);
    for (int i = 0; i <= n; i++) {
        for (int k = 0; k < nn; k++)
            if (pos[k] == i) needle_text(b, c.uuid_values, keys[k / c.values], vals[k / c.values][k % c.values]);
        if (i == n) break;
        if (c.needle_haystack) {
            char dk[RULER_ANSWER_LEN], dv[RULER_ANSWER_LEN];
            do
                make_key(&rh, c.uuid_keys, dk, sizeof dk);
            while (!strcmp(dk, keys[0]));
            make_value(&rh, c.uuid_values, dv, sizeof dv);
            needle_text(b, c.uuid_values, dk, dv);
        } else {
            sb_add(b, NOISE);
            sb_add(b, "\n");
        }
    }
    char query[4 * RULER_ANSWER_LEN + 16] = "";
    for (int q = 0; q < c.queries; q++) {
        if (q) strcat(query, q + 1 == c.queries ? ", and " : ", ");
        strcat(query, keys[q]);
    }
    s->n_answers = 0;
    for (int q = 0; q < c.queries; q++)
        for (int v = 0; v < c.values; v++)
            snprintf(s->answers[s->n_answers++], RULER_ANSWER_LEN, "%s", vals[q][v]);
    s->n_needles = c.needle_haystack ? n + 1 : nn;
    const char *one = c.uuid_values ? "uuid" : "number";
    if (s->n_answers == 1)
        sb_addf(b, "What is the special magic %s for %s mentioned in the provided text? The "
                   "special magic %s for %s mentioned in the provided text is", one, query, one,
                query);
    else
        sb_addf(b, "What are all the special magic %s for %s mentioned in the provided text? The "
                   "special magic %s for %s mentioned in the provided text are", type, query,
                type, query);
}

/* ---- variable tracking ---- */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void build_vt(int n, uint64_t seed, struct sb *b, struct ruler_sample *s) {
    uint64_t r = seed;
    enum { HOPS = 4, NV = HOPS + 1 };
    char names[NV][8];
    for (int i = 0; i < NV; i++) {
        int fresh;
        do {
            for (int j = 0; j < 5; j++) names[i][j] = (char)('A' + rnd(&r, 26));
            names[i][5] = 0;
            fresh = 1;
            for (int j = 0; j < i; j++) fresh &= strcmp(names[i], names[j]) != 0;
        } while (!fresh);
    }
    unsigned value = 10000u + rnd(&r, 90000u);
    int pos[NV];
    for (int i = 0; i < NV; i++) pos[i] = (int)rnd(&r, (uint32_t)n + 1);
    qsort(pos, NV, sizeof pos[0], cmp_int);
    sb_add(b, "Memorize and track the chain(s) of variable assignment hidden in the following "
              "text.\n\n");
    for (int i = 0, k = 0; i <= n; i++) {
        for (; k < NV && pos[k] == i; k++) {
            if (k == 0)
                sb_addf(b, "VAR %s = %u.\n", names[0], value);
            else
                sb_addf(b, "VAR %s = VAR %s.\n", names[k], names[k - 1]);
        }
        if (i < n) {
            sb_add(b, NOISE);
            sb_add(b, "\n");
        }
    }
    sb_addf(b, "Question: Find all variables that are assigned the value %u in the text above. "
               "Answer: According to the chain(s) of variable assignment in the text above, %d "
               "variables are assigned the value %u, they are:", value, NV, value);
    s->n_answers = NV;
    for (int i = 0; i < NV; i++) snprintf(s->answers[i], RULER_ANSWER_LEN, "%s", names[i]);
    s->n_needles = NV;
}

/* ---- common words ---- */

/* word i of a seeded shuffle of WORDS, continued by synthetic 7-letter words past the list */
static void cwe_word(const int *perm, int i, uint64_t seed, char *out, size_t n) {
    if (i < N_WORDS) {
        snprintf(out, n, "%s", WORDS[perm[i]]);
        return;
    }
    uint64_t r = seed ^ (0xC0FFEEull * (uint64_t)(i + 1));
    for (int j = 0; j < 7; j++) out[j] = (char)('a' + rnd(&r, 26));
    out[7] = 0;
}

static void build_cwe(int n, int32_t target, uint64_t seed, struct sb *b, struct ruler_sample *s) {
    uint64_t r = seed;
    int perm[N_WORDS];
    for (int i = 0; i < N_WORDS; i++) perm[i] = i;
    for (int i = N_WORDS - 1; i > 0; i--) {
        int j = (int)rnd(&r, (uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int fc = target >= 4096 ? 30 : 6, fu = target >= 4096 ? 3 : 1;
    int total = 10 * fc + n * fu;
    int *list = nx_malloc(sizeof *list * (size_t)total);
    if (!list) {
        b->oom = 1;
        return;
    }
    int k = 0;
    for (int w = 0; w < 10; w++)
        for (int c = 0; c < fc; c++) list[k++] = w;
    for (int w = 0; w < n; w++)
        for (int c = 0; c < fu; c++) list[k++] = 10 + w;
    uint64_t rs = mix(&r) ^ (uint64_t)n; /* the order depends on n; the words do not */
    for (int i = total - 1; i > 0; i--) {
        int j = (int)rnd(&rs, (uint32_t)i + 1), t = list[i];
        list[i] = list[j], list[j] = t;
    }
    sb_add(b, "Below is a numbered list of words. In these words, some appear more often than "
              "others. Memorize the ones that appear most often.\n");
    char w[16];
    for (int i = 0; i < total; i++) {
        cwe_word(perm, list[i], seed, w, sizeof w);
        sb_addf(b, "%d. %s ", i + 1, w);
    }
    nx_free(list);
    sb_add(b, "\nQuestion: What are the 10 most common words in the above list? Answer: The top "
              "10 words that appear most often in the list are:");
    s->n_answers = 10;
    for (int i = 0; i < 10; i++) cwe_word(perm, i, seed, s->answers[i], RULER_ANSWER_LEN);
    s->n_needles = 10 * fc;
}

/* ---- frequent words ---- */

static void build_fwe(int n, int32_t target, int max_new, uint64_t seed, struct sb *b,
                      struct ruler_sample *s) {
    uint64_t r = seed;
    int vocab = (target - max_new) / 50;
    if (vocab < 5) vocab = 5;
    if (vocab > 4096) vocab = 4096;
    char(*words)[8] = nx_malloc(sizeof *words * (size_t)vocab);
    int *count = nx_malloc(sizeof *count * (size_t)vocab);
    if (!words || !count) {
        nx_free(words);
        nx_free(count);
        b->oom = 1;
        return;
    }
    for (int v = 0; v < vocab; v++) {
        int fresh;
        do {
            for (int j = 0; j < 6; j++) words[v][j] = (char)('a' + rnd(&r, 26));
            words[v][6] = 0;
            fresh = 1;
            for (int u = 0; u < v; u++) fresh &= strcmp(words[u], words[v]) != 0;
        } while (!fresh);
    }
    /* n words in all, Zipf(2): count_k = floor(n k^-2 / zeta(2)); at least one each */
    const double zeta2 = M_PI * M_PI / 6;
    int total = 0;
    for (int v = 0; v < vocab; v++) {
        count[v] = (int)floor(n / ((double)(v + 1) * (v + 1)) / zeta2);
        if (count[v] < 1) count[v] = 1;
        total += count[v];
    }
    int *list = nx_malloc(sizeof *list * (size_t)total);
    if (!list) {
        nx_free(words);
        nx_free(count);
        b->oom = 1;
        return;
    }
    for (int v = 0, k = 0; v < vocab; v++)
        for (int c = 0; c < count[v]; c++) list[k++] = v;
    uint64_t rs = mix(&r) ^ (uint64_t)n;
    for (int i = total - 1; i > 0; i--) {
        int j = (int)rnd(&rs, (uint32_t)i + 1), t = list[i];
        list[i] = list[j], list[j] = t;
    }
    sb_add(b, "Read the following coded text and track the frequency of each coded word. Find "
              "the three most frequently appeared coded words. ");
    for (int i = 0; i < total; i++) {
        sb_add(b, list[i] == 0 ? "...." : words[list[i]]);
        sb_add(b, " ");
    }
    sb_add(b, "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What "
              "are the three most frequently appeared words in the above coded text? Answer: "
              "According to the coded text above, the three most frequently appeared words "
              "are:");
    s->n_answers = 3;
    for (int i = 0; i < 3; i++) snprintf(s->answers[i], RULER_ANSWER_LEN, "%s", words[i + 1]);
    s->n_needles = count[1] + count[2] + count[3];
    nx_free(list);
    nx_free(words);
    nx_free(count);
}

/* ---- driver ---- */

static int build(enum ruler_task t, int n, int32_t target, int max_new, uint64_t seed,
                 struct sb *b, struct ruler_sample *s) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
    uint64_t ts = seed * 0x100000001B3ull + (uint64_t)t * 0x9E3779B97F4A7C15ull;
    switch (t) {
    case RULER_VT: build_vt(n, ts, b, s); break;
    case RULER_CWE: build_cwe(n, target, ts, b, s); break;
    case RULER_FWE: build_fwe(n, target, max_new, ts, b, s); break;
    default: build_niah(t, n, ts, b, s); break;
    }
    return b->oom ? -1 : 0;
}

/* tokens of build(n), or -1 */
static int32_t measure(enum ruler_task t, int n, int32_t target, int max_new, uint64_t seed,
                       struct sb *b, struct ruler_sample *s, ruler_count_fn count, void *user) {
    if (build(t, n, target, max_new, seed, b, s)) return -1;
    return count(user, b->p, b->n);
}

nx_status ruler_generate(enum ruler_task task, int32_t target, int max_new, uint64_t seed,
                   ruler_count_fn count, void *user, struct ruler_sample *out, char *err,
                   size_t errlen) {
    memset(out, 0, sizeof *out);
    if ((unsigned)task >= RULER_N_TASKS || !count || target < 1) {
        snprintf(err, errlen, "ruler: bad task, target or counter");
        return NX_STATUS_INVALID_ARG;
    }
    if (max_new <= 0) max_new = ruler_task_max_new(task);
    int32_t room = target - max_new;
    struct sb b = {0};
    int32_t k = measure(task, 1, target, max_new, seed, &b, out, count, user);
    if (k < 0 || k > room) {
        if (k < 0)
            snprintf(err, errlen, "ruler: %s: tokenizing the prompt failed", ruler_task_name(task));
        else
            snprintf(err, errlen, "ruler: %s: target %d tokens is too small (the smallest prompt "
                     "takes %d tokens plus %d to generate)", ruler_task_name(task), target, k,
                     max_new);
        nx_free(b.p);
        return k < 0 ? (b.oom ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG) : NX_STATUS_UNSUPPORTED;
    }
    int lo = 1, hi = 2; /* lo fits; find hi that does not */
    for (;;) {
        k = measure(task, hi, target, max_new, seed, &b, out, count, user);
        if (k < 0) goto fail;
        if (k > room) break;
        lo = hi;
        if (hi >= (1 << 24)) break;
        hi *= 2;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        k = measure(task, mid, target, max_new, seed, &b, out, count, user);
        if (k < 0) goto fail;
        if (k <= room)
            lo = mid;
        else
            hi = mid;
    }
    k = measure(task, lo, target, max_new, seed, &b, out, count, user);
    if (k < 0 || k > room) goto fail;
    out->task = task;
    out->prompt = b.p;
    out->n_tokens = k;
    out->max_new = max_new;
    return NX_STATUS_OK;
fail:
    snprintf(err, errlen, "ruler: %s: %s", ruler_task_name(task),
             b.oom ? "out of memory" : "tokenizing the prompt failed");
    nx_free(b.p);
    memset(out, 0, sizeof *out);
    return b.oom ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
}

void ruler_sample_free(struct ruler_sample *s) {
    if (!s) return;
    nx_free(s->prompt);
    s->prompt = NULL;
}

/* ASCII case-insensitive substring */
static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 0;
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

double ruler_score_all(const char *prediction, const char (*refs)[RULER_ANSWER_LEN], int n) {
    if (!prediction || !refs || n <= 0) return 0;
    int hit = 0;
    for (int i = 0; i < n; i++) hit += contains_ci(prediction, refs[i]);
    return (double)hit / n;
}

double ruler_score_part(const char *prediction, const char (*refs)[RULER_ANSWER_LEN], int n) {
    if (!prediction || !refs || n <= 0) return 0;
    for (int i = 0; i < n; i++)
        if (contains_ci(prediction, refs[i])) return 1;
    return 0;
}
