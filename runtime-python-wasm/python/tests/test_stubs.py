import asyncio
import json
import inspect
import unittest

from helpers import ScriptedHost  # noqa: F401
from ptc_runtime import describe, make_stub
from ptc_runtime.stubs import parse_tools, signature_line, stub_text

WEATHER = {
    "type": "object",
    "properties": {
        "days": {"type": "integer", "description": "how many days"},
        "city": {"type": "string", "description": "the city"},
        "user-id": {"type": "string"},
    },
    "required": ["city"],
}


def spec(params=WEATHER, name="get-weather", desc="Weather for a city."):
    return parse_tools([(name, desc, params)])[0]


class StubTest(unittest.TestCase):
    def call(self, stub, *args, **kwargs):
        seen = []

        async def fake(name, payload):
            seen.append((name, payload))
            return "ok"

        s = make_stub(stub, fake)
        asyncio.run(s(*args, **kwargs))
        return seen

    def test_signature_and_doc(self):
        s = make_stub(spec(), None)
        self.assertEqual(s.__name__, "get_weather")
        self.assertEqual(str(inspect.signature(s)), "(city, days=..., **kwargs)")
        self.assertIn("Weather for a city.", s.__doc__)
        self.assertIn("city (str): the city", s.__doc__)
        self.assertIn("days (int, optional): how many days", s.__doc__)

    def test_keyword_positional_and_omitted(self):
        self.assertEqual(self.call(spec(), city="SF"), [("get-weather", {"city": "SF"})])
        self.assertEqual(self.call(spec(), "SF", 3), [("get-weather", {"city": "SF", "days": 3})])
        self.assertEqual(
            self.call(spec(), city="SF", **{"user-id": "u"}),
            [("get-weather", {"city": "SF", "user-id": "u"})],
        )

    def test_keywords_give_what_binding_gives_in_the_signatures_order(self):
        # Keyword-only calls skip `Signature.bind`: the payload is the same, its keys in the
        # signature's order, the extra keywords after them in the program's.
        calls = [
            ((), {"days": 3, "city": "SF"}),
            ((), {"zone": "utc", "city": "SF", "user-id": "u", "days": 2}),
            (("SF",), {"days": 3, "zone": "utc"}),
            ((), {"city": "SF", "kwargs": 1}),
        ]
        for args, kwargs in calls:
            bound = inspect.signature(make_stub(spec(), None)).bind(*args, **kwargs).arguments
            expected = {k: v for k, v in bound.items() if k != "kwargs"} | bound.get("kwargs", {})
            [(_, payload)] = self.call(spec(), *args, **kwargs)
            self.assertEqual(list(payload.items()), list(expected.items()), kwargs)

    def test_missing_required_is_type_error(self):
        with self.assertRaisesRegex(TypeError, "get_weather\\(\\).*city"):
            self.call(spec())

    def test_closed_schema_rejects_unknown_keyword(self):
        closed = {"type": "object", "properties": {"q": {"type": "string"}},
                  "additionalProperties": False}
        with self.assertRaises(TypeError):
            self.call(spec(closed, "search"), q="x", other=1)

    def test_describe(self):
        lines, stub = describe(parse_tools([("get-weather", "Weather.", WEATHER), ("noop", "", "")]))
        self.assertEqual(lines[0], ("get-weather", "get_weather",
                                    "get_weather(city: str, days?: int, user-id?: str)"))
        self.assertEqual(lines[1], ("noop", "noop", "noop()"))
        self.assertIn("async def get_weather(city: str, days: int = ..., **kwargs: Any):", stub)
        self.assertIn("async def noop(): ...", stub)
        compile(stub, "<stub>", "exec")  # the stub is valid Python

    def test_enums_are_literals(self):
        unit = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["F", "K"]}}}
        lines, _ = describe(parse_tools([("convert", "", unit)]))
        self.assertEqual(lines[0][2], 'convert(unit?: "F"|"K")')


if __name__ == "__main__":
    unittest.main()


def _chain(links):
    """`links` definitions, each an anyOf whose two branches name the next one: 2**links paths."""
    defs = {}
    for i in range(links):
        nxt = {"type": "string"} if i == links - 1 else {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {"anyOf": [nxt, dict(nxt)]}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "required": ["x"]}


class BoundedRenderingTest(unittest.TestCase):
    def test_a_chain_that_doubles_at_every_link_renders_within_the_budget(self):
        from ptc_runtime import shapes

        calls = []
        real = shapes.Shapes._spent

        def counting(self):
            calls.append(1)
            return real(self)

        shapes.Shapes._spent = counting
        try:
            described, stub = describe([spec(_chain(21), name="chain")])
        finally:
            shapes.Shapes._spent = real
        # Three renderings (the line, the stub, its docs) and the properties, each bounded.
        self.assertLess(len(calls), 5 * (shapes.MAX_STEPS + 1))
        self.assertTrue(described[0][2].startswith("chain(x: "), described)
        compile(stub, "<stub>", "exec")

    def test_a_short_chain_still_renders_whole(self):
        described, _ = describe([spec(_chain(3), name="chain")])
        self.assertEqual(described[0][2], "chain(x: str)")


ISSUE = json.dumps({"type": "object", "properties": {
    "id": {"type": "integer"}, "title": {"type": "string"},
    "labels": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    "body": {"anyOf": [{"type": "string"}, {"type": "null"}]}}, "required": ["id", "title", "labels"]})


class ReturnsTest(unittest.TestCase):
    def specs(self, returns, observed):
        return parse_tools([("get_issue", "Gets an issue.", {"type": "object", "properties": {"n": {"type": "integer"}}},
                             "gh", returns, observed)])

    def test_an_observed_shape_follows_the_signature_marked_observed(self):
        (s,) = self.specs(ISSUE, True)
        self.assertEqual(signature_line(s), "gh.get_issue(n?: int) -> {id: int, title: str, labels: list[{name: str}], "
                                            "body?: str | None} (observed)")
        stub = stub_text([s])
        self.assertIn('async def get_issue(n: int = ...) -> {"id": int, "title": str, "labels": list[{"name": str}], '
                      '"body?": str | None}:  # result shape observed in earlier calls', stub)
        compile(stub, "<stub>", "exec")

    def test_a_declared_shape_is_not_marked_and_none_shows_nothing(self):
        (s,) = self.specs(ISSUE, False)
        self.assertTrue(signature_line(s).endswith("body?: str | None}"), signature_line(s))
        (s,) = self.specs("", False)
        self.assertEqual(signature_line(s), "gh.get_issue(n?: int)")
        (s,) = self.specs("{}", True)
        self.assertEqual(signature_line(s), "gh.get_issue(n?: int)", "a shape of anything says nothing")

    def test_a_wide_shape_keeps_one_level(self):
        wide = {"type": "object", "properties": {f"field_{i}": {"type": "object", "properties": {
            "inner": {"type": "string"}}} for i in range(8)}}
        (s,) = self.specs(json.dumps(wide), True)
        self.assertIn("field_0?: dict", signature_line(s))

    def test_a_very_wide_shape_shows_its_first_fields(self):
        # A GitHub issue has some 30 fields: the line names 16, required ones first.
        fields = {f"f{i}": {"type": "string"} for i in range(30)}
        wide = {"type": "array", "items": {"type": "object", "properties": fields, "required": ["f29"]}}
        (s,) = self.specs(json.dumps(wide), True)
        self.assertTrue(signature_line(s).endswith(" -> list[{f29, f0?, f1?, f2?, f3?, f4?, f5?, f6?, f7?, f8?, f9?, "
                                                   "f10?, f11?, f12?, f13?, f14?, … 14 more}] (observed)"), signature_line(s))
