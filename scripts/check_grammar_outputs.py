#!/usr/bin/env python3
"""Independent check of constrained generations (the output of `nexus bench-grammar --out`).

Each JSON line holds the BFCL function's original "parameters" schema and the generated text.
The text must parse as JSON (Python's json module) and validate against the full schema with
python3-jsonschema (Draft 2020-12, with its FormatChecker, so "format": "date" is checked).
BFCL's non-standard type names are mapped the way BFCL's own converter maps them
(GORILLA_TO_OPENAPI: dict -> object, float -> number, tuple -> array, any -> string, ...), and
BFCL's "optional" key is dropped; the mapping is written here independently of the C code.

Usage: check_grammar_outputs.py OUT.jsonl [OUT2.jsonl ...] [--times T.txt ...]
Prints counts and exits 1 on any invalid output. With --times files (one microsecond value a
line), also prints median / p99 of the mask time over all of them.
"""
import json
import sys

try:
    import jsonschema
except ImportError:  # the caller (tests) skips when this is missing
    print("check_grammar_outputs: python3-jsonschema is not installed", file=sys.stderr)
    sys.exit(77)

BFCL_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "string": "string",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array",
    "dict": "object", "object": "object", "tuple": "array", "any": "string",
    "byte": "integer", "short": "integer", "long": "integer", "double": "number",
    "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string",
    "String": "string", "Bigint": "integer", "null": "null",
}


def type_ok(t, v):
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return {"string": str, "boolean": bool, "null": type(None), "array": list,
            "object": dict}.get(t, ()) and isinstance(v, {"string": str, "boolean": bool,
                                                        "null": type(None), "array": list,
                                                        "object": dict}[t])


def repair_enum(out):
    """BFCL data bug: enum values that contradict the type make a schema unsatisfiable. As in
    the C compiler's BFCL mode: an array type takes the enum as its items'; otherwise the enum
    values stand without the type."""
    if "enum" not in out or "type" not in out:
        return out, False
    types = out["type"] if isinstance(out["type"], list) else [out["type"]]
    if any(type_ok(t, v) for t in types for v in out["enum"]):
        return out, False
    out = dict(out)
    if "array" in types:
        out["type"] = "array"
        out["items"] = {"enum": out.pop("enum")}
    else:
        del out["type"]
    return out, True


REPAIRED = [0]


def bfcl_to_jsonschema(s):
    if isinstance(s, list):
        return [bfcl_to_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k == "optional":
            continue
        if k == "type":
            out[k] = [BFCL_TYPES.get(t, t) for t in v] if isinstance(v, list) else BFCL_TYPES.get(v, v)
        elif k in ("properties", "$defs", "definitions"):
            out[k] = {pk: bfcl_to_jsonschema(pv) for pk, pv in v.items()}
        elif k in ("items", "additionalProperties", "anyOf", "oneOf"):
            out[k] = bfcl_to_jsonschema(v)
        else:
            out[k] = v
    out, fixed = repair_enum(out)
    REPAIRED[0] += fixed
    return out


def run(argv):
    outs, times = [], []
    cur = outs
    for a in argv:
        if a == "--times":
            cur = times
        else:
            cur.append(a)
    n = bad = 0
    funcs = set()
    keywords = {}
    first_errors = []
    checker = jsonschema.FormatChecker()
    for path in outs:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                n += 1
                funcs.add((rec.get("file"), rec.get("function")))
                schema = bfcl_to_jsonschema(rec["schema"])
                try:
                    value = json.loads(rec["output"])
                    jsonschema.Draft202012Validator(schema, format_checker=checker).validate(value)
                except (ValueError, jsonschema.ValidationError) as e:
                    bad += 1
                    if len(first_errors) < 5:
                        first_errors.append("%s: %r: %s" % (rec.get("function"), rec["output"][:200], str(e)[:300]))
    print("check_grammar_outputs: %d outputs of %d functions, %d invalid (%d schema nodes with a "
          "BFCL enum/type contradiction repaired)" % (n, len(funcs), bad, REPAIRED[0]))
    for e in first_errors:
        print("  invalid:", e)
    if times:
        v = []
        for path in times:
            with open(path) as f:
                v.extend(float(x) for x in f if x.strip())
        v.sort()
        if v:
            print("mask per step over %d steps: median %.2f us, p90 %.2f us, p99 %.2f us, max %.0f us"
                  % (len(v), v[len(v) // 2], v[int(len(v) * 0.9)], v[int(len(v) * 0.99)], v[-1]))
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
