/* cuda_int.cuh — internals of the CUDA backend, shared by the .cu files of backend/cuda.
 *
 * struct cu_be is the backend object: one stream, one cuBLAS handle, grow-only scratch
 * buffers (used by one op at a time, on the stream), the list of weight copies the backend
 * owns, and the latched first error. Every launch goes through cu_after_launch(), which
 * latches a launch error; sync() reports it.
 */
#ifndef CINFER_BACKEND_CUDA_INT_CUH
#define CINFER_BACKEND_CUDA_INT_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "backend/cuda/cuda.h"
}

enum { CU_SCRATCH_X = 0, CU_SCRATCH_W = 1, CU_SCRATCH_ATT = 2, CU_SCRATCH_F = 3,
       CU_SCRATCH_DEC = 4, /* cuda_attn_dec.cu (fused merge: counters kept zero + partials) */
       CU_SCRATCH_N = 5,   /* matmul_fused: the normed x */
       CU_SCRATCH_TC = 6,  /* cuda_sample.cu: topcand's per-slice partials */
       CU_SCRATCH_LORA = 7, /* cuda_lora_sg.cu: the shrink's per-chunk partials */
       CU_SCRATCH_KVQ = 8,  /* cuda_kvq_dec.cu (fused merge: counters kept zero + partials) */
       CU_N_SCRATCH = 9 };

/* Most rows of x the skinny tensor-core matmul (cuda_mmf.cu) takes; larger steps use cuBLAS.
 * CINFER_CUDA_SKINNY_MAX (0..SG_MAX_N) lowers it (0 = off), for measurements. */
enum { SG_MAX_N = 16, CU_SS_TILES = 2048 /* widest chained ADD output: 16 * this */ };

/* Row invariance (cu_be.inv_rows, CINFER_CUDA_INVARIANT_ROWS): steps of up to inv_rows rows
 * (tokens) give every row the bits of a one-row step, so a speculative verify row of k + 1
 * tokens, a prompt chunk and a decode row agree. Matmuls of up to inv_rows rows run the
 * skinny tensor-core kernel (16-bit weights) or the matvec in groups of 8 rows (other
 * types), both with a per-element arithmetic that depends only on K; attention of up to
 * inv_rows tokens runs the <= 64-token kernels over consecutive 64-token ranges. Larger
 * steps (long prompt chunks) take cuBLAS and the tensor-core attention (fast, not
 * invariant). CU_INV_DEFAULT covers 8 rows with 10 drafts each plus their decode rows;
 * CU_INV_ALL ("all") makes every step invariant (prompt chunks of any size: a prefix-cache
 * hit gives the cold run's bits; prefill slower; the chained norm is then off, its
 * buffers being sized by rows); 0 keeps the old limits (16 skinny rows, 8 matvec rows, 64
 * attention tokens). */
enum { CU_INV_DEFAULT = 128, CU_INV_ALL = 1 << 30 };

struct cu_graphs;

/* CINFER_CUDA_REPEAT=qkv,out,glu,down,cls,norm,attn,merge (measurement only: the results are
 * wrong): each named kernel class is launched twice where it runs, so a step's time grows by
 * what one more of them costs in place (between its real neighbours, in the graph). */
enum {
    CU_REP_QKV = 1, CU_REP_OUT = 2, CU_REP_GLU = 4, CU_REP_DOWN = 8, CU_REP_CLS = 16,
    CU_REP_NORM = 32, CU_REP_ATTN = 64, CU_REP_MERGE = 128,
};

struct cu_be {
    struct be base;
    int device;
    int n_sm;
    size_t smem_optin; /* largest dynamic shared memory a block may ask for */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *scratch[CU_N_SCRATCH];
    size_t scratch_cap[CU_N_SCRATCH];
    void **weights; /* device copies made by weight_prepare (freed at destroy) */
    int n_weights, cap_weights;
    size_t peak_used;
    int precise;        /* CINFER_CUDA_PRECISE=1: 16-bit GEMM inputs split into hi + lo */
    int sg_max_n;       /* skinny matmul for steps of 1..sg_max_n rows (<= SG_MAX_N) */
    int inv_rows;       /* row-invariant steps of up to this many rows (see CU_INV_DEFAULT;
                         * 0: the old limits) */
    int ss_rows;        /* rows ss_buf / xg_buf hold (SG_MAX_N, or inv_rows when larger) */
    int pdl;            /* launch the decode kernels with programmatic dependent launch */
    int sg_precise;     /* skinny matmul x as hi + lo 16-bit parts (CINFER_CUDA_SKINNY_PRECISE=1;
                         * CINFER_CUDA_PRECISE=1 implies it) */
    int fuse_rope;      /* q/k/v projection does the rope + K/V store (CINFER_CUDA_FUSE_ROPE=0: no) */
    int sg_warps_qkv;   /* 0, or 8 / 16 warps for the skinny q/k/v (CINFER_CUDA_SG_WARPS_QKV) */
    int sg_warps_glu;   /* the same for gate/up (CINFER_CUDA_SG_WARPS_GLU) */
    int sg_wave;        /* which projections take 8 warps when tiles are many (sg_warps) */
    int fuse_norm;      /* chained ADD -> norm: the norm rides on the skinny q/k/v and gate/up
                         * (1, the default), on q/k/v only (2), off (0) (CINFER_CUDA_FUSE_NORM) */
    float *ss_buf;      /* (SG_MAX_N, CU_SS_TILES): sums of squares of 16-row tiles of the
                         * last chained ADD's output (cuda_mmf.cu); NULL: no fusion */
    float *xg_buf;      /* (SG_MAX_N, 16 * CU_SS_TILES), in ss_buf's allocation: that output
                         * times the next norm's weights */
    const float *ss_y;  /* recording (cuda_graph.cu): the last call was a chained ADD that
                         * gathers (ss_ok), its output, rows, width and next norm */
    const float *ss_g;
    int ss_n, ss_m, ss_ok;
    int64_t n_chained;  /* consumers recorded chained (be_cuda_chained) */
    int64_t n_kvq_fmerge, n_kvq_fstore; /* quantized decode launches with the fused merge /
                                         * the K/V store inside (be_cuda_kvq_fused) */
    int64_t n_kvq_tc;   /* ... with the keys' scores on the tensor cores (be_cuda_kvq_tc) */
    int64_t n_kvq_one;  /* ... with one warp a head's softmax (be_cuda_kvq_one) */
    int64_t n_kvq_mma;  /* ... on k_kvq_mm, CINFER_KVQ_DEC=mma (be_cuda_kvq_mma) */
    int64_t n_kvq_bulk; /* ... of those with cp.async.bulk copies (be_cuda_kvq_bulk) */
    void *am_buf;       /* argmax split over blocks: counters + partials (cuda_sample.cu) */
    int am_split;       /* argmax of a long row split over blocks (CINFER_CUDA_ARGMAX_SPLIT=0: no) */
    int tc_split;       /* the same for topcand (CINFER_CUDA_TOPCAND_SPLIT=0: one block a row) */
    void *fetch_buf[2];       /* pinned staging of fetch_start (allocated on first use) */
    cudaEvent_t fetch_ev[2];  /* recorded after each slot's copy */
    int repeat;         /* measurement only (CINFER_CUDA_REPEAT): CU_REP_* kernels run twice */
    unsigned scratch_epoch; /* bumped when a scratch buffer moves: cached graphs are stale */
    int last_kernel;    /* the last op queued on the stream was a kernel (PDL may follow it;
                         * after a copy or memset the next launch is a plain one) */
    struct cu_graphs *graphs; /* NULL when graphs are off */
    void *blas_ws;      /* cuBLAS workspace (fixed, so GEMMs can be captured) */
    int err;            /* first latched error: 0 or a CERR_* code */
    char err_msg[400];
};

static inline struct cu_be *cu_be(struct be *b) { return (struct cu_be *)b; }

/* Most rows the skinny kernel takes (0: off), and most rows the matvec takes. */
static inline int cu_sg_lim(const struct cu_be *cb)
{
    return cb->sg_max_n <= 0 ? 0 : cb->inv_rows > cb->sg_max_n ? cb->inv_rows : cb->sg_max_n;
}
static inline int cu_mv_lim(const struct cu_be *cb) { return cb->inv_rows > 8 ? cb->inv_rows : 8; }

/* Programmatic dependent launch (sm_90): a kernel launched with cu_launch may start while
 * the previous kernel of the stream finishes; it must call cu_pdl_wait() before it reads
 * or writes anything the previous kernels touch (first thing, in practice). A kernel may
 * call cu_pdl_trigger() once its main work is issued to let the next one launch early.
 * cb->pdl = 0 (CINFER_CUDA_PDL=0) launches plainly; the wait is then a no-op. */
__device__ __forceinline__ void cu_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void cu_pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }

/* PDL is used for the next launch: on, and the stream's last op was a kernel. */
static inline int cu_pdl_ok(const struct cu_be *cb) { return cb->pdl && cb->last_kernel; }

template <typename... KArgs, typename... Args>
static inline void cu_launch(struct cu_be *cb, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                             size_t smem, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cu_pdl_ok(cb) ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* Latches the first error (what = the op's name). */
void cu_latch(struct cu_be *cb, const char *what, cudaError_t rc);
void cu_latch_blas(struct cu_be *cb, const char *what, cublasStatus_t rc);
/* Checks the last launch. */
static inline void cu_after_launch(struct cu_be *cb, const char *what)
{
    cb->last_kernel = 1;
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        cu_latch(cb, what, rc);
}
/* Scratch buffer i of at least n bytes (grown, contents lost); NULL after latching an
 * out-of-memory error. */
void *cu_scratch(struct cu_be *cb, int i, size_t n);

/* ---- warp reductions (xor butterfly: every lane gets the result, a fixed order) ---- */

__device__ __forceinline__ float cu_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cu_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- element decoding shared by get_rows and matmul (cuda_ops.cu / cuda_mm.cu) ---- */

__device__ __forceinline__ float cu_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float cu_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t cu_ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* 32 consecutive weights of sub-block sb (elements 32 sb .. 32 sb + 31 of the 256-element
 * block, or the whole 32-element block) as floats, with the CPU dequantization's exact
 * operation order (no contraction: explicit _rn ops). */
__device__ __forceinline__ void cu_deq32(int dt, const uint8_t *blk, int sb, float *o)
{
    if (dt == DT_Q8_0) {
        float d = cu_f16(cu_ld16(blk));
        const int8_t *q = (const int8_t *)(blk + 2);
#pragma unroll
        for (int i = 0; i < 32; i++)
            o[i] = __fmul_rn((float)q[i], d);
    } else if (dt == DT_Q4_K) {
        float d = cu_f16(cu_ld16(blk)), dmin = cu_f16(cu_ld16(blk + 2));
        const uint8_t *sc = blk + 4, *qs = blk + 16;
        int a, m;
        if (sb < 4) {
            a = sc[sb] & 63;
            m = sc[sb + 4] & 63;
        } else {
            a = (sc[sb + 4] & 0xf) | ((sc[sb - 4] >> 6) << 4);
            m = (sc[sb + 4] >> 4) | ((sc[sb] >> 6) << 4);
        }
        float ds = __fmul_rn(d, (float)a), mm = __fmul_rn(dmin, (float)m);
        const uint8_t *q = qs + (sb / 2) * 32;
        int hi = sb & 1;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int v = hi ? q[i] >> 4 : q[i] & 0xf;
            o[i] = __fsub_rn(__fmul_rn(ds, (float)v), mm);
        }
    } else { /* DT_Q6_K */
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *scs = (const int8_t *)(blk + 192);
        float d = cu_f16(cu_ld16(blk + 208));
        int n = sb / 4, qq = sb % 4;
        float s0 = __fmul_rn(d, (float)scs[sb * 2]), s1 = __fmul_rn(d, (float)scs[sb * 2 + 1]);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int lb = ql[n * 64 + l + (qq & 1) * 32];
            int lo = qq >= 2 ? lb >> 4 : lb & 0xf;
            int hb = (qh[n * 32 + l] >> (2 * qq)) & 3;
            int v = (lo | hb << 4) - 32;
            o[l] = __fsub_rn(__fmul_rn(l < 16 ? s0 : s1, (float)v), __fmul_rn(0.0f, 0.0f));
        }
    }
}

/* Ops (cuda_ops.cu, cuda_mm.cu, cuda_attn.cu). */
void cu_get_rows(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n);
void cu_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w);
void cu_rmsnorm(struct be *b, float *y, const float *x, const float *w, int rows, int dim,
                float eps);
void cu_rope(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
             int rot_dim, int mode, const float *inv_freq, float mscale);
void cu_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                 const float *v, const int32_t *slots, int n_tok, int kv_dim);
void cu_attention(struct be *b, float *out, const float *q, const struct be_attn *a);
void cu_act_mul(struct be *b, float *y, const float *gate, const float *up, int64_t n, int act);
void cu_add(struct be *b, float *y, const float *a, const float *x, int64_t n);
void cu_add_row(struct be *b, float *y, const float *bias, int rows, int dim);
void cu_scale(struct be *b, float *y, const float *x, float s, int64_t n);
void cu_softcap(struct be *b, float *y, const float *x, float s, int64_t n);
void cu_matmul_fused(struct be *b, const struct be_mm *m);
/* The op lora: cq_lora records it (cuda_lora.cuh, cuda_lora_sg.cu); cu_lora (cuda_lora.cu)
 * is the previous one-kernel path for at most CU_LORA_GRP groups (CINFER_CUDA_LORA=v1). */
enum { CU_LORA_GRP = 3 }; /* a recorded call (cuda_graph.cu) holds the groups by value */
void cu_lora(struct be *b, float *y, const float *x, int K, int M, const struct be_lora_grp *g,
             int n_grp);
void cq_lora(struct be *b, float *y, const float *x, int K, int M, const struct be_lora_grp *g,
             int n_grp);
/* lora_norm (only in the ops table when cu_lora_norm_on(): not with v1) */
void cq_lora_norm(struct be *b, float *y, const float *x, const float *norm, float eps, int K,
                  int M, const struct be_lora_grp *g, int n_grp);
/* 1 when cu_matmul_fused runs this call chained (be_mm.chain): an ADD that gathers the sums
 * of squares of its output's tiles, or a norm that reads them. A host-side function of the
 * arguments and the backend's settings only. */
/* Reads the skinny kernel's process-wide measurement knobs (once, at backend creation). */
void cu_mmf_init(void);
int cu_mm_chain_ok(const struct cu_be *cb, const struct be_mm *m);
void cu_rope_kv_store(struct be *b, const struct be_rope_kv *r);
void cu_argmax(struct be *b, int32_t *out, const float *x, int rows, int n);
void cu_sample(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
               const int32_t *prev);
void cu_topcand_launch(struct be *b, void *out, const float *x, int rows, int n, float span,
                       int cap); /* the launch alone (what a recorded call runs) */
/* y = x W^T on the skinny tensor-core kernel; 0 (nothing launched) when it does not take
 * the case (weight type, shapes, alignment, n > sg_max_n). */
int cu_matmul_skinny(struct cu_be *cb, float *y, const float *x, int n, const struct be_tensor *w);
/* y[i] = x W_i^T + beta[i] y[i] on cuBLAS for 16-bit weights of one dtype and K, converting x
 * once; 0 (nothing done) for other weight types, else 1 (errors latched). */
int cu_gemm16_shared_x(struct cu_be *cb, const float *x, int n, int n_w,
                       const struct be_tensor *const *w, float *const *y, const float *beta);
/* Deferred ops and graph replay (cuda_graph.cu): the vtable's ops record calls; cu_flush()
 * runs or replays the pending list. */
/* want: be_config.graphs (1 on, -1 off, 0 default: on unless CINFER_CUDA_GRAPHS=0). */
int cu_graphs_init(struct cu_be *cb, int want);
void cu_graphs_free(struct cu_be *cb);
void cu_flush(struct cu_be *cb);
void cu_graph_stats(struct cu_be *cb, int64_t *replays, int64_t *captures);
/* Replays the last k graph launches in order, reps times, back to back; *us = device time
 * of one round (be_cuda_replay_last's return codes). */
int cu_graph_replay_last(struct cu_be *cb, int k, int reps, double *us);
void cq_get_rows(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n);
void cq_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w);
void cq_rmsnorm(struct be *b, float *y, const float *x, const float *w, int rows, int dim,
                float eps);
void cq_rope(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
             int rot_dim, int mode, const float *inv_freq, float mscale);
void cq_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                 const float *v, const int32_t *slots, int n_tok, int kv_dim);
void cq_attention(struct be *b, float *out, const float *q, const struct be_attn *a);
void cq_act_mul(struct be *b, float *y, const float *gate, const float *up, int64_t n, int act);
void cq_add(struct be *b, float *y, const float *a, const float *x, int64_t n);
void cq_add_row(struct be *b, float *y, const float *bias, int rows, int dim);
void cq_scale(struct be *b, float *y, const float *x, float s, int64_t n);
void cq_softcap(struct be *b, float *y, const float *x, float s, int64_t n);
void cq_matmul_fused(struct be *b, const struct be_mm *m);
void cq_rope_kv_store(struct be *b, const struct be_rope_kv *r);
void cq_argmax(struct be *b, int32_t *out, const float *x, int rows, int n);
void cq_sample(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
               const int32_t *prev);
void cq_topcand(struct be *b, void *out, const float *x, int rows, int n, float span, int cap);

/* Quantized KV rows (cuda_kvq.cu, formats of backend/kvq.h): the store and the attention
 * for a kv_dtype that is a scheme code (kvq_is); cu_kvq_init copies the codebooks in. */
void cu_kvq_store(struct cu_be *cb, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                  const float *v, const int32_t *slots, int n_tok, int kv_dim);
void cu_kvq_attention(struct cu_be *cb, float *out, const float *q, const struct be_attn *a);
cudaError_t cu_kvq_init(struct cu_be *cb);
/* CINFER_KVQ_STORE=attn (cuda_kvq_dec.cu): r's rope and K/V store (a quantized cache) done by
 * the decode attention a that follows it (r->q is a's q, unroped: every block ropes q
 * itself; the block holding a token's new position ropes k, quantizes K and V and writes
 * them at r->slots). Only for a step with a.one_per_seq set. Returns 1 when it ran both (q
 * and k are then left unroped), 0 when the caller must run rope_kv_store, then attention. */
int cu_kvq_attention_store(struct cu_be *cb, float *out, const float *q, const struct be_attn *a,
                           const struct be_rope_kv *r);
/* 1 when CINFER_KVQ_STORE=attn was set when the backend was created. */
int cu_kvq_store_attn_on(void);

/* One-time kernel attributes (shared-memory opt-in); 0 or a CUDA error. */
cudaError_t cu_attn_init(struct cu_be *cb);
/* Specialised attention paths tried first by cu_attention (arguments already validated:
 * head_dim <= 256, n_head % n_kv_head == 0). Each returns 1 when it ran the whole op, 0
 * when the case is not its own (then the general kernel runs). */
int cu_attn_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a);
int cu_attn_prefill_tc(struct cu_be *cb, float *out, const float *q, const struct be_attn *a);
/* One-time setup of those paths (shared-memory opt-in); 0 or a CUDA error. */
cudaError_t cu_attn_decode_init(struct cu_be *cb);
cudaError_t cu_attn_tc_init(struct cu_be *cb);

#endif
