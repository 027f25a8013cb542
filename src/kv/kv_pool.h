/* kv_pool.h — the paged KV cache: a fixed pool of blocks per layer, allocated once.
 *
 * Each block holds block_size positions of K and V for every layer, laid out per layer as
 * (n_blocks, block_size, n_kv_head, head_dim) in kv_dtype. Blocks are refcounted so that a
 * later prefix cache can share them. A sequence owns a block table (struct kv_seq) that
 * grows a block at a time. Engine-thread only; engine lifetime.
 */
#ifndef CINFER_KV_POOL_H
#define CINFER_KV_POOL_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"

struct kv_pool {
    struct be *be;
    int n_layer, kv_dim, block_size, n_blocks, kv_dtype;
    void **k, **v;       /* [n_layer] backend buffers */
    int32_t *free_ids;   /* stack of free block ids */
    int n_free;
    int32_t *refcnt;     /* (n_blocks) */
};

/* Allocates n_blocks blocks for a model with these dimensions. */
int kv_pool_new(struct kv_pool **out, struct be *be, int n_layer, int kv_dim, int block_size,
                int n_blocks, int kv_dtype, struct cerr *e);
void kv_pool_free(struct kv_pool *p);
/* Bytes of KV one position takes across all layers. */
size_t kv_bytes_per_token(int n_layer, int kv_dim, int kv_dtype);
/* The view model_forward() reads. */
struct model_kv_view kv_pool_view(const struct kv_pool *p);

/* A sequence's block table. */
struct kv_seq {
    int32_t *blocks;
    int n_blocks, cap;
};

void kv_seq_init(struct kv_seq *s);
/* Makes s hold blocks for positions [0, n_pos). Returns CERR_LIMIT when the pool is out
 * of blocks (s keeps what it had). */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos, struct cerr *e);
/* Releases every block of s back to the pool. */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);
/* Cache row of position pos (pos must be reserved). */
static inline int32_t kv_seq_slot(const struct kv_pool *p, const struct kv_seq *s, int pos)
{
    return s->blocks[pos / p->block_size] * p->block_size + pos % p->block_size;
}

#endif
