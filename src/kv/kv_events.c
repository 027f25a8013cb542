/* kv_events.c — see kv_events.h. The engine thread appends to a locked queue (consecutive
 * stores of one chain merge into one BlockStored, as vLLM's do); the publisher thread swaps
 * the queue out, encodes it as one EventBatch with msgpack-c and sends it on the PUB socket,
 * keeping the last replay_batches payloads for the ROUTER replay socket it also serves.
 */
#include "kv/kv_events.h"

#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define MAX_QUEUED 1000000 /* events waiting beyond this are dropped (and counted) */

struct ring_ent {
    uint64_t seq;
    char *buf;
    size_t len;
};

struct bnode {
    struct bnode *next;
    uint64_t h, parent;
    int has_parent, group, n;
    int32_t *ids;
};

struct btab {
    struct bnode **b;
    int nb, n;
};

struct kv_events {
    struct kv_events_config c; /* strings point into the copies below */
    char *endpoint, *replay_ep, *topic, *medium;
    void *ctx, *pub, *rep;
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* queue (mu) */
    struct kv_event *q;
    int nq, capq;
    long queued;
    int stop;
    struct kv_events_stats st;
    struct kv_listener lis;
    /* the SSD tier's events (mu): the data of the pool's stored blocks, which a spill's
     * BlockStored repeats, and the keys announced on the disk */
    struct btab live, disk;
    /* publisher thread only */
    uint64_t seq;
    struct ring_ent *ring;
    int ring_cap, ring_head, ring_n;
};

/* ---- block tables: 64-bit hash -> (parent, tokens), chained ------------------------------ */

static struct bnode *bt_find(struct btab *t, uint64_t h)
{
    if (!t->nb)
        return NULL;
    for (struct bnode *x = t->b[h & (t->nb - 1)]; x; x = x->next)
        if (x->h == h)
            return x;
    return NULL;
}

/* Adds (or finds) h; NULL when out of memory. */
static struct bnode *bt_add(struct btab *t, uint64_t h)
{
    struct bnode *x = bt_find(t, h);
    if (x)
        return x;
    if (t->n >= t->nb) { /* keep the load under 1: double and rehash */
        int nb = t->nb ? 2 * t->nb : 1024;
        struct bnode **b = calloc((size_t)nb, sizeof *b);
        if (!b)
            return NULL;
        for (int i = 0; i < t->nb; i++)
            for (struct bnode *y = t->b[i], *nx; y; y = nx) {
                nx = y->next;
                y->next = b[y->h & (uint64_t)(nb - 1)];
                b[y->h & (uint64_t)(nb - 1)] = y;
            }
        free(t->b);
        t->b = b;
        t->nb = nb;
    }
    if (!(x = calloc(1, sizeof *x)))
        return NULL;
    x->h = h;
    x->next = t->b[h & (uint64_t)(t->nb - 1)];
    t->b[h & (uint64_t)(t->nb - 1)] = x;
    t->n++;
    return x;
}

static void bt_del(struct btab *t, uint64_t h)
{
    if (!t->nb)
        return;
    for (struct bnode **pp = &t->b[h & (t->nb - 1)]; *pp; pp = &(*pp)->next)
        if ((*pp)->h == h) {
            struct bnode *x = *pp;
            *pp = x->next;
            free(x->ids);
            free(x);
            t->n--;
            return;
        }
}

static void bt_free(struct btab *t)
{
    for (int i = 0; i < t->nb; i++)
        for (struct bnode *y = t->b[i], *nx; y; y = nx) {
            nx = y->next;
            free(y->ids);
            free(y);
        }
    free(t->b);
    memset(t, 0, sizeof *t);
}

/* ---- endpoints ---------------------------------------------------------------------------- */

int kv_events_endpoint_check(const char *ep, int *binds, struct cerr *e)
{
    if (binds)
        *binds = 0;
    if (!ep)
        return cerr_set(e, CERR_INVALID, "no KV-events endpoint given");
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) {
        if (!ep[ep[0] == 'i' && ep[1] == 'p' ? 6 : 9])
            return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s' names no path", ep);
        if (binds)
            *binds = 1;
        return 0;
    }
    if (strncmp(ep, "tcp://", 6))
        return cerr_set(e, CERR_INVALID,
                        "KV-events endpoint '%s' is not tcp://HOST:PORT, ipc://PATH or "
                        "inproc://NAME",
                        ep);
    const char *host = ep + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host)
        return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s' needs HOST:PORT", ep);
    if (host[0] == '[' && colon[-1] != ']')
        return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s': an IPv6 host goes in brackets",
                        ep);
    const char *p = colon + 1;
    long port = 0;
    if (!*p)
        return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s' has no port", ep);
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || (port = port * 10 + (*p - '0')) > 65535)
            return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s': the port is not in "
                                             "[0, 65535]",
                            ep);
    }
    for (const char *h = host; h < colon; h++)
        if ((unsigned char)*h <= ' ' || *h == '/')
            return cerr_set(e, CERR_INVALID, "KV-events endpoint '%s' has a malformed host", ep);
    if (binds)
        *binds = strchr(ep, '*') != NULL || strstr(ep, "::") != NULL;
    return 0;
}

/* ---- encoding ----------------------------------------------------------------------------- */

uint64_t kv_events_hash(const uint8_t key[KV_KEY_BYTES])
{
    uint64_t h = 0;
    for (int i = KV_KEY_BYTES - 8; i < KV_KEY_BYTES; i++)
        h = h << 8 | key[i];
    return h;
}

static int pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

static int pk_hashes(msgpack_packer *pk, const struct kv_event *ev)
{
    int rc = msgpack_pack_array(pk, (size_t)ev->n_hashes);
    for (int i = 0; i < ev->n_hashes; i++)
        rc |= msgpack_pack_uint64(pk, ev->hashes[i]);
    return rc;
}

static int pk_parent(msgpack_packer *pk, const struct kv_event *ev)
{
    return ev->has_parent ? msgpack_pack_uint64(pk, ev->parent) : msgpack_pack_nil(pk);
}

static int pk_ids(msgpack_packer *pk, const struct kv_event *ev)
{
    int rc = msgpack_pack_array(pk, (size_t)ev->n_ids);
    for (int i = 0; i < ev->n_ids; i++)
        rc |= msgpack_pack_int32(pk, ev->ids[i]);
    return rc;
}

static const char *TAG[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};

/* vLLM main: tagged maps, default-valued optional fields left out */
static int pk_event_map(msgpack_packer *pk, const struct kv_events_config *c,
                        const struct kv_event *ev)
{
    int rc = 0;
    const char *medium = ev->disk ? KV_EVENTS_DISK : c->medium ? c->medium : "GPU";
    if (ev->kind == KVE_STORED) {
        int sw = ev->group == 1 && c->sliding_window > 0;
        rc |= msgpack_pack_map(pk, 10 + sw);
        rc |= pk_str(pk, "type") | pk_str(pk, TAG[0]);
        rc |= pk_str(pk, "block_hashes") | pk_hashes(pk, ev);
        rc |= pk_str(pk, "parent_block_hash") | pk_parent(pk, ev);
        rc |= pk_str(pk, "token_ids") | pk_ids(pk, ev);
        rc |= pk_str(pk, "block_size") | msgpack_pack_int32(pk, c->block_size);
        rc |= pk_str(pk, "lora_id") | msgpack_pack_nil(pk);
        rc |= pk_str(pk, "medium") | pk_str(pk, medium);
        rc |= pk_str(pk, "lora_name") | msgpack_pack_nil(pk);
        rc |= pk_str(pk, "group_idx") | msgpack_pack_int32(pk, ev->group);
        rc |= pk_str(pk, "kv_cache_spec_kind") |
              pk_str(pk, ev->group == 1 ? "sliding_window" : "full_attention");
        if (sw)
            rc |= pk_str(pk, "kv_cache_spec_sliding_window") |
                  msgpack_pack_int32(pk, c->sliding_window);
    } else if (ev->kind == KVE_REMOVED) {
        rc |= msgpack_pack_map(pk, 4);
        rc |= pk_str(pk, "type") | pk_str(pk, TAG[1]);
        rc |= pk_str(pk, "block_hashes") | pk_hashes(pk, ev);
        rc |= pk_str(pk, "medium") | pk_str(pk, medium);
        rc |= pk_str(pk, "group_idx") | msgpack_pack_int32(pk, ev->group);
    } else {
        rc |= msgpack_pack_map(pk, 1);
        rc |= pk_str(pk, "type") | pk_str(pk, TAG[2]);
    }
    return rc;
}

/* vLLM's array_like layout: the tag, then the fields of its documented subscriber */
static int pk_event_array(msgpack_packer *pk, const struct kv_events_config *c,
                          const struct kv_event *ev)
{
    int rc = 0;
    const char *medium = ev->disk ? KV_EVENTS_DISK : c->medium ? c->medium : "GPU";
    if (ev->kind == KVE_STORED) {
        rc |= msgpack_pack_array(pk, 7);
        rc |= pk_str(pk, TAG[0]) | pk_hashes(pk, ev) | pk_parent(pk, ev) | pk_ids(pk, ev);
        rc |= msgpack_pack_int32(pk, c->block_size) | msgpack_pack_nil(pk) | pk_str(pk, medium);
    } else if (ev->kind == KVE_REMOVED) {
        rc |= msgpack_pack_array(pk, 3);
        rc |= pk_str(pk, TAG[1]) | pk_hashes(pk, ev) | pk_str(pk, medium);
    } else {
        rc |= msgpack_pack_array(pk, 1) | pk_str(pk, TAG[2]);
    }
    return rc;
}

int kv_events_encode(const struct kv_events_config *c, const struct kv_event *evs, int n,
                     double ts, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    /* the array layout cannot say which pool a block is in: it carries the main one only */
    int shown = 0;
    for (int i = 0; i < n; i++)
        shown += c->map_layout || evs[i].kind == KVE_CLEARED || evs[i].group == 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 3) | msgpack_pack_double(&pk, ts) |
             msgpack_pack_array(&pk, (size_t)shown);
    for (int i = 0; i < n && !rc; i++) {
        if (c->map_layout)
            rc |= pk_event_map(&pk, c, &evs[i]);
        else if (evs[i].kind == KVE_CLEARED || evs[i].group == 0)
            rc |= pk_event_array(&pk, c, &evs[i]);
    }
    rc |= msgpack_pack_int32(&pk, c->data_parallel_rank);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return CERR_NOMEM;
    }
    *out = sb.data; /* msgpack_sbuffer allocates with malloc/realloc */
    *len = sb.size;
    if (!*out && !(*out = malloc(1)))
        return CERR_NOMEM;
    return 0;
}

/* ---- the queue (any thread; the listener's callbacks run on the engine thread) ------------ */

static void ev_clear(struct kv_event *ev)
{
    free(ev->hashes);
    free(ev->ids);
    memset(ev, 0, sizeof *ev);
}

/* A new zeroed event at the queue's end, or NULL (out of memory / over the bound). mu held. */
static struct kv_event *q_push(struct kv_events *k)
{
    if (k->queued >= MAX_QUEUED)
        return NULL;
    if (k->nq == k->capq) {
        int cap = k->capq ? 2 * k->capq : 64;
        struct kv_event *nq = realloc(k->q, (size_t)cap * sizeof *nq);
        if (!nq)
            return NULL;
        k->q = nq;
        k->capq = cap;
    }
    struct kv_event *ev = &k->q[k->nq++];
    memset(ev, 0, sizeof *ev);
    k->queued++;
    return ev;
}

static int append_u64(uint64_t **v, int *n, uint64_t x)
{
    uint64_t *nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv)
        return -1;
    nv[(*n)++] = x;
    *v = nv;
    return 0;
}

static int append_ids(int32_t **v, int *n, const int32_t *ids, int m)
{
    int32_t *nv = realloc(*v, (size_t)(*n + m) * sizeof *nv);
    if (!nv && *n + m)
        return -1;
    if (m)
        memcpy(nv + *n, ids, (size_t)m * sizeof *ids);
    *n += m;
    *v = nv;
    return 0;
}

/* Queues a BlockStored of one block (merged into the last event when it continues its
 * chain in the same pool and medium). mu held. */
static void q_stored(struct kv_events *k, int group, int disk, uint64_t h, int has_parent,
                     uint64_t ph, const int32_t *ids, int n)
{
    struct kv_event *last = k->nq ? &k->q[k->nq - 1] : NULL;
    int ok;
    if (has_parent && last && last->kind == KVE_STORED && last->group == group &&
        last->disk == disk && last->hashes[last->n_hashes - 1] == ph) {
        /* the next block of the same chain: one BlockStored for both */
        int nh = last->n_hashes, ni = last->n_ids;
        ok = append_u64(&last->hashes, &last->n_hashes, h) == 0 &&
             append_ids(&last->ids, &last->n_ids, ids, n) == 0;
        if (!ok)
            last->n_hashes = nh, last->n_ids = ni;
    } else {
        struct kv_event *ev = q_push(k);
        ok = ev != NULL;
        if (ev) {
            ev->kind = KVE_STORED;
            ev->group = group;
            ev->disk = disk;
            ev->parent = ph;
            ev->has_parent = has_parent;
            ok = append_u64(&ev->hashes, &ev->n_hashes, h) == 0 &&
                 append_ids(&ev->ids, &ev->n_ids, ids, n) == 0;
            if (!ok) {
                ev_clear(ev);
                k->nq--;
                k->queued--;
            }
        }
    }
    if (!ok)
        k->st.dropped++;
    pthread_cond_signal(&k->cv);
}

static void on_stored(void *ud, int group, const uint8_t key[KV_KEY_BYTES], const uint8_t *parent,
                      const int32_t *ids, int n)
{
    struct kv_events *k = ud;
    uint64_t h = kv_events_hash(key), ph = parent ? kv_events_hash(parent) : 0;
    pthread_mutex_lock(&k->mu);
    q_stored(k, group, 0, h, parent != NULL, ph, ids, n);
    if (!k->c.disk_tier) {
        pthread_mutex_unlock(&k->mu);
        return;
    }
    /* kept for a later spill's BlockStored on the disk medium */
    struct bnode *x = bt_add(&k->live, h);
    int32_t *cp = x && n > 0 ? malloc((size_t)n * sizeof *cp) : NULL;
    if (x && cp) {
        memcpy(cp, ids, (size_t)n * sizeof *cp);
        free(x->ids);
        x->ids = cp;
        x->n = n;
        x->parent = ph;
        x->has_parent = parent != NULL;
        x->group = group;
    } else if (x) {
        bt_del(&k->live, h); /* out of memory: this block's spill goes unreported */
    }
    pthread_mutex_unlock(&k->mu);
}

/* Queues a BlockRemoved of one block (merged into the last one of its pool and medium). mu
 * held. */
static void q_removed(struct kv_events *k, int group, int disk, uint64_t h)
{
    struct kv_event *last = k->nq ? &k->q[k->nq - 1] : NULL;
    int ok;
    if (last && last->kind == KVE_REMOVED && last->group == group && last->disk == disk)
        ok = append_u64(&last->hashes, &last->n_hashes, h) == 0;
    else {
        struct kv_event *ev = q_push(k);
        ok = ev != NULL;
        if (ev) {
            ev->kind = KVE_REMOVED;
            ev->group = group;
            ev->disk = disk;
            if (!(ok = append_u64(&ev->hashes, &ev->n_hashes, h) == 0)) {
                k->nq--;
                k->queued--;
            }
        }
    }
    if (!ok)
        k->st.dropped++;
    pthread_cond_signal(&k->cv);
}

static void on_removed(void *ud, int group, const uint8_t key[KV_KEY_BYTES])
{
    struct kv_events *k = ud;
    uint64_t h = kv_events_hash(key);
    pthread_mutex_lock(&k->mu);
    q_removed(k, group, 0, h);
    bt_del(&k->live, h);
    pthread_mutex_unlock(&k->mu);
}

/* A pool block queued for the SSD tier: BlockStored on the disk medium, with the tokens and
 * parent its pool event carried (a block whose pool event was not seen is not reported). */
static void on_spilled(void *ud, int group, const uint8_t key[KV_KEY_BYTES])
{
    struct kv_events *k = ud;
    uint64_t h = kv_events_hash(key);
    pthread_mutex_lock(&k->mu);
    struct bnode *x = bt_find(&k->live, h);
    if (x && !bt_find(&k->disk, h)) {
        struct bnode *d = bt_add(&k->disk, h);
        if (d) {
            d->group = group;
            q_stored(k, group, 1, h, x->has_parent, x->parent, x->ids, x->n);
        } else {
            k->st.dropped++;
        }
    }
    pthread_mutex_unlock(&k->mu);
}

/* An entry left the SSD tier: BlockRemoved on the disk medium, if it was announced. */
static void on_disk_gone(void *ud, const uint8_t key[KV_KEY_BYTES])
{
    struct kv_events *k = ud;
    uint64_t h = kv_events_hash(key);
    pthread_mutex_lock(&k->mu);
    struct bnode *d = bt_find(&k->disk, h);
    if (d) {
        q_removed(k, d->group, 1, h);
        bt_del(&k->disk, h);
    }
    pthread_mutex_unlock(&k->mu);
}

void kv_events_cleared(struct kv_events *k)
{
    pthread_mutex_lock(&k->mu);
    bt_free(&k->live); /* a subscriber forgets every block, on every medium */
    bt_free(&k->disk);
    struct kv_event *ev = q_push(k);
    if (ev)
        ev->kind = KVE_CLEARED;
    else
        k->st.dropped++;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

const struct kv_listener *kv_events_listener(struct kv_events *k) { return &k->lis; }

void kv_events_get_stats(struct kv_events *k, struct kv_events_stats *out)
{
    pthread_mutex_lock(&k->mu);
    *out = k->st;
    pthread_mutex_unlock(&k->mu);
}

/* ---- the publisher thread ----------------------------------------------------------------- */

static void be64(uint8_t out[8], uint64_t x)
{
    for (int i = 7; i >= 0; i--, x >>= 8)
        out[i] = (uint8_t)x;
}

static void ring_push(struct kv_events *k, uint64_t seq, char *buf, size_t len)
{
    struct ring_ent *r;
    if (k->ring_n < k->ring_cap)
        r = &k->ring[(k->ring_head + k->ring_n++) % k->ring_cap];
    else { /* full: the oldest goes */
        r = &k->ring[k->ring_head];
        free(r->buf);
        k->ring_head = (k->ring_head + 1) % k->ring_cap;
    }
    r->seq = seq;
    r->buf = buf;
    r->len = len;
}

/* Answers waiting replay requests: [id, "", start seq (8 bytes)] -> (seq, payload) for each
 * kept batch from start on, then (-1, ""). Malformed requests are ignored, as vLLM does. */
static void serve_replay(struct kv_events *k)
{
    for (;;) {
        zmq_msg_t fr[3];
        int n = 0, more = 1, got = 0;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, k->rep, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            got = 1;
            more = zmq_msg_more(&m);
            if (n < 3)
                fr[n++] = m;
            else {
                zmq_msg_close(&m);
                n = 4; /* too many frames: ignore the request */
            }
        }
        if (!got)
            return;
        int ok = n == 3 && zmq_msg_size(&fr[2]) == 8;
        if (ok) {
            const uint8_t *p = zmq_msg_data(&fr[2]);
            uint64_t start = 0;
            for (int i = 0; i < 8; i++)
                start = start << 8 | p[i];
            const void *id = zmq_msg_data(&fr[0]);
            size_t idlen = zmq_msg_size(&fr[0]);
            /* counted before the answer goes out, so a client that has read the end marker
             * sees its replay in the stats */
            pthread_mutex_lock(&k->mu);
            k->st.replays++;
            pthread_mutex_unlock(&k->mu);
            for (int i = 0; i < k->ring_n; i++) {
                const struct ring_ent *r = &k->ring[(k->ring_head + i) % k->ring_cap];
                if (r->seq < start)
                    continue;
                uint8_t s8[8];
                be64(s8, r->seq);
                zmq_send(k->rep, id, idlen, ZMQ_SNDMORE);
                zmq_send(k->rep, "", 0, ZMQ_SNDMORE);
                zmq_send(k->rep, s8, 8, ZMQ_SNDMORE);
                zmq_send(k->rep, r->buf, r->len, 0);
            }
            static const uint8_t end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
            zmq_send(k->rep, id, idlen, ZMQ_SNDMORE);
            zmq_send(k->rep, "", 0, ZMQ_SNDMORE);
            zmq_send(k->rep, end, 8, ZMQ_SNDMORE);
            zmq_send(k->rep, "", 0, 0);
        }
        for (int i = 0; i < (n < 3 ? n : 3); i++)
            zmq_msg_close(&fr[i]);
    }
}

static void publish(struct kv_events *k, struct kv_event *evs, int n)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char *buf;
    size_t len;
    if (kv_events_encode(&k->c, evs, n, (double)now.tv_sec + now.tv_nsec / 1e9, &buf, &len)) {
        pthread_mutex_lock(&k->mu);
        k->st.dropped += n;
        pthread_mutex_unlock(&k->mu);
        return;
    }
    uint8_t s8[8];
    be64(s8, k->seq);
    const char *topic = k->c.topic ? k->c.topic : "";
    zmq_send(k->pub, topic, strlen(topic), ZMQ_SNDMORE);
    zmq_send(k->pub, s8, 8, ZMQ_SNDMORE);
    zmq_send(k->pub, buf, len, 0);
    if (k->ring_cap)
        ring_push(k, k->seq, buf, len);
    else
        free(buf);
    k->seq++;
    pthread_mutex_lock(&k->mu);
    k->st.batches++;
    k->st.events += n;
    pthread_mutex_unlock(&k->mu);
}

static void *publisher(void *arg)
{
    struct kv_events *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->nq && !k->stop) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_nsec += 50 * 1000000L;
            if (t.tv_nsec >= 1000000000L)
                t.tv_sec++, t.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&k->cv, &k->mu, &t);
            if (k->rep) {
                pthread_mutex_unlock(&k->mu);
                serve_replay(k);
                pthread_mutex_lock(&k->mu);
            }
        }
        if (!k->nq && k->stop)
            break;
        struct kv_event *evs = k->q;
        int n = k->nq;
        k->q = NULL;
        k->nq = k->capq = 0;
        k->queued = 0;
        pthread_mutex_unlock(&k->mu);
        publish(k, evs, n);
        for (int i = 0; i < n; i++)
            ev_clear(&evs[i]);
        free(evs);
        if (k->rep)
            serve_replay(k);
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int kv_events_new(struct kv_events **out, const struct kv_events_config *c, struct cerr *e)
{
    *out = NULL;
    int binds = 0, rbinds = 0;
    int rc = kv_events_endpoint_check(c->endpoint, &binds, e);
    if (!rc && c->replay_endpoint)
        rc = kv_events_endpoint_check(c->replay_endpoint, &rbinds, e);
    if (rc)
        return rc;
    if (c->block_size <= 0)
        return cerr_set(e, CERR_INVALID, "KV events: invalid block size %d", c->block_size);
    struct kv_events *k = calloc(1, sizeof *k);
    if (!k)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->c = *c;
    k->endpoint = dup_or_null(c->endpoint);
    k->replay_ep = dup_or_null(c->replay_endpoint);
    k->topic = strdup(c->topic ? c->topic : "");
    k->medium = strdup(c->medium ? c->medium : "GPU");
    k->c.endpoint = k->endpoint;
    k->c.replay_endpoint = k->replay_ep;
    k->c.topic = k->topic;
    k->c.medium = k->medium;
    k->ring_cap = c->replay_batches > 0 ? c->replay_batches : 10000;
    k->ring = calloc((size_t)k->ring_cap, sizeof *k->ring);
    k->lis = (struct kv_listener){.stored = on_stored, .removed = on_removed,
                                  .spilled = on_spilled, .disk_gone = on_disk_gone, .ud = k};
    if (!k->endpoint || (c->replay_endpoint && !k->replay_ep) || !k->topic || !k->medium ||
        !k->ring) {
        kv_events_free(k);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    k->ctx = zmq_ctx_new();
    k->pub = k->ctx ? zmq_socket(k->ctx, ZMQ_PUB) : NULL;
    if (!k->pub) {
        kv_events_free(k);
        return cerr_set(e, CERR_IO, "KV events: cannot create a ZMQ socket: %s",
                        zmq_strerror(zmq_errno()));
    }
    int hwm = 100000, linger = 1000;
    zmq_setsockopt(k->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(k->pub, ZMQ_LINGER, &linger, sizeof linger);
    if ((binds ? zmq_bind(k->pub, k->endpoint) : zmq_connect(k->pub, k->endpoint)) != 0) {
        rc = cerr_set(e, CERR_IO, "KV events: cannot %s %s: %s", binds ? "bind" : "connect to",
                      k->endpoint, zmq_strerror(zmq_errno()));
        kv_events_free(k);
        return rc;
    }
    if (k->replay_ep) {
        k->rep = zmq_socket(k->ctx, ZMQ_ROUTER);
        int zero = 0;
        if (!k->rep || zmq_setsockopt(k->rep, ZMQ_LINGER, &zero, sizeof zero) ||
            zmq_bind(k->rep, k->replay_ep)) {
            rc = cerr_set(e, CERR_IO, "KV events: cannot bind the replay socket %s: %s",
                          k->replay_ep, zmq_strerror(zmq_errno()));
            kv_events_free(k);
            return rc;
        }
    }
    kv_events_cleared(k); /* a (re)started server's cache is empty */
    if (pthread_create(&k->th, NULL, publisher, k)) {
        kv_events_free(k);
        return cerr_set(e, CERR_IO, "KV events: cannot start the publisher thread");
    }
    k->th_started = 1;
    *out = k;
    return 0;
}

void kv_events_free(struct kv_events *k)
{
    if (!k)
        return;
    if (k->th_started) {
        pthread_mutex_lock(&k->mu);
        k->stop = 1;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
        pthread_join(k->th, NULL);
    }
    if (k->pub)
        zmq_close(k->pub);
    if (k->rep)
        zmq_close(k->rep);
    if (k->ctx)
        zmq_ctx_term(k->ctx);
    for (int i = 0; i < k->nq; i++)
        ev_clear(&k->q[i]);
    free(k->q);
    for (int i = 0; k->ring && i < k->ring_n; i++)
        free(k->ring[(k->ring_head + i) % k->ring_cap].buf);
    free(k->ring);
    free(k->endpoint);
    free(k->replay_ep);
    free(k->topic);
    free(k->medium);
    bt_free(&k->live);
    bt_free(&k->disk);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k);
}
