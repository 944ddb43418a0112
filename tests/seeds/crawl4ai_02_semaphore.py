from crawlherd import SemaphoreDispatcher

# Create a dispatcher that allows 5 simultaneous crawls
dispatcher = SemaphoreDispatcher(semaphore_count=5)
