"""The house's measures find what they are meant to find."""

import pathlib
import tempfile
import unittest

import house_measures as h


class HouseMeasures(unittest.TestCase):
    def test_paths_name_the_top_level_modules_they_reach(self):
        self.assertEqual(h.grouped("use crate::{a, b::c, d::{e, f}};", "crate::"), ["a", "b", "d"])
        self.assertEqual(h.dependencies("use super::super::{alpha, beta::gamma};", ["m", "n"]),
                         {"alpha", "beta"})
        self.assertEqual(h.dependencies('let s = "crate::fake"; // crate::comment', ["m"]), set())
        tests_borrow = "use crate::a::X;\n#[cfg(test)]\nmod tests {\n    use crate::b::fixture;\n}\n"
        self.assertEqual(h.dependencies(tests_borrow, ["m"]), {"a"})

    def test_a_cycle_between_modules_and_a_long_file_are_reported(self):
        with tempfile.TemporaryDirectory() as root:
            src = pathlib.Path(root, "crates", "demo", "src")
            (src / "a").mkdir(parents=True)
            (src / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n")
            (src / "a.rs").write_text("mod inner;\n")
            (src / "a" / "inner.rs").write_text("use crate::b::B;\n")
            (src / "b.rs").write_text("use crate::{c, a::A};\n")
            (src / "c.rs").write_text("\n" * (h.MAX_LINES + 1))
            self.assertEqual(h.cycles(h.crate_graph(src)), [["a", "b"]])
            self.assertEqual(h.main(pathlib.Path(root)), 1)
            (src / "b.rs").write_text("use crate::c;\n")
            (src / "c.rs").write_text("\n")
            self.assertEqual(h.main(pathlib.Path(root)), 0)


if __name__ == "__main__":
    unittest.main()
