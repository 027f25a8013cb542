/* pool.c — see pool.h. Linux futexes for sleeping; C11 atomics for the hand-off.
 *
 * Protocol: the caller stores (fn, ctx, nth), sets pending = n-1, then increments gen.
 * A worker that sees a new gen runs the task (if its index < nth) and decrements pending.
 * Sleepers are counted so that a dispatch only makes a futex syscall when someone sleeps.
 */
#include "backend/cpu/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

enum { SPIN_ITERS = 1 << 15 };

struct cpu_worker {
    struct cpu_pool *pool;
    int ith;
    pthread_t tid;
};

struct cpu_pool {
    int n;
    struct cpu_worker *w;
    _Alignas(64) atomic_uint gen;
    atomic_int sleepers;
    atomic_int stop;
    _Alignas(64) atomic_int pending;
    cpu_task_fn fn;
    void *ctx;
    int nth;
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

static void *worker_main(void *arg)
{
    struct cpu_worker *w = arg;
    struct cpu_pool *p = w->pool;
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
        if (w->ith < p->nth)
            p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

static void dispatch(struct cpu_pool *p)
{
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&p->sleepers) > 0)
        futex_wake_all(&p->gen);
}

static void wait_done(struct cpu_pool *p)
{
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
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
        p->w[i].ith = i;
        int rc = pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]);
        if (rc != 0) {
            log_warn("cpu: could start only %d of %d threads", i, n_threads);
            p->n = i;
            break;
        }
    }
    return p;
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p)
        return;
    if (p->n > 1) {
        atomic_store(&p->stop, 1);
        dispatch(p);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->w[i].tid, NULL);
    }
    free(p->w);
    free(p);
}

int cpu_pool_size(const struct cpu_pool *p) { return p->n; }

void cpu_pool_run(struct cpu_pool *p, cpu_task_fn fn, void *ctx, int nth_max)
{
    int nth = nth_max <= 0 || nth_max > p->n ? p->n : nth_max;
    if (nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->nth = nth;
    dispatch(p);
    fn(ctx, 0, nth);
    wait_done(p);
}
