// bw_read.cu — the device's streaming-read bandwidth, measured with a plain CUDA kernel (the
// ceiling the decode figures are read against; peers.py bw measures a copy and a torch sum).
// 2 GiB of device memory read once per launch with 16-byte loads, U loads in flight per
// thread, grid = n_sm x B blocks of T threads, grid-stride; each block writes one word so
// the loads cannot be dropped. Prints one JSON line: the best configuration's median of 10
// launches (after 3 warm-ups), and every configuration tried.
//   nvcc -O3 -arch=sm_90 -o /tmp/bw_read bench/gpu/bw_read.cu && /tmp/bw_read
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

template <int U>
__global__ void k_read(const uint4 *__restrict__ p, size_t n, unsigned *out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = __ldcs(p + i + u * stride); /* streaming: no reuse */
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    acc = __reduce_xor_sync(0xffffffffu, acc);
    if ((threadIdx.x & 31) == 0)
        atomicXor(out + blockIdx.x, acc);
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

template <int U>
static float run(const uint4 *p, size_t n, unsigned *out, int blocks, int threads)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    std::vector<float> ms;
    for (int r = 0; r < 13; r++) {
        cudaEventRecord(a);
        k_read<U><<<blocks, threads>>>(p, n, out);
        cudaEventRecord(b);
        check(cudaEventSynchronize(b), "launch");
        float t;
        cudaEventElapsedTime(&t, a, b);
        if (r >= 3)
            ms.push_back(t);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int main(void)
{
    const size_t bytes = (size_t)2 << 30, n = bytes / sizeof(uint4);
    int dev = 0, sms = 0;
    check(cudaGetDevice(&dev), "device");
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    uint4 *p;
    unsigned *out;
    check(cudaMalloc(&p, bytes), "malloc");
    check(cudaMalloc(&out, 1 << 20), "malloc");
    check(cudaMemset(p, 1, bytes), "memset");
    check(cudaMemset(out, 0, 1 << 20), "memset");
    double best = 0;
    char best_cfg[64] = "";
    printf("{\"bytes\": %zu, \"sms\": %d, \"runs\": [", bytes, sms);
    const int bs[] = {2, 4, 8, 16}, ts[] = {256, 512, 1024};
    int first = 1;
    for (int u : {2, 4, 8})
        for (int bi : bs)
            for (int t : ts) {
                if (bi * t > 2048) /* more threads than an SM holds */
                    continue;
                const int blocks = sms * bi;
                float ms = u == 2   ? run<2>(p, n, out, blocks, t)
                           : u == 4 ? run<4>(p, n, out, blocks, t)
                                    : run<8>(p, n, out, blocks, t);
                const double tbs = bytes / (ms * 1e-3) / 1e12;
                printf("%s{\"U\": %d, \"blocks_per_sm\": %d, \"threads\": %d, \"tb_s\": %.3f}",
                       first ? "" : ", ", u, bi, t, tbs);
                first = 0;
                if (tbs > best) {
                    best = tbs;
                    snprintf(best_cfg, sizeof best_cfg, "U=%d blocks/SM=%d threads=%d", u, bi, t);
                }
            }
    printf("], \"read_tb_s\": %.3f, \"best\": \"%s\"}\n", best, best_cfg);
    cudaFree(p), cudaFree(out);
    return 0;
}
