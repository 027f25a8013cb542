// host emulation shim for cuda_lora_sg.cu (threads = std::thread, __syncthreads = barrier)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <thread>
#include <vector>
extern "C" {
#include "backend/backend.h"
}
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static pthread_barrier_t emu_bar;
static float *emu_dyn;
static float emu_xch[1024];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __grid_constant__
static inline void __syncthreads() { pthread_barrier_wait(&emu_bar); }
static inline void cu_pdl_wait() {}
static inline void cu_pdl_trigger() {}
static inline float cu_warp_sum(float v)
{
    int t = threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) {
        emu_xch[t] = v;
        __syncthreads();
        float w = emu_xch[t ^ o];
        __syncthreads();
        v += w;
    }
    return v;
}
static inline float __shfl_xor_sync(unsigned, float v, int o)
{
    int t = threadIdx.x;
    emu_xch[t] = v;
    __syncthreads();
    float w = emu_xch[t ^ o];
    __syncthreads();
    return w;
}
static inline float cu_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float cu_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
/* the op act_mul as cuda_ops.cu's k_ew computes it (the two-launch fallback of an
 * activated call) */
static void cu_act_mul(struct be *, float *y, const float *g, const float *u, int64_t n, int act)
{
    for (int64_t i = 0; i < n; i++) {
        float a = g[i];
        if (act != BE_ACT_GELU_TANH)
            y[i] = a / (1.0f + expf(-a)) * u[i];
        else
            y[i] = 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a))) * u[i];
    }
}
struct cu_be { struct be base; int stream, last_kernel; size_t scratch_cap[8]; int n_sm; };
/* the fused kernel's device-side pieces: atomics on the host, fences and sleeps as no-ops
 * (blocks run one after another in ticket order) */
#include <mutex>
static std::mutex emu_amu;
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline float atomicAdd(float *p, float v) { std::lock_guard<std::mutex> l(emu_amu); float o = *p; *p = o + v; return o; }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned) { std::this_thread::yield(); }
static inline void __trap() { printf("trap\n"); abort(); }
static inline float __ldcg(const float *p) { return *p; }
/* fold 8 (cuda_lora_mm.cuh level 8): 64-bit accumulator adds, the fixed-point conversion */
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline long long __float2ll_rn(float f) { return llrintf(f); }
typedef int cudaStreamCaptureStatus;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1 };
static int emu_capturing; /* tests: a capture in progress (the fused path must decline a new buffer) */
static inline cudaError_t cudaStreamIsCapturing(int, cudaStreamCaptureStatus *s) { *s = emu_capturing; return cudaSuccess; }
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, int) { memset(p, v, n); return cudaSuccess; }
static inline struct cu_be *cu_be(struct be *b) { return (struct cu_be *)b; }
enum { CU_SCRATCH_LORA = 7 };
static char *emu_scratch;
static int emu_launches;
static void cu_latch(struct cu_be *, const char *what, cudaError_t) { printf("latched: %s\n", what); exit(1); }
/* as the backend's: grown (contents lost: garbage here) when too small; besides, the
 * partials past the counters' header are garbage at every call (unwritten ones show) */
static void *cu_scratch(struct cu_be *cb, int i, size_t n)
{
    if (cb->scratch_cap[i] < n) {
        free(emu_scratch);
        cb->scratch_cap[i] = n + n / 4 + 4096;
        emu_scratch = (char *)malloc(cb->scratch_cap[i]);
        memset(emu_scratch, 0x7f, cb->scratch_cap[i]);
    }
    memset(emu_scratch + 256, 0x7f, n - 256);
    return emu_scratch;
}
static void cu_after_launch(struct cu_be *cb, const char *) { cb->last_kernel = 1; }
template <typename... KArgs, typename... Args>
static void cu_launch(struct cu_be *, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                      Args... args)
{
    std::vector<float> dyn(smem / 4 + 1, NAN);
    emu_dyn = dyn.data();
    blockDim = block, gridDim = grid;
    emu_launches++;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                pthread_barrier_init(&emu_bar, NULL, block.x);
                std::vector<std::thread> th;
                for (unsigned t = 0; t < block.x; t++)
                    th.emplace_back([=] {
                        threadIdx = dim3(t);
                        blockIdx = dim3(x, y, z);
                        kernel(args...);
                    });
                for (auto &h : th)
                    h.join();
                pthread_barrier_destroy(&emu_bar);
            }
}
/* the folded path's warp pieces (fold.cpp: every emulated warp of a block runs them alike,
 * so a block-wide exchange stands for the warp's) */
static unsigned char emu_pred[1024];
static inline void __syncwarp() { __syncthreads(); }
static inline unsigned __ballot_sync(unsigned, int p)
{
    const int t = threadIdx.x, w0 = t & ~31;
    emu_pred[t] = p != 0;
    __syncthreads();
    unsigned m = 0;
    for (int i = 0; i < 32 && w0 + i < (int)blockDim.x; i++)
        m |= (unsigned)emu_pred[w0 + i] << i;
    __syncthreads();
    return m;
}
static inline int __ffs(unsigned m) { return __builtin_ffs((int)m); }
static int emu_ixch[1024];
/* lane src of the caller's warp (every thread of the block calls it) */
static inline int __shfl_sync(unsigned, int v, int src)
{
    const int t = threadIdx.x;
    emu_ixch[t] = v;
    __syncthreads();
    const int w = emu_ixch[(t & ~31) + (src & 31)];
    __syncthreads();
    return w;
}
/* lane - d of the caller's warp (its own value for lanes < d) */
static inline int __shfl_up_sync(unsigned, int v, int d)
{
    const int t = threadIdx.x;
    emu_ixch[t] = v;
    __syncthreads();
    const int w = (t & 31) >= d ? emu_ixch[t - d] : v;
    __syncthreads();
    return w;
}
static inline unsigned atomicExch(unsigned *p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
