/* cuda.h — the CUDA backend (NVIDIA GPUs, built for sm_90 with a PTX fallback).
 *
 * Activations, KV cache and weights live in device memory; ops are queued on one stream
 * and latch the first CUDA error, which sync() reports (and clears). Weights: F32, F16,
 * BF16, Q8_0, Q4_K and Q6_K run natively (decode matvec kernels, cuBLAS GEMMs for larger
 * steps); the other quantized types are expanded to F32 at load. This header includes no
 * CUDA header: the rest of cinfer sees only struct be.
 */
#ifndef CINFER_BACKEND_CUDA_H
#define CINFER_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on GPU cfg->device (default 0). Returns NULL and fills e with a
 * clear sentence when there is no usable GPU or driver (never aborts). */
struct be *be_cuda_new(const struct be_config *cfg, struct cerr *e);

/* Device bytes in use on b's GPU (total - free, as the driver reports; includes the CUDA
 * context and cuBLAS workspaces), and the largest value seen by any call so far. b must be
 * a CUDA backend. */
size_t be_cuda_mem_used(struct be *b, size_t *peak);

/* Graph replays and captures so far (cuda_graph.cu); both 0 when graphs are off. */
void be_cuda_graph_counts(struct be *b, int64_t *replays, int64_t *captures);

/* Measurement: replays the last k graph launches (e.g. the segments of the last decode step,
 * k = the replay count that step added) reps times back to back, with no host work between
 * them, and sets *us to the device time of one round. They recompute what they computed
 * (same inputs in device memory), so call it only where that is harmless (a benchmark).
 * 0, or -1 (graphs off or k more than were logged), -2 (one of them is no longer cached),
 * -3 (a CUDA call failed). */
int be_cuda_replay_last(struct be *b, int k, int reps, double *us);

/* matmul_fused calls that norm x with the sums of the ADD before them (be_mm.chain), so far
 * (counted as recorded, with graphs on or off). */
int64_t be_cuda_chained(struct be *b);

/* Launches of the quantized-KV decode kernel (cuda_kvq_dec.cu) so far that merged their
 * splits themselves (CINFER_KVQ_MERGE=fused) / stored the step's K/V themselves
 * (CINFER_KVQ_STORE=attn); counted when launched (a graph replay adds nothing). */
void be_cuda_kvq_fused(struct be *b, int64_t *merges, int64_t *stores);

/* Launches of that kernel so far with the keys' scores on the tensor cores
 * (CINFER_KVQ_DEC=tc); counted when launched. */
int64_t be_cuda_kvq_tc(struct be *b);

/* Launches of that kernel so far with one warp a head's online softmax
 * (CINFER_KVQ_SOFT=one); counted when launched. */
int64_t be_cuda_kvq_one(struct be *b);

/* Launches of that path so far on k_kvq_mm, both products on the tensor cores
 * (CINFER_KVQ_DEC=mma, 8-bit K and V); counted when launched. */
int64_t be_cuda_kvq_mma(struct be *b);

/* Launches of k_kvq_mm so far whose round copies were cp.async.bulk (sm_90+, head_dim 128;
 * CINFER_KVQ_BULK=0 turns them off); counted when launched. */
int64_t be_cuda_kvq_bulk(struct be *b);

/* "NVIDIA H200, driver 580.159, CUDA runtime 13.0" into buf (for reports). */
void be_cuda_describe(struct be *b, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
