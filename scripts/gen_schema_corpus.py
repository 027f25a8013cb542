#!/usr/bin/env python3
"""gen_schema_corpus.py — writes tests/data/structured/corpus.json: JSON schemas of our own
making in real-world shapes (API payloads, configuration files, function signatures,
nested and recursive definitions, enums, formats), each with a valid instance in the
schema's declared property order. Deterministic (fixed seed); run it again to regenerate.
Used by tests/unit/test_grammar.c (all must compile, each instance must be accepted) and
tests/e2e/test_structured.py (outputs of the real model validate)."""
import json
import os
import random

R = random.Random(26)

STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}


def obj(props, required=None, extra=False):
    s = {"type": "object", "properties": props}
    s["required"] = list(props) if required is None else required
    s["additionalProperties"] = extra
    return s


def arr(items, mn=None, mx=None):
    s = {"type": "array", "items": items}
    if mn is not None:
        s["minItems"] = mn
    if mx is not None:
        s["maxItems"] = mx
    return s


FORMATS = {"date": "2024-05-17", "date-time": "2024-05-17T10:20:30Z", "time": "10:20:30+02:00",
           "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e", "email": "ada@example.org",
           "uri": "https://example.org/a/b?c=d", "ipv4": "192.168.0.1"}

WORDS = ["alpha", "beta", "gamma", "delta", "red", "green", "blue", "small", "large", "north",
         "south", "pending", "active", "closed", "admin", "user", "guest", "low", "high", "eu",
         "us", "asia", "debug", "info", "warn", "error"]

NAMES = ["id", "name", "title", "status", "owner", "email", "created_at", "priority", "count",
         "price", "enabled", "tags", "region", "level", "score", "url", "version", "limit",
         "offset", "timeout", "retries", "host", "port", "path", "kind", "note"]


def leaf(depth=0):
    """(schema, instance) for a random leaf."""
    k = R.randrange(11)
    if k == 0:
        return dict(STR), "text"
    if k == 1:
        lo, hi = R.choice([(0, 10), (1, 100), (-50, 50), (1, 65535)])
        return {"type": "integer", "minimum": lo, "maximum": hi}, R.randint(lo, hi)
    if k == 2:
        return dict(NUM), 3.25
    if k == 3:
        return dict(BOOL), True
    if k == 4:
        e = R.sample(WORDS, R.randint(2, 5))
        return {"type": "string", "enum": e}, e[0]
    if k == 5:
        f = R.choice(list(FORMATS))
        return {"type": "string", "format": f}, FORMATS[f]
    if k == 6:
        return {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"}, "AB-1234"
    if k == 7:
        return {"type": "string", "minLength": 2, "maxLength": 12}, "abc"
    if k == 8:
        return {"type": ["string", "null"]}, None
    if k == 9:
        return {"type": "integer", "minimum": 0}, 7
    return {"const": "v1"}, "v1"


def rand_object(depth, n):
    props, inst = {}, {}
    for name in R.sample(NAMES, n):
        if depth < 2 and R.random() < 0.25:
            s, v = rand_object(depth + 1, R.randint(1, 3))
        elif depth < 2 and R.random() < 0.2:
            ls, lv = leaf()
            s, v = arr(ls, R.choice([None, 1]), R.choice([None, 4])), [lv]
        else:
            s, v = leaf(depth)
        props[name] = s
        inst[name] = v
    req = [k for k in props if R.random() < 0.7]
    return obj(props, req), inst


def fixed():
    """Hand-written shapes."""
    out = []
    addr = obj({"street": STR, "city": STR, "zip": {"type": "string", "pattern": "^\\d{5}$"},
                "country": {"enum": ["US", "FR", "DE", "JP"]}})
    out.append(("api/user", obj({"id": {"type": "string", "format": "uuid"}, "name": STR,
                                 "email": {"type": "string", "format": "email"},
                                 "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                 "address": addr}, ["id", "name", "email"]),
                {"id": FORMATS["uuid"], "name": "Ada", "email": "ada@example.org", "age": 36,
                 "address": {"street": "1 Main St", "city": "Paris", "zip": "75001", "country": "FR"}}))
    item = obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}, "qty": {"type": "integer", "minimum": 1},
                "unit_price": {"type": "number", "minimum": 0}})
    out.append(("api/order", obj({"order_id": INT, "items": arr(item, 1, 20),
                                  "status": {"enum": ["new", "paid", "shipped"]},
                                  "placed_at": {"type": "string", "format": "date-time"}}),
                {"order_id": 12, "items": [{"sku": "ABC-1234", "qty": 2, "unit_price": 9.5}],
                 "status": "paid", "placed_at": FORMATS["date-time"]}))
    out.append(("config/server", obj({"host": {"type": "string", "format": "ipv4"},
                                      "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                                      "tls": BOOL, "log_level": {"enum": ["debug", "info", "warn", "error"]},
                                      "workers": {"type": "integer", "minimum": 1, "maximum": 64}},
                                     ["host", "port"]),
                {"host": "127.0.0.1", "port": 8080, "tls": False, "log_level": "info", "workers": 4}))
    out.append(("tool/search", obj({"query": STR, "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                                    "sort": {"enum": ["relevance", "date"]}}, ["query"]),
                {"query": "cats", "max_results": 5}))
    tree = {"$defs": {"node": {"type": "object", "properties": {"name": STR, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                               "required": ["name"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    out.append(("recursive/tree", tree, {"name": "root", "children": [{"name": "a", "children": []}]}))
    lst = {"definitions": {"cell": {"type": "object", "properties": {"value": INT, "next": {"anyOf": [{"$ref": "#/definitions/cell"}, {"type": "null"}]}},
                                    "required": ["value", "next"], "additionalProperties": False}}, "$ref": "#/definitions/cell"}
    out.append(("recursive/linked_list", lst, {"value": 1, "next": {"value": 2, "next": None}}))
    out.append(("union/shape", {"oneOf": [obj({"kind": {"const": "circle"}, "r": NUM}), obj({"kind": {"const": "rect"}, "w": NUM, "h": NUM})]},
                {"kind": "rect", "w": 2.0, "h": 3.5}))
    out.append(("tuple/point", {"type": "array", "prefixItems": [NUM, NUM, {"enum": ["m", "km"]}], "items": False},
                [1.5, 2.5, "km"]))
    out.append(("map/labels", {"type": "object", "additionalProperties": {"type": "string", "maxLength": 20}},
                {"team": "core"}))
    out.append(("allof/merge", {"allOf": [{"type": "object", "properties": {"a": INT}, "required": ["a"]}, {"properties": {"b": BOOL}, "required": ["b"]}]},
                {"a": 1, "b": True}))
    return out


def main():
    cases = []
    for name, s, inst in fixed():
        cases.append({"id": name, "schema": s, "instance": inst})
    kinds = ["api", "config", "event", "function", "record"]
    i = 0
    while len(cases) < 220:
        s, inst = rand_object(0, R.randint(1, 6))
        k = kinds[i % len(kinds)]
        if k == "function":
            s = {"type": "object", "properties": s["properties"], "required": s["required"], "additionalProperties": False}
        elif k == "event":
            s["properties"] = {"event": {"enum": ["created", "updated", "deleted"]}, **s["properties"]}
            s["required"] = ["event"] + s["required"]
            inst = {"event": "created", **inst}
        elif k == "config" and R.random() < 0.5:
            s = {"type": "object", "properties": {"settings": s}, "required": ["settings"], "additionalProperties": False}
            inst = {"settings": inst}
        cases.append({"id": f"{k}/{i:03d}", "schema": s, "instance": inst})
        i += 1
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "tests", "data", "structured", "corpus.json")
    with open(path, "w") as f:
        json.dump({"source": "scripts/gen_schema_corpus.py (cinfer, generated)", "cases": cases}, f, indent=1)
    print(len(cases), "schemas ->", path)


if __name__ == "__main__":
    main()
