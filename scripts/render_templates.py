#!/usr/bin/env python3
"""render_templates.py - the test oracle for src/chat: renders every chat template in a directory
over the conversations of tests/fixtures/chat/conversations.json with Python's jinja2, set up the way
Hugging Face transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, a {% generation %} tag, a tojson filter that is
json.dumps with ensure_ascii=False, globals raise_exception and strftime_now), and writes
one JSON object {template: {case: {"out": text} | {"error": kind, "message": text}}}.

Usage: render_templates.py TEMPLATE_DIR CONVERSATIONS.json OUT.json
       render_templates.py --snippets SNIPPETS.in.json OUT.json
The second form renders small templates [{"template": ..., "vars": {...}}] with the same globals
(messages = vars["messages"] or [], tools = documents = None, add_generation_prompt = False, plus
vars) and writes the list back with "out" or "error" / "message" added: the C test's oracle for
interpreter details.
strftime_now uses a fixed time (2026-01-15 10:30:00 UTC) so the output is reproducible; the C test
passes the same time to the renderer.
"""
import datetime, glob, json, os, sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
BOS, EOS = "<|bos|>", "<|eos|>"


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body (HF's AssistantTracker, untracked)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def cases(conv):
    tools = conv["tools"]
    for c in conv["conversations"]:
        for agp in (False, True):
            yield "%s/%s" % (c["name"], "gen" if agp else "nogen"), c["messages"], \
                (tools if c.get("tools") else None), agp


def compile_template(env, src):
    """The compiled template, or the error dict when jinja2 cannot compile it."""
    try:
        return env.from_string(src)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "syntax", "message": str(e)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": "compile", "message": str(e)}


def render_one(env, src, messages, tools, agp, extra=None):
    tmpl = compile_template(env, src) if isinstance(src, str) else src
    if isinstance(tmpl, dict):
        return tmpl
    try:
        if extra is None:
            out = tmpl.render(messages=json.loads(json.dumps(messages)), tools=tools, documents=None,
                              add_generation_prompt=agp, bos_token=BOS, eos_token=EOS)
        else:
            kw = dict(messages=messages, tools=None, documents=None, add_generation_prompt=False)
            kw.update(extra)
            out = tmpl.render(**kw)
        return {"out": out}
    except jinja2.exceptions.UndefinedError as e:
        return {"error": "undefined", "message": str(e)}
    except jinja2.exceptions.SecurityError as e:
        return {"error": "security", "message": str(e)}
    except jinja2.exceptions.TemplateError as e:
        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "template"
        return {"error": kind, "message": str(e)}
    except Exception as e:  # TypeError and friends inside the template
        return {"error": "python", "message": "%s: %s" % (type(e).__name__, e)}


def write_json(out_path, result, indent, sort_keys=True):
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out_path)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--snippets":
        env = make_env()
        snippets = json.load(open(sys.argv[2], encoding="utf-8"))
        for s in snippets:
            vars_ = s.get("vars", {})
            s.update(render_one(env, s["template"], vars_.get("messages", []), None, False, vars_))
        write_json(sys.argv[3], snippets, 1, sort_keys=False)
        return
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tdir, conv_path, out_path = sys.argv[1:]
    conv = json.load(open(conv_path, encoding="utf-8"))
    env = make_env()
    result = {}
    for path in sorted(glob.glob(os.path.join(tdir, "*.jinja"))):
        tmpl = compile_template(env, open(path, encoding="utf-8").read())
        name = os.path.basename(path)
        result[name] = {k: render_one(env, tmpl, m, t, agp) for k, m, t, agp in cases(conv)}
    write_json(out_path, result, 1)


if __name__ == "__main__":
    main()
