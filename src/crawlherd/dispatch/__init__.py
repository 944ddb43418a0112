"""The dispatch service's pipeline: a target's schedule, targets files, the tick (due targets ->
outbox rows), the relay (outbox -> broker), :class:`~crawlherd.dispatch.dispatch_service.DispatchService`
running both, the embedded runner (service + worker in one process) and retention. ``crawlherd dispatch``
runs it."""
