/* backend.h — the backend vtable: memory and the ops a transformer forward needs.
 *
 * A backend (CPU now, CUDA later) is a struct be whose first member points at its ops.
 * All activation buffers are contiguous float32 in the backend's memory (host memory on the
 * CPU backend, device memory on CUDA); shapes are given in the comments as (rows, cols)
 * with cols contiguous. Weights are struct be_tensor in their file dtype; kernels consume
 * them natively (quantized blocks are never expanded to a whole float copy).
 *
 * Ops return void: shapes are validated by the caller (the model layer) at load time and
 * nothing inside an op can fail on the CPU. A backend whose ops can fail asynchronously
 * (CUDA) latches the first error and reports it from sync(). Ops are called from one thread
 * (the engine thread); a backend may use its own worker threads inside an op.
 *
 * Entries marked OPTIONAL may be NULL; callers check before use.
 */
#ifndef CINFER_BACKEND_BACKEND_H
#define CINFER_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/dtype.h"
#include "util/err.h"

/* A weight tensor. ne[0] is the row length (innermost), ne[1] the number of rows; higher
 * dims are 1 for the 1-D/2-D weights a transformer uses. data is in backend memory; on the
 * CPU backend it usually points into the mmap'd model file (process lifetime). */
struct be_tensor {
    int dtype;          /* enum dtype */
    int64_t ne[4];
    void *data;
    size_t nbytes;
    const char *name;   /* points into the model's storage; for messages only */
};

enum be_act { BE_ACT_SILU = 0, BE_ACT_GELU_TANH = 1 };
enum be_rope_mode { BE_ROPE_NORM = 0 /* pairs (2i, 2i+1) */, BE_ROPE_NEOX = 1 /* (i, i+rot/2) */ };

/* Attention over a paged KV cache for one layer.
 * Cache layout per layer: (n_blocks, block_size, n_kv_head, head_dim), dtype kv_dtype
 * (DT_F32 or DT_F16). Token t of the step belongs to sequence seq[t] at position pos[t];
 * the K/V of every position 0..pos[t] of that sequence are already in the cache (the caller
 * stores this step's K/V with kv_store first), so one call serves mixed prefill/decode.
 * Position p of sequence s lives in block block_tables[s*max_blocks + p/block_size], row
 * p % block_size. Token t attends to positions p <= pos[t] with pos[t] - p < window
 * (window 0 = unlimited). Query head h uses KV head h / (n_head / n_kv_head). */
struct be_attn {
    int n_tok, n_head, n_kv_head, head_dim;
    float scale;   /* multiplies q.k before softmax */
    float softcap; /* > 0: score = softcap * tanh(score / softcap) */
    int window;
    const int32_t *pos;          /* (n_tok) */
    const int32_t *seq;          /* (n_tok) */
    const int32_t *block_tables; /* (n_seq, max_blocks) */
    int max_blocks, block_size;
    int kv_dtype;
    const void *k_cache, *v_cache;
    /* a hint (0 is always correct): 1 = no two tokens of the step belong to one sequence (a
     * decode step), so no token reads K/V that another token of the step stored; a backend
     * may then fold the rope_kv_store just before into this call (CUDA: CINFER_KVQ_STORE) */
    int one_per_seq;
};

/* A fused projection (the OPTIONAL op matmul_fused): up to three weights that read the same
 * input x (n, K), each W_i (M_i, K) of one dtype and one K.
 *   BE_MM_PLAIN: y[i] (n, M_i) = x W_i^T for every i (e.g. q, k, v in one pass);
 *   BE_MM_GLU:   n_w = 2 (gate, up; M_0 = M_1): y[0] (n, M_0) = act(x W_0^T) * (x W_1^T);
 *   BE_MM_ADD:   n_w = 1: y[0] (n, M_0) += x W_0^T (a residual add).
 * Each y[i] is contiguous (n, M_i) and does not overlap x. The result must equal (up to the
 * backend's stated matmul tolerance) the unfused ops matmul / act_mul / add.
 * rope (PLAIN with n_w = 3: q, k, v): then also rope_kv_store(*rope) on y[0], y[1], y[2]
 * (rope's q, k, v pointers are ignored), with exactly the results of the unfused pair.
 * chain (a hint; 0 is always correct): on an ADD, 1 = the next matmul_fused call norms this
 * y[0] (its x = y[0], same n, with the norm next_norm), so the backend may gather now what
 * that norm needs; on a call with a norm, 1 = x is the y[0] of the immediately preceding
 * matmul_fused call, an ADD with chain = 1 and next_norm = this norm, unchanged since. The
 * norm may then be computed in another fixed order (its sum of squares reduced otherwise,
 * the row's 1/rms applied after the dot product: rounding only; batch invariant all the
 * same). */
enum be_mm_mode { BE_MM_PLAIN = 0, BE_MM_GLU = 1, BE_MM_ADD = 2 };
struct be_rope_kv;
struct be_mm {
    int mode, act; /* act: enum be_act (GLU only) */
    int n;         /* rows of x */
    const float *x;
    const float *norm; /* non-NULL: x is first replaced by rmsnorm(x) * norm row by row (K
                        * floats, epsilon eps), as the op rmsnorm would (up to rounding) */
    float eps;
    int n_w;
    const struct be_tensor *w[3];
    float *y[3];
    const struct be_rope_kv *rope; /* NULL, or see above */
    int chain;                     /* see above */
    const float *next_norm;        /* ADD with chain = 1: the next call's norm, or NULL */
};

/* rope on q and k, then kv_store of the rotated k and of v (the OPTIONAL op rope_kv_store):
 * the same results as rope(q), rope(k), kv_store(k, v) with these arguments (k is rotated in
 * place too). */
struct be_rope_kv {
    float *q, *k;     /* (n_tok, n_head, head_dim), (n_tok, n_kv_head, head_dim) */
    const float *v;   /* (n_tok, n_kv_head * head_dim) */
    const int32_t *pos, *slots;
    int n_tok, n_head, n_kv_head, head_dim, rot_dim, mode;
    const float *inv_freq;
    float mscale;
    void *k_cache, *v_cache;
    int kv_dtype;
};

/* The output of the OPTIONAL op topcand, per row: a header, then cap entries (the first nc
 * valid). Rows are be_topcand_stride(cap) bytes apart; the entries follow the header. */
struct be_topcand_hdr {
    float mx;       /* the row's largest value (NaN ignored; -inf when there is none) */
    float sum;      /* sum over the row of e^(x_i - mx); 0 when mx is not finite */
    int32_t argmax; /* the argmax rule of the op argmax */
    int32_t nc;     /* entries that follow; -1 = more than cap (overflow: none written) */
};
struct be_topcand_ent {
    float logit; /* x_i, as stored */
    int32_t id;  /* i */
};
#define BE_TOPCAND_CAP_MAX 4096
static inline size_t be_topcand_stride(int cap)
{
    return sizeof(struct be_topcand_hdr) + (size_t)cap * sizeof(struct be_topcand_ent);
}
/* The bounds the candidates may stop at: cut(k) = mx - span * k / BE_TOPCAND_BINS, computed
 * in float in this order (k = 0 .. BE_TOPCAND_BINS; cut(BE_TOPCAND_BINS) = mx - span). */
#define BE_TOPCAND_BINS 128
static inline float be_topcand_cut(float mx, float span, int k)
{
    return mx - span * (float)k / (float)BE_TOPCAND_BINS;
}

/* The OPTIONAL op lora (unmerged low-rank adapters, model/lora.h): rows of one step grouped
 * by adapter set. A group's rows (indices into x and y, backend memory) all take the same
 * terms; term i is a (rank, K) and bt (rank, M), both in backend memory (bt is B
 * transposed, so both are rank rows), and scale. For each row r of a group:
 *   t_i = (x[r] a_i^T) * scale_i  (rank floats; each a dot over K in a fixed order),
 *   d   = sum over i in order of t_i bt_i (each element summed over j in order from 0),
 *   y[r] += d.
 * The arithmetic of a row depends only on its x row and its group's terms (batch
 * invariant). Rows of different groups are disjoint. A term's a and bt hold dtype elements
 * (DT_F32, DT_F16 or DT_BF16: model/lora.h's storage), each converted to float exactly
 * before its multiply. */
#define BE_LORA_MAX_TERMS 4
struct be_lora_term {
    const void *a, *bt;
    int rank;
    int dtype;
    float scale;
};
struct be_lora_grp {
    const int32_t *rows; /* (n_rows) backend memory */
    int n_rows;
    int n_terms;
    struct be_lora_term t[BE_LORA_MAX_TERMS];
};

struct be;

#define BE_FETCH_MAX 65536 /* bytes of one fetch_start */

struct be_ops {
    const char *name;
    /* OPTIONAL. NULL: every op gives a row the same bits whatever the step's row count.
     * Else the most rows of a step whose rows get the bits of a one-row step, for weights
     * of this dtype (CUDA: 16 for BF16/F16, the skinny kernel; 8 for the others; larger
     * steps take cuBLAS): the model then runs a step's decode rows apart from larger prompt
     * chunks (model_batch.n_lead). */
    int (*exact_rows)(struct be *b, int dtype);
    void (*destroy)(struct be *b);

    /* ---- memory ---- */
    /* Backend memory, 64-byte aligned; NULL on failure (never aborts). */
    void *(*alloc)(struct be *b, size_t bytes);
    void (*free)(struct be *b, void *p);
    /* host -> backend and backend -> host copies of n bytes. */
    int (*upload)(struct be *b, void *dst, const void *src, size_t n, struct cerr *e);
    int (*download)(struct be *b, void *dst, const void *src, size_t n, struct cerr *e);
    /* OPTIONAL (with host_free). Page-locked host memory of n bytes (NULL on failure). An
     * upload from it is asynchronous: the source must stay unchanged until the next sync
     * (the SSD tier double-buffers its restores in it). NULL: the caller uses malloc. */
    void *(*host_alloc)(struct be *b, size_t n);
    void (*host_free)(struct be *b, void *p);
    /* Makes t->data usable by the ops: the CPU backend keeps the host (mmap) pointer, a
     * device backend copies to device memory and replaces t->data. */
    int (*weight_prepare)(struct be *b, struct be_tensor *t, struct cerr *e);
    /* Waits for queued work; returns the first latched error, if any. */
    int (*sync)(struct be *b, struct cerr *e);

    /* ---- ops ---- */
    /* out (n, w->ne[0]) = rows ids[0..n) of w, converted to float. */
    void (*get_rows)(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n);
    /* y (n, w->ne[1]) = x (n, w->ne[0]) * w^T. Rows of x are independent: the result of a
     * row must not depend on n (batch invariance); reductions run in a fixed order. */
    void (*matmul)(struct be *b, float *y, const float *x, int n, const struct be_tensor *w);
    /* y (rows, dim) = x / rms(x) * w  (w: dim floats). y may equal x. */
    void (*rmsnorm)(struct be *b, float *y, const float *x, const float *w, int rows, int dim,
                    float eps);
    /* In place on x (n_tok, n_head, head_dim): rotates the first rot_dim dims of each head
     * by angle pos[t] * inv_freq[i] (i < rot_dim/2), cos/sin multiplied by mscale. */
    void (*rope)(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
                 int rot_dim, int mode, const float *inv_freq, float mscale);
    /* Writes k, v (n_tok, kv_dim) into cache rows slots[t] (slot = block * block_size + row;
     * a row is kv_dim = n_kv_head * head_dim elements), converting to kv_dtype. */
    void (*kv_store)(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                     const float *v, const int32_t *slots, int n_tok, int kv_dim);
    /* out (n_tok, n_head * head_dim) = softmax(q k^T) v per the rules of struct be_attn,
     * computed with an online softmax (no (n_tok, ctx) score matrix). */
    void (*attention)(struct be *b, float *out, const float *q, const struct be_attn *a);
    /* y (n) = act(gate) * up. */
    void (*act_mul)(struct be *b, float *y, const float *gate, const float *up, int64_t n,
                    int act);
    /* y (n) = a + b. y may alias a or b. */
    void (*add)(struct be *b, float *y, const float *a, const float *x, int64_t n);
    /* y (rows, dim) += bias (dim), every row. */
    void (*add_row)(struct be *b, float *y, const float *bias, int rows, int dim);
    /* y (n) = x * s. y may equal x. */
    void (*scale)(struct be *b, float *y, const float *x, float s, int64_t n);
    /* OPTIONAL. y (n) = s * tanh(x / s). */
    void (*softcap)(struct be *b, float *y, const float *x, float s, int64_t n);

    /* OPTIONAL (device backends). Free and total bytes of the device's memory, for the
     * memory plan; NULL = the backend uses host memory. Returns 0 or a CERR_*. */
    int (*mem_info)(struct be *b, size_t *free_bytes, size_t *total_bytes, struct cerr *e);
    /* OPTIONAL. The fused projection described at struct be_mm. A backend may decline no
     * case: it runs the unfused sequence itself when it has no fused kernel for it. */
    void (*matmul_fused)(struct be *b, const struct be_mm *m);
    /* OPTIONAL. The fused rope and K/V store described at struct be_rope_kv. */
    void (*rope_kv_store)(struct be *b, const struct be_rope_kv *r);
    /* OPTIONAL. out (rows) int32 in backend memory = index of the largest value of each row
     * of x (rows, n): lowest index on ties, NaN never wins, a row without a value above -inf
     * gives its first -inf, a row of NaN gives 0 (as sampler_argmax). */
    void (*argmax)(struct be *b, int32_t *out, const float *x, int rows, int n);
    /* OPTIONAL. Sampling candidates of each row of x (rows, n), so a sampled step copies
     * back rows * be_topcand_stride(cap) bytes instead of the logits. out (backend memory)
     * row r at r * be_topcand_stride(cap): a struct be_topcand_hdr {mx, sum, argmax, nc},
     * then the candidates, a complete prefix of the row's ranking (descending x_i, ties by
     * lower i; -0 and +0 are equal): every i with x_i >= cut(K) (be_topcand_cut), K the
     * largest k <= BE_TOPCAND_BINS with at most cap such values; so the whole span below
     * mx when it holds at most cap values, else a narrower one. nc = their count; nc = -1
     * (no entries) when more than cap values equal mx, or when mx is not finite (no value
     * above -inf, or +inf; sum is then 0). sum is reduced in a fixed order that depends
     * only on n (never on rows or on other rows: batch invariant); its rounding may differ
     * between backends (CUDA: within 1e-5 relative of the CPU's). mx, argmax and the
     * entries are exact. 1 <= cap <= BE_TOPCAND_CAP_MAX, span finite and >= 0. */
    void (*topcand)(struct be *b, void *out, const float *x, int rows, int n, float span,
                    int cap);
    /* OPTIONAL. Samples each row of x (rows, n) where it lies (backend/be_sample.h: logit_bias
     * and the penalties in place, then the argmax rule above or the exact temperature
     * draw): out (rows) int32 ids in backend memory. params (backend memory): rows struct
     * be_sample_row, then the aux words their offsets name. A row with skip set is left
     * alone (out -1). prev (backend memory, rows ids) continues the history of rows with
     * use_prev (NULL when no row sets it). A row's id and processed logits depend only on
     * its own row and parameters (batch invariant) and equal be_sample_ref's, bit for bit. */
    void (*sample)(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
                   const int32_t *prev);
    /* OPTIONAL (overlapped steps, model_forward_queue). fetch_start queues a copy of n <=
     * BE_FETCH_MAX bytes of backend memory at src into staging slot `slot` (0 or 1) behind
     * the work queued so far, and returns without waiting. fetch_wait waits for that copy
     * only (work queued after it may still run), copies the n bytes to dst and returns the
     * first latched error, if any (as sync). A slot holds one copy: start, wait, start...
     * A backend without them is synchronous (the CPU's): the caller downloads instead. */
    int (*fetch_start)(struct be *b, int slot, const void *src, size_t n, struct cerr *e);
    int (*fetch_wait)(struct be *b, int slot, void *dst, size_t n, struct cerr *e);
    /* OPTIONAL. Makes the calling thread able to run the ops (a device backend selects its
     * device for that thread). Called once by any thread other than the creator that will
     * run ops, e.g. the engine thread. Returns 0 or a CERR_*. */
    int (*bind_thread)(struct be *b, struct cerr *e);
    /* OPTIONAL. The LoRA deltas of one projection (struct be_lora_grp above): x (rows, K),
     * y (rows, M), groups g[0..n_grp) (host memory; their rows and weights in backend
     * memory). NULL: the backend cannot run adapters (mounting one is refused). */
    void (*lora)(struct be *b, float *y, const float *x, int K, int M,
                 const struct be_lora_grp *g, int n_grp);
    /* OPTIONAL (with lora). lora of the rows rmsnorm(x, norm, eps) (as the op rmsnorm
     * computes them, up to rounding: each row's sum of squares in a fixed order) for x the
     * un-normed rows: the norm rides on the deltas (a device backend saves the launch that
     * would write the normed copy). NULL: the caller norms into a buffer and calls lora. */
    void (*lora_norm)(struct be *b, float *y, const float *x, const float *norm, float eps,
                      int K, int M, const struct be_lora_grp *g, int n_grp);
};

struct be {
    const struct be_ops *ops;
};

struct be_config {
    int n_threads; /* CPU worker threads; <= 0 = number of online cores */
    int device;    /* GPU index for device backends */
    int graphs;    /* device backends: replay repeated steps as graphs; 1 on, -1 off,
                    * 0 = the backend's default (CUDA: on unless CINFER_CUDA_GRAPHS=0) */
};

/* Creates a backend by name: "cpu", "cuda" (builds with the CUDA backend), or "auto" (cuda
 * when the build has it and a GPU answers, else cpu). Returns NULL and fills e on failure. */
struct be *be_new(const char *name, const struct be_config *cfg, struct cerr *e);
static inline void be_free(struct be *b)
{
    if (b)
        b->ops->destroy(b);
}

#endif
