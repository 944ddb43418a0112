# The chapter's "Implementation Details" excerpts of crawl4ai's own MemoryAdaptiveDispatcher (its
# constructor, simplified, and its memory-monitor loop), as printed. The excerpts have no import line;
# these three were added, and nothing else changed:
import asyncio
import psutil
from crawlherd import BaseDispatcher

# From crawl4ai/async_dispatcher.py (simplified)
class MemoryAdaptiveDispatcher(BaseDispatcher):
    def __init__(
        self,
        memory_threshold_percent=90.0,
        critical_threshold_percent=95.0,
        recovery_threshold_percent=85.0,
        max_session_permit=20,
        rate_limiter=None,
    ):
        self.memory_threshold_percent = memory_threshold_percent
        self.critical_threshold_percent = critical_threshold_percent
        self.max_session_permit = max_session_permit
        self.rate_limiter = rate_limiter
        self.memory_pressure_mode = False

# From the _memory_monitor_task method (simplified)
async def _memory_monitor_task(self):
    while True:
        # Check current memory usage
        self.current_memory_percent = psutil.virtual_memory().percent
        
        # Enter pressure mode if memory is high
        if not self.memory_pressure_mode and self.current_memory_percent >= self.memory_threshold_percent:
            self.memory_pressure_mode = True
            
        # Exit pressure mode if memory is lower
        elif self.memory_pressure_mode and self.current_memory_percent <= self.recovery_threshold_percent:
            self.memory_pressure_mode = False
            
        await asyncio.sleep(self.check_interval)
