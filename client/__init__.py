"""Python client library for the pdserve gateway, async and sync (``client.bench`` is the load tester).

    from client import Client, SamplingOptions
    with Client("127.0.0.1:50051") as c:
        for text in c.generate_text("Hello", SamplingOptions(max_tokens=32)):
            print(text, end="")

    from client import AsyncClient
    async with AsyncClient("127.0.0.1:50051", api_key="...") as c:
        done = await c.complete([1, 2, 3], SamplingOptions(max_tokens=8))

gRPC errors propagate unchanged (``grpc.aio.AioRpcError`` / ``grpc.RpcError``): check ``.code()``.
"""

from client.async_client import AsyncClient
from client.sync_client import Client
from client.types import SLO, Chunk, ClusterInfo, Completion, SamplingOptions, TokenLogprob, Usage, WorkerInfo

__all__ = ["AsyncClient", "Client", "SLO", "Chunk", "ClusterInfo", "Completion", "SamplingOptions", "TokenLogprob",
           "Usage", "WorkerInfo"]
