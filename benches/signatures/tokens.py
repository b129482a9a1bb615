"""How many tokens a model spends on tool definitions: the tools' own JSON definitions (name,
description, inputSchema, as a client lists them to a model) against execute_code's compact
lines and describe_tools' full stub, for the real tool lists in
runtime-python-wasm/toolsets. Run with `just signatures`.

Tokens are counted with Claude's tokenizer as published in the `anthropic` 0.34.2 wheel
(`tokenizer.json`, for the `tokenizers` library): a legacy tokenizer, bundled so the count
needs no network; ratios between the forms are what matter.
"""

import json
import os
import sys

from tokenizers import Tokenizer
import anthropic

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
RUNTIME = os.path.join(ROOT, "runtime-python-wasm", "python")
sys.path.insert(0, RUNTIME)
from ptc_runtime.stubs import describe, parse_tools  # noqa: E402

TOKENIZER = Tokenizer.from_file(os.path.join(os.path.dirname(anthropic.__file__), "tokenizer.json"))
SETS = ["filesystem", "everything", "github", "playwright", "notion"]


def tokens(text):
    return len(TOKENIZER.encode(text).ids)


def summary(description):
    """The first sentence, at most 100 characters (server/src/mcp/service.rs `summary`)."""
    first = (description or "").strip().split("\n")[0]
    i = first.find(". ")
    sentence = first[: i + 1] if i >= 0 else first
    return sentence if len(sentence) <= 100 else sentence[:99] + "…"


def forms(name, tools):
    specs = parse_tools([(t["name"], t.get("description", ""), t["inputSchema"], name) for t in tools])
    lines, stub = describe(specs)
    definitions = "\n".join(
        json.dumps({k: t[k] for k in ("name", "description", "inputSchema") if k in t}, separators=(",", ":"))
        for t in tools
    )
    signatures = "\n".join(line for _, _, line in lines)
    compact = "\n".join(
        f"{line}  # {summary(t.get('description'))}" if summary(t.get("description")) else line
        for (_, _, line), t in zip(lines, tools)
    )
    return definitions, signatures, compact, stub


def main():
    rows = []
    total = [0, 0, 0, 0, 0]
    named = [0, 0, 0, 0, 0]  # the four large sets issue 10 names (all but `everything`)
    for name in SETS:
        with open(os.path.join(RUNTIME, "..", "toolsets", f"{name}.json")) as f:
            tools = json.load(f)
        definitions, signatures, compact, stub = forms(name, tools)
        counts = [len(tools), tokens(definitions), tokens(signatures), tokens(compact), tokens(stub)]
        total = [a + b for a, b in zip(total, counts)]
        if name != "everything":
            named = [a + b for a, b in zip(named, counts)]
        rows.append((name, *counts))
    rows.append(("GitHub, filesystem, Playwright, Notion", *named))
    rows.append(("all five", *total))
    print("| tool set | tools | JSON definitions | signatures | compact (+ summaries) | full stub |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, n, d, s, c, st in rows:
        pct = lambda x: f"{x} ({100 * (1 - x / d):.0f}% smaller)"  # noqa: E731
        print(f"| {name} | {n} | {d} | {pct(s)} | {pct(c)} | {pct(st)} |")


main()
