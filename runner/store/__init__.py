"""The store: PostgreSQL as the runner's storage (the ledger's statements, migrations, the
embedded server, the session check for poolers). It imports nothing of the worker, the
actions or the faces (tests/test_imports.py)."""
