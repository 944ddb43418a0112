# Large-scale crawling
SCHEDULER_MAX_QUEUE_SIZE = 100000
