/* ssd.c — see ssd.h: the index of this namespace's block files, the writer thread and its
 * queue, reads with checks and quarantine, and the byte cap.
 *
 * The index maps a key to an entry: PENDING (queued for the writer, not readable yet) or
 * ON_DISK (a complete file). On-disk entries sit in a list ordered by mtime (oldest first;
 * a hit moves an entry to the end and touches the file), which the cap evicts from the
 * front. One mutex guards the index, the queue and the counters; file I/O runs outside it.
 */
#include "kv/ssd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

enum { ST_FREE = 0, ST_PENDING = 1, ST_DISK = 2 };
enum { FAULT_ENOSPC = 1, FAULT_STALL = 2 };

struct ent {
    uint8_t key[KV_SSD_KEY];
    int32_t n_tok;
    int32_t state;
    int64_t size;        /* file bytes (ON_DISK) */
    int32_t prev, next;  /* mtime list (ON_DISK) or free list (next) */
    int32_t hnext;       /* hash chain */
    double mtime;        /* for the start-up sort */
};

struct item {
    struct item *next;
    uint8_t key[KV_SSD_KEY];
    int n_tok;
    int urgent; /* a generation checkpoint: written even while the engine is busy */
    void *buf;
};

struct kv_ssd {
    struct kv_ssd_config c;
    char dir[1824], nsdir[1856], qdir[1856];
    uint8_t ns[KV_SSD_KEY];
    int fault;              /* CINFER_SSD_FAULT (tests) */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the writer waits for work / not busy */
    pthread_cond_t idle_cv; /* drains wait for an empty queue */
    /* under mu */
    int quit, busy, draining, writing;
    int urgent; /* urgent items pending: the writer works while busy until they are written */
    struct item *qhead, *qtail;
    struct ent *ents;
    int n_ents, cap_ents, free_head;
    int32_t *buckets;
    uint32_t bmask;
    int32_t lru_head, lru_tail;
    struct kv_ssd_stats st;
    int warned_write;
    void (*gone)(void *ud, const uint8_t key[KV_SSD_KEY]); /* see kv_ssd_set_gone */
    void *gone_ud;
};

/* ---- index ------------------------------------------------------------------------------ */

static uint32_t bucket_of(const struct kv_ssd *s, const uint8_t *key)
{
    uint32_t h;
    memcpy(&h, key, sizeof h);
    return h & s->bmask;
}

static int32_t find(const struct kv_ssd *s, const uint8_t *key)
{
    for (int32_t i = s->buckets[bucket_of(s, key)]; i >= 0; i = s->ents[i].hnext)
        if (!memcmp(s->ents[i].key, key, KV_SSD_KEY))
            return i;
    return -1;
}

static int grow(struct kv_ssd *s)
{
    int cap = s->cap_ents ? 2 * s->cap_ents : 1024;
    struct ent *ne = realloc(s->ents, (size_t)cap * sizeof *ne);
    if (!ne)
        return -1;
    s->ents = ne;
    for (int i = cap - 1; i >= s->cap_ents; i--) {
        ne[i].state = ST_FREE;
        ne[i].next = s->free_head;
        s->free_head = i;
    }
    s->cap_ents = cap;
    /* rehash into twice as many buckets */
    uint32_t nb = 2u * (uint32_t)cap;
    int32_t *b = malloc((size_t)nb * sizeof *b);
    if (!b)
        return -1;
    free(s->buckets);
    s->buckets = b;
    s->bmask = nb - 1;
    memset(b, 0xff, (size_t)nb * sizeof *b);
    for (int i = 0; i < cap; i++)
        if (ne[i].state != ST_FREE) {
            uint32_t k = bucket_of(s, ne[i].key);
            ne[i].hnext = b[k];
            b[k] = i;
        }
    return 0;
}

static int32_t ent_add(struct kv_ssd *s, const uint8_t *key, int n_tok, int state)
{
    if (s->free_head < 0 && grow(s))
        return -1;
    int32_t i = s->free_head;
    struct ent *x = &s->ents[i];
    s->free_head = x->next;
    memcpy(x->key, key, KV_SSD_KEY);
    x->n_tok = n_tok;
    x->state = state;
    x->size = 0;
    x->prev = x->next = -1;
    uint32_t k = bucket_of(s, key);
    x->hnext = s->buckets[k];
    s->buckets[k] = i;
    s->n_ents++;
    return i;
}

static void lru_unlink(struct kv_ssd *s, int32_t i)
{
    struct ent *x = &s->ents[i];
    if (x->prev >= 0)
        s->ents[x->prev].next = x->next;
    else
        s->lru_head = x->next;
    if (x->next >= 0)
        s->ents[x->next].prev = x->prev;
    else
        s->lru_tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_append(struct kv_ssd *s, int32_t i)
{
    struct ent *x = &s->ents[i];
    x->prev = s->lru_tail;
    x->next = -1;
    if (s->lru_tail >= 0)
        s->ents[s->lru_tail].next = i;
    else
        s->lru_head = i;
    s->lru_tail = i;
}

/* Removes entry i from the index (and the mtime list when on disk). */
static void ent_del(struct kv_ssd *s, int32_t i)
{
    struct ent *x = &s->ents[i];
    if (s->gone)
        s->gone(s->gone_ud, x->key);
    if (x->state == ST_DISK) {
        lru_unlink(s, i);
        s->st.entries--;
        s->st.bytes -= x->size;
    }
    int32_t *pp = &s->buckets[bucket_of(s, x->key)];
    while (*pp != i)
        pp = &s->ents[*pp].hnext;
    *pp = x->hnext;
    x->state = ST_FREE;
    x->next = s->free_head;
    s->free_head = i;
    s->n_ents--;
}

static void hex(const uint8_t *b, int n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

static int unhex(const char *s, uint8_t *out, int n)
{
    for (int i = 0; i < 2 * n; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        if (i & 1)
            out[i / 2] = (uint8_t)(out[i / 2] << 4 | v);
        else
            out[i / 2] = (uint8_t)v;
    }
    return 0;
}

static void path_of(const struct kv_ssd *s, const uint8_t *key, char *out, size_t cap)
{
    char kh[2 * KV_SSD_KEY + 1];
    hex(key, KV_SSD_KEY, kh);
    snprintf(out, cap, "%s/%s.kvb", s->nsdir, kh);
}

/* Deletes the oldest files until the bytes fit the cap. Called with mu held. */
static void evict_to_cap(struct kv_ssd *s)
{
    while (s->st.bytes > (long long)s->c.max_bytes && s->lru_head >= 0) {
        int32_t i = s->lru_head;
        char p[2048];
        path_of(s, s->ents[i].key, p, sizeof p);
        unlink(p);
        ent_del(s, i);
        s->st.evictions++;
    }
}

/* ---- quarantine ----------------------------------------------------------------------- */

/* Moves a file that failed a check out of the namespace folder. Called without mu. */
static void quarantine(struct kv_ssd *s, const char *path, const char *why)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char q[4000];
    snprintf(q, sizeof q, "%s/%ld-%s", s->qdir, (long)time(NULL), base);
    if (rename(path, q))
        unlink(path);
    log_warn("ssd cache: %s: %s; moved to %s", path, why, s->qdir);
    pthread_mutex_lock(&s->mu);
    s->st.quarantined++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- reads ----------------------------------------------------------------------------- */

int kv_ssd_has(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok)
{
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, key);
    int ok = i >= 0 && s->ents[i].state == ST_DISK && s->ents[i].n_tok == n_tok;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int kv_ssd_known(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY])
{
    pthread_mutex_lock(&s->mu);
    int ok = find(s, key) >= 0;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void drop_entry_for(struct kv_ssd *s, const uint8_t *key)
{
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, key);
    if (i >= 0 && s->ents[i].state == ST_DISK)
        ent_del(s, i);
    pthread_mutex_unlock(&s->mu);
}

int kv_ssd_read(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok, void *dst,
                struct cerr *e)
{
    char p[2048];
    path_of(s, key, p, sizeof p);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        drop_entry_for(s, key); /* evicted or deleted under us: a miss */
        pthread_mutex_lock(&s->mu);
        s->st.misses++;
        pthread_mutex_unlock(&s->mu);
        return cerr_set(e, CERR_LIMIT, "not on disk");
    }
    uint8_t hb[KV_SSD_HDR_BYTES];
    struct kv_ssd_hdr h;
    struct cerr pe = {0};
    ssize_t got = pread(fd, hb, sizeof hb, 0);
    int rc = kv_ssd_hdr_parse(hb, got > 0 ? (size_t)got : 0, &h, &pe);
    const char *why = rc ? pe.msg : NULL;
    if (!rc && memcmp(h.ns, s->ns, KV_SSD_KEY))
        why = "written for another model, KV scheme or tokenizer (namespace mismatch)";
    else if (!rc && memcmp(h.key, key, KV_SSD_KEY))
        why = "its key does not match its name";
    else if (!rc && ((int)h.n_tok != n_tok || (int)h.block_size != s->c.block_size ||
                     (int)h.n_layer != s->c.n_layer || (int)h.kv_dim != s->c.kv_dim ||
                     (int)h.kv_dtype != s->c.kv_dtype || h.payload_bytes != s->c.payload_bytes))
        why = "its KV geometry does not match this engine";
    if (!why) {
        struct stat st;
        if (fstat(fd, &st) || (uint64_t)st.st_size != KV_SSD_HDR_BYTES + h.payload_bytes)
            why = "truncated or padded (size does not match the header)";
    }
    if (!why) {
        size_t n = s->c.payload_bytes, off = 0;
        while (off < n) {
            ssize_t r = pread(fd, (char *)dst + off, n - off, (off_t)(KV_SSD_HDR_BYTES + off));
            if (r <= 0)
                break;
            off += (size_t)r;
        }
        if (off != n)
            why = "short read";
        else if (s->c.verify) {
            uint8_t ph[KV_SSD_KEY];
            unsigned int len = KV_SSD_KEY;
            if (!EVP_Digest(dst, n, ph, &len, EVP_sha256(), NULL) ||
                memcmp(ph, h.payload_hash, KV_SSD_KEY))
                why = "payload hash mismatch (--ssd-cache-verify)";
        }
    }
    close(fd);
    if (why) {
        drop_entry_for(s, key);
        quarantine(s, p, why);
        pthread_mutex_lock(&s->mu);
        s->st.misses++;
        pthread_mutex_unlock(&s->mu);
        return cerr_set(e, CERR_FORMAT, "%s", why);
    }
    utimensat(AT_FDCWD, p, NULL, 0);
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, key);
    if (i >= 0 && s->ents[i].state == ST_DISK) {
        lru_unlink(s, i);
        lru_append(s, i);
    }
    s->st.hits++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- writes ---------------------------------------------------------------------------- */

static void item_free(struct item *it)
{
    free(it->buf);
    free(it);
}

/* Drops the oldest queued item (mu held). */
static void drop_oldest(struct kv_ssd *s)
{
    struct item *it = s->qhead;
    s->qhead = it->next;
    if (!s->qhead)
        s->qtail = NULL;
    s->urgent -= it->urgent;
    int32_t i = find(s, it->key);
    if (i >= 0 && s->ents[i].state == ST_PENDING)
        ent_del(s, i);
    s->st.pending_spills--;
    s->st.pending_spill_bytes -= (long long)s->c.payload_bytes;
    s->st.dropped_spills++;
    item_free(it);
}

int kv_ssd_put(struct kv_ssd *s, const uint8_t key[KV_SSD_KEY], int n_tok, void *payload,
               int flags)
{
    int may_drop = flags & KV_SSD_MAY_DROP, urgent = !!(flags & KV_SSD_URGENT);
    struct item *it = malloc(sizeof *it);
    if (!it) {
        free(payload);
        return 1;
    }
    pthread_mutex_lock(&s->mu);
    int32_t known = find(s, key);
    if (known >= 0) {
        if (urgent && s->ents[known].state == ST_PENDING) /* queued by a sweep: urgent now */
            for (struct item *q = s->qhead; q; q = q->next)
                if (!q->urgent && !memcmp(q->key, key, KV_SSD_KEY)) {
                    q->urgent = 1;
                    s->urgent++;
                    s->st.checkpoint_blocks++;
                    pthread_cond_signal(&s->cv);
                    break;
                }
        pthread_mutex_unlock(&s->mu);
        free(it);
        free(payload);
        return 0;
    }
    long long pb = (long long)s->c.payload_bytes;
    while (may_drop && s->qhead && s->st.pending_spill_bytes + pb > (long long)s->c.spill_queue_bytes)
        drop_oldest(s);
    if (s->st.pending_spill_bytes + pb > (long long)s->c.spill_queue_bytes &&
        (!may_drop || s->st.pending_spill_bytes > 0)) {
        if (may_drop)
            s->st.dropped_spills++;
        pthread_mutex_unlock(&s->mu);
        free(it);
        free(payload);
        return 1;
    }
    if (ent_add(s, key, n_tok, ST_PENDING) < 0) {
        pthread_mutex_unlock(&s->mu);
        free(it);
        free(payload);
        return 1;
    }
    memcpy(it->key, key, KV_SSD_KEY);
    it->n_tok = n_tok;
    it->buf = payload;
    it->next = NULL;
    it->urgent = urgent;
    s->urgent += urgent;
    s->st.checkpoint_blocks += urgent;
    if (s->qtail)
        s->qtail->next = it;
    else
        s->qhead = it;
    s->qtail = it;
    s->st.pending_spills++;
    s->st.pending_spill_bytes += pb;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Writes one block file atomically: temporary file, fsync, rename. Returns 0 or errno. */
static int write_file(struct kv_ssd *s, const struct item *it, int64_t *size)
{
    if (s->fault == FAULT_ENOSPC)
        return ENOSPC;
    struct kv_ssd_hdr h = {.version = KV_SSD_VERSION, .n_tok = (uint32_t)it->n_tok,
                           .block_size = (uint32_t)s->c.block_size,
                           .n_layer = (uint32_t)s->c.n_layer, .kv_dim = (uint32_t)s->c.kv_dim,
                           .kv_dtype = (uint32_t)s->c.kv_dtype,
                           .payload_bytes = s->c.payload_bytes};
    memcpy(h.ns, s->ns, KV_SSD_KEY);
    memcpy(h.key, it->key, KV_SSD_KEY);
    unsigned int len = KV_SSD_KEY;
    EVP_Digest(it->buf, s->c.payload_bytes, h.payload_hash, &len, EVP_sha256(), NULL);
    uint8_t hb[KV_SSD_HDR_BYTES];
    kv_ssd_hdr_encode(&h, hb);
    char p[2048], tmp[2100];
    path_of(s, it->key, p, sizeof p);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", p, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    int err = 0;
    const char *parts[2] = {(const char *)hb, it->buf};
    size_t lens[2] = {sizeof hb, s->c.payload_bytes};
    if (s->fault == FAULT_STALL)
        lens[1] /= 2; /* then hang before the rename: a crash lands mid-write */
    for (int k = 0; k < 2 && !err; k++)
        for (size_t off = 0; off < lens[k] && !err;) {
            ssize_t w = write(fd, parts[k] + off, lens[k] - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                err = w < 0 ? errno : ENOSPC;
            else
                off += (size_t)w;
        }
    if (!err && fsync(fd))
        err = errno;
    while (s->fault == FAULT_STALL && !__atomic_load_n(&s->quit, __ATOMIC_RELAXED))
        usleep(10000);
    if (s->fault == FAULT_STALL)
        err = EIO;
    if (close(fd) && !err)
        err = errno;
    if (!err && rename(tmp, p))
        err = errno;
    if (err)
        unlink(tmp);
    *size = (int64_t)(sizeof hb + s->c.payload_bytes);
    return err;
}

static void *writer_main(void *arg)
{
    struct kv_ssd *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && (!s->qhead || (s->busy && !s->draining && !s->urgent)))
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->qhead && s->quit)
            break;
        if (!s->qhead)
            continue;
        if (s->quit && !s->draining)
            break;
        struct item *it = s->qhead;
        s->qhead = it->next;
        if (!s->qhead)
            s->qtail = NULL;
        s->writing = 1;
        pthread_mutex_unlock(&s->mu);
        int64_t size = 0;
        int err = write_file(s, it, &size);
        pthread_mutex_lock(&s->mu);
        s->writing = 0;
        s->urgent -= it->urgent;
        s->st.pending_spills--;
        s->st.pending_spill_bytes -= (long long)s->c.payload_bytes;
        int32_t i = find(s, it->key);
        if (err) {
            if (i >= 0 && s->ents[i].state == ST_PENDING)
                ent_del(s, i);
            s->st.write_errors++;
            s->st.dropped_spills++;
            if (!s->warned_write) {
                s->warned_write = 1;
                log_warn("ssd cache: writing to %s failed (%s); dropping spills and serving on "
                         "(warned once)",
                         s->nsdir, strerror(err));
            }
        } else if (i >= 0) {
            s->ents[i].state = ST_DISK;
            s->ents[i].size = size;
            lru_append(s, i);
            s->st.entries++;
            s->st.bytes += size;
            s->st.writes++;
            evict_to_cap(s);
        }
        item_free(it);
        if (!s->qhead)
            pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void kv_ssd_set_gone(struct kv_ssd *s, void (*gone)(void *ud, const uint8_t key[KV_SSD_KEY]),
                     void *ud)
{
    pthread_mutex_lock(&s->mu);
    s->gone = gone;
    s->gone_ud = ud;
    pthread_mutex_unlock(&s->mu);
}

void kv_ssd_set_busy(struct kv_ssd *s, int busy)
{
    pthread_mutex_lock(&s->mu);
    if (s->busy != busy) {
        s->busy = busy;
        if (!busy)
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

int kv_ssd_drain(struct kv_ssd *s, double timeout_s)
{
    double t0 = clock_now_s();
    pthread_mutex_lock(&s->mu);
    s->draining++;
    pthread_cond_signal(&s->cv);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    while ((s->qhead || s->writing) && s->th_started) {
        if (pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts) == ETIMEDOUT)
            break;
    }
    int left = s->qhead != NULL || s->writing;
    s->draining--;
    s->st.last_flush_ms = (clock_now_s() - t0) * 1e3;
    pthread_mutex_unlock(&s->mu);
    return left;
}

void kv_ssd_stats(struct kv_ssd *s, struct kv_ssd_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void kv_ssd_count(struct kv_ssd *s, long demoted, long restored_tokens, long restored_blocks,
                  long spilled)
{
    pthread_mutex_lock(&s->mu);
    s->st.demoted_blocks += demoted;
    s->st.restored_tokens += restored_tokens;
    s->st.restored_blocks += restored_blocks;
    s->st.spilled_blocks += spilled;
    pthread_mutex_unlock(&s->mu);
}

const char *kv_ssd_dir(const struct kv_ssd *s) { return s->dir; }

/* ---- open / close ---------------------------------------------------------------------- */

static int mkdir_p(const char *path)
{
    char tmp[1824];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static int cmp_mtime(const void *a, const void *b)
{
    const struct ent *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Indexes this namespace's files (oldest mtime first) and deletes stray temporary files. */
static int scan(struct kv_ssd *s)
{
    DIR *d = opendir(s->nsdir);
    if (!d)
        return -1;
    struct ent *found = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t L = strlen(nm);
        char p[2200];
        snprintf(p, sizeof p, "%s/%s", s->nsdir, nm);
        if (L > 4 && !strcmp(nm + L - 4, ".tmp")) {
            unlink(p); /* a write cut short by a crash: never visible */
            continue;
        }
        struct stat st;
        uint8_t key[KV_SSD_KEY];
        if (L != 2 * KV_SSD_KEY + 4 || strcmp(nm + 2 * KV_SSD_KEY, ".kvb") ||
            unhex(nm, key, KV_SSD_KEY) || stat(p, &st) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            struct ent *nf = realloc(found, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *nf);
            if (!nf)
                break;
            found = nf;
        }
        memset(&found[n], 0, sizeof found[n]);
        memcpy(found[n].key, key, KV_SSD_KEY);
        found[n].size = st.st_size;
        found[n].mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
        /* the token count is in the header; a full block is by far the common case, and a
         * partial one is read from its header now (small files, few of them) */
        found[n].n_tok = s->c.block_size;
        if ((size_t)st.st_size == KV_SSD_HDR_BYTES + s->c.payload_bytes) {
            int fd = open(p, O_RDONLY | O_CLOEXEC);
            uint8_t hb[KV_SSD_HDR_BYTES];
            if (fd >= 0 && pread(fd, hb, sizeof hb, 0) == (ssize_t)sizeof hb) {
                uint32_t nt = (uint32_t)hb[80] | (uint32_t)hb[81] << 8 |
                              (uint32_t)hb[82] << 16 | (uint32_t)hb[83] << 24;
                if (nt >= 1 && nt <= (uint32_t)s->c.block_size)
                    found[n].n_tok = (int32_t)nt;
            }
            if (fd >= 0)
                close(fd);
        }
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(found, (size_t)n, sizeof *found, cmp_mtime);
    for (int i = 0; i < n; i++) {
        int32_t k = ent_add(s, found[i].key, found[i].n_tok, ST_DISK);
        if (k < 0)
            break;
        s->ents[k].size = found[i].size;
        lru_append(s, k);
        s->st.entries++;
        s->st.bytes += found[i].size;
    }
    free(found);
    s->st.entries_at_start = s->st.entries;
    evict_to_cap(s);
    return 0;
}

int kv_ssd_open(struct kv_ssd **out, const struct kv_ssd_config *c, const uint8_t ns[KV_SSD_KEY],
                struct cerr *e)
{
    *out = NULL;
    if (!c->dir || !*c->dir || strlen(c->dir) > 1800)
        return cerr_set(e, CERR_INVALID, "--ssd-cache needs a directory");
    struct kv_ssd *s = calloc(1, sizeof *s);
    if (!s)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    s->c = *c;
    snprintf(s->dir, sizeof s->dir, "%s", c->dir);
    s->c.dir = s->dir;
    memcpy(s->ns, ns, KV_SSD_KEY);
    char nh[17];
    hex(ns, 8, nh);
    snprintf(s->nsdir, sizeof s->nsdir, "%s/%s", s->dir, nh);
    snprintf(s->qdir, sizeof s->qdir, "%s/quarantine", s->dir);
    s->free_head = s->lru_head = s->lru_tail = -1;
    s->st.max_bytes = (long long)c->max_bytes;
    const char *f = getenv("CINFER_SSD_FAULT");
    s->fault = !f ? 0 : !strcmp(f, "enospc") ? FAULT_ENOSPC : !strcmp(f, "stall") ? FAULT_STALL : 0;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    int rc = 0;
    if (mkdir_p(s->nsdir) || mkdir_p(s->qdir))
        rc = cerr_set(e, CERR_IO, "--ssd-cache %s: cannot create the directory (%s)", s->dir,
                      strerror(errno));
    if (!rc) {
        char probe[2048];
        snprintf(probe, sizeof probe, "%s/.probe.%d.tmp", s->nsdir, (int)getpid());
        int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            rc = cerr_set(e, CERR_IO, "--ssd-cache %s: the directory is not writable (%s)",
                          s->dir, strerror(errno));
        else {
            close(fd);
            unlink(probe);
        }
    }
    if (!rc && (grow(s) || scan(s)))
        rc = cerr_set(e, CERR_IO, "--ssd-cache %s: cannot read the directory", s->dir);
    if (!rc) {
        if (pthread_create(&s->th, NULL, writer_main, s))
            rc = cerr_set(e, CERR_NOMEM, "cannot start the SSD cache writer");
        else
            s->th_started = 1;
    }
    if (rc) {
        kv_ssd_close(s, 0);
        return rc;
    }
    *out = s;
    return 0;
}

void kv_ssd_close(struct kv_ssd *s, double timeout_s)
{
    if (!s)
        return;
    if (s->th_started) {
        pthread_mutex_lock(&s->mu);
        long n = s->st.pending_spills;
        pthread_mutex_unlock(&s->mu);
        if (n && timeout_s > 0) {
            log_info("ssd cache: writing %ld pending blocks (at most %.0f s)", n, timeout_s);
            if (kv_ssd_drain(s, timeout_s)) {
                pthread_mutex_lock(&s->mu);
                n = s->st.pending_spills;
                pthread_mutex_unlock(&s->mu);
                log_warn("ssd cache: %ld blocks were still pending after %.0f s; they are lost "
                         "(a future miss)",
                         n, timeout_s);
            }
        }
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->quit, 1, __ATOMIC_RELAXED);
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    while (s->qhead) {
        struct item *it = s->qhead;
        s->qhead = it->next;
        item_free(it);
    }
    free(s->ents);
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}
