"""PyTorch's own OpInfo samples (op_db) run on tvk against torch CPU: the breadth check.

check.py checks one op; runner.py runs many, crash-isolated in worker processes;
report.py writes docs/op-coverage.md and missing_ops.json from a run. tests/test_opinfo.py
runs every float32 op of op_db and compares with known_failures.json and missing_ops.json.
"""
