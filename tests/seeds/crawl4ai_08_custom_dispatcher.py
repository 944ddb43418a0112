# The chapter's "Implementation Details: SemaphoreDispatcher" excerpt, as printed, used as a dispatcher
# of one's own. The excerpt has no import line (these two were added) and shows crawl_url only; a
# dispatcher also needs run_urls (crawl4ai's BaseDispatcher declares both), written below the excerpt
# as crawl4ai's own SemaphoreDispatcher does it.
import asyncio
from crawlherd import BaseDispatcher

# From crawl4ai/async_dispatcher.py (simplified)
class SemaphoreDispatcher(BaseDispatcher):
    def __init__(self, semaphore_count=5, rate_limiter=None):
        super().__init__(rate_limiter)
        self.semaphore_count = semaphore_count
        
    async def crawl_url(self, url, config, task_id, semaphore):
        async with semaphore:
            # Crawl the URL with rate limiting
            if self.rate_limiter:
                await self.rate_limiter.wait_if_needed(url)
                
            result = await self.crawler.arun(url, config=config)
            return result

    # -- not in the excerpt: run_urls, as crawl4ai's SemaphoreDispatcher writes it ---------------------
    async def run_urls(self, urls, crawler, config):
        self.crawler = crawler
        semaphore = asyncio.Semaphore(self.semaphore_count)
        tasks = [self.crawl_url(url, config, task_id, semaphore) for task_id, url in enumerate(urls)]
        return await asyncio.gather(*tasks)
