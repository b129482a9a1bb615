"""Finding tools from inside a program, for tool sets too large to list in a model's prompt:
`search_tools("create an issue")` returns the compact signatures (with their first sentence)
of the tools that match best, and `describe_tools(["github.create_issue"])` their full stub.
Every program has both, and `help` (`helptext.py`); a tool found or not, described or not, is
called the same way.
"""

import difflib
import math
import re

from . import helptext
from .stubs import signature_line, specs_by_name, stub_text

_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which tool is meant. Verbs ("get", "list") stay: tool names
# are made of them, and their rarity weighs them (`_Index`).
_STOP = frozenset({"a", "an", "the", "to", "of", "for", "in", "on", "and", "or", "by", "with", "my", "me", "i",
                   "tool", "tools", "from", "that", "is", "it", "this", "do", "how", "some", "which"})
# How much a word counts where it is found: in the tool's name, its namespace, its description
# or parameters' names; a query word that begins a name's word (or the reverse) counts half.
_NAME, _SPACE, _TEXT, _PREFIX = 3.0, 1.5, 1.0, 1.5
# Tools scoring below this share of the best are not shown.
_CUTOFF = 0.4


def _words(text):
    return [w for w in _WORD.findall(_CAMEL.sub(" ", str(text)).lower().replace("_", " ")) if w not in _STOP]


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _stem(word):
    """Crudely the same for `issues`/`issue`, `created`/`create`."""
    stem = _STEMS.get(word)
    if stem is None:
        stem = _STEMS[word] = _strip(word)
    return stem


# Stems of the words seen, for every search of the instance: the names, descriptions and
# parameters of 510 tools (the 102 yardstick's five times) are 17,000 words, 576 of them distinct;
# stemming each took 2/3 of indexing them.
_STEMS = {}


def _strip(word):
    for end in ("ies", "es", "s", "ed", "ing"):
        if len(word) > len(end) + 2 and word.endswith(end):
            return word[: -len(end)] + ("y" if end == "ies" else "")
    return word


def _terms(text):
    return {_stem(w) for w in set(_words(text))}


def _summary(description):
    first = (description or "").strip().split("\n")[0]
    i = first.find(". ")
    sentence = first[: i + 1] if i >= 0 else first
    return sentence if len(sentence) <= 100 else sentence[:99] + "…"


class _Index:
    """Each tool's words by where they are, and how rare each word is among the tools (a word
    every tool has, such as a server's name, tells little: its weight is log(n / tools with it))."""

    def __init__(self, specs):
        self.specs = specs
        self.rows = []
        count = {}
        for spec in specs:
            name = _terms(spec.name)
            space = _terms(spec.namespace)
            props = spec.schema if isinstance(spec.schema, str) else ""
            text = _terms(spec.description[:500]) | _terms(" ".join(_PROP.findall(props[:2000])))
            self.rows.append((spec, name, space, text))
            for w in name | space | text:
                count[w] = count.get(w, 0) + 1
        n = max(1, len(specs))
        self.weight = {w: math.log(1 + n / c) for w, c in count.items()}

    def search(self, query, limit):
        wanted = _terms(query)
        if not wanted:
            return "search_tools(query): say what the tool should do, e.g. search_tools('create issue')"
        scored = []
        for order, (spec, name, space, text) in enumerate(self.rows):
            score = 0.0
            for w in wanted:
                weight = self.weight.get(w, 1.0)
                if w in name:
                    score += _NAME * weight
                elif w in space:
                    score += _SPACE * weight
                elif w in text:
                    score += _TEXT * weight
                elif len(w) > 2 and any(n.startswith(w) or w.startswith(n) for n in name if len(n) > 2):
                    score += _PREFIX * weight
            if score:
                scored.append((-score, order, spec))
        if not scored:
            spaces = sorted({s.python_namespace for s in self.specs if s.python_namespace})
            where = f"; the namespaces are {', '.join(spaces)} (dir(namespace) lists one's tools)" if spaces else ""
            return f"no tool matches {query!r}{where}"
        scored.sort(key=lambda t: t[:2])
        best = -scored[0][0]
        relevant = [s for score, _, s in scored if -score >= _CUTOFF * best]
        found = relevant[: max(1, int(limit))]
        lines = []
        for spec in found:
            line = signature_line(spec)
            summary = _summary(spec.description)
            lines.append(f"{line}  # {summary}" if summary else line)
        if len(relevant) > len(found):
            lines.append(f"(and {len(relevant) - len(found)} more; search_tools({query!r}, limit={len(relevant)}))")
        return "\n".join(lines)


# Property names in a schema's JSON text, found without decoding it.
_PROP = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:\s*\{')


def search(specs, query, limit=10):
    """The tools that best match `query`, one compact signature each, best first."""
    return _Index(specs).search(query, limit)


def describe(specs, names):
    """The full stub (docstrings, every parameter) of the tools `names` names
    (`"github.create_issue"`, or a top-level tool's name)."""
    if isinstance(names, str):
        names = [names]
    by_name = specs_by_name(specs)
    chosen, unknown = [], []
    for name in names:
        spec = by_name.get(str(name))
        if spec is None:
            unknown.append(str(name))
        elif spec not in chosen:
            chosen.append(spec)
    text = stub_text(chosen) if chosen else ""
    if unknown:
        notes = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.6)
            notes.append(f"# no tool {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
        text = "\n".join(notes) + ("\n\n" + text if text else "\n# search_tools(query) finds tools by what they do")
    return text


def bind(specs):
    """`search_tools` and `describe_tools` for a program whose tools are `specs`."""

    index = []

    def search_tools(query, limit=10):
        """The compact signatures of the tools that best match `query` (what the tool should
        do), one per line, best first. Print it to read it."""
        if not index:
            index.append(_Index(specs))
        return index[0].search(query, limit)

    def describe_tools(names):
        """The full stub of the named tools (`["github.create_issue"]`): every parameter and
        what it means. Print it to read it."""
        return describe(specs, names)

    def help(*obj):
        """Prints what an object is: a tool's parameters and what they mean, a tool
        namespace's tools, or a function's, class's or module's signature and documentation."""
        if len(obj) > 1:
            raise TypeError(f"help() takes at most 1 argument ({len(obj)} given)")
        print(helptext.text(specs, obj[0] if obj else None, given=bool(obj)))

    return {"search_tools": search_tools, "describe_tools": describe_tools, "help": help}
