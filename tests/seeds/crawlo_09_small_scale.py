# Small-scale crawling
SCHEDULER_MAX_QUEUE_SIZE = 1000
