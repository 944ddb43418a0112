"""The operator's console (``crawlherd web``): :mod:`crawlherd.web.app` (``create_app``: the routes,
middleware and state put together), :mod:`crawlherd.web.routes` (the endpoints, one module per resource),
:mod:`crawlherd.web.common` (what the endpoints share: rendering, redirects, form and query parsing,
pagination), :mod:`crawlherd.web.auth` (login sessions, CSRF, loopback-only open mode),
:mod:`crawlherd.web.server` (serving it with uvicorn inside ``web``, ``run`` and ``demo``); templates in
``templates/``, CSS and the little JavaScript in ``static/``."""
