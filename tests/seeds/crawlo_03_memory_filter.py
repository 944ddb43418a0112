# Memory filter configuration
FILTER_TYPE = 'memory'
