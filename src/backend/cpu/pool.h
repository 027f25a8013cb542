/* pool.h — the CPU backend's persistent worker pool.
 *
 * n threads in all: the caller of cpu_pool_run() is thread 0 and n-1 workers wait for work.
 * Dispatch bumps a generation counter; workers spin briefly on it, then sleep on a futex,
 * so back-to-back ops cost no syscalls while idle threads use no CPU. cpu_pool_run()
 * returns when every thread has finished the task. One caller thread at a time.
 */
#ifndef CINFER_BACKEND_CPU_POOL_H
#define CINFER_BACKEND_CPU_POOL_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/err.h"

struct cpu_pool;

/* Task body: runs once on each thread ith of nth (0 <= ith < nth). */
typedef void (*cpu_task_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1). NULL + e on failure. */
struct cpu_pool *cpu_pool_new(int n_threads, struct cerr *e);
/* Stops and joins the workers. NULL is a no-op. */
void cpu_pool_free(struct cpu_pool *p);
int cpu_pool_size(const struct cpu_pool *p);
/* Runs fn(ctx, ith, nth) on every thread (the caller is ith 0) and waits for all. Runs only
 * on the caller when nth_max is 1 or the pool has one thread; nth_max <= 0 = all. */
void cpu_pool_run(struct cpu_pool *p, cpu_task_fn fn, void *ctx, int nth_max);

/* Dynamic work split: returns the next chunk index from *ctr (shared by the threads of one
 * task, set to 0 before cpu_pool_run), or a value >= n when none is left. */
static inline int64_t cpu_next_chunk(atomic_int_fast64_t *ctr)
{
    return atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
}

#endif
