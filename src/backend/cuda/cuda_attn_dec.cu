/* cuda_attn_dec.cu — decode-step attention over the paged KV cache (short steps).
 *
 * Placeholder: declines every case, so the general kernel of cuda_attn.cu runs.
 */
#include "backend/cuda/cuda_int.cuh"

cudaError_t cu_attn_decode_init(struct cu_be *cb)
{
    (void)cb;
    return cudaSuccess;
}

int cu_attn_decode(struct cu_be *cb, float *out, const float *q, const struct be_attn *a)
{
    (void)cb, (void)out, (void)q, (void)a;
    return 0;
}
