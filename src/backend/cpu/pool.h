/* pool.h — the CPU backend's persistent worker pool.
 *
 * A task is n_chunks independent pieces of work. The caller of cpu_pool_run() and every
 * worker that wakes in time claim chunks from a shared counter until none are left; the
 * call returns when all chunks are done. A worker that is late (descheduled, asleep) simply
 * finds nothing left, so one slow thread never stalls an op. Workers spin briefly on a
 * generation counter, then sleep on a futex, so back-to-back ops cost no syscalls while
 * idle threads use no CPU. One caller thread at a time.
 */
#ifndef CINFER_BACKEND_CPU_POOL_H
#define CINFER_BACKEND_CPU_POOL_H

#include <stdint.h>

#include "util/err.h"

struct cpu_pool;

/* Runs chunk number `chunk` of a task; chunks may run in any order on any thread. */
typedef void (*cpu_chunk_fn)(void *ctx, int64_t chunk);

/* Starts n_threads - 1 workers (n_threads >= 1). NULL + e on failure. */
struct cpu_pool *cpu_pool_new(int n_threads, struct cerr *e);
/* Stops and joins the workers. NULL is a no-op. */
void cpu_pool_free(struct cpu_pool *p);
int cpu_pool_size(const struct cpu_pool *p);
/* Runs fn(ctx, c) for every c in [0, n_chunks) and waits until all are done. Wakes workers
 * only when n_chunks > 1; chunks run on the caller alone when the pool has one thread. */
void cpu_pool_run(struct cpu_pool *p, cpu_chunk_fn fn, void *ctx, int64_t n_chunks);

#endif
