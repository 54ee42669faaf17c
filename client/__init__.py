"""Python client library for the pdserve gateway (async and sync) and, later, the load tester.

    from client import Client, SamplingOptions
    with Client("127.0.0.1:50051") as c:
        for text in c.generate_text("Hello", SamplingOptions(max_tokens=32)):
            print(text, end="")
"""

from client.async_client import AsyncClient
from client.sync_client import Client
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions, WorkerInfo

__all__ = ["AsyncClient", "Client", "SLO", "Chunk", "ClusterInfo", "Completion", "SamplingOptions", "WorkerInfo"]
