/* cuda_mm.cu — matmul: y (n, M) = x (n, K) * w^T on the GPU.
 *
 * Steps of up to cu_mv_lim rows (decode, speculative verify steps, short prompt chunks:
 * CINFER_CUDA_INVARIANT_ROWS) run the matvec kernel: one warp per weight row streams the
 * row once (16-byte loads for F16/BF16/F32) and keeps float accumulators for a group of up
 * to MV_MAX_N rows of x (a step of more rows runs several groups); a row of y is computed
 * with the same operation sequence for any n, so those steps are batch invariant. Quantized
 * rows are decoded 32 weights at a time with the CPU's exact dequantization and multiplied
 * in float. Larger steps (prefill, big batches) use cuBLAS:
 * SGEMM (no TF32) for F32 weights; for 16-bit weights x is rounded to the weight type and
 * GemmEx accumulates in F32; quantized weights are expanded to BF16 in row chunks first.
 * With CINFER_CUDA_PRECISE=1, x is split into hi + lo 16-bit parts and two GEMMs are
 * accumulated (about float precision for twice the GEMM work).
 */
#include "backend/cuda/cuda_int.cuh"

enum { MV_MAX_N = 8, MV_WARPS = 4, DQ_CHUNK_BYTES = 256 << 20 };

/* 8 weights at element 8c of a 16-bit or F32 row, vector loads. */
template <int DT> __device__ __forceinline__ void load8(const uint8_t *row, int c, float *w)
{
    if (DT == DT_F32) {
        float4 a = __ldg((const float4 *)row + 2 * c), b = __ldg((const float4 *)row + 2 * c + 1);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z,
        w[7] = b.w;
    } else {
        uint4 u = __ldg((const uint4 *)row + c);
        uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint16_t lo = (uint16_t)(p[j] & 0xffff), hi = (uint16_t)(p[j] >> 16);
            w[2 * j] = DT == DT_F16 ? cu_f16(lo) : cu_bf16(lo);
            w[2 * j + 1] = DT == DT_F16 ? cu_f16(hi) : cu_bf16(hi);
        }
    }
}

template <int DT> __device__ __forceinline__ float load1(const uint8_t *row, int e)
{
    return DT == DT_F32   ? ((const float *)row)[e]
           : DT == DT_F16 ? cu_f16(((const uint16_t *)row)[e])
                          : cu_bf16(((const uint16_t *)row)[e]);
}

/* acc[r] += w[0..8) . x[r][8c .. 8c+8), in element order. */
template <int N>
__device__ __forceinline__ void mv_acc8(float *acc, const float *wv, const float *x, int K, int c)
{
#pragma unroll
    for (int r = 0; r < N; r++) {
        const float4 *xp = (const float4 *)(x + (size_t)r * K) + 2 * c;
        float4 a = __ldg(xp), b = __ldg(xp + 1);
        float s = acc[r];
        s = fmaf(wv[0], a.x, s), s = fmaf(wv[1], a.y, s);
        s = fmaf(wv[2], a.z, s), s = fmaf(wv[3], a.w, s);
        s = fmaf(wv[4], b.x, s), s = fmaf(wv[5], b.y, s);
        s = fmaf(wv[6], b.z, s), s = fmaf(wv[7], b.w, s);
        acc[r] = s;
    }
}

template <int DT, int N>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_mv(float *__restrict__ y, const float *__restrict__ x, const uint8_t *__restrict__ w,
         size_t rb, int K, int M, int vec, int ng)
{
    /* ng groups of N rows of x: block b serves group b % ng of weight rows MV_WARPS (b / ng)
     * .. (the groups that read the same weights run together) */
    const int grp = (int)(blockIdx.x % (unsigned)ng);
    int row = (int)(blockIdx.x / (unsigned)ng) * MV_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= M)
        return;
    x += (size_t)grp * N * K;
    y += (size_t)grp * N * M;
    const uint8_t *wr = w + (size_t)row * rb;
    float acc[N];
#pragma unroll
    for (int r = 0; r < N; r++)
        acc[r] = 0.0f;
    if (DT == DT_F32 || DT == DT_F16 || DT == DT_BF16) {
        if (vec) {
            /* 8 chunks' weight loads (128 bytes a lane) in flight before the first use; the
             * accumulation order (chunk by chunk, element by element) is the same for
             * every n */
            int c = lane;
            for (; c + 224 < K / 8; c += 256) {
                float wv[8][8];
#pragma unroll
                for (int u = 0; u < 8; u++)
                    load8<DT>(wr, c + 32 * u, wv[u]);
#pragma unroll
                for (int u = 0; u < 8; u++)
                    mv_acc8<N>(acc, wv[u], x, K, c + 32 * u);
            }
            for (; c < K / 8; c += 32) {
                float wv[8];
                load8<DT>(wr, c, wv);
                mv_acc8<N>(acc, wv, x, K, c);
            }
        } else {
            for (int e = lane; e < K; e += 32) {
                float wv = load1<DT>(wr, e);
#pragma unroll
                for (int r = 0; r < N; r++)
                    acc[r] = fmaf(wv, x[(size_t)r * K + e], acc[r]);
            }
        }
    } else {
        int be = DT == DT_Q8_0 ? 32 : 256;
        size_t bb = DT == DT_Q8_0 ? 34 : DT == DT_Q4_K ? 144 : 210;
        for (int s = lane; s < K / 32; s += 32) {
            int e0 = s * 32;
            float wv[32];
            cu_deq32(DT, wr + (size_t)(e0 / be) * bb, (e0 % be) / 32, wv);
#pragma unroll
            for (int r = 0; r < N; r++) {
                const float4 *xp = (const float4 *)(x + (size_t)r * K + e0);
                float t = acc[r];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float4 a = __ldg(xp + j);
                    t = fmaf(wv[4 * j], a.x, t), t = fmaf(wv[4 * j + 1], a.y, t);
                    t = fmaf(wv[4 * j + 2], a.z, t), t = fmaf(wv[4 * j + 3], a.w, t);
                }
                acc[r] = t;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < N; r++) {
        float s = cu_warp_sum(acc[r]);
        if (lane == 0)
            y[(size_t)r * M + row] = s;
    }
}

/* Rows of x in groups of MV_MAX_N (one launch for the whole groups, one for the rest): a
 * row's arithmetic is the same in any group size, so any n is row invariant. */
template <int DT>
static void mv_launch(struct cu_be *cb, float *y, const float *x, int n, const uint8_t *w,
                      size_t rb, int K, int M, int vec)
{
    const unsigned wb = (unsigned)((M + MV_WARPS - 1) / MV_WARPS);
    dim3 blk(MV_WARPS * 32);
    const int ng = n / MV_MAX_N, rest = n % MV_MAX_N;
    if (ng > 0) {
        k_mv<DT, MV_MAX_N><<<dim3(wb * (unsigned)ng), blk, 0, cb->stream>>>(y, x, w, rb, K, M,
                                                                          vec, ng);
        x += (size_t)ng * MV_MAX_N * K;
        y += (size_t)ng * MV_MAX_N * M;
    }
    switch (rest) {
#define MV_CASE(N)                                                                             \
    case N:                                                                                    \
        k_mv<DT, N><<<dim3(wb), blk, 0, cb->stream>>>(y, x, w, rb, K, M, vec, 1);              \
        break;
        MV_CASE(1) MV_CASE(2) MV_CASE(3) MV_CASE(4) MV_CASE(5) MV_CASE(6) MV_CASE(7)
#undef MV_CASE
    default: break;
    }
}

/* x (n, K) float -> 16-bit (bf16 or f16), round to nearest even; with lo non-NULL also
 * the rounding remainder lo = 16-bit(x - hi). */
__global__ void k_to16(void *dst, void *lo, const float *x, int64_t n, int bf)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        if (bf) {
            __nv_bfloat16 h = __float2bfloat16_rn(v);
            ((__nv_bfloat16 *)dst)[i] = h;
            if (lo)
                ((__nv_bfloat16 *)lo)[i] = __float2bfloat16_rn(v - __bfloat162float(h));
        } else {
            __half h = __float2half_rn(v);
            ((__half *)dst)[i] = h;
            if (lo)
                ((__half *)lo)[i] = __float2half_rn(v - __half2float(h));
        }
    }
}

/* Rows [r0, r0 + nr) of a quantized weight -> bf16 (nr, K). One thread per 32 weights. */
__global__ void k_deq_bf16(__nv_bfloat16 *dst, const uint8_t *w, int dt, size_t rb, int K, int r0,
                           int nr)
{
    int64_t per = K / 32, idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= per * nr)
        return;
    int r = (int)(idx / per), s = (int)(idx % per), e0 = s * 32;
    int be = dt == DT_Q8_0 ? 32 : 256;
    size_t bb = dt == DT_Q8_0 ? 34 : dt == DT_Q4_K ? 144 : 210;
    float v[32];
    cu_deq32(dt, w + (size_t)(r0 + r) * rb + (size_t)(e0 / be) * bb, (e0 % be) / 32, v);
    __nv_bfloat16 *o = dst + (int64_t)r * K + e0;
#pragma unroll
    for (int j = 0; j < 32; j++)
        o[j] = __float2bfloat16_rn(v[j]);
}

/* x (n, K) as 16-bit (parts = 2 with the precise split) in scratch X; NULL after latching. */
static char *x_to16(struct cu_be *cb, const float *x, int64_t nx, int bf, int parts)
{
    char *xs = (char *)cu_scratch(cb, CU_SCRATCH_X, (size_t)nx * 2 * parts);
    if (!xs)
        return NULL;
    unsigned nb = (unsigned)((nx + 255) / 256);
    k_to16<<<nb > 65535u * 16 ? 65535u * 16 : nb, 256, 0, cb->stream>>>(
        xs, parts == 2 ? xs + nx * 2 : NULL, x, nx, bf);
    cu_after_launch(cb, "matmul activation conversion");
    return xs;
}

int cu_gemm16_shared_x(struct cu_be *cb, const float *x, int n, int n_w,
                       const struct be_tensor *const *w, float *const *y, const float *beta)
{
    int dt = w[0]->dtype, K = (int)w[0]->ne[0];
    if (dt != DT_F16 && dt != DT_BF16)
        return 0;
    for (int i = 0; i < n_w; i++)
        if (w[i]->dtype != dt || w[i]->ne[0] != K)
            return 0;
    int bf = dt == DT_BF16, parts = cb->precise ? 2 : 1;
    int64_t nx = (int64_t)n * K;
    char *xs = x_to16(cb, x, nx, bf, parts);
    if (!xs)
        return 1;
    cudaDataType_t ty = bf ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1.0f;
    for (int i = 0; i < n_w; i++) {
        int M = (int)w[i]->ne[1];
        for (int p = 0; p < parts; p++) {
            cublasStatus_t st = cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one,
                                             w[i]->data, ty, K, xs + p * nx * 2, ty, K,
                                             p ? &one : &beta[i], y[i], CUDA_R_32F, M,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) {
                cu_latch_blas(cb, "GemmEx", st);
                return 1;
            }
        }
    }
    return 1;
}

static void gemm(struct cu_be *cb, float *y, const float *x, int n, const struct be_tensor *w)
{
    int K = (int)w->ne[0], M = (int)w->ne[1];
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st;
    if (w->dtype == DT_F32) {
        st = cublasSgemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one, (const float *)w->data,
                         K, x, K, &zero, y, M);
        if (st != CUBLAS_STATUS_SUCCESS)
            cu_latch_blas(cb, "SGEMM", st);
        return;
    }
    int bf = w->dtype != DT_F16;
    cudaDataType_t ty = bf ? CUDA_R_16BF : CUDA_R_16F;
    int64_t nx = (int64_t)n * K;
    int parts = cb->precise ? 2 : 1;
    char *xs = (char *)cu_scratch(cb, CU_SCRATCH_X, (size_t)nx * 2 * parts);
    if (!xs)
        return;
    unsigned nb = (unsigned)((nx + 255) / 256);
    k_to16<<<nb > 65535u * 16 ? 65535u * 16 : nb, 256, 0, cb->stream>>>(
        xs, parts == 2 ? xs + nx * 2 : NULL, x, nx, bf);
    cu_after_launch(cb, "matmul activation conversion");
    if (w->dtype == DT_F16 || w->dtype == DT_BF16) {
        for (int p = 0; p < parts; p++) {
            st = cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, n, K, &one, w->data, ty, K,
                              xs + p * nx * 2, ty, K, p ? &one : &zero, y, CUDA_R_32F, M,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) {
                cu_latch_blas(cb, "GemmEx", st);
                return;
            }
        }
        return;
    }
    size_t rb = dtype_row_bytes(w->dtype, K);
    int chunk = (int)(DQ_CHUNK_BYTES / ((size_t)K * 2));
    chunk = chunk < 64 ? 64 : chunk > M ? M : chunk;
    __nv_bfloat16 *wb = (__nv_bfloat16 *)cu_scratch(cb, CU_SCRATCH_W, (size_t)chunk * K * 2);
    if (!wb)
        return;
    for (int r0 = 0; r0 < M; r0 += chunk) {
        int nr = M - r0 < chunk ? M - r0 : chunk;
        int64_t th = (int64_t)nr * (K / 32);
        k_deq_bf16<<<(unsigned)((th + 127) / 128), 128, 0, cb->stream>>>(
            wb, (const uint8_t *)w->data, w->dtype, rb, K, r0, nr);
        cu_after_launch(cb, "weight expansion");
        for (int p = 0; p < parts; p++) {
            st = cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, K, &one, wb, CUDA_R_16BF,
                              K, xs + p * nx * 2, CUDA_R_16BF, K, p ? &one : &zero, y + r0,
                              CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) {
                cu_latch_blas(cb, "GemmEx", st);
                return;
            }
        }
    }
}

void cu_matmul(struct be *b, float *y, const float *x, int n, const struct be_tensor *w)
{
    struct cu_be *cb = cu_be(b);
    int K = (int)w->ne[0], M = (int)w->ne[1];
    if (n <= 0 || M <= 0)
        return;
    if (cu_matmul_skinny(cb, y, x, n, w))
        return;
    /* the matvec's x loads are 16-byte; beyond cu_mv_lim rows (long prompt chunks), cuBLAS */
    if (n > cu_mv_lim(cb) || ((uintptr_t)x & 15) != 0) {
        gemm(cb, y, x, n, w);
        return;
    }
    size_t rb = dtype_row_bytes(w->dtype, K);
    const uint8_t *wd = (const uint8_t *)w->data;
    int vec = K % 8 == 0 && rb % 16 == 0 && ((uintptr_t)wd & 15) == 0;
    switch (w->dtype) {
    case DT_F32: mv_launch<DT_F32>(cb, y, x, n, wd, rb, K, M, vec); break;
    case DT_F16: mv_launch<DT_F16>(cb, y, x, n, wd, rb, K, M, vec); break;
    case DT_BF16: mv_launch<DT_BF16>(cb, y, x, n, wd, rb, K, M, vec); break;
    case DT_Q8_0: mv_launch<DT_Q8_0>(cb, y, x, n, wd, rb, K, M, 0); break;
    case DT_Q4_K: mv_launch<DT_Q4_K>(cb, y, x, n, wd, rb, K, M, 0); break;
    case DT_Q6_K: mv_launch<DT_Q6_K>(cb, y, x, n, wd, rb, K, M, 0); break;
    default:
        cu_latch(cb, "matmul (weight type without a kernel)", cudaErrorInvalidValue);
        return;
    }
    cu_after_launch(cb, "matmul");
}
