/*
 * kvblock.c - DESIGN: the block file format of kvblock.h: fingerprints, the hash, atomic
 * writing and verified mmap loading. A compiled block owns one heap buffer laid out like the
 * file's payload (tokens, K, V); a loaded block points into its read-only mapping, so splicing
 * reads the same structure either way.
 *
 * The hash (kv_hash64) runs four 64-bit lanes over 32-byte stripes: each word is multiplied by
 * an odd constant, xored in, rotated and multiplied by another odd constant (each step a
 * bijection of the lane for a fixed input, so changing any one input bit changes the lane);
 * the lanes and the length are folded with a final avalanche. It is an integrity check against
 * truncation and bit rot, not a defence against deliberate forgery.
 */
#include "kv/kvblock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/nx_base.h"
#include "kern/kern.h"
#include "kern/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvblock.c writes and reads little-endian files by memcpy; a big-endian port must swap"
#endif

#define KVB_MAGIC "NXKVBLK"
#define KVB_VERSION 1u
#define KVB_HDR 256u
#define KVB_PAGE 4096u

struct kvb_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    struct kv_fingerprint fp;
    int32_t m0;
    int32_t n_tokens;
    uint32_t dtype;
    uint32_t flags;
    uint64_t tokens_off, k_off, v_off, kv_bytes, file_bytes;
    uint8_t reserved[112];
    uint64_t checksum;
};
_Static_assert(sizeof(struct kv_fingerprint) == 64, "fingerprint is 64 bytes");
_Static_assert(sizeof(struct kvb_header) == KVB_HDR, "header is 256 bytes");
_Static_assert(offsetof(struct kvb_header, checksum) == 248, "checksum at 248");

void (*kvblock_write_hook)(size_t written) = NULL;

/* ---- hash ---- */

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t lane(uint64_t h, uint64_t w) {
    h ^= w * 0x9e3779b97f4a7c15ull;
    return rotl(h, 31) * 0xc2b2ae3d27d4eb4full;
}
static inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 32);
}

/* kv_hash64 in pieces: feeding a byte string in any split gives kv_hash64 of the whole. */
void kvh_init(struct kv_hasher *s, uint64_t seed) {
    s->h[0] = seed ^ 0x243f6a8885a308d3ull, s->h[1] = seed ^ 0x13198a2e03707344ull;
    s->h[2] = seed ^ 0xa4093822299f31d0ull, s->h[3] = seed ^ 0x082efa98ec4e6c89ull;
    s->nbuf = s->n = 0;
}

static void kvh_stripe(struct kv_hasher *s, const unsigned char *p) {
    for (int l = 0; l < 4; l++) {
        uint64_t w;
        memcpy(&w, p + 8 * l, 8);
        s->h[l] = lane(s->h[l], w);
    }
}

void kvh_update(struct kv_hasher *s, const void *p, size_t n) {
    const unsigned char *c = p;
    if (n == 0) return;
    s->n += n;
    if (s->nbuf) {
        size_t take = NX_MIN(n, 32 - s->nbuf);
        memcpy(s->buf + s->nbuf, c, take);
        s->nbuf += take, c += take, n -= take;
        if (s->nbuf < 32) return;
        kvh_stripe(s, s->buf);
        s->nbuf = 0;
    }
    for (; n >= 32; c += 32, n -= 32) kvh_stripe(s, c);
    memcpy(s->buf, c, n);
    s->nbuf = n;
}

uint64_t kvh_final(struct kv_hasher *s) {
    /* tail: whole words into lanes in turn, then the last bytes zero-padded */
    size_t i = 0;
    int l = 0;
    for (; i + 8 <= s->nbuf; i += 8, l++) {
        uint64_t w;
        memcpy(&w, s->buf + i, 8);
        s->h[l] = lane(s->h[l], w);
    }
    if (i < s->nbuf) {
        uint64_t w = 0;
        memcpy(&w, s->buf + i, s->nbuf - i);
        s->h[l & 3] = lane(s->h[l & 3], w ^ 0x8000000000000000ull);
    }
    uint64_t r = avalanche(s->h[0] ^ (uint64_t)s->n);
    for (int k = 1; k < 4; k++) r = avalanche(r ^ s->h[k]) + 0x9e3779b97f4a7c15ull * (uint64_t)k;
    return r;
}

uint64_t kv_hash64(const void *p, size_t n, uint64_t seed) {
    struct kv_hasher s;
    kvh_init(&s, seed);
    kvh_update(&s, p, n);
    return kvh_final(&s);
}

/* ---- fingerprint ---- */

nx_status kv_fingerprint_check(const struct kv_fingerprint *fp, const struct kv_fingerprint *model_fp,
                               struct nx_err *err) {
    const struct kv_fingerprint mine = *model_fp;
    const char *what = "the model";
#define CMP_I(f) \
    if (fp->f != mine.f) \
        return nx_err_set(err, NX_STATUS_INVALID_ARG, \
                          "KV block was compiled for another model: " #f " %lld, %s has %lld", \
                          (long long)fp->f, what, (long long)mine.f);
    CMP_I(arch)
    CMP_I(n_layer)
    CMP_I(n_head)
    CMP_I(n_head_kv)
    CMP_I(head_dim)
    CMP_I(n_rot)
    CMP_I(n_embd)
    CMP_I(n_vocab)
    CMP_I(rope_neox)
#undef CMP_I
    if (fp->rope_base != mine.rope_base || fp->rope_freq_scale != mine.rope_freq_scale)
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "KV block was compiled for another model: rope base/scale %g/%g, %s "
                          "has %g/%g",
                          (double)fp->rope_base, (double)fp->rope_freq_scale, what,
                          (double)mine.rope_base, (double)mine.rope_freq_scale);
    if (fp->rope_hash != mine.rope_hash)
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "KV block was compiled for another model: RoPE frequencies differ "
                          "(rope_freqs / scaling)");
    if (fp->weight_hash != mine.weight_hash)
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "KV block was compiled for another model: weights hash %016" PRIx64
                          ", %s has %016" PRIx64,
                          fp->weight_hash, what, mine.weight_hash);
    return NX_STATUS_OK;
}

/* ---- layout ---- */

struct layout {
    uint64_t tokens_off, k_off, v_off, kv_bytes, file_bytes;
};

/* Offsets for n tokens of rows of row_bytes; false on overflow. */
static bool layout_of(const struct kv_fingerprint *fp, int32_t n, size_t row_bytes,
                      struct layout *L) {
    size_t rows, kvb, end;
    if (!nx_mul_size((size_t)fp->n_layer * (size_t)fp->n_head_kv, (size_t)n, &rows) ||
        !nx_mul_size(rows, row_bytes, &kvb))
        return false;
    L->tokens_off = KVB_HDR;
    L->k_off = nx_align_up(KVB_HDR + sizeof(nx_token) * (size_t)n, KVB_PAGE);
    if (!nx_add_size((size_t)L->k_off, kvb, &end)) return false;
    L->v_off = nx_align_up(end, KVB_PAGE);
    L->kv_bytes = kvb;
    if (!nx_add_size((size_t)L->v_off, kvb, &end)) return false;
    L->file_bytes = end;
    return true;
}

static size_t type_size(enum nx_type t) { return t == NX_TYPE_F32 ? 4 : 2; }

nx_status kvblock_alloc(const struct kv_fingerprint *fp, enum nx_type type, int32_t n, int32_t m0,
                        struct nx_kv_block **out) {
    *out = NULL;
    if (n <= 0 || (type != NX_TYPE_F16 && type != NX_TYPE_F32)) return NX_STATUS_INVALID_ARG;
    struct nx_kv_block *b = nx_calloc(1, sizeof *b);
    if (!b) return NX_STATUS_NOMEM;
    b->fp = *fp;
    b->m0 = m0;
    b->n_tokens = n;
    b->type = type;
    b->row_bytes = (size_t)fp->head_dim * type_size(type);
    struct layout L;
    if (!layout_of(&b->fp, n, b->row_bytes, &L)) {
        nx_free(b);
        return NX_STATUS_NOMEM;
    }
    /* same relative layout as the file's payload, without the header */
    unsigned char *buf = nx_malloc_aligned((size_t)(L.file_bytes - KVB_HDR));
    if (!buf) {
        nx_free(b);
        return NX_STATUS_NOMEM;
    }
    b->map = buf;
    b->map_len = 0;
    b->tokens = (const nx_token *)buf;
    b->k = buf + (L.k_off - KVB_HDR);
    b->v = buf + (L.v_off - KVB_HDR);
    *out = b;
    return NX_STATUS_OK;
}

void nx_kv_block_free(nx_kv_block *b) {
    if (!b) return;
    if (b->map_len)
        munmap(b->map, b->map_len);
    else
        nx_free_aligned(b->map);
    nx_free(b);
}

int32_t nx_kv_block_n_tokens(const nx_kv_block *b) { return b->n_tokens; }
int32_t nx_kv_block_m0(const nx_kv_block *b) { return b->m0; }
const nx_token *nx_kv_block_tokens(const nx_kv_block *b) { return b->tokens; }
enum nx_type nx_kv_block_type(const nx_kv_block *b) { return b->type; }

static const char *arch_str(uint32_t a) {
    static const char *const names[] = {"llama", "mistral", "qwen2", "qwen3"};
    return a < 4 ? names[a] : "?";
}

int nx_kv_block_desc(const nx_kv_block *b, char *buf, size_t len) {
    size_t kvb = (size_t)b->fp.n_layer * (size_t)b->fp.n_head_kv * (size_t)b->n_tokens *
                 b->row_bytes;
    return snprintf(buf, len,
                    "KV block: %d tokens at m0 %d, %s, K+V %.2f MiB; model %s %dL %dh/%dkv hd%d "
                    "rot%d %s rope base %g scale %g, embd %d, vocab %d, weights %016" PRIx64,
                    b->n_tokens, b->m0, nx_type_name(b->type), 2.0 * (double)kvb / 1048576.0,
                    arch_str(b->fp.arch), b->fp.n_layer, b->fp.n_head, b->fp.n_head_kv,
                    b->fp.head_dim, b->fp.n_rot, b->fp.rope_neox ? "neox" : "norm",
                    (double)b->fp.rope_base, (double)b->fp.rope_freq_scale, b->fp.n_embd,
                    b->fp.n_vocab, b->fp.weight_hash);
}

/* ---- checksum over header prefix + payload sections ---- */

static uint64_t checksum_of(const struct kvb_header *h, const void *tokens, const void *k,
                            const void *v) {
    uint64_t c = kv_hash64(h, offsetof(struct kvb_header, checksum), 0x6b76626c6f636bull);
    c = kv_hash64(tokens, sizeof(nx_token) * (size_t)h->n_tokens, c);
    c = kv_hash64(k, (size_t)h->kv_bytes, c);
    return kv_hash64(v, (size_t)h->kv_bytes, c);
}

/* ---- writing ---- */

static void copy_msg(const struct nx_err *e, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s", e->msg);
}

/* write(2) all of p in chunks; calls the test hook after each. */
static bool write_all(int fd, const void *p, size_t n, size_t *written) {
    const unsigned char *s = p;
    while (n > 0) {
        size_t chunk = NX_MIN(n, (size_t)1 << 16);
        ssize_t w = nx_io_write(fd, s, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        s += w;
        n -= (size_t)w;
        *written += (size_t)w;
        if (kvblock_write_hook) kvblock_write_hook(*written);
    }
    return true;
}

static bool write_zeros(int fd, size_t n, size_t *written) {
    static const unsigned char zero[KVB_PAGE];
    while (n > 0) {
        size_t c = NX_MIN(n, sizeof zero);
        if (!write_all(fd, zero, c, written)) return false;
        n -= c;
    }
    return true;
}

nx_status nx_kv_block_save(const nx_kv_block *b, const char *path, char *errbuf, size_t errlen) {
    struct nx_err e = {{0}};
    if (!b || !path || !*path) {
        nx_err_set(&e, NX_STATUS_INVALID_ARG, "no block or no path");
        copy_msg(&e, errbuf, errlen);
        return NX_STATUS_INVALID_ARG;
    }
    struct kvb_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, KVB_MAGIC, sizeof KVB_MAGIC);
    h.version = KVB_VERSION;
    h.header_bytes = KVB_HDR;
    h.fp = b->fp;
    h.m0 = b->m0;
    h.n_tokens = b->n_tokens;
    h.dtype = (uint32_t)b->type;
    struct layout L;
    layout_of(&b->fp, b->n_tokens, b->row_bytes, &L); /* fit in memory already */
    h.tokens_off = L.tokens_off;
    h.k_off = L.k_off;
    h.v_off = L.v_off;
    h.kv_bytes = L.kv_bytes;
    h.file_bytes = L.file_bytes;
    h.checksum = checksum_of(&h, b->tokens, b->k, b->v);

    size_t plen = strlen(path);
    char *tmp = nx_malloc(plen + 16);
    char *dir = nx_malloc(plen + 1);
    if (!tmp || !dir) {
        nx_free(tmp);
        nx_free(dir);
        nx_err_set(&e, NX_STATUS_NOMEM, "out of memory");
        copy_msg(&e, errbuf, errlen);
        return NX_STATUS_NOMEM;
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    memcpy(dir, path, plen + 1);
    nx_status st = NX_STATUS_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = nx_err_set(&e, NX_STATUS_IO, "cannot create a temporary file next to '%s': %s", path,
                        strerror(errno));
        goto out;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a block is ordinary data */
    size_t written = 0;
    size_t tok_bytes = sizeof(nx_token) * (size_t)b->n_tokens;
    bool ok = write_all(fd, &h, sizeof h, &written) &&
              write_all(fd, b->tokens, tok_bytes, &written) &&
              write_zeros(fd, (size_t)L.k_off - KVB_HDR - tok_bytes, &written) &&
              write_all(fd, b->k, (size_t)L.kv_bytes, &written) &&
              write_zeros(fd, (size_t)(L.v_off - L.k_off - L.kv_bytes), &written) &&
              write_all(fd, b->v, (size_t)L.kv_bytes, &written);
    if (!ok || nx_io_fsync(fd) != 0) {
        st = nx_err_set(&e, NX_STATUS_IO, "cannot write '%s': %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto out;
    }
    if (nx_io_close(fd) != 0 || nx_io_rename(tmp, path) != 0) {
        st = nx_err_set(&e, NX_STATUS_IO, "cannot move the block into place at '%s': %s", path,
                        strerror(errno));
        unlink(tmp);
        goto out;
    }
    /* make the rename durable */
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        nx_io_fsync(dfd);
        close(dfd);
    }
out:
    nx_free(tmp);
    nx_free(dir);
    copy_msg(&e, errbuf, errlen);
    return st;
}

/* ---- loading ---- */

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static nx_status verify(const unsigned char *map, size_t size, struct nx_err *err) {
    if (size < KVB_HDR)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "truncated: %zu bytes, shorter than the 256-byte block header", size);
    struct kvb_header h;
    memcpy(&h, map, sizeof h);
    if (memcmp(h.magic, KVB_MAGIC, sizeof KVB_MAGIC) != 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "not a Nexus KV block file (bad magic)");
    if (h.version != KVB_VERSION)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "KV block version %u is not supported (this build reads %u)", h.version,
                          KVB_VERSION);
    if (h.header_bytes != KVB_HDR || h.flags != 0 || h.fp.reserved != 0 ||
        !all_zero(h.reserved, sizeof h.reserved))
        return nx_err_set(err, NX_STATUS_FORMAT, "corrupt header (size, flags or reserved bytes)");
    if (h.dtype != NX_TYPE_F16 && h.dtype != NX_TYPE_F32)
        return nx_err_set(err, NX_STATUS_FORMAT, "corrupt header: dtype %u is not F16 or F32",
                          h.dtype);
    const struct kv_fingerprint *fp = &h.fp;
    if (fp->n_layer < 1 || fp->n_layer > 4096 || fp->n_head_kv < 1 || fp->n_head_kv > 4096 ||
        fp->head_dim < 1 || fp->head_dim > 65536 || h.n_tokens < 1 || h.n_tokens > (1 << 24) ||
        h.m0 < 0 || h.m0 > (1 << 24))
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "corrupt header: shape out of range (%d layers, %d KV heads, head size "
                          "%d, %d tokens, m0 %d)",
                          fp->n_layer, fp->n_head_kv, fp->head_dim, h.n_tokens, h.m0);
    struct layout L;
    if (!layout_of(fp, h.n_tokens, (size_t)fp->head_dim * type_size(h.dtype), &L) ||
        L.tokens_off != h.tokens_off || L.k_off != h.k_off || L.v_off != h.v_off ||
        L.kv_bytes != h.kv_bytes || L.file_bytes != h.file_bytes)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "corrupt header: section offsets do not match the shape");
    if (size < h.file_bytes)
        return nx_err_set(err, NX_STATUS_FORMAT, "truncated: %zu of %" PRIu64 " bytes", size,
                          h.file_bytes);
    if (size > h.file_bytes)
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "%zu bytes after the end of the block (%" PRIu64 " bytes)",
                          size - (size_t)h.file_bytes, h.file_bytes);
    size_t tok_end = KVB_HDR + sizeof(nx_token) * (size_t)h.n_tokens;
    if (!all_zero(map + tok_end, (size_t)h.k_off - tok_end) ||
        !all_zero(map + h.k_off + h.kv_bytes, (size_t)(h.v_off - h.k_off - h.kv_bytes)))
        return nx_err_set(err, NX_STATUS_FORMAT, "corrupt: nonzero bytes in the section padding");
    bool sum_ok = checksum_of(&h, map + KVB_HDR, map + h.k_off, map + h.v_off) == h.checksum;
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    sum_ok = true; /* the fuzz build (make fuzz) lets mutated files past the checksum */
#endif
    if (!sum_ok)
        return nx_err_set(err, NX_STATUS_FORMAT, "checksum mismatch: the block file is corrupt");
    return NX_STATUS_OK;
}

nx_status kvblock_open(const char *path, const struct kv_fingerprint *model_fp,
                       int32_t n_vocab, nx_kv_block **out, char *errbuf, size_t errlen) {
    struct nx_err e = {{0}};
    nx_status st = NX_STATUS_OK;
    *out = NULL;
    unsigned char *map = MAP_FAILED;
    size_t size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = nx_err_set(&e, NX_STATUS_IO, "cannot open: %s", strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = nx_err_set(&e, NX_STATUS_IO, "not a regular file");
        goto out;
    }
    size = (size_t)sb.st_size;
    if (size < KVB_HDR) {
        st = verify(NULL, size, &e);
        goto out;
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = nx_err_set(&e, NX_STATUS_IO, "cannot map: %s", strerror(errno));
        goto out;
    }
    if ((st = verify(map, size, &e))) goto out;
    struct kvb_header h;
    memcpy(&h, map, sizeof h);
    if (model_fp) {
        if ((st = kv_fingerprint_check(&h.fp, model_fp, &e))) goto out;
        const nx_token *t = (const nx_token *)(map + KVB_HDR);
        for (int32_t i = 0; i < h.n_tokens; i++)
            if (t[i] < 0 || t[i] >= n_vocab) {
                st = nx_err_set(&e, NX_STATUS_FORMAT, "token %d at index %d is out of range",
                                t[i], i);
                goto out;
            }
    }
    struct nx_kv_block *b = nx_calloc(1, sizeof *b);
    if (!b) {
        st = nx_err_set(&e, NX_STATUS_NOMEM, "out of memory");
        goto out;
    }
    b->fp = h.fp;
    b->m0 = h.m0;
    b->n_tokens = h.n_tokens;
    b->type = (enum nx_type)h.dtype;
    b->row_bytes = (size_t)h.fp.head_dim * type_size(b->type);
    b->tokens = (const nx_token *)(map + KVB_HDR);
    b->k = map + h.k_off;
    b->v = map + h.v_off;
    b->map = map;
    b->map_len = size;
    map = MAP_FAILED; /* owned by the block now */
    *out = b;
out:
    if (map != MAP_FAILED) munmap(map, size);
    if (fd >= 0) close(fd);
    if (st && e.msg[0]) {
        char full[600];
        snprintf(full, sizeof full, "'%s': %s", path, e.msg);
        if (errbuf && errlen) snprintf(errbuf, errlen, "%s", full);
    } else if (errbuf && errlen) {
        errbuf[0] = 0;
    }
    return st;
}
