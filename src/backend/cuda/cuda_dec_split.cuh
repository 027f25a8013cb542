/* cuda_dec_split.cuh — pieces shared by the decode-attention kernels (cuda_attn_dec.cu over
 * f16/f32 KV, cuda_kvq_dec.cu over quantized KV): the split rule that makes a token's result
 * independent of the batch and of the context capacity, and the team reduce-scatter.
 * Both kernels must split alike, so the rule lives here once. */
#ifndef CINFER_CUDA_DEC_SPLIT_CUH
#define CINFER_CUDA_DEC_SPLIT_CUH

/* Splits of token position pos, with ROUND positions a round: its attended range is
 * [*lo, pos], covering rounds [*r0, pos / ROUND]; split z takes *per rounds from
 * *r0 + z * *per. Returns the number of splits, 0 for a position outside the context
 * (the output is zero). */
template <int ROUND>
__device__ __forceinline__ int cu_dec_splits(int pos, int window, int target, int cap, int *lo,
                                             int *r0, int *per)
{
    if (pos < 0 || pos >= cap)
        return 0;
    const int l0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int k0 = l0 / ROUND, nr = pos / ROUND - k0 + 1;
    const int c = (nr + target - 1) / target;
    *lo = l0, *r0 = k0, *per = c;
    return (nr + c - 1) / c;
}

/* Sums v[0..N) over the lanes of a team (xor offsets O, O/2 .. 1): while more than one
 * value is left each step halves them (the lane with bit O set keeps the upper half), then
 * the rest is an all-reduce. Afterwards v[i] holds the team's sum of element *base + i. */
template <int N, int O> __device__ __forceinline__ void cu_team_sum(float *v, int lane, int *base)
{
    if constexpr (O >= 1) {
        if constexpr (N > 1) {
            constexpr int H = N / 2;
            const bool up = (lane & O) != 0;
#pragma unroll
            for (int i = 0; i < H; i++) {
                const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            if (up)
                *base += H;
            cu_team_sum<H, O / 2>(v, lane, base);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            cu_team_sum<1, O / 2>(v, lane, base);
        }
    }
}

#endif
