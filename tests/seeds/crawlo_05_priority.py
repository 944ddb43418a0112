from crawlherd import Request

# Set request priority
request = Request(
    url='http://example.com',
    priority=10  # Higher number means higher priority
)
