/*
 * threadpool.c - DESIGN: workers wait on a job generation counter. The driver publishes
 * (fn, arg, nth), bumps `gen` and wakes sleepers; each worker runs its share and bumps `done`.
 * Waiting is spin-then-sleep: a worker spins (with a pause hint) for SPIN_SECONDS of wall
 * time (waking a sleeping vCPU costs milliseconds in a VM, more than the gap between decode
 * steps), then registers in `sleeping` and blocks on the condition variable. The sleeping counter and the
 * generation are both seq_cst, so either the driver sees a sleeper and broadcasts under the
 * mutex, or the sleeper sees the new generation before waiting: no lost wake-up.
 * A new worker sleeps until its first job, and a one-off job (the per-thread preparation)
 * sends it back to sleep at once: on the project's 2-vCPU VMs any activity on one vCPU, a
 * pause loop or even a 50 us nanosleep loop, slows a single-threaded run on the other by
 * up to 60% (measured with stories260K pinned to one vCPU), so a pool whose model never
 * needs a second thread must leave that vCPU idle.
 * The barrier is a sense-reversing counter (count + generation): every participant is running
 * when it is used, so it spins, yielding the core after BARRIER_SPINS polls (oversubscribed).
 *
 * Shared pool: one pool per process behind a run lock (pthread mutex: users on different
 * threads take turns job by job) and a reference count. Widening replaces the pool under the
 * lock, so no job is running while the old one is joined.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "core/alloc.h"

#define SPIN_ITERS 200000
#define SPIN_SECONDS 0.005
#define BARRIER_SPINS 20000
#define BARRIER_YIELD_AFTER 0.0005 /* seconds of spinning before yielding the core */

struct nx_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    nx_pool_fn fn;
    void *arg;
    int nth;

    atomic_int gen;
    atomic_int done;
    atomic_int spin_after; /* whether workers spin after the current job, or sleep at once */
    atomic_int sleeping;
    atomic_int stop;

    atomic_int bar_count;
    atomic_int bar_gen;
};

struct worker_arg {
    struct nx_pool *pool;
    int ith;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    nx_free(p);
    struct nx_pool *pool = wa.pool;
    int last = 0;
    bool spin = false; /* a new worker sleeps until its first job: a pool may be created and
                          never used (a model too small for a second thread) */
    for (;;) {
        int g;
        int spins = 0;
        double t_spin = 0;
        while ((g = atomic_load(&pool->gen)) == last && !atomic_load(&pool->stop)) {
            /* spin for up to SPIN_SECONDS of wall time (a sleeping vCPU can take milliseconds
               to wake in a VM, far longer than the gap between two decode steps); after a
               job that is not followed by others (spin_after 0) sleep at once */
            if (spin && (++spins & 1023) != 0) {
                cpu_relax();
                continue;
            }
            if (t_spin == 0) t_spin = nx_time_s();
            if (spin && nx_time_s() - t_spin < SPIN_SECONDS) continue;
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleeping, 1);
            while (atomic_load(&pool->gen) == last && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
            t_spin = 0;
        }
        if (atomic_load(&pool->stop)) return NULL;
        last = g;
        if (wa.ith < pool->nth) pool->fn(pool->arg, wa.ith, pool->nth);
        /* read before reporting done: the driver may publish the next job right after */
        spin = atomic_load(&pool->spin_after) != 0;
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
}

nx_status nx_pool_init(int n_threads, struct nx_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024) return NX_STATUS_INVALID_ARG;
    struct nx_pool *pool = nx_calloc(1, sizeof *pool);
    if (!pool) return NX_STATUS_NOMEM;
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = nx_calloc((size_t)n_threads, sizeof(pthread_t));
    if (!pool->threads) goto fail;
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = nx_malloc(sizeof *wa);
        if (!wa) goto fail_join;
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            nx_free(wa);
            goto fail_join;
        }
        pool->n = i + 1; /* threads started so far, for cleanup */
    }
    pool->n = n_threads;
    *out = pool;
    return NX_STATUS_OK;
fail_join:
    nx_pool_free(pool);
    return NX_STATUS_NOMEM;
fail:
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    nx_free(pool);
    return NX_STATUS_NOMEM;
}

void nx_pool_free(struct nx_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    nx_free(pool->threads);
    nx_free(pool);
}

int nx_pool_size(const struct nx_pool *pool) { return pool->n; }

/* spin_after: whether the workers spin for the next job (decode steps come back to back) or
 * go to sleep at once (a one-off job such as the per-thread preparation: a spinning vCPU
 * slows its neighbour, see DESIGN). */
static void pool_run(struct nx_pool *pool, nx_pool_fn fn, void *arg, int nth, bool spin_after) {
    NX_ASSERT(nth >= 1 && nth <= pool->n);
    if (pool->n == 1 || nth == 1) {
        /* one participant: run inline, the workers stay asleep (nx_pool_barrier returns) */
        pool->nth = 1;
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store(&pool->spin_after, spin_after);
    atomic_store(&pool->done, 0);
    atomic_store(&pool->bar_count, 0);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, nth);
    int spins = 0;
    while (atomic_load_explicit(&pool->done, memory_order_acquire) < pool->n - 1) {
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}

void nx_pool_run(struct nx_pool *pool, nx_pool_fn fn, void *arg, int nth) { pool_run(pool, fn, arg, nth, true); }

void nx_pool_barrier(struct nx_pool *pool) {
    int nth = pool->nth;
    if (pool->n == 1 || nth == 1) return;
    int g = atomic_load(&pool->bar_gen);
    if (atomic_fetch_add(&pool->bar_count, 1) == nth - 1) {
        atomic_store(&pool->bar_count, 0);
        atomic_fetch_add(&pool->bar_gen, 1);
    } else {
        /* spin, but yield the core when it is oversubscribed (another process, more threads
           than cores): a pure spin there would starve the thread everyone waits for */
        int spins = 0;
        double t0 = 0;
        while (atomic_load(&pool->bar_gen) == g) {
            if ((++spins & 1023) != 0 || spins < BARRIER_SPINS) {
                cpu_relax();
                continue;
            }
            if (t0 == 0) t0 = nx_time_s();
            if (nx_time_s() - t0 > BARRIER_YIELD_AFTER) sched_yield();
        }
    }
}

/* ---- the process-wide shared pool ---- */

static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nx_pool *g_shared;
static int g_shared_users;
static nx_pool_prep_fn g_prep;
static int64_t g_prep_a, g_prep_b;

struct prep_job {
    nx_pool_prep_fn fn;
    int64_t a, b;
    atomic_int failed;
};
static void prep_worker(void *arg, int ith, int nth) {
    struct prep_job *j = arg;
    (void)ith, (void)nth;
    if (!j->fn(j->a, j->b)) atomic_store(&j->failed, 1);
}
static bool run_prep(struct nx_pool *pool, nx_pool_prep_fn fn, int64_t a, int64_t b) {
    struct prep_job j = {.fn = fn, .a = a, .b = b};
    atomic_init(&j.failed, 0);
    pool_run(pool, prep_worker, &j, pool->n, false);
    return !atomic_load(&j.failed);
}

nx_status nx_pool_shared_acquire(int n_threads, nx_pool_prep_fn prep, int64_t a, int64_t b) {
    if (n_threads < 1) n_threads = 1;
    pthread_mutex_lock(&g_shared_lock);
    nx_status st = NX_STATUS_OK;
    bool grow_prep = prep && (a > g_prep_a || b > g_prep_b || !g_prep);
    int64_t na = prep ? NX_MAX(a, g_prep_a) : g_prep_a, nb = prep ? NX_MAX(b, g_prep_b) : g_prep_b;
    nx_pool_prep_fn fn = prep ? prep : g_prep;
    if (!g_shared || g_shared->n < n_threads) {
        struct nx_pool *np;
        int want = g_shared ? NX_MAX(g_shared->n, n_threads) : n_threads;
        st = nx_pool_init(want, &np);
        if (st == NX_STATUS_OK && fn && !run_prep(np, fn, na, nb)) {
            nx_pool_free(np);
            st = NX_STATUS_NOMEM;
        }
        if (st == NX_STATUS_OK) {
            nx_pool_free(g_shared);
            g_shared = np;
        }
    } else if (grow_prep && !run_prep(g_shared, fn, na, nb)) {
        st = NX_STATUS_NOMEM;
    }
    if (st == NX_STATUS_OK) {
        g_shared_users++;
        if (fn) {
            g_prep = fn;
            g_prep_a = na;
            g_prep_b = nb;
        }
    }
    pthread_mutex_unlock(&g_shared_lock);
    return st;
}

void nx_pool_shared_release(void) {
    pthread_mutex_lock(&g_shared_lock);
    if (g_shared_users > 0 && --g_shared_users == 0) {
        nx_pool_free(g_shared);
        g_shared = NULL;
        g_prep = NULL;
        g_prep_a = g_prep_b = 0;
    }
    pthread_mutex_unlock(&g_shared_lock);
}

struct nx_pool *nx_pool_shared_lock(void) {
    pthread_mutex_lock(&g_shared_lock);
    return g_shared;
}

void nx_pool_shared_unlock(void) { pthread_mutex_unlock(&g_shared_lock); }
