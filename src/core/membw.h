/* membw.h - measure the machine's memory read bandwidth (for the benchmark's roofline). */
#ifndef NX_MEMBW_H
#define NX_MEMBW_H
#include <stddef.h>
/* Read a buffer of `bytes` (much larger than the caches) with n_threads threads, `reps` times;
 * returns the best bytes/second, or 0 when the buffer cannot be allocated. */
double nx_measure_read_bandwidth(size_t bytes, int n_threads, int reps);
#endif
