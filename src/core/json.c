/* json.c - jansson helpers (see json.h). */
#include "core/json.h"

#include <math.h>

#include "core/alloc.h"

char *nx_json_dumps(const json_t *j, size_t flags) {
    if (!j) return NULL;
    size_t fails = nx_alloc_failures();
    char *s = json_dumps(j, flags);
    if (s && nx_alloc_failures() != fails) {
        nx_free(s);
        s = NULL;
    }
    return s;
}

static json_t *checked(json_t *v, size_t fails, bool *oom) {
    *oom = nx_alloc_failures() != fails;
    if (*oom) {
        json_decref(v);
        return NULL;
    }
    return v;
}

json_t *nx_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je, bool *oom) {
    size_t fails = nx_alloc_failures();
    return checked(json_loadb(buf, len, flags, je), fails, oom);
}

json_t *nx_json_loads(const char *text, size_t flags, json_error_t *je, bool *oom) {
    size_t fails = nx_alloc_failures();
    return checked(json_loads(text, flags, je), fails, oom);
}

json_t *nx_json_load_file(const char *path, size_t flags, json_error_t *je, bool *oom) {
    size_t fails = nx_alloc_failures();
    return checked(json_load_file(path, flags, je), fails, oom);
}

json_t *nx_json_real_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }
