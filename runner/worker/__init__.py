"""The parts of one runner process, each owning its state, composed by ``runner.loop.Worker``
(runner/loop.py says what each part is, and the order of the tick's duties)."""
