/* fuzz_kv_events.c — libFuzzer target for the KV-events module's input handling.
 *
 * Input: byte 0 picks the layout (bit 0) and whether to check an endpoint (bit 1); up to the
 * first NUL the bytes are an endpoint string for kv_events_endpoint_check (must not crash;
 * an accepted tcp endpoint has a port in [0, 65535]); the rest describes events: per event
 * one kind byte, one count byte (hashes, mod 5), 8 bytes per hash, a parent flag. The batch
 * is encoded and decoded back with msgpack-c: it must decode whole, as [ts, events, rank]
 * with as many events as the layout keeps. Seeds: fuzz/corpus/fuzz_kv_events/.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int layout = data[0] & 1, endpoint = data[0] & 2;
    data++, size--;
    const uint8_t *nul = memchr(data, 0, size);
    size_t elen = nul ? (size_t)(nul - data) : size;
    if (endpoint) {
        char *ep = malloc(elen + 1);
        if (!ep)
            return 0;
        memcpy(ep, data, elen);
        ep[elen] = 0;
        int binds = -1;
        if (kv_events_endpoint_check(ep, &binds, NULL) == 0) {
            require(binds == 0 || binds == 1);
            if (!strncmp(ep, "tcp://", 6)) {
                const char *c = strrchr(ep, ':');
                require(c && atol(c + 1) <= 65535);
            }
        }
        free(ep);
    }
    if (!nul)
        return 0;
    data = nul + 1;
    size -= elen + 1;
    struct kv_event evs[16];
    uint64_t hashes[16][4];
    int32_t ids[16][16];
    int n = 0, kept = 0;
    while (size >= 3 && n < 16) {
        struct kv_event *ev = &evs[n];
        memset(ev, 0, sizeof *ev);
        ev->kind = data[0] % 3;
        ev->group = data[0] >> 7;
        int nh = data[1] % 5;
        ev->has_parent = data[2] & 1;
        ev->parent = data[2];
        data += 3, size -= 3;
        for (int i = 0; i < nh && size >= 8; i++, data += 8, size -= 8) {
            memcpy(&hashes[n][i], data, 8);
            ev->n_hashes++;
        }
        ev->hashes = hashes[n];
        for (int i = 0; i < 4 * ev->n_hashes; i++)
            ids[n][i] = (int32_t)(i * 7919 - (int)ev->parent);
        ev->ids = ids[n];
        ev->n_ids = ev->kind == KVE_STORED ? 4 * ev->n_hashes : 0;
        kept += layout || ev->kind == KVE_CLEARED || ev->group == 0;
        n++;
    }
    struct kv_events_config c = {.block_size = 4, .map_layout = layout, .sliding_window = 8};
    char *buf = NULL;
    size_t len = 0;
    if (kv_events_encode(&c, evs, n, 1.5, &buf, &len))
        return 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    require(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len);
    require(u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3);
    const msgpack_object *e = &u.data.via.array.ptr[1];
    require(e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size == (uint32_t)kept);
    msgpack_unpacked_destroy(&u);
    free(buf);
    return 0;
}
