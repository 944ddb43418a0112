# Set maximum queue size
SCHEDULER_MAX_QUEUE_SIZE = 50000
