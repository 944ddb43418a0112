"""Crawlo's ``crawlo.core``: the scheduler (:mod:`.scheduling.task_scheduler`, also
:mod:`.scheduler`) and the engine's enqueue guard (:mod:`.engine`)."""
