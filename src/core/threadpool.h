/*
 * threadpool.h - a persistent pool of worker threads for data-parallel kernels.
 *
 * nx_pool_run(pool, fn, arg, nth) runs fn(arg, ith, nth) for ith = 0..nth-1 at once, on the
 * calling thread (ith 0) and nth-1 workers, and returns when all are done. Inside fn, the
 * participants may synchronise with nx_pool_barrier(pool). Workers spin for a short while after a
 * job (decode issues jobs back to back) and then sleep on a condition variable; a new worker
 * sleeps until its first job.
 * A pool is driven by one thread at a time.
 */
#ifndef NX_THREADPOOL_H
#define NX_THREADPOOL_H

#include "core/nx_base.h"

struct nx_pool;
typedef void (*nx_pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started. */
nx_status nx_pool_init(int n_threads, struct nx_pool **out);
void nx_pool_free(struct nx_pool *pool);
int nx_pool_size(const struct nx_pool *pool);
/* nth in [1, size]. */
void nx_pool_run(struct nx_pool *pool, nx_pool_fn fn, void *arg, int nth);
/* All nth participants of the current job wait here for each other. */
void nx_pool_barrier(struct nx_pool *pool);

/*
 * The process-wide pool every context (and encoder call) shares instead of one pool each.
 * A user takes a reference with nx_pool_shared_acquire, asking for at least n_threads
 * threads: the pool is created on first use and replaced by a wider one when a user needs
 * more (never narrowed while it has users; freed with the last reference). prep (may be NULL)
 * is called on every thread of the pool with the largest (a, b) any user has asked for (the
 * kernels' per-thread buffer reservation), on a new pool and whenever the largest grows, so
 * every thread stays prepared for every user. Jobs of different users never overlap:
 * nx_pool_shared_lock returns the pool with the pool's run lock held (one driver at a time),
 * nx_pool_shared_unlock releases it.
 */
typedef bool (*nx_pool_prep_fn)(int64_t a, int64_t b);
/* Errors: NOMEM (no reference taken; prep failing on a thread counts as NOMEM). */
nx_status nx_pool_shared_acquire(int n_threads, nx_pool_prep_fn prep, int64_t a, int64_t b);
void nx_pool_shared_release(void);
struct nx_pool *nx_pool_shared_lock(void);
void nx_pool_shared_unlock(void);

#endif
