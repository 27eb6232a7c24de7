/* types.c - the type trait table (sizes of ggml's block layouts, and Nexus's internal ones). */
#include "kern/types.h"

#include "core/nx_base.h"

static const struct nx_type_info g_types[NX_TYPE_COUNT] = {
    [NX_TYPE_F32] = {"F32", 1, 4, false, true},
    [NX_TYPE_F16] = {"F16", 1, 2, false, true},
    [NX_TYPE_Q4_0] = {"Q4_0", 32, 18, true, true},
    [NX_TYPE_Q4_1] = {"Q4_1", 32, 20, true, false},
    [NX_TYPE_Q5_0] = {"Q5_0", 32, 22, true, false},
    [NX_TYPE_Q5_1] = {"Q5_1", 32, 24, true, false},
    [NX_TYPE_Q8_0] = {"Q8_0", 32, 34, true, true},
    [NX_TYPE_Q8_1] = {"Q8_1", 32, 36, true, false},
    [NX_TYPE_Q2_K] = {"Q2_K", 256, 84, true, false},
    [NX_TYPE_Q3_K] = {"Q3_K", 256, 110, true, false},
    [NX_TYPE_Q4_K] = {"Q4_K", 256, 144, true, true},
    [NX_TYPE_Q5_K] = {"Q5_K", 256, 176, true, true},
    [NX_TYPE_Q6_K] = {"Q6_K", 256, 210, true, true},
    [NX_TYPE_Q8_K] = {"Q8_K", 256, 292, true, false},
    [NX_TYPE_BF16] = {"BF16", 1, 2, false, true},
    [NX_TYPE_F16_X4] = {"F16_X4", 1, 2, false, false, true},
    [NX_TYPE_BF16_X4] = {"BF16_X4", 1, 2, false, false, true},
    [NX_TYPE_Q4_K_IL] = {"Q4_K_IL", 256, 144, true, false, true},
};

const struct nx_type_info *nx_type_info_get(int type) {
    if (type < 0 || type >= NX_TYPE_COUNT || g_types[type].blck_size == 0) return NULL;
    return &g_types[type];
}

bool nx_row_bytes(enum nx_type t, int64_t n, size_t *out) {
    const struct nx_type_info *ti = nx_type_info_get(t);
    if (!ti || n < 0 || n % ti->blck_size != 0) return false;
    return nx_mul_size((size_t)(n / ti->blck_size), ti->type_size, out);
}

const char *nx_type_name(enum nx_type t) {
    const struct nx_type_info *ti = nx_type_info_get(t);
    return ti ? ti->name : NULL;
}

bool nx_type_supported(enum nx_type t) {
    const struct nx_type_info *ti = nx_type_info_get(t);
    return ti && ti->supported;
}
