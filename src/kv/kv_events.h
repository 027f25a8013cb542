/* kv_events.h — KV-cache events in vLLM's wire format, for cache-aware routers (llm-d's KV
 * indexer, NVIDIA Dynamo's KV router, SGLang's model gateway): what the prefix cache holds,
 * published as it changes.
 *
 * Wire (vllm/distributed/kv_events.py): a ZMQ PUB socket sends multipart messages
 * (topic, seq as 8 bytes big-endian, msgpack payload); the payload is an EventBatch
 * [ts, events, data_parallel_rank] whose events are BlockStored (block_hashes,
 * parent_block_hash, token_ids, block_size, lora_id, medium, ...), BlockRemoved
 * (block_hashes, medium) and AllBlocksCleared. Two layouts of an event exist in the field:
 * "array" (msgspec array_like: the tag first, then the fields in order — vLLM's documented
 * subscriber and its releases up to 0.10) and "map" (a tagged map {"type": "BlockStored",
 * ...} with omit_defaults — vLLM main, and the only one the vLLM Router reads; cinfer
 * serve's default). A block hash is the low 64 bits of cinfer's SHA-256
 * block key (its last 8 bytes, big-endian) as an unsigned integer, as vLLM's integer form
 * is; a chain's first block has parent nil. An optional ROUTER socket replays past batches:
 * a client sends the first seq it wants (8 bytes big-endian) and gets (seq, payload) for
 * each buffered batch from there, then (-1, empty).
 *
 * Threads: the listener callbacks (kv_events_listener) run on the engine thread and only
 * append to a locked queue; one publisher thread of this module owns both sockets, encodes
 * and sends. Lifetime: kv_events_new .. kv_events_free, longer than the engine it observes.
 */
#ifndef CINFER_KV_EVENTS_H
#define CINFER_KV_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_pool.h"
#include "util/err.h"

struct kv_events;

struct kv_events_config {
    const char *endpoint;        /* PUB endpoint: tcp://HOST:PORT (HOST '*' = every
                                    interface), ipc:// or inproc://. vLLM's rule: bind when
                                    it holds '*' or '::' or is ipc/inproc, else connect */
    const char *replay_endpoint; /* ROUTER endpoint (always binds); NULL = no replay */
    const char *topic;           /* first frame of each message; NULL = "" */
    const char *medium;          /* the tier named in events; NULL = "GPU" (the working pool) */
    int block_size;              /* positions per block (BlockStored.block_size) */
    int map_layout;              /* 1 = tagged maps (vLLM main), 0 = arrays (older vLLM) */
    int data_parallel_rank;      /* EventBatch.data_parallel_rank */
    int replay_batches;          /* batches kept for replay; 0 = 10000 */
    int sliding_window;          /* group 1's window (map layout's
                                    kv_cache_spec_sliding_window); 0 = none */
    int disk_tier;               /* an SSD tier is attached: keep each stored block's tokens
                                    and parent for its DISK-medium event when it is spilled
                                    (0: spills are not reported, nothing is kept) */
};

/* Checks an endpoint: tcp://HOST:PORT (HOST non-empty, '*' allowed, PORT in [0, 65535],
 * IPv6 hosts in brackets), ipc://PATH or inproc://NAME. *binds (may be NULL) gets vLLM's
 * bind-or-connect choice. Returns 0, or CERR_INVALID with a sentence in e. */
int kv_events_endpoint_check(const char *ep, int *binds, struct cerr *e);

/* Opens the sockets (a busy port or a bad endpoint fails here, naming it) and starts the
 * publisher thread, which first publishes AllBlocksCleared (a restarted server's cache is
 * empty). Returns 0 and *out, or a negative CERR_* with e filled. */
int kv_events_new(struct kv_events **out, const struct kv_events_config *c, struct cerr *e);
/* Publishes what is queued, stops the thread and closes the sockets. NULL is a no-op. */
void kv_events_free(struct kv_events *ev);
/* The listener to hand to the engine (engine_config.kv_listener); valid while ev is. */
const struct kv_listener *kv_events_listener(struct kv_events *ev);
/* Any thread: queues an AllBlocksCleared. */
void kv_events_cleared(struct kv_events *ev);
/* Any thread: counters since start. */
struct kv_events_stats { long batches, events, dropped, replays; };
void kv_events_get_stats(struct kv_events *ev, struct kv_events_stats *out);

/* ---- the encoding, on its own (tests and fuzzing) ---- */

enum { KVE_STORED = 0, KVE_REMOVED, KVE_CLEARED };
/* The medium of the SSD tier's blocks (the working pool's is the config's medium, "GPU"). */
#define KV_EVENTS_DISK "DISK"

/* One event: STORED carries n_hashes consecutive blocks of one chain (parent = the block
 * before the first; has_parent 0 = the chain's start) and their n_hashes * block_size
 * token ids; REMOVED carries n_hashes hashes; CLEARED nothing. */
struct kv_event {
    int kind;
    int group;          /* 0 global layers ("full_attention"), 1 sliding-window layers */
    int disk;           /* the SSD tier's copy (medium KV_EVENTS_DISK), else the pool's */
    uint64_t *hashes;
    int n_hashes;
    uint64_t parent;
    int has_parent;
    int32_t *ids;
    int n_ids;
};

/* The 64-bit hash of a block key (its last 8 bytes, big-endian). */
uint64_t kv_events_hash(const uint8_t key[KV_KEY_BYTES]);

/* Encodes an EventBatch of evs[0..n) with timestamp ts (Unix seconds) in c's layout into a
 * malloc'd buffer (*out, *len). Returns 0, or CERR_NOMEM. */
int kv_events_encode(const struct kv_events_config *c, const struct kv_event *evs, int n,
                     double ts, char **out, size_t *len);

#endif
