# Memory queue configuration
QUEUE_TYPE = 'memory'
SCHEDULER_MAX_QUEUE_SIZE = 10000
