"""The Python test harness shared by tests/fault, tests/cluster, tests/deploy and tests/load
(standard library only): cases, checks and deadline-bounded waits (runner), processes killed at
exit and after each case (procs), HTTP requests and Prometheus text (web), kvferry request and
config shapes (kvferry_api), network namespaces (netns), and the kvf_fault_node processes of
the fault and load tests (fault_node).

Importable as `harness` with tests/ on PYTHONPATH, which kvf_python_test (tests/CMakeLists.txt)
sets for every CTest entry; by hand: PYTHONPATH=tests python3 tests/fault/<script> ...
"""
