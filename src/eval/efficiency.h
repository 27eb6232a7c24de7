/* efficiency.h - the runner of `nexus eval-efficiency`: decode speed, latency and KV memory of every
 * policy against dense, at several generated lengths from one long run per policy. */
#ifndef NX_EVAL_EFFICIENCY_H
#define NX_EVAL_EFFICIENCY_H
#include <stdint.h>
#include "nexus.h"

struct effi_params {
    const char *policies; /* comma-separated; "full" is the dense reference */
    float density;        /* budget of the evicting policies */
    int regime;           /* NX_KV_REGIME_STREAM (default) or _PREFILL */
    int prompt;           /* prompt tokens decoded before the timed decode */
    const char *lengths;  /* comma-separated generated lengths (checkpoints), ascending */
    int threads;
    uint64_t seed;        /* token ids of prompt and decode (speed does not depend on them) */
    const char *json_path, *svg_dir; /* NULL: none */
    const struct nx_ctx_params *base; /* KV type, block/sink/recent, Nexus knobs; NULL: defaults */
};
struct effi_params effi_default_params(void);
/* Prints a table; NX_STATUS_OK, or the failing step's status (INVALID_ARG for bad parameters,
 * NOMEM, the engine's, IO) with a message on stderr. */
nx_status eval_efficiency_run(const nx_model *m, const struct effi_params *p);
#endif
