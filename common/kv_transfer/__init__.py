"""Moving a request's KV blocks from a prefill worker's pool into a decode worker's.

One interface (``KVSender`` on the prefill side), several transports chosen per worker pair:

| transport  | data path                                                              |
|------------|------------------------------------------------------------------------|
| shm        | decode's pool lives in /dev/shm; prefill maps it once and copies in    |
| cuda_ipc   | decode exports its pool's CUDA IPC handle once; prefill copies D2D     |
| nccl       | a torch.distributed group per pair (gloo on CPU, NCCL on GPU)          |
| grpc       | block bytes streamed in chunks over the DecodeWorker.WriteBlocks RPC  |
"""
