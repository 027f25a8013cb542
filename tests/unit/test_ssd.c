/* test_ssd.c — the SSD tier (kv/ssd.h, kv_tier.c): the header codec, write/read round
 * trips, restart (a second open finds the files), quarantine of truncated, bit-flipped and
 * foreign files, the byte cap (oldest mtime first), the spill-queue cap, a full disk (the
 * fault hook), and the pool: an evicted block spills, and a fresh pool restores the prefix
 * from disk with the same bytes. Works in a temporary directory of its own.
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "kv/kv_pool.h"
#include "kv/ssd.h"

static char g_dir[256];
static struct be *g_be;

enum { NL = 2, KD = 8, BS = 4 };
static const size_t PAYLOAD = 2 * NL * BS * KD * 4; /* f32 */

static struct kv_ssd_config cfg(size_t max_bytes, int verify)
{
    struct kv_ssd_config c = {.dir = g_dir, .max_bytes = max_bytes, .verify = verify,
                              .spill_queue_bytes = 1 << 20, .n_layer = NL, .kv_dim = KD,
                              .block_size = BS, .kv_dtype = DT_F32, .payload_bytes = PAYLOAD};
    return c;
}

static void key_of(int i, uint8_t k[KV_SSD_KEY])
{
    char s[32];
    snprintf(s, sizeof s, "key-%d", i);
    kv_key_root(k, s, strlen(s));
}

static void *payload_of(int i)
{
    unsigned char *p = malloc(PAYLOAD);
    for (size_t j = 0; j < PAYLOAD; j++)
        p[j] = (unsigned char)(i * 31 + j * 7);
    return p;
}

static void path_of(const uint8_t ns[KV_SSD_KEY], const uint8_t key[KV_SSD_KEY], char *out,
                    size_t cap)
{
    char nh[17], kh[65];
    for (int i = 0; i < 8; i++)
        sprintf(nh + 2 * i, "%02x", ns[i]);
    for (int i = 0; i < 32; i++)
        sprintf(kh + 2 * i, "%02x", key[i]);
    snprintf(out, cap, "%s/%s/%s.kvb", g_dir, nh, kh);
}

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    CHECK(fd >= 0 && pread(fd, &c, 1, off) == 1);
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, off) == 1);
    close(fd);
}

static void test_header(void)
{
    struct kv_ssd_hdr h = {.version = KV_SSD_VERSION, .n_tok = 3, .block_size = 4, .n_layer = 2,
                           .kv_dim = 8, .kv_dtype = 1, .payload_bytes = 512};
    key_of(1, h.ns);
    key_of(2, h.key);
    uint8_t b[KV_SSD_HDR_BYTES];
    kv_ssd_hdr_encode(&h, b);
    struct kv_ssd_hdr d;
    CHECK(kv_ssd_hdr_parse(b, sizeof b, &d, NULL) == 0);
    CHECK(d.n_tok == 3 && d.payload_bytes == 512 && !memcmp(d.key, h.key, KV_SSD_KEY));
    CHECK(kv_ssd_hdr_parse(b, sizeof b - 1, &d, NULL) == CERR_FORMAT);
    int caught = 0;
    for (size_t i = 0; i < sizeof b; i++) {
        b[i] ^= 1;
        caught += kv_ssd_hdr_parse(b, sizeof b, &d, NULL) == CERR_FORMAT;
        b[i] ^= 1;
    }
    CHECK_EQ_INT(caught, KV_SSD_HDR_BYTES); /* every bit flip of byte 0 of every byte */
}

static void test_roundtrip_restart_quarantine(void)
{
    rm_rf(g_dir);
    uint8_t ns[KV_SSD_KEY], other[KV_SSD_KEY], k[6][KV_SSD_KEY];
    key_of(100, ns);
    key_of(101, other);
    for (int i = 0; i < 6; i++)
        key_of(i, k[i]);
    struct kv_ssd_config c = cfg(1 << 30, 0);
    struct kv_ssd *s = NULL;
    struct cerr e = {0};
    CHECK(kv_ssd_open(&s, &c, ns, &e) == 0);
    if (!s)
        return;
    for (int i = 0; i < 5; i++)
        CHECK(kv_ssd_put(s, k[i], BS, payload_of(i), 1) == 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    unsigned char *buf = malloc(PAYLOAD), *want = payload_of(3);
    CHECK(kv_ssd_has(s, k[3], BS) && !kv_ssd_has(s, k[3], BS - 1) && !kv_ssd_has(s, k[5], BS));
    CHECK(kv_ssd_read(s, k[3], BS, buf, NULL) == 0 && !memcmp(buf, want, PAYLOAD));
    CHECK(kv_ssd_read(s, k[5], BS, buf, NULL) == CERR_LIMIT);
    kv_ssd_close(s, 30);

    /* a foreign namespace's file under this namespace's name */
    struct kv_ssd *f = NULL;
    CHECK(kv_ssd_open(&f, &c, other, &e) == 0);
    CHECK(kv_ssd_put(f, k[5], BS, payload_of(5), 1) == 0);
    CHECK(kv_ssd_drain(f, 30) == 0);
    kv_ssd_close(f, 30);
    char src[512], dst[512];
    path_of(other, k[5], src, sizeof src);
    path_of(ns, k[5], dst, sizeof dst);
    CHECK(rename(src, dst) == 0);
    /* damage: 0 truncated, 1 header bit flip, 2 payload bit flip (verify off, then on) */
    char p[512];
    path_of(ns, k[0], p, sizeof p);
    CHECK(truncate(p, KV_SSD_HDR_BYTES + PAYLOAD / 2) == 0);
    path_of(ns, k[1], p, sizeof p);
    flip_byte(p, 90);
    path_of(ns, k[2], p, sizeof p);
    flip_byte(p, KV_SSD_HDR_BYTES + 17);
    /* a stray temporary file (a crash mid-write) is deleted, never indexed */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.123.tmp", p);
    int fd = open(tmp, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);

    CHECK(kv_ssd_open(&s, &c, ns, &e) == 0);
    struct kv_ssd_stats st;
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.entries_at_start, 6);
    CHECK(access(tmp, F_OK) != 0);
    CHECK(kv_ssd_read(s, k[0], BS, buf, NULL) == CERR_FORMAT);
    CHECK(kv_ssd_read(s, k[1], BS, buf, NULL) == CERR_FORMAT);
    CHECK(kv_ssd_read(s, k[5], BS, buf, NULL) == CERR_FORMAT);
    /* without verify the payload flip goes unseen (that is what verify is for) */
    CHECK(kv_ssd_read(s, k[2], BS, buf, NULL) == 0);
    CHECK(kv_ssd_read(s, k[4], BS, buf, NULL) == 0);
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.quarantined, 3);
    CHECK_EQ_INT(st.entries, 3);
    CHECK(!kv_ssd_has(s, k[0], BS));
    kv_ssd_close(s, 30);
    char q[512];
    snprintf(q, sizeof q, "%s/quarantine", g_dir);
    CHECK_EQ_INT(count_files(q), 3);

    c.verify = 1;
    CHECK(kv_ssd_open(&s, &c, ns, &e) == 0);
    CHECK(kv_ssd_read(s, k[2], BS, buf, NULL) == CERR_FORMAT);
    CHECK(kv_ssd_read(s, k[3], BS, buf, NULL) == 0 && !memcmp(buf, want, PAYLOAD));
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.quarantined, 1);
    kv_ssd_close(s, 30);
    free(buf);
    free(want);
}

static void test_cap_and_queue(void)
{
    rm_rf(g_dir);
    uint8_t ns[KV_SSD_KEY], k[8][KV_SSD_KEY];
    key_of(200, ns);
    for (int i = 0; i < 8; i++)
        key_of(i, k[i]);
    size_t file = KV_SSD_HDR_BYTES + PAYLOAD;
    struct kv_ssd_config c = cfg(3 * file, 0);
    struct kv_ssd *s = NULL;
    CHECK(kv_ssd_open(&s, &c, ns, NULL) == 0);
    for (int i = 0; i < 5; i++) {
        CHECK(kv_ssd_put(s, k[i], BS, payload_of(i), 1) == 0);
        CHECK(kv_ssd_drain(s, 30) == 0);
    }
    struct kv_ssd_stats st;
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.entries, 3);
    CHECK_EQ_INT(st.evictions, 2);
    CHECK(!kv_ssd_has(s, k[0], BS) && !kv_ssd_has(s, k[1], BS) && kv_ssd_has(s, k[4], BS));
    /* a hit refreshes the mtime order: 2 is read, so 3 is the next to go */
    unsigned char *buf = malloc(PAYLOAD);
    CHECK(kv_ssd_read(s, k[2], BS, buf, NULL) == 0);
    CHECK(kv_ssd_put(s, k[5], BS, payload_of(5), 1) == 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    CHECK(kv_ssd_has(s, k[2], BS) && !kv_ssd_has(s, k[3], BS));
    kv_ssd_close(s, 30);
    free(buf);

    /* the spill queue: a busy engine holds the writer; 2 payloads fit */
    rm_rf(g_dir);
    c = cfg(1 << 30, 0);
    c.spill_queue_bytes = 2 * PAYLOAD;
    CHECK(kv_ssd_open(&s, &c, ns, NULL) == 0);
    kv_ssd_set_busy(s, 1);
    CHECK(kv_ssd_put(s, k[0], BS, payload_of(0), 1) == 0);
    CHECK(kv_ssd_put(s, k[1], BS, payload_of(1), 1) == 0);
    CHECK(kv_ssd_put(s, k[2], BS, payload_of(2), 0) == 1); /* a snapshot waits */
    CHECK(kv_ssd_put(s, k[3], BS, payload_of(3), 1) == 0); /* a spill drops the oldest */
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.pending_spills, 2);
    CHECK_EQ_INT(st.dropped_spills, 1);
    kv_ssd_set_busy(s, 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    CHECK(!kv_ssd_has(s, k[0], BS) && kv_ssd_has(s, k[1], BS) && kv_ssd_has(s, k[3], BS));
    kv_ssd_close(s, 30);

    /* a full disk (the fault hook): writes fail, are counted, nothing is indexed */
    setenv("CINFER_SSD_FAULT", "enospc", 1);
    CHECK(kv_ssd_open(&s, &c, ns, NULL) == 0);
    unsetenv("CINFER_SSD_FAULT");
    CHECK(kv_ssd_put(s, k[6], BS, payload_of(6), 1) == 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.write_errors, 1);
    CHECK_EQ_INT(st.dropped_spills, 1);
    CHECK(!kv_ssd_has(s, k[6], BS));
    kv_ssd_close(s, 30);

    /* an unwritable directory is a clear error at open */
    struct cerr e = {0};
    struct kv_ssd_config bad = cfg(1 << 30, 0);
    bad.dir = "/proc/cinfer-no-such-dir";
    CHECK(kv_ssd_open(&s, &bad, ns, &e) == CERR_IO);
    CHECK(strstr(e.msg, "/proc/cinfer-no-such-dir") != NULL);
}

/* The pool: blocks evicted from RAM spill; a fresh pool with the same tier restores the
 * prefix from disk, bit for bit. */
static void test_pool_tier(void)
{
    rm_rf(g_dir);
    uint8_t root[KV_KEY_BYTES];
    kv_key_root(root, "pool", 4);
    struct kv_ssd_config c = cfg(1 << 30, 1);
    struct kv_ssd *s = NULL;
    CHECK(kv_ssd_open(&s, &c, root, NULL) == 0);
    struct kv_pool *p = NULL;
    CHECK(kv_pool_new(&p, g_be, NL, KD, BS, 8, DT_F32, 8, NULL) == 0);
    CHECK(kv_pool_attach_ssd(p, s, NULL) == 0);
    int32_t ids[15];
    for (int i = 0; i < 15; i++)
        ids[i] = 5 + i * 2;
    struct kv_seq a;
    kv_seq_init(&a);
    CHECK(kv_seq_reserve(p, &a, 14, NULL) == 0);
    /* distinct bytes in every position of every layer */
    size_t bb = (size_t)BS * KD * 4;
    for (int l = 0; l < NL; l++)
        for (int b = 0; b < a.n_blocks; b++) {
            float v[BS * KD];
            for (int j = 0; j < BS * KD; j++)
                v[j] = (float)(l * 1000 + b * 100 + j);
            p->be->ops->upload(p->be, (char *)p->k[l] + (size_t)a.blocks[b] * bb, v, bb, NULL);
            for (int j = 0; j < BS * KD; j++)
                v[j] = -v[j];
            p->be->ops->upload(p->be, (char *)p->v[l] + (size_t)a.blocks[b] * bb, v, bb, NULL);
        }
    kv_cache_commit_tail(p, &a, root, ids, 14); /* 3 full blocks + a partial of 2 */
    kv_seq_release(p, &a);
    CHECK_EQ_INT(kv_tier_snapshot(p, 100, 0), 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    struct kv_ssd_stats st;
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.entries, 4);
    /* demotion frees the RAM blocks (all unused for >= 0 s) */
    CHECK_EQ_INT(kv_tier_demote(p, 1e18, 0, 100), 4);
    CHECK_EQ_INT(p->cs.entries, 0);
    kv_pool_free(p);

    struct kv_pool *q = NULL;
    CHECK(kv_pool_new(&q, g_be, NL, KD, BS, 8, DT_F32, 8, NULL) == 0);
    CHECK(kv_pool_attach_ssd(q, s, NULL) == 0);
    struct kv_seq b;
    kv_seq_init(&b);
    CHECK_EQ_INT(kv_cache_lookup(q, &b, root, ids, 15, NULL), 14);
    int bad = 0;
    for (int l = 0; l < NL; l++)
        for (int blk = 0; blk < 4 && blk < b.n_blocks; blk++) {
            float v[BS * KD], w[BS * KD];
            q->be->ops->download(q->be, v, (char *)q->k[l] + (size_t)b.blocks[blk] * bb, bb, NULL);
            q->be->ops->download(q->be, w, (char *)q->v[l] + (size_t)b.blocks[blk] * bb, bb, NULL);
            int n = blk < 3 ? BS * KD : 2 * KD;
            for (int j = 0; j < n; j++)
                bad += v[j] != (float)(l * 1000 + blk * 100 + j) ||
                       w[j] != -(float)(l * 1000 + blk * 100 + j);
        }
    CHECK_EQ_INT(bad, 0);
    const struct kv_seq *seqs[1] = {&b};
    CHECK(kv_pool_check(q, seqs, 1, NULL) == 0);
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.restored_tokens, 14);
    /* a pool too small to take them all: the hit stops, nothing breaks */
    kv_seq_release(q, &b);
    kv_pool_free(q);
    struct kv_pool *t = NULL;
    CHECK(kv_pool_new(&t, g_be, NL, KD, BS, 2, DT_F32, 2, NULL) == 0);
    CHECK(kv_pool_attach_ssd(t, s, NULL) == 0);
    struct kv_seq c2;
    kv_seq_init(&c2);
    CHECK_EQ_INT(kv_cache_lookup(t, &c2, root, ids, 15, NULL), 8);
    const struct kv_seq *s2[1] = {&c2};
    CHECK(kv_pool_check(t, s2, 1, NULL) == 0);
    kv_seq_release(t, &c2);
    kv_pool_free(t);
    kv_ssd_close(s, 30);
}

/* Fills every block of a (pool p) with values that name the layer, the block's index in the
 * sequence and the position: tag separates pools. */
static void fill_seq(struct kv_pool *p, const struct kv_seq *a, float tag)
{
    size_t bb = (size_t)BS * KD * 4;
    for (int l = 0; l < NL; l++)
        for (int b = 0; b < a->n_blocks; b++) {
            if (a->blocks[b] < 0)
                continue;
            float v[BS * KD];
            for (int j = 0; j < BS * KD; j++)
                v[j] = tag + (float)(l * 1000 + b * 100 + j);
            p->be->ops->upload(p->be, (char *)p->k[l] + (size_t)a->blocks[b] * bb, v, bb, NULL);
            for (int j = 0; j < BS * KD; j++)
                v[j] = -v[j];
            p->be->ops->upload(p->be, (char *)p->v[l] + (size_t)a->blocks[b] * bb, v, bb, NULL);
        }
}

static int seq_bad(struct kv_pool *p, const struct kv_seq *a, float tag, int from)
{
    size_t bb = (size_t)BS * KD * 4;
    int bad = 0;
    for (int l = 0; l < NL; l++)
        for (int b = from; b < a->n_blocks; b++) {
            float v[BS * KD], w[BS * KD];
            if (a->blocks[b] < 0)
                return 1000;
            p->be->ops->download(p->be, v, (char *)p->k[l] + (size_t)a->blocks[b] * bb, bb, NULL);
            p->be->ops->download(p->be, w, (char *)p->v[l] + (size_t)a->blocks[b] * bb, bb, NULL);
            for (int j = 0; j < BS * KD; j++)
                bad += v[j] != tag + (float)(l * 1000 + b * 100 + j) ||
                       w[j] != -(tag + (float)(l * 1000 + b * 100 + j));
        }
    return bad;
}

static void truncate_all(const uint8_t ns[KV_SSD_KEY])
{
    char dir[512], nh[17];
    for (int i = 0; i < 8; i++)
        sprintf(nh + 2 * i, "%02x", ns[i]);
    snprintf(dir, sizeof dir, "%s/%s", g_dir, nh);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char f[1024];
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".kvb") && truncate(f, 100) != 0)
            fprintf(stderr, "cannot truncate %s\n", f);
    }
    if (d)
        closedir(d);
}

/* A model whose sliding-window layers have their own pool (Gemma 3): each pool has its own
 * tier (namespace); after a restart the lookup takes the global chain and the window's
 * sliding blocks from the disk, bit-exact; with the sliding files damaged it is a miss (never
 * a hit without the window), and both pools stay consistent. */
static void test_swa_pools_restore(void)
{
    rm_rf(g_dir);
    enum { WIN = 8, N = 24 };
    uint8_t root[KV_KEY_BYTES], root_swa[KV_KEY_BYTES];
    kv_key_root(root, "glob", 4);
    kv_key_root(root_swa, "swa", 3);
    struct kv_ssd_config c = cfg(1 << 30, 1);
    struct kv_ssd *sg = NULL, *ss = NULL;
    CHECK(kv_ssd_open(&sg, &c, root, NULL) == 0);
    CHECK(kv_ssd_open(&ss, &c, root_swa, NULL) == 0);
    int32_t ids[N + 1];
    for (int i = 0; i <= N; i++)
        ids[i] = 3 + i * 5;
    struct kv_pool *pg = NULL, *ps = NULL;
    CHECK(kv_pool_new(&pg, g_be, NL, KD, BS, 16, DT_F32, 16, NULL) == 0);
    CHECK(kv_pool_new(&ps, g_be, NL, KD, BS, 16, DT_F32, 16, NULL) == 0);
    CHECK(kv_pool_attach_ssd(pg, sg, NULL) == 0 && kv_pool_attach_ssd(ps, ss, NULL) == 0);
    struct kv_seq a, w;
    kv_seq_init(&a);
    kv_seq_init(&w);
    CHECK(kv_seq_reserve(pg, &a, N, NULL) == 0 && kv_seq_reserve(ps, &w, N, NULL) == 0);
    fill_seq(pg, &a, 0.0f);
    fill_seq(ps, &w, 0.5f);
    kv_cache_commit(pg, &a, root, ids, N);
    kv_cache_commit(ps, &w, root, ids, N);
    kv_seq_drop_before(ps, &w, N - WIN + 1); /* the window lets go of blocks 0..3 */
    kv_seq_release(pg, &a);
    kv_seq_release(ps, &w);
    CHECK_EQ_INT(kv_tier_snapshot(pg, 100, 0), 0);
    CHECK_EQ_INT(kv_tier_snapshot(ps, 100, 0), 0);
    CHECK(kv_ssd_drain(sg, 30) == 0 && kv_ssd_drain(ss, 30) == 0);
    kv_pool_free(pg);
    kv_pool_free(ps);

    for (int round = 0; round < 2; round++) {
        CHECK(kv_pool_new(&pg, g_be, NL, KD, BS, 16, DT_F32, 16, NULL) == 0);
        CHECK(kv_pool_new(&ps, g_be, NL, KD, BS, 16, DT_F32, 16, NULL) == 0);
        CHECK(kv_pool_attach_ssd(pg, sg, NULL) == 0 && kv_pool_attach_ssd(ps, ss, NULL) == 0);
        kv_seq_init(&a);
        kv_seq_init(&w);
        int hit = kv_cache_lookup_swa(pg, &a, ps, &w, root, ids, N + 1, WIN, NULL);
        if (round == 0) {
            CHECK_EQ_INT(hit, N);
            CHECK_EQ_INT(seq_bad(pg, &a, 0.0f, 0), 0);
            CHECK_EQ_INT(seq_bad(ps, &w, 0.5f, (N - WIN) / BS), 0); /* the window's blocks */
            CHECK(w.n_blocks == N / BS && w.blocks[0] < 0);
        } else {
            CHECK_EQ_INT(hit, 0); /* the sliding files failed their checks: a miss */
            struct kv_ssd_stats st;
            kv_ssd_stats(ss, &st);
            CHECK(st.quarantined >= 1);
        }
        const struct kv_seq *g1[1] = {&a}, *s1[1] = {&w};
        CHECK(kv_pool_check(pg, g1, 1, NULL) == 0);
        CHECK(kv_pool_check(ps, s1, 1, NULL) == 0);
        kv_seq_release(pg, &a);
        kv_seq_release(ps, &w);
        kv_pool_free(pg);
        kv_pool_free(ps);
        if (round == 0)
            truncate_all(root_swa);
    }
    kv_ssd_close(sg, 30);
    kv_ssd_close(ss, 30);
}

/* --generation-checkpoint: a running sequence's registered blocks not on disk are queued as
 * urgent once they hold min_tokens positions, and the writer writes them while the engine is
 * busy (a plain spill waits for idle). */
static void test_checkpoint_urgent(void)
{
    rm_rf(g_dir);
    uint8_t root[KV_KEY_BYTES];
    kv_key_root(root, "ckpt", 4);
    struct kv_ssd_config c = cfg(1 << 30, 0);
    struct kv_ssd *s = NULL;
    CHECK(kv_ssd_open(&s, &c, root, NULL) == 0);
    struct kv_pool *p = NULL;
    CHECK(kv_pool_new(&p, g_be, NL, KD, BS, 16, DT_F32, 16, NULL) == 0);
    CHECK(kv_pool_attach_ssd(p, s, NULL) == 0);
    kv_ssd_set_busy(s, 1); /* the engine is running steps */
    int32_t ids[21];
    for (int i = 0; i < 21; i++)
        ids[i] = 7 + i;
    struct kv_seq a;
    kv_seq_init(&a);
    CHECK(kv_seq_reserve(p, &a, 20, NULL) == 0);
    fill_seq(p, &a, 0.0f);
    kv_cache_commit(p, &a, root, ids, 12); /* 3 blocks: under the 16 of a checkpoint */
    CHECK_EQ_INT(kv_tier_checkpoint(p, &a, 16), 0);
    kv_cache_commit(p, &a, root, ids, 20); /* 5 blocks */
    CHECK_EQ_INT(kv_tier_checkpoint(p, &a, 16), 5);
    CHECK_EQ_INT(kv_tier_checkpoint(p, &a, 16), 0); /* all queued already */
    struct kv_ssd_stats st;
    for (int t = 0; t < 3000; t++) { /* written while busy: no drain, no idle */
        kv_ssd_stats(s, &st);
        if (st.writes == 5)
            break;
        usleep(10000);
    }
    CHECK_EQ_INT(st.writes, 5);
    CHECK_EQ_INT(st.checkpoint_blocks, 5);
    /* a plain spill still waits while busy */
    struct kv_seq b;
    kv_seq_init(&b);
    CHECK(kv_seq_reserve(p, &b, 8, NULL) == 0);
    int32_t other[9] = {90, 91, 92, 93, 94, 95, 96, 97, 98};
    kv_cache_commit(p, &b, root, other, 8);
    CHECK_EQ_INT(kv_tier_snapshot(p, 100, 0), 0);
    usleep(50000);
    kv_ssd_stats(s, &st);
    CHECK_EQ_INT(st.writes, 5);
    CHECK_EQ_INT(st.pending_spills, 2);
    kv_ssd_set_busy(s, 0);
    CHECK(kv_ssd_drain(s, 30) == 0);
    kv_seq_release(p, &a);
    kv_seq_release(p, &b);
    kv_pool_free(p);
    kv_ssd_close(s, 30);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/cinfer-test-ssd-%d", (int)getpid());
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 1};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_header);
    RUN(test_roundtrip_restart_quarantine);
    RUN(test_cap_and_queue);
    RUN(test_pool_tier);
    RUN(test_swa_pools_restore);
    RUN(test_checkpoint_urgent);
    rm_rf(g_dir);
    be_free(g_be);
    return harness_done();
}
