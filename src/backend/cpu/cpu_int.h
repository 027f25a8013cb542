/* cpu_int.h — internals of the CPU backend, shared by the files of backend/cpu only.
 *
 * struct cpu_kernels is the per-ISA kernel table: the scalar reference fills every entry,
 * then the AVX2 and AVX-512 files override the entries they implement. The glue (cpu.c,
 * matmul.c, attn.c, ops.c) splits work over the pool and calls through this table.
 *
 * Batch invariance rule: a kernel computes each output element with a sequence of float
 * operations that depends only on that element's inputs, never on how many rows or which
 * thread it was computed with. Tiled kernels keep one accumulator set per output element.
 */
#ifndef CINFER_BACKEND_CPU_CPU_INT_H
#define CINFER_BACKEND_CPU_CPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/repack.h"

enum cpu_isa { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };

/* y[i * ldy + j] = dot(x row i, w row j) for i < nx, j < nw. w (dtype dt) rows are w_stride
 * bytes apart, x rows x_stride bytes apart; x is in quant_act_kind(dt) format; k elements. */
typedef void (*cpu_mm_fn)(int dt, int64_t k, const void *w, size_t w_stride, int nw, const void *x,
                          size_t x_stride, int nx, float *y, int64_t ldy);

/* y[i * ldy + r] = dot(x row i, repacked row j0 + r) for i < nx, r < nw; j0 a multiple of
 * RP_ROWS; x in quant_act_kind(h->dtype) format, rows x_stride bytes apart. */
typedef void (*cpu_mmrp_fn)(const struct rp_hdr *h, int64_t j0, int nw, const void *x,
                            size_t x_stride, int nx, float *y, int64_t ldy);

/* Attention over one chunk of at most CPU_AT_CH positions (attn.c): one query row's state. */
enum { CPU_AT_CH = 32 };
struct cpu_at_row {
    const float *q; /* head_dim floats */
    float *acc;     /* head_dim floats: sum of p_j v_j so far (unnormalized) */
    float *m, *l;   /* running max of the scores and sum of p_j */
    int np;         /* positions of the chunk this row attends: 1 .. CPU_AT_CH */
};

struct cpu_kernels {
    cpu_mm_fn mm[DT_COUNT];
    /* kernels on repacked weights (repack.h); NULL: that dtype is not repacked */
    cpu_mmrp_fn mm_rp[DT_COUNT];
    /* kt[d * CPU_AT_CH + j] = float(rows[j][d]) for d < n, j < np; 0 for np <= j < CPU_AT_CH
     * (rows F32, or fp16 when f16): the chunk's K rows transposed, so a score is a lane. */
    void (*kt_pack)(float *kt, const void *const *rows, int np, int n, int f16);
    /* One chunk for rows r[0 .. nr) (nr <= 4), K packed in kt, V in F32 rows v[0 .. max np),
     * n = head_dim. Per row: s_j = (sum of q[d] k_j[d] over even d, in d order) + (the same
     * over odd d), times scale, then cap tanh(s_j / cap) (libm tanhf) when cap > 0; cm =
     * max of s_j over j < np; when cm > m: f = expf(m - cm) (libm), l *= f, acc *= f, m = cm;
     * p_j = exp(s_j - m) (the level's exp); l += the sum of the p_j (a fixed order);
     * acc[d] += p_j v_j[d] for j = 0 .. np-1 in order (SIMD: fused). A row's arithmetic
     * never depends on nr, its slot or the other rows (batch invariance). */
    void (*at_chunk)(const struct cpu_at_row *r, int nr, const float *kt, const float *const *v,
                     int n, float scale, float cap);
    /* s[j] = exp(s[j] - m) for j < n (s[j] <= m). SIMD levels use a polynomial exp
     * (within 2 ulp of expf). */
    void (*exp_shift)(float *s, float m, int n);
    /* quant_act_row() (scalar) or a SIMD version with bit-identical output. */
    void (*quant_act)(int kind, const float *x, void *dst, int64_t k);
    /* y[i] = act(gate[i]) * up[i], act = enum be_act. Scalar: PyTorch's formulas with libm;
     * SIMD: x * sigmoid(z) with a polynomial exp (z = x for SiLU, z = 2 sqrt(2/pi)(x +
     * 0.044715 x^3) for GELU-tanh, the same function); an element's arithmetic never depends
     * on its index or on n. */
    void (*act_mul)(float *y, const float *gate, const float *up, int64_t n, int act);
    /* dst[i] = float(src[i]) for fp16 src (exact). */
    void (*f16_to_f32)(float *dst, const uint16_t *src, int n);
    /* dst[i] = fp16(src[i]), round to nearest even (bit-identical at every level). */
    void (*f32_to_f16)(uint16_t *dst, const float *src, int n);
    /* x[i] *= s. */
    void (*scale_inplace)(float *x, float s, int n);
    /* sum of x[i]^2, accumulated in float in index order (every level uses the scalar
     * loop, so rmsnorm is bit-identical across levels). */
    float (*sumsq)(const float *x, int n);
    /* y[i] = (x[i] * s) * w[i]. */
    void (*norm_mul)(float *y, const float *x, float s, const float *w, int n);
};

void cpu_kernels_scalar(struct cpu_kernels *k);
void cpu_kernels_avx2(struct cpu_kernels *k);
void cpu_kernels_avx512(struct cpu_kernels *k);
void cpu_kernels_rp2(struct cpu_kernels *k); /* AVX2 kernels on repacked Q4_K */
/* needs AVX-512 VNNI + VBMI; Q6_K's kernel also GFNI (gfni: the CPU has it) */
void cpu_kernels_rp512(struct cpu_kernels *k, int gfni);

struct cpu_be {
    struct be base;
    struct cpu_pool *pool;
    int n_threads;
    int isa;
    struct cpu_kernels k;
    void *qbuf; /* quantized activations, grown on demand, kept */
    size_t qbuf_cap;
    void *abuf; /* attention: partial softmax states of a split step (attn.c), grown, kept */
    size_t abuf_cap;
    int attn_split; /* attention may split a step's segments over the pool (CINFER_CPU_ATTN_SPLIT) */
    int repack;             /* repack weights at weight_prepare (CINFER_CPU_REPACK) */
    uint32_t repack_types;  /* bit dt: dtype dt may be repacked */
    struct rp_hdr **rp;     /* repacked copies owned by the backend */
    int n_rp, cap_rp;
    size_t rp_bytes;        /* their total size */
    size_t rp_src_bytes;    /* bytes of the file layout they replace */
};

static inline struct cpu_be *cpu_be(struct be *b) { return (struct cpu_be *)b; }

/* Grows cb->qbuf to at least n bytes. 0, or -1 when the allocation fails. */
int cpu_qbuf_reserve(struct cpu_be *cb, size_t n);
/* The same for cb->abuf. */
int cpu_abuf_reserve(struct cpu_be *cb, size_t n);

/* Ops (matmul.c, attn.c, ops.c). */
void cpu_get_rows(struct be *b, float *out, const struct be_tensor *w, const int32_t *ids, int n);
void cpu_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w);
void cpu_kv_store(struct be *b, void *k_cache, void *v_cache, int kv_dtype, const float *k,
                  const float *v, const int32_t *slots, int n_tok, int kv_dim);
void cpu_attention(struct be *b, float *out, const float *q, const struct be_attn *a);
void cpu_rmsnorm(struct be *b, float *y, const float *x, const float *w, int rows, int dim,
                 float eps);
void cpu_rope(struct be *b, float *x, const int32_t *pos, int n_tok, int n_head, int head_dim,
              int rot_dim, int mode, const float *inv_freq, float mscale);
void cpu_act_mul(struct be *b, float *y, const float *gate, const float *up, int64_t n, int act);
void cpu_add(struct be *b, float *y, const float *a, const float *x, int64_t n);
void cpu_add_row(struct be *b, float *y, const float *bias, int rows, int dim);
void cpu_scale(struct be *b, float *y, const float *x, float s, int64_t n);
void cpu_softcap(struct be *b, float *y, const float *x, float s, int64_t n);
/* lora.c */
void cpu_lora(struct be *b, float *y, const float *x, int K, int M,
              const struct be_lora_grp *g, int n_grp);

#endif
