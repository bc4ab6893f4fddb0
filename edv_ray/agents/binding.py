"""What a participant (agent, user simulator, judge) needs to call its model in one
episode or stage step: the one client, an endpoint, sampling, attribution, a ledger and
a deadline. Benchmark-neutral: every environment binds its participants with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edv_ray.config import Sampling
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient


@dataclass
class ModelBinding:
    client: LLMClient
    endpoint: Endpoint
    sampling: Sampling
    ctx: CallContext
    ledger: CallLedger
    deadline: float | None

    def complete(self, messages: list[dict[str, Any]], tools: list[dict] | None = None,
                 response_format: dict[str, Any] | None = None):
        return self.client.complete(
            self.endpoint, messages, ctx=self.ctx, ledger=self.ledger,
            sampling=self.sampling, tools=tools, response_format=response_format,
            deadline=self.deadline,
        )
