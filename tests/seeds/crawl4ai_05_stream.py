from crawlherd import AsyncWebCrawler, CrawlerRunConfig

async def stream_results():
    urls = ["https://example.com", "https://example.org", "https://example.net"]
    
    # Enable streaming in the configuration
    config = CrawlerRunConfig(stream=True)
    
    async with AsyncWebCrawler() as crawler:
        # This returns an async generator
        results_generator = await crawler.arun_many(urls=urls, config=config)
        
        # Process results as they arrive
        async for result in results_generator:
            print(f"Just finished: {result.url}")
            # Process each result immediately
