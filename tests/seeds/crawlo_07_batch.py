# Run by the test with top-level await and ``scheduler`` given. The page prints
# ``scheduler.enqueue_request(request)``; crawlherd's scheduler methods are coroutines (as Crawlo's own
# scheduler's are), so the call is awaited -- the one change besides the import line.
from crawlherd import Request

# Batch enqueueing
requests = [Request(url=f"http://example.com/{i}") for i in range(100)]
for request in requests:
    await scheduler.enqueue_request(request)
