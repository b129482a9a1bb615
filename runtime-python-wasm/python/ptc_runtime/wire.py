"""Text that leaves the guest for the host: WIT strings are UTF-8, and a Python string holding a
lone surrogate (`'\\ud800'`, which `json.dumps` and f-strings keep as it is) cannot be encoded,
so handing one over traps the instance. Everything that crosses goes through here."""

import json


def json_text(value, **options):
    """`json.dumps(value, ensure_ascii=False, **options)`, with lone surrogates escaped
    (`"\\ud800"`, still the same JSON string) when there are any."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return text if is_utf8(text) else json.dumps(value, ensure_ascii=True, **options)


def plain_text(text):
    """`text`, with a lone surrogate written as its escape (`\\ud800`)."""
    return text if is_utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_utf8(text):
    """Whether `text` can be written as UTF-8 (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
