from crawlherd import (
    AsyncWebCrawler, MemoryAdaptiveDispatcher, RateLimiter, CrawlerRunConfig
)

async def crawl_news_sites():
    # Create a memory-adaptive dispatcher with rate limiting
    dispatcher = MemoryAdaptiveDispatcher(
        memory_threshold_percent=85.0,  # Be conservative with memory
        rate_limiter=RateLimiter(base_delay=(2.0, 5.0))  # Be extra polite
    )
    
    # List of news sites to crawl
    news_sites = [
        "https://example-news.com/tech",
        "https://example-news.com/business",
        # ... more URLs ...
    ]
    
    # Configure how we want to crawl
    config = CrawlerRunConfig(
        screenshot=True,  # Take screenshots
        stream=True       # Process results as they arrive
    )
    
    # Run the crawler with our dispatcher
    async with AsyncWebCrawler() as crawler:
        results_stream = await crawler.arun_many(
            urls=news_sites,
            config=config,
            dispatcher=dispatcher
        )
        
        # Process each result as it completes
        async for result in results_stream:
            if result.success:
                print(f"Successfully crawled: {result.url}")
                # Process the content...
            else:
                print(f"Failed to crawl: {result.url}")
