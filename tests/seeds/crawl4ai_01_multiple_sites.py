from crawlherd import AsyncWebCrawler, SemaphoreDispatcher, CrawlerRunConfig

async def crawl_multiple_sites():
    # Create a dispatcher that allows 3 crawls at a time
    dispatcher = SemaphoreDispatcher(semaphore_count=3)
    
    # List of URLs to crawl
    urls = ["https://example.com", "https://example.org", "https://example.net"]
    
    # Create a crawler and run multiple URLs using our dispatcher
    async with AsyncWebCrawler() as crawler:
        results = await crawler.arun_many(
            urls=urls,
            dispatcher=dispatcher,
            config=CrawlerRunConfig()
        )
    
    return results
