"""Adapters for the stacks teams already run (see docs/integrations.md):

- :mod:`crawlherd.contrib.aws_lambda`: ``handler(event, context)``, one dispatch cycle per invocation
  (a scheduled serverless function);
- :mod:`crawlherd.contrib.celery`: a Celery task running one dispatch cycle (for Celery beat), and
  job messages published as Celery tasks for teams whose workers are Celery workers;
- :mod:`crawlherd.contrib.django`: a Django app whose unmanaged models map crawlherd's tables (admin
  included), with ``manage.py crawlherd_dispatch`` and ``manage.py crawlherd_worker``.

Each needs its extra (``crawlherd[celery]``, ``crawlherd[django]``; the Lambda handler needs none).
"""
