"""inputs.py — the bench inputs: JSON schemas (our corpus and JSONSchemaBench, with a valid
text each), regexes and an EBNF grammar, each with a text it accepts. Writes INPUTS.json."""
import json
import os
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def main(out):
    items = []
    corpus = json.load(open(os.path.join(REPO, "tests/data/structured/corpus.json")))["cases"]
    for c in corpus[:10] + corpus[100:110]:
        items.append({"name": "corpus/" + c["id"], "kind": "schema", "source": c["schema"],
                      "text": json.dumps(c["instance"], separators=(",", ":"))})
    bench = json.load(open(os.path.join(REPO, "tests/data/jsonschemabench/schemas.json")))["cases"]
    for c in sorted(bench, key=lambda c: c["id"])[:40]:
        if c.get("xgrammar_ok") and c.get("llguidance_ok"):
            items.append({"name": "jsb/" + c["id"], "kind": "schema", "source": c["schema"],
                          "text": json.dumps(c["example"], separators=(",", ":"))})
    for name, r, t in [("phone", "\\(\\d{3}\\) \\d{3}-\\d{4}", "(555) 123-4567"),
                       ("email", "[a-z0-9._]+@[a-z0-9]+\\.[a-z]{2,4}", "jane.doe_42@example.org"),
                       ("iso_date", "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])", "2024-02-29"),
                       ("words", "([A-Za-z]+ ){3,12}[A-Za-z]+\\.", "The quick brown fox jumps over the lazy dog.")]:
        items.append({"name": "regex/" + name, "kind": "regex", "source": r, "text": t})
    ebnf = ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
            'factor ::= [0-9]+ | "(" expr ")"\n')
    items.append({"name": "ebnf/arith", "kind": "ebnf", "source": ebnf, "text": "(12+3)*45-(6/7+8)*(9-10)"})
    json.dump(items, open(out, "w"))


if __name__ == "__main__":
    main(sys.argv[1])
