from wire.v1 import gateway_pb2 as _gateway_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerDescriptor(_message.Message):
    __slots__ = ("worker_id", "role", "address", "host_id", "device", "model", "block_size", "total_blocks", "max_model_len", "vocab_size", "kv_dtype", "block_bytes", "cost_model", "policy", "incarnation", "max_num_tokens", "device_kind", "gpu_uuid", "kv_transport", "kv_receives", "prefix_salt", "model_digest")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    KV_DTYPE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    COST_MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    KV_RECEIVES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_SALT_FIELD_NUMBER: _ClassVar[int]
    MODEL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    role: str
    address: str
    host_id: str
    device: str
    model: str
    block_size: int
    total_blocks: int
    max_model_len: int
    vocab_size: int
    kv_dtype: str
    block_bytes: int
    cost_model: CostModel
    policy: str
    incarnation: str
    max_num_tokens: int
    device_kind: str
    gpu_uuid: str
    kv_transport: str
    kv_receives: _containers.RepeatedScalarFieldContainer[str]
    prefix_salt: int
    model_digest: str
    def __init__(self, worker_id: _Optional[str] = ..., role: _Optional[str] = ..., address: _Optional[str] = ..., host_id: _Optional[str] = ..., device: _Optional[str] = ..., model: _Optional[str] = ..., block_size: _Optional[int] = ..., total_blocks: _Optional[int] = ..., max_model_len: _Optional[int] = ..., vocab_size: _Optional[int] = ..., kv_dtype: _Optional[str] = ..., block_bytes: _Optional[int] = ..., cost_model: _Optional[_Union[CostModel, _Mapping]] = ..., policy: _Optional[str] = ..., incarnation: _Optional[str] = ..., max_num_tokens: _Optional[int] = ..., device_kind: _Optional[str] = ..., gpu_uuid: _Optional[str] = ..., kv_transport: _Optional[str] = ..., kv_receives: _Optional[_Iterable[str]] = ..., prefix_salt: _Optional[int] = ..., model_digest: _Optional[str] = ...) -> None: ...

class CostModel(_message.Message):
    __slots__ = ("present", "prefill_threshold", "prefill_base_s", "prefill_per_token_s", "decode_alpha", "decode_beta", "decode_gamma", "decode_delta", "decode_knee", "prefill_per_token2_s", "prefill_max_tokens")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    PREFILL_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BASE_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_PER_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_ALPHA_FIELD_NUMBER: _ClassVar[int]
    DECODE_BETA_FIELD_NUMBER: _ClassVar[int]
    DECODE_GAMMA_FIELD_NUMBER: _ClassVar[int]
    DECODE_DELTA_FIELD_NUMBER: _ClassVar[int]
    DECODE_KNEE_FIELD_NUMBER: _ClassVar[int]
    PREFILL_PER_TOKEN2_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    present: bool
    prefill_threshold: float
    prefill_base_s: float
    prefill_per_token_s: float
    decode_alpha: float
    decode_beta: float
    decode_gamma: float
    decode_delta: float
    decode_knee: float
    prefill_per_token2_s: float
    prefill_max_tokens: float
    def __init__(self, present: _Optional[bool] = ..., prefill_threshold: _Optional[float] = ..., prefill_base_s: _Optional[float] = ..., prefill_per_token_s: _Optional[float] = ..., decode_alpha: _Optional[float] = ..., decode_beta: _Optional[float] = ..., decode_gamma: _Optional[float] = ..., decode_delta: _Optional[float] = ..., decode_knee: _Optional[float] = ..., prefill_per_token2_s: _Optional[float] = ..., prefill_max_tokens: _Optional[float] = ...) -> None: ...

class WorkerLoad(_message.Message):
    __slots__ = ("free_blocks", "running", "waiting", "queued_tokens", "draining", "vbs", "mean_len", "tightest_tpot_ms", "reserved", "earliest_ttft_deadline_ms", "steps", "prefix", "tpot_alone_ms", "tpot_margin_ceiling", "tpot_margin_start")
    FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    VBS_FIELD_NUMBER: _ClassVar[int]
    MEAN_LEN_FIELD_NUMBER: _ClassVar[int]
    TIGHTEST_TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_TTFT_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TPOT_ALONE_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MARGIN_CEILING_FIELD_NUMBER: _ClassVar[int]
    TPOT_MARGIN_START_FIELD_NUMBER: _ClassVar[int]
    free_blocks: int
    running: int
    waiting: int
    queued_tokens: int
    draining: bool
    vbs: float
    mean_len: float
    tightest_tpot_ms: float
    reserved: int
    earliest_ttft_deadline_ms: float
    steps: int
    prefix: PrefixDigest
    tpot_alone_ms: float
    tpot_margin_ceiling: float
    tpot_margin_start: float
    def __init__(self, free_blocks: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., queued_tokens: _Optional[int] = ..., draining: _Optional[bool] = ..., vbs: _Optional[float] = ..., mean_len: _Optional[float] = ..., tightest_tpot_ms: _Optional[float] = ..., reserved: _Optional[int] = ..., earliest_ttft_deadline_ms: _Optional[float] = ..., steps: _Optional[int] = ..., prefix: _Optional[_Union[PrefixDigest, _Mapping]] = ..., tpot_alone_ms: _Optional[float] = ..., tpot_margin_ceiling: _Optional[float] = ..., tpot_margin_start: _Optional[float] = ...) -> None: ...

class PrefixDigest(_message.Message):
    __slots__ = ("seq", "snapshot", "stored", "removed")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    snapshot: bool
    stored: _containers.RepeatedScalarFieldContainer[int]
    removed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq: _Optional[int] = ..., snapshot: _Optional[bool] = ..., stored: _Optional[_Iterable[int]] = ..., removed: _Optional[_Iterable[int]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("worker", "load")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    worker: WorkerDescriptor
    load: WorkerLoad
    def __init__(self, worker: _Optional[_Union[WorkerDescriptor, _Mapping]] = ..., load: _Optional[_Union[WorkerLoad, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("heartbeat_ms",)
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    heartbeat_ms: int
    def __init__(self, heartbeat_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "load")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    load: WorkerLoad
    def __init__(self, worker_id: _Optional[str] = ..., load: _Optional[_Union[WorkerLoad, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known", "prefix_resync")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_RESYNC_FIELD_NUMBER: _ClassVar[int]
    known: bool
    prefix_resync: bool
    def __init__(self, known: _Optional[bool] = ..., prefix_resync: _Optional[bool] = ...) -> None: ...

class KVDestination(_message.Message):
    __slots__ = ("decode_worker_id", "address", "block_ids", "lease_id", "transport", "host_id", "incarnation", "cached_blocks")
    DECODE_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    decode_worker_id: str
    address: str
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    lease_id: str
    transport: str
    host_id: str
    incarnation: str
    cached_blocks: int
    def __init__(self, decode_worker_id: _Optional[str] = ..., address: _Optional[str] = ..., block_ids: _Optional[_Iterable[int]] = ..., lease_id: _Optional[str] = ..., transport: _Optional[str] = ..., host_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., cached_blocks: _Optional[int] = ...) -> None: ...

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "sampling", "destination", "slo", "ttft_left_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SLO_FIELD_NUMBER: _ClassVar[int]
    TTFT_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: _gateway_pb2.SamplingParams
    destination: KVDestination
    slo: _gateway_pb2.SLO
    ttft_left_ms: float
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[_gateway_pb2.SamplingParams, _Mapping]] = ..., destination: _Optional[_Union[KVDestination, _Mapping]] = ..., slo: _Optional[_Union[_gateway_pb2.SLO, _Mapping]] = ..., ttft_left_ms: _Optional[float] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("first_token", "queue_ms", "prefill_ms", "transfer_ms", "transfer_bytes", "transport", "finish_reason", "cached_tokens", "forward_ratio", "first_logprobs", "prompt_logprobs")
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_RATIO_FIELD_NUMBER: _ClassVar[int]
    FIRST_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    first_token: int
    queue_ms: float
    prefill_ms: float
    transfer_ms: float
    transfer_bytes: int
    transport: str
    finish_reason: str
    cached_tokens: int
    forward_ratio: float
    first_logprobs: _gateway_pb2.TokenLogprobs
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_gateway_pb2.TokenLogprobs]
    def __init__(self, first_token: _Optional[int] = ..., queue_ms: _Optional[float] = ..., prefill_ms: _Optional[float] = ..., transfer_ms: _Optional[float] = ..., transfer_bytes: _Optional[int] = ..., transport: _Optional[str] = ..., finish_reason: _Optional[str] = ..., cached_tokens: _Optional[int] = ..., forward_ratio: _Optional[float] = ..., first_logprobs: _Optional[_Union[_gateway_pb2.TokenLogprobs, _Mapping]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_gateway_pb2.TokenLogprobs, _Mapping]]] = ...) -> None: ...

class WorkerAbortRequest(_message.Message):
    __slots__ = ("request_id", "lease_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class WorkerAbortResponse(_message.Message):
    __slots__ = ("found", "writes_done")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    WRITES_DONE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    writes_done: bool
    def __init__(self, found: _Optional[bool] = ..., writes_done: _Optional[bool] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("request_id", "prompt_tokens", "max_tokens", "stream_id", "tpot_ms", "tpot_margin", "prefix_hashes", "tpot_us", "lease_id", "handoff_us")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MARGIN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HASHES_FIELD_NUMBER: _ClassVar[int]
    TPOT_US_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_US_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_tokens: int
    max_tokens: int
    stream_id: str
    tpot_ms: int
    tpot_margin: float
    prefix_hashes: _containers.RepeatedScalarFieldContainer[int]
    tpot_us: int
    lease_id: str
    handoff_us: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stream_id: _Optional[str] = ..., tpot_ms: _Optional[int] = ..., tpot_margin: _Optional[float] = ..., prefix_hashes: _Optional[_Iterable[int]] = ..., tpot_us: _Optional[int] = ..., lease_id: _Optional[str] = ..., handoff_us: _Optional[int] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("block_ids", "lease_id", "lease_ms", "cached_blocks", "admitted_alone")
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_ALONE_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    lease_id: str
    lease_ms: float
    cached_blocks: int
    admitted_alone: bool
    def __init__(self, block_ids: _Optional[_Iterable[int]] = ..., lease_id: _Optional[str] = ..., lease_ms: _Optional[float] = ..., cached_blocks: _Optional[int] = ..., admitted_alone: _Optional[bool] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("request_id", "lease_id", "prompt_token_ids", "first_token", "sampling", "slo")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SLO_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    first_token: int
    sampling: _gateway_pb2.SamplingParams
    slo: _gateway_pb2.SLO
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., first_token: _Optional[int] = ..., sampling: _Optional[_Union[_gateway_pb2.SamplingParams, _Mapping]] = ..., slo: _Optional[_Union[_gateway_pb2.SLO, _Mapping]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "lease_id", "writer_may_still_write")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    WRITER_MAY_STILL_WRITE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    writer_may_still_write: bool
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., writer_may_still_write: _Optional[bool] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("request_id", "lease_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamRequest(_message.Message):
    __slots__ = ("stream_id",)
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    def __init__(self, stream_id: _Optional[str] = ...) -> None: ...

class TokenEvent(_message.Message):
    __slots__ = ("request_id", "token_ids", "finish_reason", "error", "logprobs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: str
    error: str
    logprobs: _containers.RepeatedCompositeFieldContainer[_gateway_pb2.TokenLogprobs]
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[str] = ..., error: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[_gateway_pb2.TokenLogprobs, _Mapping]]] = ...) -> None: ...

class StepEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TokenEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[TokenEvent, _Mapping]]] = ...) -> None: ...

class TransportInfoRequest(_message.Message):
    __slots__ = ("transport", "peer_id")
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    transport: str
    peer_id: str
    def __init__(self, transport: _Optional[str] = ..., peer_id: _Optional[str] = ...) -> None: ...

class TransportInfoResponse(_message.Message):
    __slots__ = ("shm_name", "cuda_ipc_handle", "rendezvous", "num_blocks", "block_bytes", "kv_dtype")
    SHM_NAME_FIELD_NUMBER: _ClassVar[int]
    CUDA_IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    KV_DTYPE_FIELD_NUMBER: _ClassVar[int]
    shm_name: str
    cuda_ipc_handle: bytes
    rendezvous: str
    num_blocks: int
    block_bytes: int
    kv_dtype: str
    def __init__(self, shm_name: _Optional[str] = ..., cuda_ipc_handle: _Optional[bytes] = ..., rendezvous: _Optional[str] = ..., num_blocks: _Optional[int] = ..., block_bytes: _Optional[int] = ..., kv_dtype: _Optional[str] = ...) -> None: ...

class BlockChunk(_message.Message):
    __slots__ = ("request_id", "lease_id", "first_block", "num_blocks", "data")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_BLOCK_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    first_block: int
    num_blocks: int
    data: bytes
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., first_block: _Optional[int] = ..., num_blocks: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteBlocksResponse(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...

class ReceiveBlocksRequest(_message.Message):
    __slots__ = ("request_id", "lease_id", "peer_id", "run_starts", "run_lengths", "tag")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTS_FIELD_NUMBER: _ClassVar[int]
    RUN_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_id: str
    peer_id: str
    run_starts: _containers.RepeatedScalarFieldContainer[int]
    run_lengths: _containers.RepeatedScalarFieldContainer[int]
    tag: int
    def __init__(self, request_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., peer_id: _Optional[str] = ..., run_starts: _Optional[_Iterable[int]] = ..., run_lengths: _Optional[_Iterable[int]] = ..., tag: _Optional[int] = ...) -> None: ...

class ReceiveBlocksResponse(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ...) -> None: ...
