/* kv_pool.h — the paged KV cache: a fixed pool of blocks per layer, allocated once, and the
 * prefix cache that shares blocks between sequences.
 *
 * Each block holds block_size positions of K and V for every layer, laid out per layer as
 * (n_blocks, block_size, n_kv_head, head_dim) in kv_dtype. A sequence owns a block table
 * (struct kv_seq) that grows a block at a time; blocks are refcounted.
 *
 * Prefix cache (DESIGN.md §5): every full block a sequence computes gets a key =
 * SHA-256(parent key, its token ids), chained from a namespace root (model fingerprint, KV
 * scheme, adapters). A later sequence whose prompt starts with the same tokens takes those
 * blocks by reference instead of recomputing them: hits never consume the donor. A finished
 * sequence's last partial block is cached too; a hit on it is copied (copy-on-write) since
 * the new sequence will write its next positions into it. Blocks nobody references stay
 * cached in an LRU (at most max_cached_blocks of them) and are evicted when the pool needs
 * space. Engine-thread only; engine lifetime.
 */
#ifndef CINFER_KV_POOL_H
#define CINFER_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"

#define KV_KEY_BYTES 32

struct kv_bmeta; /* per-block cache bookkeeping (kv_int.h) */
struct kv_ssd;   /* the SSD tier (ssd.h) */

struct kv_cache_stats {
    long hits, misses, hit_tokens, evictions, cow_copies;
    int entries;   /* cached blocks (referenced or not) */
    int full_entries; /* of those, full blocks (what a kv_listener hears of) */
    int lru;       /* cached blocks nobody references */
};

/* An observer of the prefix cache's full blocks (KV events; vLLM's BlockStored /
 * BlockRemoved). stored runs when a full block's key becomes cached: parent is the key of
 * the block before it in its chain (NULL for a chain's first block), ids its block_size
 * tokens. removed runs when a full cached block is evicted. Partial tail blocks are not
 * reported (vLLM's events know only full blocks), nor a block whose content is already
 * cached elsewhere. Both run on the engine thread inside pool calls: they must be quick and
 * must not call into the pool. group is the value given to kv_pool_set_listener. */
struct kv_listener {
    void (*stored)(void *ud, int group, const uint8_t key[KV_KEY_BYTES], const uint8_t *parent,
                   const int32_t *ids, int n);
    void (*removed)(void *ud, int group, const uint8_t key[KV_KEY_BYTES]);
    /* The SSD tier (may be NULL): spilled runs on the engine thread when a full cached
     * block is queued for the disk (it is reported while its stored event's data is still
     * known); disk_gone runs on any thread, under the tier's lock, when an entry leaves the
     * disk index (deleted, dropped before its write, quarantined, a failed write). */
    void (*spilled)(void *ud, int group, const uint8_t key[KV_KEY_BYTES]);
    void (*disk_gone)(void *ud, const uint8_t key[KV_KEY_BYTES]);
    void *ud;
};

struct kv_pool {
    struct be *be;
    int n_layer, kv_dim, block_size, n_blocks, kv_dtype;
    int *ldt;            /* [n_layer] each layer's KV dtype (DT_F16/F32 or a kvq code) */
    void **k, **v;       /* [n_layer] backend buffers */
    int32_t *free_ids;   /* stack of free (uncached, unreferenced) block ids */
    int n_free;
    int32_t *refcnt;     /* (n_blocks) */
    /* prefix cache */
    int cache_on;
    int max_cached_blocks;   /* cap on unreferenced cached blocks (the LRU) */
    struct kv_bmeta *meta;   /* (n_blocks) */
    int32_t *table;          /* open-addressing key -> block id, -1 = empty */
    uint32_t table_mask;
    int lru_head, lru_tail;  /* oldest .. newest, -1 = none */
    void *scratch;           /* host copy buffer for copy-on-write (one layer's block) */
    struct kv_cache_stats cs;
    struct kv_listener lis;  /* all NULL = nobody listens */
    int lis_group;
    /* SSD tier (kv_tier.c), NULL when off */
    struct kv_ssd *ssd;
    void *ssd_buf[2];        /* restore staging: two block payloads (every layer's K and V) */
    int ssd_slot;            /* the buffer the next restore reads into */
    int ssd_pinned;          /* the buffers are the backend's host_alloc (uploads async) */
    int ssd_busy[2];         /* an upload from that buffer may still be in flight */
    long dirty;              /* blocks registered since the last complete snapshot */
};

/* Allocates n_blocks blocks for a model with these dimensions. max_cached_blocks < 0
 * disables the prefix cache. */
int kv_pool_new(struct kv_pool **out, struct be *be, int n_layer, int kv_dim, int block_size,
                int n_blocks, int kv_dtype, int max_cached_blocks, struct cerr *e);
/* The same with a KV dtype per layer (layer_dtype[n_layer], NULL: kv_dtype everywhere); a
 * dtype is DT_F16, DT_F32 or a quantized scheme code (backend/kvq.h). kv_dtype names the
 * pool's scheme (the SSD header's field). */
int kv_pool_new_layers(struct kv_pool **out, struct be *be, int n_layer, int kv_dim,
                       int block_size, int n_blocks, int kv_dtype, const int *layer_dtype,
                       int max_cached_blocks, struct cerr *e);
void kv_pool_free(struct kv_pool *p);
/* Installs (l NULL: removes) the observer of p's full cached blocks; group is passed back to
 * its callbacks (which pool of a model: 0 global layers, 1 sliding-window layers). */
void kv_pool_set_listener(struct kv_pool *p, const struct kv_listener *l, int group);
/* Bytes of KV one position takes across all layers (kv_dtype may be a kvq code). */
size_t kv_bytes_per_token(int n_layer, int kv_dim, int kv_dtype);
/* The view model_forward() reads. */
struct model_kv_view kv_pool_view(const struct kv_pool *p);
/* Blocks a sequence could get now: free ones plus evictable cached ones. */
int kv_pool_available(const struct kv_pool *p);

/* A sequence's block table and its place in the hash chain. */
struct kv_seq {
    int32_t *blocks;
    int n_blocks, cap;
    int n_hashed;                 /* leading full blocks whose keys are known */
    uint8_t chain[KV_KEY_BYTES];  /* key of block n_hashed - 1 (the root when 0) */
};

void kv_seq_init(struct kv_seq *s);
/* Makes s hold blocks for positions [0, n_pos), evicting unreferenced cached blocks when
 * the free list is short. Returns CERR_LIMIT when the pool is out of blocks (s keeps what
 * it had). */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos, struct cerr *e);
/* Speculative decoding's rollback: releases the blocks of s past those that hold positions
 * [0, n_pos) (rejected draft tokens' K/V), never a block whose key is registered
 * (s->n_hashed) — those hold verified positions only. */
void kv_seq_trim(struct kv_pool *p, struct kv_seq *s, int n_pos);
/* Releases every block of s (cached ones go to the LRU, others to the free list). */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);
/* Cache row of position pos (pos must be reserved). */
static inline int32_t kv_seq_slot(const struct kv_pool *p, const struct kv_seq *s, int pos)
{
    return s->blocks[pos / p->block_size] * p->block_size + pos % p->block_size;
}

/* Sliding-window layers: releases the blocks of s that lie entirely before position pos
 * (their entries become -1; the table keeps its indexing). */
void kv_seq_drop_before(struct kv_pool *p, struct kv_seq *s, int pos);
/* Blocks s still holds. */
int kv_seq_live_blocks(const struct kv_seq *s);

/* ---- prefix cache ---- */

/* The namespace root key: SHA-256 of the bytes that identify what a block's K/V depend on
 * besides the tokens (model fingerprint, KV dtype and block size, adapter set). */
void kv_key_root(uint8_t out[KV_KEY_BYTES], const void *ns, size_t n);

/* Fills an empty s (no blocks) with the longest cached prefix of ids[0..n), leaving at least
 * one id to compute: shared full blocks by reference, then a cached partial block copied
 * (copy-on-write). Returns the number of positions now in s (0 on a miss), or a negative
 * CERR_* (s is then empty again). */
int kv_cache_lookup(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                    const int32_t *ids, int n, struct cerr *e);
/* Registers every full block of s within the first n_computed positions that is not yet
 * cached (call after each step). ids are the sequence's tokens. */
void kv_cache_commit(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                     const int32_t *ids, int n_computed);
/* At the end of a sequence: also registers its last, partial block (positions
 * [full blocks * block_size, n_computed)) so the next turn can continue from it. */
void kv_cache_commit_tail(struct kv_pool *p, struct kv_seq *s, const uint8_t root[KV_KEY_BYTES],
                          const int32_t *ids, int n_computed);

/* The lookup for a model with sliding-window layers kept in their own pool ps (sequence
 * ss) beside the global layers' pool pg (sequence sg): the longest cached prefix of full
 * blocks whose global blocks are all cached AND whose sliding blocks cover the window
 * before the hit point (blocks before it are -1 in ss). Both sequences must be empty.
 * Returns the positions now in both, or a negative CERR_*. */
int kv_cache_lookup_swa(struct kv_pool *pg, struct kv_seq *sg, struct kv_pool *ps,
                        struct kv_seq *ss, const uint8_t root[KV_KEY_BYTES], const int32_t *ids,
                        int n, int window, struct cerr *e);

/* Checks the pool's invariants against the live sequences (every reference accounted for,
 * every block in exactly one of: referenced / LRU / free list, the key table consistent).
 * Returns 0, or CERR_FORMAT with the first violation in e. For tests and CINFER_CHECK_KV. */
int kv_pool_check(const struct kv_pool *p, const struct kv_seq *const *seqs, int n_seqs,
                  struct cerr *e);

/* ---- the SSD tier (kv_tier.c) ----
 * With an SSD tier attached, the lookup continues on disk where the RAM chain ends (every
 * request, lone or batched), an evicted block is spilled before it is dropped, and the
 * engine calls the snapshot and demotion sweeps while it is idle. */

/* Bytes of one block across all layers, K and V (one SSD entry's payload). */
size_t kv_pool_block_payload(const struct kv_pool *p);
/* Attaches ssd (borrowed; it must outlive its use by p). Returns 0 or CERR_NOMEM. */
int kv_pool_attach_ssd(struct kv_pool *p, struct kv_ssd *ssd, struct cerr *e);
/* Queues up to max_blocks cached blocks that are not on the SSD yet. Returns how many are
 * still left (0: everything cached is on disk or queued). Stops early when the spill queue
 * is full (those blocks stay for a later call). exact: ask the SSD index instead of trusting
 * the blocks' flags (a flush: blocks whose write failed or whose file was evicted are
 * queued again). */
int kv_tier_snapshot(struct kv_pool *p, int max_blocks, int exact);
/* Idle demotion: LRU blocks unused for idle_s seconds go to the SSD and their pool blocks
 * to the free list (at most max_blocks). Returns the number demoted. */
int kv_tier_demote(struct kv_pool *p, double now, double idle_s, int max_blocks);
/* A generation checkpoint of a running sequence: when its registered (hashed) blocks not yet
 * on the SSD hold at least min_tokens positions, queues them all as urgent (written while
 * the engine runs). Returns the blocks queued. */
int kv_tier_checkpoint(struct kv_pool *p, const struct kv_seq *s, int min_tokens);
/* Seconds until the oldest LRU block becomes demotable (0 = now), or -1 when the LRU is
 * empty. */
double kv_tier_next_demote(const struct kv_pool *p, double now, double idle_s);

#endif
