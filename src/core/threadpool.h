/*
 * threadpool.h - a persistent pool of worker threads for data-parallel kernels.
 *
 * nx_pool_run(pool, fn, arg, nth) runs fn(arg, ith, nth) for ith = 0..nth-1 at once, on the
 * calling thread (ith 0) and nth-1 workers, and returns when all are done. Inside fn, the
 * participants may synchronise with nx_pool_barrier(pool). Workers spin for a short while after a
 * job (decode issues jobs back to back) and then sleep on a condition variable.
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

#endif
