"""The model: what a job and its slots are (``Runner`` and ``@app.job``, schedules, misfire
tiers and policies, the alert kinds). It imports nothing of the store, the worker, the
actions or the faces (tests/test_imports.py)."""
