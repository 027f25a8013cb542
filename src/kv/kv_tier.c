/* kv_tier.c — the RAM prefix cache's SSD tier (see kv_pool.h, ssd.h): moving one block's
 * payload between the pool and an SSD entry, and the idle sweeps (snapshot, demotion).
 *
 * A payload is every layer's K rows of the block, then its V rows, layer by layer:
 * (n_layer, 2, block_size, row) in each layer's KV dtype (kvq_row_bytes: quantized rows are smaller). Moving one block touches only one block's
 * worth of host memory (p->ssd_buf, or the spill's own buffer): a restore streams a prefix
 * in bounded memory, on any backend (download/upload are the backend's copies).
 *
 * Restores alternate between two buffers. Where the backend has page-locked host memory
 * (be_ops.host_alloc: CUDA) an upload from it is asynchronous, so block i's copy to the
 * device runs while block i+1's file is read into the other buffer; a buffer is rewritten
 * only after a sync that follows its last upload (the H100 restored ~2.5 GB/s of an 8B
 * shape's KV with one pageable buffer, where every upload waited for its staging copy).
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "kv/kv_pool.h"
#include "kv/ssd.h"
#include "util/log.h"

size_t kv_pool_block_payload(const struct kv_pool *p)
{
    size_t n = 0;
    for (int l = 0; l < p->n_layer; l++)
        n += kv_layer_block_bytes(p, l, 0) + kv_layer_block_bytes(p, l, 1);
    return n;
}

void kv_tier_free_bufs(struct kv_pool *p)
{
    if (p->ssd_pinned && (p->ssd_busy[0] || p->ssd_busy[1]))
        p->be->ops->sync(p->be, NULL);
    for (int i = 0; i < 2; i++) {
        if (p->ssd_pinned)
            p->be->ops->host_free(p->be, p->ssd_buf[i]);
        else
            free(p->ssd_buf[i]);
        p->ssd_buf[i] = NULL;
        p->ssd_busy[i] = 0;
    }
    p->ssd_pinned = 0;
    p->ssd_slot = 0;
}

int kv_pool_attach_ssd(struct kv_pool *p, struct kv_ssd *ssd, struct cerr *e)
{
    kv_tier_free_bufs(p);
    p->ssd = NULL;
    if (!ssd)
        return 0;
    size_t n = kv_pool_block_payload(p);
    const struct be_ops *o = p->be->ops;
    if (o->host_alloc && o->host_free) {
        p->ssd_buf[0] = o->host_alloc(p->be, n);
        p->ssd_buf[1] = p->ssd_buf[0] ? o->host_alloc(p->be, n) : NULL;
        if (p->ssd_buf[0] && p->ssd_buf[1])
            p->ssd_pinned = 1;
        else { /* no page-locked memory to spare: the plain buffers below */
            o->host_free(p->be, p->ssd_buf[0]);
            p->ssd_buf[0] = NULL;
        }
    }
    if (!p->ssd_pinned && (!(p->ssd_buf[0] = malloc(n)) || !(p->ssd_buf[1] = malloc(n)))) {
        kv_tier_free_bufs(p);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    p->ssd = ssd;
    kv_tier_wire_listener(p);
    return 0;
}

void kv_tier_wire_listener(struct kv_pool *p)
{
    if (p->ssd)
        kv_ssd_set_gone(p->ssd, p->lis.disk_gone, p->lis.ud);
}

/* Copies pool block id into host buffer dst (payload layout). */
static int download_block(struct kv_pool *p, int32_t id, char *dst)
{
    for (int l = 0; l < p->n_layer; l++) {
        char *k = p->k[l], *v = p->v[l];
        size_t kb = kv_layer_block_bytes(p, l, 0), vb = kv_layer_block_bytes(p, l, 1);
        if (p->be->ops->download(p->be, dst, k + (size_t)id * kb, kb, NULL) ||
            p->be->ops->download(p->be, dst + kb, v + (size_t)id * vb, vb, NULL))
            return -1;
        dst += kb + vb;
    }
    return 0;
}

static int upload_block(struct kv_pool *p, int32_t id, const char *src)
{
    for (int l = 0; l < p->n_layer; l++) {
        char *k = p->k[l], *v = p->v[l];
        size_t kb = kv_layer_block_bytes(p, l, 0), vb = kv_layer_block_bytes(p, l, 1);
        if (p->be->ops->upload(p->be, k + (size_t)id * kb, src, kb, NULL) ||
            p->be->ops->upload(p->be, v + (size_t)id * vb, src + kb, vb, NULL))
            return -1;
        src += kb + vb;
    }
    return 0;
}

int kv_tier_spill(struct kv_pool *p, int32_t id, int flags)
{
    struct kv_bmeta *m = &p->meta[id];
    if (!p->ssd || m->n_tok <= 0)
        return 1;
    if (m->on_ssd)
        return 0;
    char *buf = malloc(kv_pool_block_payload(p));
    if (!buf || download_block(p, id, buf)) {
        free(buf);
        return 1;
    }
    if (kv_ssd_put(p->ssd, m->key, m->n_tok, buf, flags))
        return 1;
    m->on_ssd = 1;
    kv_ssd_count(p->ssd, 0, 0, 0, 1);
    if (p->lis.spilled && m->n_tok == p->block_size) /* events know only full blocks */
        p->lis.spilled(p->lis.ud, p->lis_group, m->key);
    return 0;
}

int kv_tier_has(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES], int n_tok)
{
    return p->ssd && kv_ssd_has(p->ssd, key, n_tok);
}

int kv_tier_read_into(struct kv_pool *p, int32_t id, const uint8_t key[KV_KEY_BYTES], int n_tok)
{
    if (!p->ssd)
        return -1;
    int s = p->ssd_slot;
    if (p->ssd_busy[s]) { /* its last upload may still be reading it */
        struct cerr se = {0};
        if (p->be->ops->sync(p->be, &se))
            log_warn("ssd-cache: restore: %s", se.msg);
        p->ssd_busy[0] = p->ssd_busy[1] = 0;
    }
    if (kv_ssd_read(p->ssd, key, n_tok, p->ssd_buf[s], NULL))
        return -1;
    p->ssd_busy[s] = p->ssd_pinned; /* set before: a failed upload may have queued a part */
    p->ssd_slot = s ^ 1;
    if (upload_block(p, id, p->ssd_buf[s]))
        return -1;
    kv_ssd_count(p->ssd, 0, n_tok, 1, 0);
    return 0;
}

int32_t kv_tier_restore_block(struct kv_pool *p, const uint8_t key[KV_KEY_BYTES], int n_tok,
                              const uint8_t *parent, const int32_t *ids)
{
    if (!p->ssd || !kv_ssd_has(p->ssd, key, n_tok))
        return -1;
    if (p->n_free == 0 && p->cs.lru > 0)
        kv_evict_one(p);
    if (p->n_free == 0)
        return -1;
    int32_t id = p->free_ids[p->n_free - 1];
    if (kv_tier_read_into(p, id, key, n_tok))
        return -1;
    p->n_free--;
    p->refcnt[id] = 1;
    kv_register_block(p, id, key, n_tok, parent, ids);
    p->meta[id].on_ssd = 1;
    p->dirty--; /* it came from the disk */
    return id;
}

int kv_tier_snapshot(struct kv_pool *p, int max_blocks, int exact)
{
    if (!p->ssd || (p->dirty <= 0 && !exact))
        return 0;
    int done = 0, left = 0;
    for (int32_t id = 0; id < p->n_blocks; id++) {
        struct kv_bmeta *m = &p->meta[id];
        if (m->n_tok <= 0)
            continue;
        if (exact && m->on_ssd && !kv_ssd_known(p->ssd, m->key))
            m->on_ssd = 0; /* its write failed or its file was evicted: queue it again */
        if (m->on_ssd)
            continue;
        if (done >= max_blocks || kv_tier_spill(p, id, 0)) {
            left++;
            continue;
        }
        done++;
    }
    if (!left)
        p->dirty = 0;
    return left;
}

int kv_tier_demote(struct kv_pool *p, double now, double idle_s, int max_blocks)
{
    int n = 0;
    while (p->ssd && n < max_blocks && p->lru_head >= 0 &&
           now - p->meta[p->lru_head].t_unused >= idle_s) {
        int32_t id = p->lru_head;
        if (!p->meta[id].on_ssd && kv_tier_spill(p, id, 0))
            break; /* the spill queue is full: later */
        kv_evict_one(p);
        n++;
    }
    if (n)
        kv_ssd_count(p->ssd, n, 0, 0, 0);
    return n;
}

double kv_tier_next_demote(const struct kv_pool *p, double now, double idle_s)
{
    if (!p->ssd || p->lru_head < 0)
        return -1;
    double t = p->meta[p->lru_head].t_unused + idle_s - now;
    return t > 0 ? t : 0;
}

int kv_tier_checkpoint(struct kv_pool *p, const struct kv_seq *s, int min_tokens)
{
    if (!p->ssd)
        return 0;
    /* the registered blocks not on the SSD yet: a checkpoint spills them all, in order, so
     * they are the tail of the hashed prefix (a block shared with another cached copy has
     * n_tok 0 here and is skipped) */
    int first = s->n_hashed, pending = 0;
    while (first > 0) {
        int32_t id = s->blocks[first - 1];
        if (id >= 0 && p->meta[id].n_tok > 0 && p->meta[id].on_ssd)
            break;
        first--;
        pending += id >= 0 && p->meta[id].n_tok > 0;
    }
    if (pending * p->block_size < min_tokens)
        return 0;
    int n = 0;
    for (int b = first; b < s->n_hashed; b++) {
        int32_t id = s->blocks[b];
        if (id < 0 || p->meta[id].n_tok <= 0)
            continue;
        if (kv_tier_spill(p, id, KV_SSD_URGENT))
            break; /* the queue is full: the next checkpoint tries again */
        n++;
    }
    return n;
}
