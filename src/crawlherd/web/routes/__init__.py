"""The console's endpoints, one module per resource; each module's ``routes``
(:class:`~crawlherd.web.common.RouteTable`) holds its URLs, each declared on its endpoint with the
action it does, and :func:`crawlherd.web.app.create_app` puts them together. An endpoint is a plain
``async def (request)`` that reaches the config DB, the templates and the title through
``request.app.state`` (:mod:`crawlherd.web.common`), so a test can import and call it; the action
guards it (:func:`crawlherd.web.auth.needs`: ``create_app`` refuses an endpoint that does not say the
role it needs).

========================= ==================================================================
module                    URLs
========================= ==================================================================
:mod:`.login`             ``/login``, ``/logout``
:mod:`.health`            ``/healthz``
:mod:`.overview`          ``/``, ``/overview/live``, ``/overview.json``
:mod:`.websites`          ``/websites``, ``/websites/new``, ``/websites/{id}`` (+ active, delete)
:mod:`.targets`           ``/targets``, ``/targets/new``, ``/targets/{id}`` (+ run, active, delete,
                          schedule)
:mod:`.target_import`     ``/targets/import`` (a targets file, uploaded or pasted)
:mod:`.schedules`         ``/api/schedule-preview`` (the target form's next runs)
:mod:`.jobs`              ``/jobs``, ``/jobs/{run_id}``
:mod:`.dead_letters`      ``/dead-letters``, ``/dead-letters/retry``, ``/dead-letters/{run_id}/discard``
:mod:`.items`             ``/items``, ``/items/export``
:mod:`.frontier`          ``/frontier`` (the workers' hosts, from their heartbeats)
:mod:`.audit`             ``/audit``
:mod:`.users`             ``/users`` (+ add, role, password, revoke, remove; admins only)
========================= ==================================================================
"""
