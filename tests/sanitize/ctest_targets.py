#!/usr/bin/env python3
"""Prints the build targets that the CTest tests selected by the given ctest arguments run, so
`make asan` / `make tsan` build only what they test (the sanitizer builds are slow on a small
machine). A target is any extension-less file path inside BUILD_DIR named in a selected test's
command line (the test binary itself, e.g. bin/kv_test or examples/example_x, or a helper passed
as an argument, e.g. --node .../kvf_fault_node); the target is its base name.
Works before anything is built: the commands are read from the generated CTestTestfile.cmake.

  usage: ctest_targets.py BUILD_DIR [ctest selection args, e.g. -L "transfer|connector"]
"""
import os
import re
import subprocess
import sys


def main():
    build = os.path.abspath(sys.argv[1])
    listing = subprocess.run(["ctest", "-N"] + sys.argv[2:], cwd=build, capture_output=True,
                             text=True, check=True).stdout
    selected = set(re.findall(r"Test\s+#\d+: (\S+)", listing))
    prefix = build + "/"
    targets = set()
    for root, _, files in os.walk(build):
        if "CTestTestfile.cmake" not in files:
            continue
        for line in open(os.path.join(root, "CTestTestfile.cmake")):
            m = re.match(r'add_test\(\[=\[(.+?)\]=\] (.*)\)\s*$', line)
            if not m or m.group(1) not in selected:
                continue
            for arg in re.findall(r'"([^"]*)"', m.group(2)):
                base = os.path.basename(arg)
                if arg.startswith(prefix) and base and "." not in base:
                    targets.add(base)
    print(" ".join(sorted(targets)))


if __name__ == "__main__":
    main()
