"""One runner process: its parts, each owning its state, composed by
``runner.worker.loop.Worker`` (runner/worker/loop.py says what each part is, and the order of
the tick's duties); the maintenance duties, one attempt's life, and the runner inside an
application (runner/worker/inprocess.py)."""
