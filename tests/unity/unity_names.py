#!/usr/bin/env python3
"""Fails when two source files of one target define the same file-local name.

The build is a unity build (CMakeLists.txt, KVFERRY_UNITY_BUILD): each target's .cc files are
compiled in batches, so two files' anonymous-namespace or static helpers share one translation
unit. A second definition with the same signature is a compile error, but one with another
signature is a silent overload: a call in one file can bind to the other file's helper (it
happened: `StartProxy({url}, {url}, 300)` bound to a `(const std::string&, ..., bool)` twin).
A second class, enum or constant of the same name is always a compile error, so only functions
can clash silently. This check reads the batches CMake generated (<build>/**/Unity/
unity_*_cxx.cxx), takes every function a file defines at column 0 (not qualified member
definitions, not macros such as TEST) with its named namespace, and reports the names two files
of one target both define in one namespace, one of them file-local (anonymous namespace or
static). Names are compared per target, not per batch, since batches shift as files come.

usage: unity_names.py BUILD_DIR | --self-test
"""
import collections
import pathlib
import re
import sys
import tempfile

INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
# A function definition at column 0: `[static|inline|constexpr...] type Name(`, the line not
# ending in `;` (that would be a declaration).
FUNC = re.compile(r'^(?!return\b|using\b|class\b|struct\b|enum\b)(?:[\w:<>,*&\[\]]+\s+)+?[*&]*(\w+)\((?!.*\)\s*;\s*$)')


NAMESPACE = re.compile(r'^(?:inline\s+)?namespace\s*([\w:]*)\s*\{')
NAMESPACE_END = re.compile(r'^\}\s*//\s*namespace')


def defined_names(path):
    """{(named namespace, function name): file-local?} for the functions `path` defines."""
    names = {}
    stack = []  # enclosing namespaces; "" for an anonymous one
    for line in pathlib.Path(path).read_text(errors="replace").splitlines():
        ns = NAMESPACE.match(line)
        if ns:
            stack.append(ns.group(1))
            continue
        if NAMESPACE_END.match(line) and stack:
            stack.pop()
            continue
        if not line or line[0] in " \t#/}{" or line.startswith("template"):
            continue
        m = FUNC.match(line)
        if m and not m.group(1).isupper() and m.group(1) not in ("main", "operator"):
            local = "" in stack or line.startswith("static ")
            key = ("::".join(n for n in stack if n), m.group(1))
            names[key] = names.get(key, False) or local
    return names


def targets(build):
    """{target: its .cc files}, a target named by its CMakeFiles/<name>.dir folder relative to
    `build` (a build tree nested inside, such as the wheel's build/wheel, keeps its own)."""
    sources = collections.defaultdict(list)
    for unity in sorted(pathlib.Path(build).rglob("Unity/unity_*_cxx.cxx")):
        target = str(unity.parent.parent.relative_to(build)).removesuffix(".dir")
        for f in INCLUDE.findall(unity.read_text()):
            if f not in sources[target]:
                sources[target].append(f)
    return sources


SELF_TEST = {
    "a.cc": "namespace kvferry {\nnamespace {\nint Start(const std::string& s, bool x) {\n"
            "  return 1;\n}\n}  // namespace\n}  // namespace kvferry\n",
    "b.cc": "namespace kvferry {\nnamespace {\nint Start(std::vector<std::string> v,\n"
            "          int64_t t) {\n  return 2;\n}\n}  // namespace\n"
            "int Api(int x);\nint Api(int x) { return x; }\n}  // namespace kvferry\n",
    "c.cc": "namespace other {\nnamespace {\nint Start(int x) { return 3; }\n}  // namespace\n"
            "int Api(double x) { return 4; }\n}  // namespace other\n",
}


def self_test():
    """The check finds a.cc's and b.cc's Start, and nothing else: c.cc's Start is in another
    namespace, and b.cc's and c.cc's Api are external functions of different namespaces."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for name, text in SELF_TEST.items():
            (root / name).write_text(text)
        unity = root / "t.dir" / "Unity"
        unity.mkdir(parents=True)
        (unity / "unity_0_cxx.cxx").write_text(
            "".join(f'#include "{root / n}"\n' for n in SELF_TEST))
        found = [line.replace(str(root) + "/", "") for line in clashes(targets(root))]
    want = ["t: 'kvferry::Start' is defined in a.cc and b.cc"]
    if found != want:
        print(f"unity_names self-test: got {found}, want {want}")
        return 1
    print("unity_names self-test: ok")
    return 0


def clashes(found):
    """Lines naming each function two files of one target define, one of them file-local."""
    out = []
    for target, files in sorted(found.items()):
        where = collections.defaultdict(list)
        for f in files:
            if f.endswith(".cc"):
                for key, local in defined_names(f).items():
                    where[key].append((f, local))
        for (ns, name), defs in sorted(where.items()):
            # Two external functions of one name are overloads any build sees (headers declare
            # them); a clash needs a file-local one.
            if len(defs) > 1 and any(local for _, local in defs):
                out.append(f"{target}: '{ns}::{name}' is defined in " +
                           " and ".join(f for f, _ in defs))
    return out


def main():
    if sys.argv[1] == "--self-test":
        return self_test()
    build = sys.argv[1]
    found = targets(build)
    if not found:
        print(f"unity_names: no unity batches under {build} (is KVFERRY_UNITY_BUILD on?)")
        return 1
    lines = clashes(found)
    print("\n".join(lines + [f"unity_names: {len(found)} targets, "
                             f"{sum(len(v) for v in found.values())} files, {len(lines)} function "
                             "names defined in two files of one target"]))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
