from crawlherd import RateLimiter, MemoryAdaptiveDispatcher

# Create a rate limiter that waits 1-3 seconds between requests
rate_limiter = RateLimiter(
    base_delay=(1.0, 3.0),  # Wait 1-3 seconds between requests
    max_delay=60.0,         # Never wait more than 60 seconds
    max_retries=3           # Try a maximum of 3 times if rate limited
)

# Add the rate limiter to our dispatcher
dispatcher = MemoryAdaptiveDispatcher(rate_limiter=rate_limiter)
