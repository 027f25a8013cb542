/* kv_int.h — internals shared by kv_pool.c (the RAM cache) and kv_tier.c (its SSD tier).
 * Not for use outside src/kv. Engine thread only.
 */
#ifndef CINFER_KV_KV_INT_H
#define CINFER_KV_KV_INT_H

#include "kv/kv_pool.h"

struct kv_bmeta {
    uint8_t key[KV_KEY_BYTES];
    int32_t n_tok;       /* positions the key covers (block_size or a partial count); 0 = not cached */
    int32_t prev, next;  /* LRU links */
    uint8_t in_lru;
    uint8_t on_ssd;      /* queued for or written to the SSD tier (cleared when re-registered) */
    double t_unused;     /* clock_now_s() when it entered the LRU (idle demotion) */
};

/* One block of layer l's K (which 0) or V (1), in bytes (per-layer KV dtypes). */
size_t kv_layer_block_bytes(const struct kv_pool *p, int l, int which);
/* Drops the oldest LRU block to the free list, spilling it to the SSD tier first. */
void kv_evict_one(struct kv_pool *p);
/* Caches block id under key (unless it or the key is cached already). */
/* parent / ids: the chain key before the block (NULL for the first) and its tokens, for the
 * listener (KV events); a restored block is reported like a computed one. */
void kv_register_block(struct kv_pool *p, int32_t id, const uint8_t key[KV_KEY_BYTES], int n_tok,
                       const uint8_t *parent, const int32_t *ids);

/* ---- kv_tier.c ---- */

/* Copies block id out of the pool and queues it for the SSD (flags: kv_ssd_put's).
 * Marks it on_ssd when queued. Returns 0 when queued (or already there), 1 when not. */
int kv_tier_spill(struct kv_pool *p, int32_t id, int flags);
/* 1 when the SSD tier has key with n_tok tokens. */
int kv_tier_has(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES], int n_tok);
/* Reads key's block from the SSD into pool block id. Returns 0, or -1 (a miss). */
int kv_tier_read_into(struct kv_pool *p, int32_t id, const uint8_t key[KV_KEY_BYTES], int n_tok);
/* A full block from the SSD: takes a free (or evicted) pool block, reads key into it and
 * caches it. Returns the block id, referenced once by the caller, or -1 (not on disk, no
 * block free, or the file failed its checks). */
int32_t kv_tier_restore_block(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES], int n_tok,
                              const uint8_t *parent, const int32_t *ids);
/* Hands the listener's disk_gone to the attached SSD tier (after either changes). */
void kv_tier_wire_listener(struct kv_pool *p);
/* Frees the restore buffers (waiting for uploads from them first). */
void kv_tier_free_bufs(struct kv_pool *p);

#endif
