/*
 * policy_full.c - "full": the dense baseline, never evicts.
 *
 * DESIGN
 * - select() validates its arguments like every policy (so a bad view is reported the same way
 *   whatever the policy) and sets every keep flag. It needs no scratch (scratch may be NULL).
 * - Used to check that the cache manager with a policy attached gives the same logits as the
 *   plain engine.
 */
#include "kv/kv_policy_impl.h"

static nx_status full_select(const struct kv_layer_view *view, int64_t keep,
                             const struct kv_policy_params *params, void *scratch,
                             struct kv_selection *out) {
    NX_UNUSED(scratch);
    nx_status st = kvp_check(view, keep, params, out);
    if (st != NX_STATUS_OK) return st;
    kvp_keep_all(view, out);
    return NX_STATUS_OK;
}

const struct kv_policy kv_policy_full = {
    .name = "full",
    .needs_acc_attn = false,
    .per_head = false,
    .block_granular = false,
    .select = full_select,
};
