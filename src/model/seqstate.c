/*
 * seqstate.c - a sequence's KV state to a file and back (nx_seq_state_save / _load), so a
 * server can park an idle session on disk and resume it exactly.
 *
 * DESIGN: the file holds what the sequence's tables hold, table by table (layer-major, then KV
 * head): each token's position, pin flag and attention accumulator, and its key and value rows
 * in the cache's type, plus the sequence's next position and the positions compaction closed
 * (together what its density budget counts). What the policy's observation window held is not saved: after a load it
 * starts empty, as after nx_seq_set_kv. Shared blocks are written as ordinary rows and come
 * back private. The whole file is built in memory, checksummed and written atomically
 * (temporary file in the same directory, fsync, rename, fsync of the directory); loading reads
 * and verifies all of it (magic, version, every count against the context, the model's
 * fingerprint, the checksum) before the sequence is touched.
 *
 * Layout (little-endian, as the machine writes it; sizes in bytes):
 *   0   8  magic "NXSEQST1"
 *   8   4  version (2)
 *  12   4  cache type (NX_TYPE_F16 or NX_TYPE_F32)
 *  16  64  model fingerprint (struct kv_fingerprint)
 *  80   4  n_layer      84 4 n_head_kv      88 4 head_dim      92 4 next position (n_past)
 *  96   8  positions closed by nx_kv_seq_compact (int64: tokens seen = n_past + this)
 * 104   8  n_layer * n_head_kv token counts (int64 each)
 *   then 8 bytes: the caller's data length u, and u bytes of it (a server's token history)
 *   then per table: positions (int32 x n), pins (uint8 x n), accumulators (float x n),
 *   key rows (n x row bytes), value rows (n x row bytes)
 *   last 8: kv_hash64 of everything before
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/readfile.h"
#include "kv/kv_cache.h"
#include "kv/kvblock.h"
#include "model/context.h"
#include "model/ctx_impl.h"
#include "model/fingerprint.h"
#include "model/model.h"

#define SEQST_MAGIC "NXSEQST1"
#define SEQST_VERSION 2u
#define SEQST_HEAD 104
#define SEQST_MAX_BYTES ((size_t)1 << 36)

struct writer {
    unsigned char *p;
    size_t n, cap;
};

static void put(struct writer *w, const void *src, size_t n) {
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

/* Write buf to path atomically: PATH.tmp.PID, fsync, rename, fsync of the directory. */
static nx_status write_atomic(const char *path, const unsigned char *buf, size_t n, char *err,
                              size_t errlen) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return nx_errf(err, errlen, NX_STATUS_IO, "cannot create %s: %s", tmp, strerror(errno));
    size_t off = 0;
    while (off < n) {
        ssize_t k = nx_io_write(fd, buf + off, n - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            nx_io_close(fd);
            unlink(tmp);
            return nx_errf(err, errlen, NX_STATUS_IO, "cannot write %s: %s", tmp, strerror(e));
        }
        off += (size_t)k;
    }
    if (nx_io_fsync(fd) != 0) {
        int e = errno;
        nx_io_close(fd);
        unlink(tmp);
        return nx_errf(err, errlen, NX_STATUS_IO, "cannot sync %s: %s", tmp, strerror(e));
    }
    if (nx_io_close(fd) != 0 || nx_io_rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return nx_errf(err, errlen, NX_STATUS_IO, "cannot put %s in place: %s", path, strerror(e));
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* the rename's durability; a failure here loses nothing already there */
        close(dfd);
    }
    return NX_STATUS_OK;
}

nx_status nx_seq_state_save(nx_ctx *ctx, nx_seq_id seq, const char *path, const void *user,
                            size_t user_len, char *err, size_t errlen) {
    if (!ctx || !path || seq < 0 || seq >= ctx_n_seq(ctx))
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "no such sequence: %d", (int)seq);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    const struct nx_model *m = ctx_model(ctx);
    const int64_t nt = kv->n_tables_seq, B = kv->p.block;
    const size_t row = kv->row_bytes;
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    if (user_len && !user) return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "no user data");
    size_t total = SEQST_HEAD + (size_t)nt * 8 + 8 + user_len + 8;
    for (int64_t t = 0; t < nt; t++)
        total += (size_t)tabs[t].n_tokens * (4 + 1 + 4 + 2 * row);
    struct writer w = {nx_malloc(total), 0, total};
    if (!w.p) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (%zu bytes)", total);
    uint32_t u32 = SEQST_VERSION, type = (uint32_t)kv->p.type;
    struct kv_fingerprint fp;
    memset(&fp, 0, sizeof fp);
    kv_fingerprint_of(m, &fp);
    _Static_assert(sizeof fp == 64, "fingerprint layout");
    int32_t dims[4] = {kv->p.n_layer, kv->p.n_head_kv, kv->p.head_dim,
                       ctx_seq_n_past(ctx, seq)};
    put(&w, SEQST_MAGIC, 8);
    put(&w, &u32, 4);
    put(&w, &type, 4);
    put(&w, &fp, sizeof fp);
    put(&w, dims, sizeof dims);
    int64_t seen_base = ctx_seq_seen_base(ctx, seq);
    put(&w, &seen_base, 8);
    for (int64_t t = 0; t < nt; t++) put(&w, &tabs[t].n_tokens, 8);
    uint64_t ulen = user_len;
    put(&w, &ulen, 8);
    if (user_len) put(&w, user, user_len);
    for (int64_t t = 0; t < nt; t++) {
        const struct kv_table *tb = &tabs[t];
        for (int pass = 0; pass < 5; pass++)
            for (int64_t i = 0; i < tb->n_tokens; i++) {
                int32_t b = tb->blocks[i / B];
                int64_t o = i % B;
                float acc = kv_block_acc(kv, b) ? kv_block_acc(kv, b)[o] : 0.0f;
                switch (pass) {
                case 0: put(&w, kv_block_pos(kv, b) + o, 4); break;
                case 1: put(&w, kv_block_pin(kv, b) + o, 1); break;
                case 2: put(&w, &acc, 4); break;
                case 3: put(&w, kv_block_k(kv, b) + (size_t)o * row, row); break;
                default: put(&w, kv_block_v(kv, b) + (size_t)o * row, row); break;
                }
            }
    }
    uint64_t h = kv_hash64(w.p, w.n, 0);
    put(&w, &h, 8);
    nx_status st = write_atomic(path, w.p, w.n, err, errlen);
    nx_free(w.p);
    return st;
}

nx_status nx_seq_state_load(nx_ctx *ctx, nx_seq_id seq, const char *path, void *user,
                            size_t user_cap, size_t *user_len, char *err, size_t errlen) {
    if (!ctx || !path || seq < 0 || seq >= ctx_n_seq(ctx))
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "no such sequence: %d", (int)seq);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    const struct nx_model *m = ctx_model(ctx);
    const int64_t nt = kv->n_tables_seq;
    const size_t row = kv->row_bytes;
    size_t n = 0;
    char rerr[512];
    unsigned char *buf = (unsigned char *)nx_read_file(path, SEQST_MAX_BYTES, &n, rerr,
                                                       sizeof rerr);
    if (!buf) return nx_errf(err, errlen, NX_STATUS_IO, "%s", rerr);
    nx_status st = NX_STATUS_FORMAT;
    size_t head = SEQST_HEAD + (size_t)nt * 8;
    if (n < SEQST_HEAD + 8 || memcmp(buf, SEQST_MAGIC, 8)) {
        nx_errf(err, errlen, st, "%s: not a sequence state file (bad magic or truncated)", path);
        goto done;
    }
    uint32_t version, type;
    memcpy(&version, buf + 8, 4);
    memcpy(&type, buf + 12, 4);
    if (version != SEQST_VERSION) {
        nx_errf(err, errlen, st, "%s: version %u, this build reads %u", path, version,
                SEQST_VERSION);
        goto done;
    }
    uint64_t h;
    memcpy(&h, buf + n - 8, 8);
    if (kv_hash64(buf, n - 8, 0) != h) {
        nx_errf(err, errlen, st, "%s: checksum mismatch (corrupt or truncated file)", path);
        goto done;
    }
    struct kv_fingerprint fp;
    memcpy(&fp, buf + 16, sizeof fp);
    struct nx_err fe = {0};
    struct kv_fingerprint mine;
    memset(&mine, 0, sizeof mine);
    kv_fingerprint_of(m, &mine);
    if (kv_fingerprint_check(&fp, &mine, &fe) != NX_STATUS_OK) {
        st = NX_STATUS_INVALID_ARG;
        nx_errf(err, errlen, st, "%s: saved for another model (%s)", path, fe.msg);
        goto done;
    }
    int32_t dims[4];
    memcpy(dims, buf + 80, sizeof dims);
    if (type != (uint32_t)kv->p.type || dims[0] != kv->p.n_layer ||
        dims[1] != kv->p.n_head_kv || dims[2] != kv->p.head_dim) {
        st = NX_STATUS_INVALID_ARG;
        nx_errf(err, errlen, st,
                "%s: saved with another KV layout (type %u, %d layers, %d KV "
                "heads, head size %d)",
                path, type, dims[0], dims[1], dims[2]);
        goto done;
    }
    int64_t seen_base;
    memcpy(&seen_base, buf + 96, 8);
    uint64_t ulen = 0;
    if (n >= head + 8) memcpy(&ulen, buf + head, 8);
    if (n < head + 16 || dims[3] < 0 || dims[3] > nx_ctx_n_ctx(ctx) || seen_base < 0 ||
        seen_base > ((int64_t)1 << 48) || ulen > n - head - 16) {
        nx_errf(err, errlen, st, "%s: header out of range", path);
        goto done;
    }
    if (ulen > user_cap) {
        st = NX_STATUS_INVALID_ARG;
        nx_errf(err, errlen, st, "%s: %llu bytes of caller data, room for %zu", path,
                (unsigned long long)ulen, user_cap);
        goto done;
    }
    const unsigned char *udata = buf + head + 8;
    head += 8 + (size_t)ulen;
    int64_t *counts = nx_malloc(sizeof(int64_t) * (size_t)nt);
    if (!counts) {
        st = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        goto done;
    }
    memcpy(counts, buf + SEQST_HEAD, sizeof(int64_t) * (size_t)nt);
    size_t need = head + 8;
    int64_t most = 0;
    for (int64_t t = 0; t < nt; t++) {
        if (counts[t] < 0 || counts[t] > dims[3] || counts[t] > ((int64_t)1 << 31)) {
            nx_errf(err, errlen, st, "%s: table %lld holds %lld tokens (next position %d)", path,
                    (long long)t, (long long)counts[t], dims[3]);
            nx_free(counts);
            goto done;
        }
        need += (size_t)counts[t] * (4 + 1 + 4 + 2 * row);
        most = NX_MAX(most, counts[t]);
    }
    if (need != n) {
        nx_errf(err, errlen, st, "%s: %zu bytes, the header describes %zu", path, n, need);
        nx_free(counts);
        goto done;
    }
    /* positions strictly increasing in every table, all before the next position */
    const unsigned char *q = buf + head;
    for (int64_t t = 0; t < nt; t++) {
        const unsigned char *pos = q;
        int32_t prev = -1;
        for (int64_t i = 0; i < counts[t]; i++) {
            int32_t p;
            memcpy(&p, pos + 4 * i, 4);
            if (p <= prev || p >= dims[3]) {
                nx_errf(err, errlen, st, "%s: table %lld: positions out of order or range", path,
                        (long long)t);
                nx_free(counts);
                goto done;
            }
            prev = p;
        }
        q += (size_t)counts[t] * (4 + 1 + 4 + 2 * row);
    }
    /* the file is good: replace the sequence */
    ctx_seq_clear(ctx, seq);
    st = kv_cache_reserve_seq(kv, seq, most);
    if (st) {
        nx_errf(err, errlen, st,
                "the KV pool has no room for the %lld tokens of %s (the "
                "sequence is left empty)",
                (long long)most, path);
        nx_free(counts);
        goto done;
    }
    q = buf + head;
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    for (int64_t t = 0; t < nt; t++) {
        int64_t c = counts[t];
        const unsigned char *pos = q, *pin = q + 4 * c, *acc = pin + c, *k = acc + 4 * c,
                            *v = k + (size_t)c * row;
        for (int64_t i = 0; i < c; i++) {
            int32_t p;
            memcpy(&p, pos + 4 * i, 4);
            kv_append_raw(kv, &tabs[t], p, k + (size_t)i * row, v + (size_t)i * row,
                          pin[i] != 0);
            int32_t b = kv_slot_block(kv, &tabs[t], i);
            float *a = kv_block_acc(kv, b);
            if (a) memcpy(a + i % kv->p.block, acc + 4 * i, 4);
        }
        q += (size_t)c * (4 + 1 + 4 + 2 * row);
    }
    kv_seq_peak_update(kv, seq);
    ctx_seq_set_n_past(ctx, seq, dims[3]);
    ctx_seq_set_seen_base(ctx, seq, seen_base);
    if (ulen) memcpy(user, udata, (size_t)ulen);
    if (user_len) *user_len = (size_t)ulen;
    nx_free(counts);
    st = NX_STATUS_OK;
done:
    nx_free(buf);
    return st;
}
