"""Scale-out on Ray: `RayBackend` runs top-level sessions' children on shard
actors. Nothing here imports Ray until a backend starts; `pip install 'subsessions[ray]'`."""

from subsessions.ray.backend import RayBackend

__all__ = ["RayBackend"]
