"""The operator's actions: their registry (runner/actions/registry.py), which the CLI and the
console dispatch through, and the audited operations it serves. It imports nothing of the
faces (tests/test_imports.py)."""
