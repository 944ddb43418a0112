"""The console's model: what the operator's console and the matching CLI commands read and change in
the config DB (overview, browsing, editing, jobs, dead letters, explain, run now, users, audit). The web
app (:mod:`crawlherd.web`) and the CLI are its two front ends."""
