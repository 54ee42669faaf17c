"""Structured output (``SamplingParams.structured``) enforced where tokens are sampled: each such
request has a grammar matcher (xgrammar's) that, before every sampling of its row, gives the
tokens that can continue its output; the others are masked out of the logits the sampler draws
from (its logprobs still come from the raw logits: ``common.model.logprobs``), and the token drawn
advances the matcher. The grammar's end allows only a stop token, so the request ends there.

A prefill worker samples a request's first token under its grammar; the decode worker's matcher,
made on the request's first step there, takes that token first (``ScheduledSeq.token_ids`` of a
request's first decode after its commit). Grammars are compiled once per (kind, spec) and kept.
xgrammar and its tokenizer tables are loaded on the first structured request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch

from common.model.batch import ScheduledSeq
from common.model.sampling_params import StructuredOutput

log = logging.getLogger(__name__)
COMPILED_KEPT = 256  # grammars kept compiled, the most recently used


class Grammars:
    def __init__(self, tokenizer: Callable[[], Any], vocab_size: int, stop_token_ids: tuple[int, ...]) -> None:
        self._tokenizer, self._vocab_size, self._stop = tokenizer, vocab_size, stop_token_ids
        self._compiler: Any = None
        self._matchers: dict[str, Any] = {}  # request id -> its matcher
        self.compiled = lru_cache(maxsize=COMPILED_KEPT)(self._compile)

    def check(self, structured: StructuredOutput) -> None:
        """Raises ValueError, saying why, for a spec that does not compile."""
        self.compiled(structured)

    def masked(self, logits: torch.Tensor, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """``logits [len(seqs), vocab]`` with each structured row's impossible tokens at −inf (a
        copy; the same tensor when no row is structured)."""
        rows = [i for i, s in enumerate(seqs) if s.params.structured is not None]
        if not rows:
            return logits
        import xgrammar as xgr

        bitmask = xgr.allocate_token_bitmask(len(rows), self._vocab_size)
        for j, i in enumerate(rows):
            self._matcher(seqs[i]).fill_next_token_bitmask(bitmask, j)
        index = torch.tensor(rows, device=logits.device)
        sub = logits.index_select(0, index).float().contiguous()
        xgr.apply_token_bitmask_inplace(sub, bitmask.to(logits.device))
        return logits.float().index_copy(0, index, sub)

    def accepted(self, seqs: list[ScheduledSeq], tokens: list[int]) -> None:
        """Each structured row sampled its token: its matcher moves on."""
        for seq, token in zip(seqs, tokens):
            if seq.params.structured is not None and not self._matchers[seq.request_id].accept_token(token):
                log.error("request %s: token %d is outside its grammar", seq.request_id, token)

    def drop(self, request_id: str) -> None:
        """The request ended here: its matcher goes."""
        self._matchers.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._matchers)

    def _matcher(self, seq: ScheduledSeq) -> Any:
        matcher = self._matchers.get(seq.request_id)
        if matcher is None:
            import xgrammar as xgr

            assert seq.params.structured is not None
            matcher = self._matchers[seq.request_id] = xgr.GrammarMatcher(self.compiled(seq.params.structured))
            if seq.num_output_tokens == 1 and seq.is_decode:  # its first token came with its commit
                matcher.accept_token(seq.token_ids[0])
        return matcher

    def _compile(self, structured: StructuredOutput) -> Any:
        compiler = self._compiler_now()
        kind, spec = structured.kind, structured.spec
        try:
            # compact JSON: a model may not spend its tokens on whitespace without end
            if kind in ("json", "json_schema"):
                return compiler.compile_json_schema(spec if kind == "json_schema" else '{"type": "object"}',
                                                    any_whitespace=False)
            if kind == "regex":
                return compiler.compile_regex(spec)
            if kind == "choice":
                choices = json.loads(spec)
                if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
                    raise ValueError("a choice's spec is a JSON list of strings")
                return compiler.compile_grammar("root ::= " + " | ".join(json.dumps(c) for c in choices))
            return compiler.compile_grammar(spec)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise ValueError(f"structured output ({kind}) does not compile: {exc}") from None

    def _compiler_now(self) -> Any:
        if self._compiler is None:
            import xgrammar as xgr

            info = xgr.TokenizerInfo.from_huggingface(self._tokenizer(), vocab_size=self._vocab_size,
                                                      stop_token_ids=list(self._stop))
            self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        return self._compiler
