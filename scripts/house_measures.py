#!/usr/bin/env python3
"""The house's measures for the Rust crates: no source file over the line limit, and no
dependency cycle between the top-level modules of a crate.

A module `a` depends on `b` when a file of `a` (or of its submodules) names
`crate::b::...`, or reaches `b` through `super::`. Submodules of one top-level module may
refer to each other and to their parent freely: the measure is between the rooms of a
crate, not inside one. Exits 1 with the offenders named.
"""

import pathlib
import re
import sys

MAX_LINES = 600
CRATE_PATH = re.compile(r"\bcrate::(\w+)")
SUPER_PATH = re.compile(r"\b((?:super::)+)(?!super\b)(\w+)")
# Paths inside string literals and comments are not dependencies.
STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')
COMMENTS = re.compile(r"//.*")
# A file's unit tests (at its end, by the house's habit) may borrow other modules' fixtures.
TESTS = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*mod \w+", re.M)


def module_path(src: pathlib.Path, file: pathlib.Path) -> list:
    """The module a source file defines, as a path from the crate root."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        return []
    return parts


def grouped(code: str, prefix: str) -> list:
    """The first names of `prefix{a, b::c, d::{e}}` groups: a, b, d."""
    names = []
    for start in [m.end() for m in re.finditer(re.escape(prefix) + r"\{", code)]:
        depth, part, parts = 1, "", []
        for ch in code[start:]:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
            if ch == "," and depth == 1:
                parts.append(part)
                part = ""
            else:
                part += ch
        parts.append(part)
        names += [m.group(0) for m in (re.match(r"\w+", p.strip()) for p in parts) if m]
    return names


def dependencies(text: str, path: list) -> set:
    """The top-level modules a file of module `path` names."""
    tests = TESTS.search(text)
    if tests:
        text = text[: tests.start()]
    code = "\n".join(COMMENTS.sub("", STRINGS.sub('""', line)) for line in text.splitlines())
    found = set(CRATE_PATH.findall(code)) | set(grouped(code, "crate::"))
    supers_found = SUPER_PATH.findall(code)
    for group in set(re.findall(r"\b((?:super::)+)\{", code)):
        supers_found += [(group, name) for name in grouped(code, group)]
    for supers, name in supers_found:
        up = supers.count("super::")
        # A file's items live in `path`; `super` leaves it, and inline test modules
        # (`mod tests { use super::*; }`) only reach back to the file itself.
        target = path[: max(len(path) - up, 0)] + [name]
        found.add(target[0])
    return found


def cycles(graph: dict) -> list:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def crate_graph(src: pathlib.Path) -> dict:
    files = [f for f in src.rglob("*.rs")]
    tops = {module_path(src, f)[0] for f in files if module_path(src, f)}
    graph = {top: set() for top in tops}
    for f in files:
        path = module_path(src, f)
        if not path:
            continue
        for dep in dependencies(f.read_text(), path):
            if dep in tops and dep != path[0]:
                graph[path[0]].add(dep)
    return graph


def main(root: pathlib.Path) -> int:
    problems = []
    for src in sorted(root.glob("crates/*/src")):
        for f in sorted(src.rglob("*.rs")):
            lines = len(f.read_text().splitlines())
            if lines > MAX_LINES:
                problems.append(f"{f.relative_to(root)}: {lines} lines (at most {MAX_LINES})")
        for group in cycles(crate_graph(src)):
            problems.append(f"{src.parent.relative_to(root)}: modules depend on each other: {' <-> '.join(group)}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
