from crawlherd import AsyncWebCrawler, MemoryAdaptiveDispatcher, CrawlerMonitor

async def monitored_crawl():
    # Create a monitor
    monitor = CrawlerMonitor()
    
    # Create a dispatcher with the monitor
    dispatcher = MemoryAdaptiveDispatcher(monitor=monitor)
    
    # Run your crawl
    async with AsyncWebCrawler() as crawler:
        results = await crawler.arun_many(
            urls=["https://example.com", "https://example.org"],
            dispatcher=dispatcher
        )
        
    # Get statistics about the crawl
    stats = monitor.get_statistics()
    print(f"Completed: {stats['completed']} URLs")
    print(f"Failed: {stats['failed']} URLs")
    print(f"Average memory usage: {stats['avg_memory_usage']} MB")
