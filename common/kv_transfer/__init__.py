"""Moving a request's KV blocks from a prefill worker's pool into a decode worker's.

Each transport is two halves behind one interface each: a ``KVSender`` on the prefill side
and a ``KVReceiver`` on the decode side (what the decode worker advertises, how it accepts a
write, what it releases at stop), side by side in the transport's module. A decode worker
builds its receivers once (``select.decode_receivers``); a prefill worker keeps one sender per
transport (``select.make_sender``); the gateway picks one transport per worker pair
(``pairing``):

| transport  | data path                                                              |
|------------|------------------------------------------------------------------------|
| shm        | decode's pool lives in /dev/shm; prefill maps it once and copies in    |
| cuda_ipc   | decode exports its pool's CUDA IPC handle once; prefill copies D2D     |
| nccl       | a torch.distributed group per pair (gloo on CPU, NCCL on GPU)          |
| grpc       | block bytes streamed in chunks over the DecodeWorker.WriteBlocks RPC  |
"""
