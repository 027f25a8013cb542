/* pool.c — see pool.h. Linux futexes for sleeping; C11 atomics for the hand-off.
 *
 * Claiming: `claim` packs (task generation << 32 | next chunk). A thread claims with a
 * CAS that only succeeds while the word still carries the generation it woke for, so a late
 * worker can never run a chunk of a newer task. The caller closes a task's word before it
 * publishes the next task's (fn, ctx, n); all atomics are sequentially consistent (a few
 * per op, not per element).
 */
#include "backend/cpu/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

enum { SPIN_ITERS = 1 << 12 };
#define CLOSED 0xffffffffu

struct cpu_worker {
    struct cpu_pool *pool;
    pthread_t tid;
};

struct cpu_pool {
    int n;
    struct cpu_worker *w;
    _Alignas(64) atomic_uint gen;
    atomic_int sleepers;
    atomic_int stop;
    _Alignas(64) atomic_uint_fast64_t claim;
    _Alignas(64) atomic_int_fast64_t done;
    _Atomic(cpu_chunk_fn) fn;
    _Atomic(void *) ctx;
    atomic_int_fast64_t n_chunks;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *addr, unsigned val)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs chunks of task g until none are left or the task changed. A chunk index
 * of CLOSED marks a finished task. The fields are read after a successful claim: the caller
 * changes them only after every claimed chunk is done, so they belong to task g. */
static void run_chunks(struct cpu_pool *p, uint32_t g)
{
    for (;;) {
        uint64_t w = atomic_load(&p->claim);
        int64_t n = atomic_load(&p->n_chunks);
        if ((uint32_t)(w >> 32) != g || (int64_t)(w & 0xffffffffu) >= n)
            return;
        if (!atomic_compare_exchange_strong(&p->claim, &w, w + 1))
            continue;
        cpu_chunk_fn fn = atomic_load(&p->fn);
        fn(atomic_load(&p->ctx), (int64_t)(w & 0xffffffffu));
        atomic_fetch_add(&p->done, 1);
    }
}

static void *worker_main(void *arg)
{
    struct cpu_worker *wk = arg;
    struct cpu_pool *p = wk->pool;
    unsigned seen = 0; /* gen is 0 when the pool starts; a dispatch may precede this thread */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1);
            futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_chunks(p, g);
    }
}

struct cpu_pool *cpu_pool_new(int n_threads, struct cerr *e)
{
    if (n_threads < 1)
        n_threads = 1;
    struct cpu_pool *p = calloc(1, sizeof *p);
    if (!p) {
        cerr_set(e, CERR_NOMEM, "out of memory creating the CPU thread pool");
        return NULL;
    }
    p->n = n_threads;
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->w) {
        free(p);
        cerr_set(e, CERR_NOMEM, "out of memory creating the CPU thread pool");
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->w[i].pool = p;
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            log_warn("cpu: could start only %d of %d threads", i, n_threads);
            p->n = i;
            break;
        }
    }
    return p;
}

static unsigned bump_gen(struct cpu_pool *p)
{
    unsigned g = atomic_fetch_add(&p->gen, 1) + 1; /* seq_cst: pairs with sleepers */
    if (atomic_load(&p->sleepers) > 0)
        futex_wake_all(&p->gen);
    return g;
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p)
        return;
    if (p->n > 1) {
        atomic_store(&p->stop, 1);
        bump_gen(p);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->w[i].tid, NULL);
    }
    free(p->w);
    free(p);
}

int cpu_pool_size(const struct cpu_pool *p) { return p->n; }

void cpu_pool_run(struct cpu_pool *p, cpu_chunk_fn fn, void *ctx, int64_t n_chunks)
{
    if (n_chunks <= 0)
        return;
    if (p->n == 1 || n_chunks == 1) {
        for (int64_t c = 0; c < n_chunks; c++)
            fn(ctx, c);
        return;
    }
    uint32_t g = atomic_load(&p->gen) + 1; /* only this thread changes gen */
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->n_chunks, n_chunks);
    atomic_store(&p->done, 0);
    atomic_store(&p->claim, (uint64_t)g << 32);
    bump_gen(p);
    run_chunks(p, g);
    int spins = 0;
    while (atomic_load(&p->done) < n_chunks) {
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
    atomic_store(&p->claim, (uint64_t)g << 32 | CLOSED); /* late workers find nothing */
}
