/* cuda_lora.cuh — the recorded form of the op lora on the GPU (cuda_lora.cu, cuda_graph.cu).
 *
 * A struct cu_lk holds the LoRA deltas of up to CU_LK_PROJ projections that read the same x
 * (q, k, v; or gate, up) for up to CU_LK_GRP groups of rows: one shrink launch (t = x a^T,
 * split over K in fixed chunks) and one expand launch (y += t b^T) do all of them. The
 * recorder (cq_lora) appends a projection to the previous recorded call when it reads the
 * same x with the same groups (cu_lk_merge), so q, k and v cost two launches, not six.
 * Everything in it is plain data (pointers, sizes), copied by value into the kernels.
 */
#ifndef CINFER_BACKEND_CUDA_LORA_CUH
#define CINFER_BACKEND_CUDA_LORA_CUH

#include "backend/cuda/cuda_int.cuh"

enum {
    CU_LK_PROJ = 3, /* projections of one call (q, k, v) */
    CU_LK_GRP = 8,  /* groups of one call */
    CU_LK_T = 24,   /* terms of one call over all its projections and groups (3 x 8 groups) */
    CU_LK_HDR = 256, /* bytes of counters at the front of scratch CU_SCRATCH_LORA (the fused
                      * kernel's; zero between launches); the partials follow */
};

struct cu_lk_term {
    const void *a, *bt; /* (rank, K), (rank, M) of dtype */
    float scale;
    uint16_t rank;
    uint16_t roff; /* first rank of this term in its group's t vector */
    uint8_t dtype;
    uint8_t pad_[3];
};

struct cu_lk_grp {
    const int32_t *rows; /* (n_rows) device memory */
    int n_rows;
    uint16_t T;                  /* ranks of all its terms (its t vector's length) */
    uint8_t t0[CU_LK_PROJ];      /* its terms of projection p: t[t0[p] .. t0[p] + nt[p]) */
    uint8_t nt[CU_LK_PROJ];
};

struct cu_lk {
    const float *x;
    const float *norm; /* non-NULL: x is un-normed; the shrink norms each row (rmsnorm, eps) */
    float eps;
    float *y[CU_LK_PROJ];
    int K;
    int M[CU_LK_PROJ];
    int n_proj, n_grp, n_t;
    int pre; /* the recorder's: x may be read before the PDL wait (cuda_lora_fu.cu) */
    /* chained norm (cuda_mmf.cu, be_mm.chain), set by the recorder (lk_chain in
     * cuda_graph.cu) when this call (one projection, M % 16 == 0) adds its delta to the
     * output of a residual ADD that gathers for the next projection's norm: the rows it
     * changes also get their xg_out (y * gnext, (rows, M)) and their 16-output tile sums of
     * squares (ss_out, (rows, M / 16)) rewritten */
    float *ss_out, *xg_out;
    const float *gnext;
    /* the activation (cuda_graph.cu lk_act) when act_y is set: this call is gate (y[0]) and
     * up (y[1]) with M[0] == M[1], and the act_mul recorded after it rides on it: act_y =
     * act(gate) * up for all act_rows rows (those of no group too), with the op's arithmetic
     * (enum be_act: BE_ACT_GELU_TANH, else SiLU) */
    float *act_y;
    int act, act_rows;
    /* level 8 (cuda_lora_mm.cuh, CINFER_CUDA_LORA_FOLD=8): this call's accumulators
     * (LK8_SLOT of them), zeroed at the start of the recorded list it is in (cuda_graph.cu
     * lk8_pass); NULL: none (the call folds as level 4) */
    unsigned long long *acc8;
    struct cu_lk_grp g[CU_LK_GRP];
    struct cu_lk_term t[CU_LK_T];
};

/* Fills a zeroed d with the projection (y, x, K, M) for a prefix of the groups g[0..n_grp)
 * (each with at least one term); returns how many groups it took (>= 1 when n_grp >= 1). */
int cu_lk_first(struct cu_lk *d, float *y, const float *x, const float *norm, float eps, int K,
                int M, const struct be_lora_grp *g, int n_grp);
/* Appends the projection (y, x, K, M) to d when it reads the same x (and norm, eps) and K
 * with the same groups (rows and counts), d has room for it, and y is none of d's outputs
 * or x; returns 0, or -1 with d unchanged. */
int cu_lk_merge(struct cu_lk *d, float *y, const float *x, const float *norm, float eps, int K,
                int M, const struct be_lora_grp *g, int n_grp);
/* Launches d (shrink + expand; more pairs when its rows' partial sums would not fit the
 * scratch budget). */
void cu_lk_run(struct be *b, const struct cu_lk *d);
/* The fused one-launch form of cu_lk_run (cuda_lora_fu.cu): 0 when launched (or an error
 * latched), -1 when d does not fit it (the caller runs the two-launch path). */
int cu_lkf_run(struct be *b, const struct cu_lk *d);
/* Scratch CU_SCRATCH_LORA of at least bytes (CU_LK_HDR bytes of the fused kernel's
 * counters, then partials), for both paths. The counters of a buffer this call allocates are
 * zeroed (in stream order), or, during a graph capture, zeroed by a later call outside one.
 * need_hdr: the counters must be zero now, else NULL with *declined = 1. NULL with *declined
 * = 0: out of memory (latched). */
char *cu_lk_scratch(struct cu_be *cb, size_t bytes, int need_hdr, int *declined);
/* After a two-launch run of a call with ss_out: rewrites its rows' xg_out and ss_out from
 * y (one launch). */
void cu_lkf_fix(struct be *b, const struct cu_lk *d);
/* 0 when CINFER_CUDA_LORA_ACT=0 (measurements): the recorder never folds an act_mul into
 * the gate/up lora call. Read once. */
int cu_lkf_act_on(void);
/* 0 when CINFER_CUDA_LORA_CHAIN=0 (measurements): the recorder never keeps a norm chain
 * across an adapter's delta. Read once. */
int cu_lkf_chain_on(void);
/* 0 when CINFER_CUDA_LORA_PRE=0 (measurements): the fused kernel never reads x before its
 * PDL wait. Read once. */
int cu_lkf_pre_on(void);
/* The kernel path of the op lora, from CINFER_CUDA_LORA (read once): CU_LK_SG (default: two
 * launches a call, cuda_lora_sg.cu), CU_LK_V1 ("v1": the one-kernel-per-projection path,
 * cuda_lora.cu), CU_LK_FUSED ("fused": one launch a call, cuda_lora_fu.cu). */
enum { CU_LK_SG = 0, CU_LK_V1 = 1, CU_LK_FUSED = 2 };
int cu_lora_mode(void);
/* 1 when CINFER_CUDA_LORA=v1 asks for the previous one-kernel path (cu_lora), for
 * side-by-side measurements. Read once. */
int cu_lora_v1(void);
/* 1 unless CINFER_CUDA_LORA=v1 or CINFER_CUDA_LORA_NORM=0: the backend offers lora_norm
 * (the norm on the fly in the shrink). Read once. */
int cu_lora_norm_on(void);

#endif
