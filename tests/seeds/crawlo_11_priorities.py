from crawlherd import Request

# Set high priority for homepage
homepage_request = Request(url='http://example.com', priority=100)

# Set medium priority for list page
list_request = Request(url='http://example.com/list', priority=50)

# Set low priority for detail page
detail_request = Request(url='http://example.com/detail', priority=10)
