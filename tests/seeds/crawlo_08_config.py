from crawlherd import CrawloConfig

# Use memory queue for standalone mode
config = CrawloConfig.standalone(queue_type='memory')

# Use Redis queue for distributed mode
config = CrawloConfig.distributed(queue_type='redis')
