/* argcheck.c - arguments against a tool's input schema, independently of the grammar. */
#include "agent/argcheck.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"

static bool type_ok(const char *t, const json_t *v) {
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return true; /* an unknown name constrains nothing here */
}

static bool types_ok(const json_t *type, const json_t *v) {
    if (json_is_string(type)) return type_ok(json_string_value(type), v);
    if (!json_is_array(type)) return true;
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && type_ok(json_string_value(t), v)) return true;
    return json_array_size(type) == 0;
}

bool ag_args_check(const json_t *schema, const char *arguments, char *why, size_t whylen) {
    char tmp[8];
    if (!why) {
        why = tmp;
        whylen = sizeof tmp;
    }
    bool oom = false;
    json_error_t je;
    json_t *a = nx_json_loads(arguments, 0, &je, &oom);
    bool ok = false;
    if (!a || !json_is_object(a)) {
        snprintf(why, whylen, "not a JSON object%s%s", a ? "" : ": ", a ? "" : je.text);
        goto done;
    }
    const json_t *props = schema ? json_object_get(schema, "properties") : NULL;
    const json_t *req = schema ? json_object_get(schema, "required") : NULL;
    const json_t *addl = schema ? json_object_get(schema, "additionalProperties") : NULL;
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r) {
        if (json_is_string(r) && !json_object_get(a, json_string_value(r))) {
            snprintf(why, whylen, "required property '%s' is missing", json_string_value(r));
            goto done;
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) {
        const json_t *ps = props ? json_object_get(props, k) : NULL;
        if (!ps) {
            if (addl && (json_is_true(addl) || json_is_object(addl))) continue;
            snprintf(why, whylen, "property '%s' is not in the schema", k);
            goto done;
        }
        const json_t *type = json_object_get(ps, "type");
        if (type && !types_ok(type, v)) {
            snprintf(why, whylen, "property '%s' has the wrong type", k);
            goto done;
        }
        const json_t *en = json_object_get(ps, "enum");
        if (json_is_array(en)) {
            bool found = false;
            const json_t *e;
            json_array_foreach(en, i, e) found |= json_equal(e, v);
            if (!found) {
                snprintf(why, whylen, "property '%s' is not one of its enum values", k);
                goto done;
            }
        }
    }
    ok = true;
done:
    json_decref(a);
    return ok;
}
