/* test_kv_events.c — KV-cache events (src/kv/kv_events.c) and the pool's listener hook:
 * endpoint checks, the msgpack EventBatch in both layouts (decoded back with msgpack-c),
 * the listener calls of a real pool (store with parent chain, eviction), and the whole
 * path pool -> queue -> publisher thread -> PUB + replay sockets over ipc://.
 */
#include <msgpack.h>
#include <unistd.h>
#include <zmq.h>

#include "backend/backend.h"
#include "harness.h"
#include "kv/kv_events.h"
#include "kv/kv_pool.h"

static struct be *g_be;

static void test_endpoints(void)
{
    int b = -1;
    CHECK(kv_events_endpoint_check("tcp://*:5557", &b, NULL) == 0 && b == 1);
    CHECK(kv_events_endpoint_check("tcp://127.0.0.1:5557", &b, NULL) == 0 && b == 0);
    CHECK(kv_events_endpoint_check("tcp://[::1]:5557", &b, NULL) == 0 && b == 1);
    CHECK(kv_events_endpoint_check("ipc:///tmp/x", &b, NULL) == 0 && b == 1);
    CHECK(kv_events_endpoint_check("inproc://x", &b, NULL) == 0 && b == 1);
    struct cerr e = {0};
    CHECK(kv_events_endpoint_check("tcp://host", NULL, &e) == CERR_INVALID);
    CHECK(strstr(e.msg, "HOST:PORT") != NULL);
    CHECK(kv_events_endpoint_check("tcp://h:65536", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check("tcp://h:", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check("tcp://:1", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check("tcp://h x:1", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check("udp://h:1", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check("ipc://", NULL, NULL) == CERR_INVALID);
    CHECK(kv_events_endpoint_check(NULL, NULL, NULL) == CERR_INVALID);
}

static int str_is(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static const msgpack_object *map_get(const msgpack_object *m, const char *k)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (str_is(&m->via.map.ptr[i].key, k))
            return &m->via.map.ptr[i].val;
    return NULL;
}

static void test_encode_layouts(void)
{
    uint64_t h[2] = {0xfedcba9876543210ull, 7}, rh[1] = {0xfedcba9876543210ull};
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct kv_event evs[4] = {
        {.kind = KVE_CLEARED},
        {.kind = KVE_STORED, .hashes = h, .n_hashes = 2, .ids = ids, .n_ids = 8},
        {.kind = KVE_STORED, .group = 1, .hashes = h, .n_hashes = 1, .parent = 9, .has_parent = 1,
         .ids = ids, .n_ids = 4},
        {.kind = KVE_REMOVED, .hashes = rh, .n_hashes = 1},
    };
    for (int layout = 0; layout < 2; layout++) {
        struct kv_events_config c = {.block_size = 4, .map_layout = layout, .sliding_window = 64};
        char *buf;
        size_t len;
        CHECK(kv_events_encode(&c, evs, 4, 1700000000.5, &buf, &len) == 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CHECK(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len);
        const msgpack_object *b = &u.data;
        CHECK(b->type == MSGPACK_OBJECT_ARRAY && b->via.array.size == 3);
        if (b->type != MSGPACK_OBJECT_ARRAY || b->via.array.size != 3) {
            msgpack_unpacked_destroy(&u);
            free(buf);
            continue;
        }
        CHECK(b->via.array.ptr[0].type == MSGPACK_OBJECT_FLOAT64 &&
              b->via.array.ptr[0].via.f64 == 1700000000.5);
        CHECK(b->via.array.ptr[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              b->via.array.ptr[2].via.u64 == 0);
        const msgpack_object *ev = &b->via.array.ptr[1];
        /* the array layout leaves the sliding-window pool's event out */
        CHECK_EQ_INT(ev->via.array.size, layout ? 4 : 3);
        const msgpack_object *e0 = &ev->via.array.ptr[0], *e1 = &ev->via.array.ptr[1],
                             *e3 = &ev->via.array.ptr[layout ? 3 : 2];
        if (!layout) {
            CHECK(e0->via.array.size == 1 && str_is(&e0->via.array.ptr[0], "AllBlocksCleared"));
            CHECK(e1->via.array.size == 7 && str_is(&e1->via.array.ptr[0], "BlockStored"));
            const msgpack_object *hs = &e1->via.array.ptr[1];
            CHECK(hs->via.array.size == 2 && hs->via.array.ptr[0].via.u64 == h[0]);
            CHECK(e1->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
            CHECK(e1->via.array.ptr[3].via.array.size == 8);
            CHECK(e1->via.array.ptr[4].via.u64 == 4);
            CHECK(e1->via.array.ptr[5].type == MSGPACK_OBJECT_NIL);
            CHECK(str_is(&e1->via.array.ptr[6], "GPU"));
            CHECK(e3->via.array.size == 3 && str_is(&e3->via.array.ptr[0], "BlockRemoved"));
        } else {
            CHECK(str_is(map_get(e0, "type"), "AllBlocksCleared") && e0->via.map.size == 1);
            CHECK(str_is(map_get(e1, "type"), "BlockStored"));
            CHECK(map_get(e1, "parent_block_hash")->type == MSGPACK_OBJECT_NIL);
            CHECK(map_get(e1, "block_hashes")->via.array.ptr[1].via.u64 == 7);
            CHECK(map_get(e1, "token_ids")->via.array.ptr[7].via.u64 == 8);
            CHECK(str_is(map_get(e1, "kv_cache_spec_kind"), "full_attention"));
            CHECK(map_get(e1, "kv_cache_spec_sliding_window") == NULL);
            const msgpack_object *e2 = &ev->via.array.ptr[2];
            CHECK(map_get(e2, "parent_block_hash")->via.u64 == 9);
            CHECK(map_get(e2, "group_idx")->via.u64 == 1);
            CHECK(str_is(map_get(e2, "kv_cache_spec_kind"), "sliding_window"));
            CHECK(map_get(e2, "kv_cache_spec_sliding_window")->via.u64 == 64);
            CHECK(str_is(map_get(e3, "type"), "BlockRemoved"));
            CHECK(str_is(map_get(e3, "medium"), "GPU"));
        }
        msgpack_unpacked_destroy(&u);
        free(buf);
    }
    uint8_t key[KV_KEY_BYTES] = {0};
    key[24] = 0x80, key[31] = 1;
    CHECK(kv_events_hash(key) == 0x8000000000000001ull);
}

/* ---- the pool's listener ---- */

struct rec {
    int stored, removed, first_without_parent, parent_ok;
    uint8_t last[KV_KEY_BYTES];
    int32_t first_id;
};

static void rec_stored(void *ud, int group, const uint8_t key[KV_KEY_BYTES], const uint8_t *parent,
                       const int32_t *ids, int n)
{
    struct rec *r = ud;
    if (!r->stored)
        r->first_without_parent = parent == NULL, r->first_id = ids[0];
    else
        r->parent_ok += parent && !memcmp(parent, r->last, KV_KEY_BYTES);
    memcpy(r->last, key, KV_KEY_BYTES);
    r->stored++;
    (void)group, (void)n;
}

static void rec_removed(void *ud, int group, const uint8_t key[KV_KEY_BYTES])
{
    ((struct rec *)ud)->removed++;
    (void)group, (void)key;
}

static void test_pool_listener(void)
{
    struct kv_pool *p = NULL;
    /* 8 blocks of 4, at most 4 cached unreferenced */
    CHECK(kv_pool_new(&p, g_be, 1, 8, 4, 8, DT_F32, 4, NULL) == 0);
    struct rec r = {0};
    struct kv_listener l = {.stored = rec_stored, .removed = rec_removed, .ud = &r};
    kv_pool_set_listener(p, &l, 0);
    uint8_t root[KV_KEY_BYTES];
    kv_key_root(root, "t", 1);
    int32_t ids[32];
    for (int i = 0; i < 32; i++)
        ids[i] = 100 + i;
    struct kv_seq s;
    kv_seq_init(&s);
    CHECK(kv_seq_reserve(p, &s, 14, NULL) == 0);
    kv_cache_commit_tail(p, &s, root, ids, 14); /* 3 full blocks + a partial one */
    CHECK_EQ_INT(r.stored, 3);                   /* the partial block is not an event */
    CHECK(r.first_without_parent && r.first_id == 100);
    CHECK_EQ_INT(r.parent_ok, 2);
    CHECK_EQ_INT(p->cs.full_entries, 3);
    CHECK_EQ_INT(p->cs.entries, 4);
    kv_seq_release(p, &s);
    /* a second sequence takes all 8 blocks: every cached one is evicted */
    struct kv_seq t;
    kv_seq_init(&t);
    CHECK(kv_seq_reserve(p, &t, 32, NULL) == 0);
    CHECK_EQ_INT(r.removed, 3);
    CHECK_EQ_INT(p->cs.full_entries, 0);
    CHECK(kv_pool_check(p, (const struct kv_seq *const[]){&t}, 1, NULL) == 0);
    kv_seq_release(p, &t);
    kv_pool_free(p);
}

/* ---- the whole path, over ipc:// ---- */

static int recv_all(void *sock, zmq_msg_t *fr, int max)
{
    int n = 0, more = 1;
    while (more && n < max) {
        zmq_msg_init(&fr[n]);
        if (zmq_msg_recv(&fr[n], sock, 0) < 0)
            return -1;
        more = zmq_msg_more(&fr[n]);
        n++;
    }
    return n;
}

static void test_publish_and_replay(void)
{
    char pub[128], rep[128];
    snprintf(pub, sizeof pub, "ipc:///tmp/cinfer-kvev-%d-pub", (int)getpid());
    snprintf(rep, sizeof rep, "ipc:///tmp/cinfer-kvev-%d-rep", (int)getpid());
    struct kv_events_config c = {.endpoint = pub, .replay_endpoint = rep, .block_size = 4,
                                 .topic = "kv"};
    struct kv_events *k = NULL;
    struct cerr e = {0};
    CHECK(kv_events_new(&k, &c, &e) == 0);
    if (!k) {
        fprintf(stderr, "%s\n", e.msg);
        return;
    }
    struct kv_pool *p = NULL;
    CHECK(kv_pool_new(&p, g_be, 1, 8, 4, 8, DT_F32, 8, NULL) == 0);
    kv_pool_set_listener(p, kv_events_listener(k), 0);
    uint8_t root[KV_KEY_BYTES];
    kv_key_root(root, "t", 1);
    int32_t ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = i;
    struct kv_seq s;
    kv_seq_init(&s);
    CHECK(kv_seq_reserve(p, &s, 16, NULL) == 0);
    kv_cache_commit(p, &s, root, ids, 16);
    kv_seq_release(p, &s);
    /* wait (bounded) for the publisher to send the clear and the stores (one batch or two,
     * as the publisher thread happened to wake) */
    struct kv_events_stats st = {0};
    for (int i = 0; i < 3000 && st.events < 2; i++) {
        kv_events_get_stats(k, &st);
        if (st.events < 2)
            usleep(10000);
    }
    CHECK(st.batches >= 1 && st.dropped == 0);
    /* the replay socket returns every batch from seq 0, then the end marker */
    void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
    int tmo = 30000;
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    CHECK(zmq_connect(d, rep) == 0);
    uint8_t zero8[8] = {0};
    zmq_send(d, "", 0, ZMQ_SNDMORE);
    zmq_send(d, zero8, 8, 0);
    long stored = 0, cleared = 0, batches = 0;
    for (;;) {
        zmq_msg_t fr[3];
        int n = recv_all(d, fr, 3);
        CHECK(n == 3);
        if (n != 3)
            break;
        const uint8_t *s8 = zmq_msg_data(&fr[1]);
        int end = zmq_msg_size(&fr[1]) == 8 && s8[0] == 0xff && s8[7] == 0xff;
        if (!end) {
            CHECK_EQ_INT(s8[7], batches);
            batches++;
            msgpack_unpacked u;
            msgpack_unpacked_init(&u);
            CHECK(msgpack_unpack_next(&u, zmq_msg_data(&fr[2]), zmq_msg_size(&fr[2]), NULL) ==
                  MSGPACK_UNPACK_SUCCESS);
            const msgpack_object *evs = &u.data.via.array.ptr[1];
            for (uint32_t i = 0; i < evs->via.array.size; i++) {
                const msgpack_object *ev = &evs->via.array.ptr[i];
                if (str_is(&ev->via.array.ptr[0], "AllBlocksCleared"))
                    cleared++;
                else if (str_is(&ev->via.array.ptr[0], "BlockStored"))
                    stored += ev->via.array.ptr[1].via.array.size;
            }
            msgpack_unpacked_destroy(&u);
        }
        for (int i = 0; i < 3; i++)
            zmq_msg_close(&fr[i]);
        if (end)
            break;
    }
    CHECK_EQ_INT(cleared, 1);
    CHECK_EQ_INT(stored, 4); /* four consecutive blocks of one chain */
    zmq_close(d);
    zmq_ctx_term(ctx);
    kv_events_get_stats(k, &st);
    CHECK_EQ_INT(st.replays, 1);
    kv_pool_free(p);
    kv_events_free(k);
    /* a busy endpoint is an error naming it */
    struct kv_events *k2 = NULL, *k3 = NULL;
    struct kv_events_config c2 = {.endpoint = "tcp://*:0", .block_size = 4};
    CHECK(kv_events_new(&k2, &c2, &e) == 0); /* port 0: the system picks one */
    kv_events_free(k2);
    struct kv_events_config c3 = {.endpoint = "tcp://127.0.0.1:1", .block_size = 0};
    CHECK(kv_events_new(&k3, &c3, &e) == CERR_INVALID && !k3);
}

int main(void)
{
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 1};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_endpoints);
    RUN(test_encode_layouts);
    RUN(test_pool_listener);
    RUN(test_publish_and_replay);
    be_free(g_be);
    return harness_done();
}
