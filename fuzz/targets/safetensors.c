/*
 * safetensors.c - fuzz target: a safetensors file (src/route/safetensors.c) from memory; every
 * tensor of a file that validates is converted (st_to_f32, st_get_f64, st_get_i64 on its first
 * and last element) and looked up by name.
 */
#include <stdlib.h>

#include "fuzz.h"
#include "route/safetensors.h"

NX_FUZZ_TARGET(safetensors) {
    char err[400] = "";
    st_file *f = NULL;
    st_open_mem(data, size, &f, err, sizeof err);
    if (!f) {
        if (!err[0]) __builtin_trap();
        return 0;
    }
    (void)st_metadata(f, "format");
    for (int i = 0; i < st_n_tensors(f); i++) {
        const struct st_tensor *t = st_tensor_at(f, i);
        if (st_find(f, t->name) == NULL) __builtin_trap();
        (void)st_dtype_name(t->dtype);
        if (t->n_elem > 0 && st_dtype_numeric(t->dtype)) {
            (void)st_get_f64(t, 0);
            (void)st_get_i64(t, t->n_elem - 1);
        }
        if (t->n_elem <= (1u << 20)) {
            float *out = malloc((t->n_elem ? t->n_elem : 1) * sizeof *out);
            if (out) (void)st_to_f32(t, out, err, sizeof err);
            free(out);
        }
    }
    st_close(f);
    return 0;
}
