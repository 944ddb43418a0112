"""The operator's console (``crawlherd web``): :mod:`crawlherd.web.app` (the Starlette application and
its pages), :mod:`crawlherd.web.auth` (login sessions, CSRF, loopback-only open mode),
:mod:`crawlherd.web.server` (serving it with uvicorn inside ``web``, ``run`` and ``demo``); templates in
``templates/``, CSS and the little JavaScript in ``static/``."""
