"""Web servers that ship with crawlherd: the built-in demo job board (:mod:`crawlherd.web.demo_site`)
and its targets (:mod:`crawlherd.web.demo_targets`)."""
