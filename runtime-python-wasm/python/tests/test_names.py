import unittest

from helpers import ScriptedHost  # noqa: F401  (sets sys.path)
from ptc_runtime import InvalidTools, assign_python_names, normalize_name


class NormalizeTest(unittest.TestCase):
    def test_issue_examples(self):
        self.assertEqual(normalize_name("get-weather"), "get_weather")
        self.assertEqual(normalize_name("my tool"), "my_tool")
        self.assertEqual(normalize_name("123data"), "_123data")
        self.assertEqual(normalize_name("for"), "for_tool")

    def test_invalid_characters_removed(self):
        self.assertEqual(normalize_name("search.web/v2!"), "searchwebv2")
        self.assertEqual(normalize_name("héllo"), "hllo")

    def test_reserved_names_cannot_shadow(self):
        for name in ["print", "asyncio", "ToolError", "json", "len", "__import__", "None"]:
            with self.subTest(name=name):
                self.assertEqual(normalize_name(name), name + "_tool")

    def test_unusable_names(self):
        for name in ["", "!!!", "-", "   "]:
            with self.subTest(name=name):
                with self.assertRaises(InvalidTools):
                    normalize_name(name)

    def test_collisions_rejected_naming_both(self):
        with self.assertRaises(InvalidTools) as ctx:
            assign_python_names(["get-weather", "get weather"])
        self.assertIn("get-weather", str(ctx.exception))
        self.assertIn("get weather", str(ctx.exception))
        self.assertIn("get_weather", str(ctx.exception))

    def test_duplicate_names_rejected(self):
        with self.assertRaises(InvalidTools):
            assign_python_names(["a", "a"])

    def test_members_of_a_namespace_only_avoid_keywords(self):
        self.assertEqual(normalize_name("open", member=True), "open")
        self.assertEqual(normalize_name("print", member=True), "print")
        self.assertEqual(normalize_name("class", member=True), "class_tool")
        self.assertEqual(normalize_name("__init__", member=True), "__init___tool")
        self.assertEqual(normalize_name("open"), "open_tool")

    def test_mapping(self):
        self.assertEqual(assign_python_names(["a-b", "c"]), {"a-b": "a_b", "c": "c"})


if __name__ == "__main__":
    unittest.main()
