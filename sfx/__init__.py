"""sfx: asynchronous APPO / V-trace reinforcement learning at the highest throughput one machine gives."""

__version__ = "0.1.0"
