#!/usr/bin/env python3
"""template_reference.py — render chat templates with Python jinja2 the way transformers does.

The environment is the one transformers' apply_chat_template builds
(transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols, generation tag]), tojson overridden by
json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys),
globals raise_exception and strftime_now (here fixed to --date), and render variables
messages, tools (None when absent), documents (None), add_generation_prompt, bos_token,
eos_token and any extra kwargs.

Usage:
  template_reference.py render TEMPLATE.jinja CONTEXT.json [--date YYYY-MM-DD]
      print one render exactly (no newline added); exit 1 with the error on stderr.
  template_reference.py build [--models DIR]
      regenerate tests/data/template/expected.json from the fixture templates, the
      templates embedded in the real GGUF models (extracted to tests/data/template/gguf/
      with the python `gguf` package when DIR has them), the conversations in
      tests/data/template/conversations/ and the snippets in tests/data/template/snippets.json;
      plus matrix.json (values x filters/tests/methods/operators) and whitespace.json (800
      random templates mixing text, whitespace, raw and every whitespace-control marker) and
      statements.json (600 random nestings of if/for/set/namespace/macro/break/continue).
Needs: pip install jinja2 (>= 3.1), and gguf for the GGUF extraction.
"""
import argparse
import glob
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "template")
FIXTURES = os.environ.get("CINFER_FIXTURES", os.path.join(REPO, "tests", "data", "fixtures"))
DATE = "2025-01-15"


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(date):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    fixed = datetime.strptime(date, "%Y-%m-%d")

    def strftime_now(fmt):
        return fixed.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(source, context, date=DATE):
    """Returns (ok, text_or_error, exact) — exact: the error is a raise_exception message."""
    env = make_env(date)
    try:
        ctx = dict(context)
        ctx.setdefault("tools", None)
        ctx.setdefault("documents", None)
        ctx.setdefault("add_generation_prompt", False)
        return True, env.from_string(source).render(**ctx), True
    except Exception as x:  # noqa: BLE001 — any template failure is an expected error
        exact = type(x) is jinja2.exceptions.TemplateError
        return False, str(x), exact


def extract_gguf_templates(models_dir):
    """Writes gguf/<stem>.jinja and gguf/tokens.json for models that embed a template."""
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        print("gguf package missing; keeping the committed GGUF templates", file=sys.stderr)
        return
    out_dir = os.path.join(DATA, "gguf")
    os.makedirs(out_dir, exist_ok=True)
    tokens_path = os.path.join(out_dir, "tokens.json")
    tokens = json.load(open(tokens_path)) if os.path.exists(tokens_path) else {}
    for path in sorted(glob.glob(os.path.join(models_dir, "*.gguf"))):
        r = gguf.GGUFReader(path)
        f = r.fields.get("tokenizer.chat_template")
        if not f:
            continue
        stem = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(out_dir, stem + ".jinja"), "w", encoding="utf-8", newline="") as fh:
            fh.write(f.contents())
        toks = r.fields["tokenizer.ggml.tokens"]

        def tok(key):
            ff = r.fields.get(key)
            return toks.contents(ff.contents()) if ff else None

        tokens[stem + ".jinja"] = {"model": os.path.basename(path),
                                   "bos_token": tok("tokenizer.ggml.bos_token_id"),
                                   "eos_token": tok("tokenizer.ggml.eos_token_id")}
    with open(tokens_path, "w", encoding="utf-8") as fh:
        json.dump(tokens, fh, indent=1, ensure_ascii=False, sort_keys=True)
        fh.write("\n")


# (conversation file, variant name, add_generation_prompt, extra kwargs)
VARIANTS = [
    ("tools_weather", "gen", True, {}),
    ("tools_only_user", "gen", True, {}),
    ("tool_calls_parallel", "gen", True, {}),
    ("thinking", "gen", True, {}),
    ("thinking", "gen_think_on", True, {"enable_thinking": True}),
    ("thinking", "gen_think_off", True, {"enable_thinking": False}),
    ("thinking", "nogen", False, {}),
    ("content_parts", "gen", True, {}),
    ("long_chat", "nogen", False, {}),
    ("long_chat", "gen", True, {}),
    ("user_only", "nogen", False, {}),
    ("user_only", "gen_think_off", True, {"enable_thinking": False}),
    ("tools_only_user", "gen_think_off", True, {"enable_thinking": False}),
]


def build(models_dir):
    if models_dir and os.path.isdir(models_dir):
        extract_gguf_templates(models_dir)
    fx = json.load(open(os.path.join(FIXTURES, "chat-templates", "expected_renders.json")))
    templates = []  # (relative path for the C test, absolute path, bos, eos)
    for name, st in sorted(fx["special_tokens"].items()):
        templates.append(("fixtures/chat-templates/" + name,
                          os.path.join(FIXTURES, "chat-templates", name),
                          st["bos_token"], st["eos_token"]))
    for tk in ("qwen3-tokenizer", "llama3-tokenizer"):
        cfg_path = os.path.join(FIXTURES, tk, "tokenizer_config.json")
        cfg = json.load(open(cfg_path))

        def content(v):
            return v.get("content") if isinstance(v, dict) else v

        templates.append(("fixtures/%s/tokenizer_config.json" % tk, cfg_path,
                          content(cfg.get("bos_token")), content(cfg.get("eos_token"))))
    tokens_path = os.path.join(DATA, "gguf", "tokens.json")
    if os.path.exists(tokens_path):
        for name, st in sorted(json.load(open(tokens_path)).items()):
            templates.append(("tests/data/template/gguf/" + name,
                              os.path.join(DATA, "gguf", name), st["bos_token"], st["eos_token"]))
    convs = {}
    for p in sorted(glob.glob(os.path.join(DATA, "conversations", "*.json"))):
        convs[os.path.splitext(os.path.basename(p))[0]] = json.load(open(p))
    convs["user_only"] = {"messages": [{"role": "user", "content": "Hello!"}]}
    cases = []
    for rel, path, bos, eos in templates:
        if path.endswith(".json"):
            src = json.load(open(path))["chat_template"]
        else:
            src = open(path, encoding="utf-8", newline="").read()
        for conv, variant, agp, kw in VARIANTS:
            c = convs[conv]
            ctx = {"messages": c["messages"], "tools": c.get("tools"), "documents": None,
                   "add_generation_prompt": agp}
            if bos is not None:
                ctx["bos_token"] = bos
            if eos is not None:
                ctx["eos_token"] = eos
            ctx.update(kw)
            ok, text, exact = render(src, ctx, DATE)
            case = {"template": rel, "name": conv + "/" + variant, "date": DATE, "context": ctx,
                    "ok": ok}
            if ok:
                case["text"] = text
            else:
                case["error"] = text
                case["error_exact"] = exact
            cases.append(case)
    for sn in json.load(open(os.path.join(DATA, "snippets.json"))):
        ok, text, exact = render(sn["source"], sn["context"], DATE)
        case = {"source": sn["source"], "name": "snippet/" + sn["name"], "date": DATE,
                "context": sn["context"], "ok": ok}
        if ok:
            case["text"] = text
        else:
            case["error"] = text
            case["error_exact"] = exact
        cases.append(case)
    out = {"generator": "scripts/template_reference.py build (jinja2 %s, transformers' "
                        "apply_chat_template environment, strftime_now fixed to %s)"
                        % (jinja2.__version__, DATE),
           "cases": cases}
    with open(os.path.join(DATA, "expected.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    n_ok = sum(1 for c in cases if c["ok"])
    print("wrote %d cases (%d renders, %d errors)" % (len(cases), n_ok, len(cases) - n_ok))


# Operator / filter / test matrix: every value through every unary filter, test and
# method, and value pairs through the binary operators. Cases whose Python result cannot
# be reproduced (generator/iterator object reprs with addresses, complex numbers,
# integers beyond 64 bits) are left out.
MATRIX_VALUES = ["0", "1", "-3", "2.5", "-0.5", "1e20", "1e-7", "'abc'", "''", "'Ab cD-eF'",
                 "' pad '", "[1,2]", "[]", "['b','A','a']", "{'a':1,'B':2}", "{}", "none", "true",
                 "false", "x", "m", "'h\u00e9llo\U0001f642'", "(1,'a')", "0.1", "3.0", "'1.5'",
                 "'42'", "[2.5,'x',none]", "m[0]", "d", "s"]
MATRIX_UNARY = ["|length", "|string", "|tojson", "|trim", "|upper", "|lower", "|title",
                "|capitalize", "|first", "|last", "|list", "|int", "|float", "|round", "|abs",
                "|reverse|list", "|sort", "|unique|list", "|join(',')", "|default('d')",
                "|items|list", "|dictsort", "|indent(2)", "|wordcount", "|tojson(indent=2)",
                "|map('string')|list", "|select|list", "|sum", "|min", "|max", "|center(9)", "|e",
                "|count", " is defined", " is string", " is number", " is iterable",
                " is sequence", " is mapping", " is none", " is integer", " is float",
                " is boolean", " is callable", " is lower", " is upper", " is odd", "[0]",
                "[-1]", "[1:]", "[::-1]", ".strip()", ".split()", ".upper()", ".keys()",
                ".items()", ".get('a')", "|replace('a','X')", "|batch(2)|list", ".title()",
                "|first|string", "|tojson(ensure_ascii=true)", "|string|length"]
MATRIX_BINARY = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=",
                 "in", "not in", "and", "or"]
MATRIX_CONTEXT = {"m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                  "d": {"z": 1, "a": [1, {"b": None}]}, "s": "Gr\u00fc\u00dfe\tworld\n"}


def random_ws_template(rnd, depth=0):
    """A random mix of text, whitespace and tags with every whitespace-control marker."""
    ws = ["\n", "  ", "\t", " \n ", "\n\n", "", "x", "ab\n  cd", " \t\n", "\r\n", "  \n"]

    def tag(kind):
        return rnd.choice(["{%", "{%-", "{%+"]) + " " + kind + " " + rnd.choice(["%}", "-%}", "+%}"])

    out = []
    for _ in range(rnd.randint(1, 5)):
        p = rnd.random()
        out.append(rnd.choice(ws))
        if p < 0.25 and depth < 3:
            k = rnd.choice(["if true", "if false", "for i in [1,2]", "for i in []"])
            out.append(tag(k))
            out.append(random_ws_template(rnd, depth + 1))
            if rnd.random() < 0.3:
                out.append(tag("else"))
                out.append(random_ws_template(rnd, depth + 1))
            out.append(tag("endif" if k.startswith("if") else "endfor"))
        elif p < 0.45:
            out.append(rnd.choice(["{{", "{{-"]) + " " + rnd.choice(["'v'", "1", "x", "none", "'a\\nb'"]) +
                       " " + rnd.choice(["}}", "-}}"]))
        elif p < 0.55:
            out.append(rnd.choice(["{#", "{#-"]) + " c " + rnd.choice(["#}", "-#}"]))
        elif p < 0.65 and depth < 3:
            out.append(tag("set y = 3"))
        elif p < 0.7:
            out.append(tag("raw") + rnd.choice(ws) + "{{ raw }}" + rnd.choice(ws) + tag("endraw"))
        out.append(rnd.choice(ws))
    return "".join(out)


def write_cases(name, context, cases):
    with open(os.path.join(DATA, name), "w", encoding="utf-8") as fh:
        fh.write('{"context": %s,\n "cases": [\n' % json.dumps(context, ensure_ascii=False))
        fh.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
        fh.write("\n]}\n")
    print("wrote %d cases to %s" % (len(cases), name))


def build_whitespace():
    import random  # noqa: PLC0415
    rnd = random.Random(7)
    cases = []
    for _ in range(800):
        src = random_ws_template(rnd)
        ok, text, _ = render(src, {"x": "X"}, DATE)
        cases.append([src, ok, text])
    write_cases("whitespace.json", {"x": "X"}, cases)


STMT_CONTEXT = {
    "messages": [{"role": "system", "content": "S y s"}, {"role": "user", "content": " Hi \u00fc "},
                 {"role": "assistant", "content": "<think>r</think>ok",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [1.5, None]}}}]},
                 {"role": "tool", "content": "{\"x\": 1}"}, {"role": "user", "content": ["p1", "p2"]}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                "parameters": {"type": "object"}}}],
    "add_generation_prompt": True, "bos_token": "<s>", "n": 3, "flag": False}


def random_stmt_template(rnd):
    """Random nesting of if/elif/else, for (filters, else, break/continue), set, namespace
    updates and macro calls over a chat-shaped context."""
    exprs = ["m.role", "m.content", "m['content']|string", "loop.index", "loop.first", "loop.last",
             "ns.c", "x", "messages|length", "m.tool_calls|default([])|length", "m.content is string",
             "(m.content|string)[:3]", "m.get('tool_calls')", "tools[0].function.name", "m.role|upper",
             "'q' ~ loop.index0", "n * 2", "ns.items|join(',')", "m.content|tojson", "m|dictsort",
             "m.keys()|list", "(m.tool_calls or [{}])[0].function", "bos_token", "flag",
             "x|default('dx')", "messages[-1].role",
             "m.content.split('<')|first if m.content is string else 'ns'"]
    conds = ["m.role == 'user'", "loop.first", "not loop.last", "m.content is string",
             "'tool_calls' in m", "m.tool_calls is defined", "ns.c > 1", "x is defined", "flag",
             "n is odd", "m.role in ['user', 'tool']", "m.content is string and '<think>' in m.content",
             "add_generation_prompt", "loop.index is divisibleby 2"]
    iters = ["messages", "messages[1:]", "messages|reverse", "messages|selectattr('role', 'equalto', 'user')",
             "range(3)", "m.content if m is defined and m.content is string else []"]

    def stmts(depth, in_loop):
        out = []
        for _ in range(rnd.randint(1, 4)):
            p = rnd.random()
            if p < 0.3:
                out.append("{{ " + rnd.choice(exprs) + " }}")
            elif p < 0.45 and depth < 3:
                out.append("{%- if " + rnd.choice(conds) + " %}" + stmts(depth + 1, in_loop))
                if rnd.random() < 0.3:
                    out.append("{%- elif " + rnd.choice(conds) + " %}" + stmts(depth + 1, in_loop))
                if rnd.random() < 0.4:
                    out.append("{% else -%}" + stmts(depth + 1, in_loop))
                out.append("{%- endif %}")
            elif p < 0.6 and depth < 2:
                it = rnd.choice(iters)
                var = "i" if "range" in it else "m"
                cond = (" if " + rnd.choice(conds)) if rnd.random() < 0.2 else ""
                out.append("{% for " + var + " in " + it + cond + " %}" + stmts(depth + 1, True) +
                           ("{% else %}E" if rnd.random() < 0.2 else "") + "{% endfor %}")
            elif p < 0.7:
                out.append("{%- set x = " + rnd.choice(exprs) + " %}")
            elif p < 0.8:
                out.append("{%- set ns.c = ns.c + 1 %}{% set ns.items = ns.items + [" +
                           rnd.choice(exprs) + "|string] %}")
            elif p < 0.85 and in_loop:
                out.append(rnd.choice(["{% break %}", "{% continue %}"]))
            elif p < 0.92:
                out.append("{{ mac(" + rnd.choice(exprs) + ") }}")
            else:
                out.append(rnd.choice(["\n", "  ", "\n  ", "txt"]))
        return "".join(out)

    return ("{%- set m = messages[2] %}{%- set ns = namespace(c=0, items=[]) %}"
            "{% macro mac(v, w='W') %}[{{ v }}|{{ w }}]{% endmacro %}\n" + stmts(0, False))


def build_statements():
    import random  # noqa: PLC0415
    rnd = random.Random(11)
    cases = []
    for _ in range(600):
        src = random_stmt_template(rnd)
        ok, text, _ = render(src, STMT_CONTEXT, DATE)
        cases.append([src, ok, text])
    write_cases("statements.json", STMT_CONTEXT, cases)


def build_matrix():
    import copy  # noqa: PLC0415
    sources = ["{{ (%s)%s }}" % (v, u) for v in MATRIX_VALUES for u in MATRIX_UNARY]
    k = 0
    for a in MATRIX_VALUES:
        for b in MATRIX_VALUES:
            for j in range(4):
                op = MATRIX_BINARY[(k * 7 + j * 5) % len(MATRIX_BINARY)]
                sources.append("{{ %s %s %s }}" % (a, op, b))
            k += 1
    cases = []
    for src in sources:
        ok, text, _ = render(src, copy.deepcopy(MATRIX_CONTEXT), DATE)
        if "object at 0x" in text or "<generator" in text or "j)" in text:
            continue
        if src.startswith("{{ (1e20)|int") or ("[" in src and ":" in src and "{" in src[3:8]):
            continue
        cases.append([src, ok, text])
    write_cases("matrix.json", MATRIX_CONTEXT, cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("template")
    r.add_argument("context")
    r.add_argument("--date", default=DATE)
    b = sub.add_parser("build")
    b.add_argument("--models", default=os.path.join(REPO, "models"))
    a = ap.parse_args()
    if a.cmd == "render":
        src = open(a.template, encoding="utf-8", newline="").read()
        ok, text, _ = render(src, json.load(open(a.context)), a.date)
        if not ok:
            print(text, file=sys.stderr)
            return 1
        sys.stdout.write(text)
        return 0
    build(a.models)
    build_matrix()
    build_whitespace()
    build_statements()
    return 0


if __name__ == "__main__":
    sys.exit(main())
