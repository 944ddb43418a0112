from crawlherd import MemoryAdaptiveDispatcher

# Create a dispatcher that adapts to memory usage
dispatcher = MemoryAdaptiveDispatcher(
    memory_threshold_percent=90.0,  # Slow down when memory reaches 90%
    max_session_permit=20           # Never exceed 20 simultaneous crawls
)
