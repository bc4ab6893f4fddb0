"""τ²-bench agents and user simulator whose model calls go through our one client.

Subclassing τ²-bench's LLMAgent / LLMSoloAgent keeps the orchestrator's contract
(solo mode asserts an LLMSoloAgent) while the prompt strategy decides how tools are
shown and how answers become τ²-bench ToolCalls. Experiences are injected into the
system prompt: the solo agent asks for them with its ticket before its first turn; the
conversational agent asks with the user's first message when it arrives (retrieval is
keyed on what the agent observes, never on the user simulator's hidden scenario), then
rebuilds its system message.
"""

from __future__ import annotations


from tau2.agent.llm_agent import LLMAgent, LLMAgentState, LLMSoloAgent
from tau2.data_model.message import (
    AssistantMessage,
    MultiToolMessage,
    SystemMessage,
    ToolCall,
    UserMessage,
)
from tau2.user.user_simulator import UserSimulator, UserState
from tau2.utils.llm_utils import to_litellm_messages

from edv_ray.agents.strategies import (
    get_strategy,
    parse_native_turn,
    parse_text_turn,
    render_system_prompt,
    text_history,
)
from edv_ray.agents.binding import ModelBinding
from edv_ray.envs.protocol import ExperienceFn


def with_reasoning(messages: list) -> list[dict]:
    """litellm messages of a τ²-bench history; a thinking model's earlier reasoning
    (kept in ``raw_data``) goes back on its assistant turns as ``reasoning_content``, as
    the GLM / MiniMax / Qwen3 chat templates expect across turns."""
    out = to_litellm_messages(messages)
    if len(out) == len(messages):
        for src, dst in zip(messages, out):
            reasoning = (getattr(src, "raw_data", None) or {}).get("reasoning_content")
            if reasoning and dst.get("role") == "assistant":
                dst["reasoning_content"] = reasoning
    return out


def _usage(c) -> dict[str, int]:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}


class _StrategyMixin:
    """Shared by the conversational and the solo agent."""

    binding: ModelBinding
    strategy_name: str
    experiences: list[str]
    experience_fn: ExperienceFn | None
    observed_text: str = ""
    _schemas: list[dict] | None = None  # tool JSON schemas, built once per process

    def _tool_schemas(self) -> list[dict]:
        if self._schemas is None:
            self._schemas = [t.openai_schema for t in self.tools]
        return self._schemas

    def _take_experiences(self, observed: str) -> bool:
        """Record the first text the agent observes and retrieve with it (once); returns
        whether experiences were fetched."""
        if self.observed_text:
            return False
        self.observed_text = observed
        fn, self.experience_fn = self.experience_fn, None
        self.experiences = list(fn(observed)) if fn is not None else []
        return fn is not None

    def _ticket(self) -> str | None:
        return None

    @property
    def system_prompt(self) -> str:
        return render_system_prompt(
            get_strategy(self.strategy_name), self.domain_policy,
            self._tool_schemas(), self.experiences, ticket=self._ticket(),
            stop_tool=LLMSoloAgent.STOP_FUNCTION_NAME,
        )

    def _respond(self, state: LLMAgentState) -> AssistantMessage:
        strategy = get_strategy(self.strategy_name)
        history = with_reasoning(state.system_messages + state.messages)
        if strategy.native_tools:
            c = self.binding.complete(history, tools=self._tool_schemas())
            turn = parse_native_turn(c.content, c.tool_calls)
        else:
            c = self.binding.complete(text_history(history))
            turn = parse_text_turn(c.content, strategy)
        calls = [ToolCall(id=tc["id"], name=tc["name"], arguments=tc["arguments"],
                          requestor="assistant") for tc in turn.tool_calls] or None
        content = turn.text if calls is None else None
        if calls is None and not content:
            content = "(no answer)"  # an empty turn is the model's failure, kept visible
        return AssistantMessage(role="assistant", content=content, tool_calls=calls,
                                cost=0.0, usage=_usage(c),
                                raw_data={"reasoning_content": c.reasoning} if c.reasoning else None)

    def _append(self, message, state: LLMAgentState) -> None:
        if isinstance(message, MultiToolMessage):
            state.messages.extend(message.tool_messages)
        elif message is not None:
            state.messages.append(message)

    def set_seed(self, seed: int) -> None:
        """τ²-bench's orchestrator seeds every agent with the run's seed; an agent with its
        own ``sampling.seed`` keeps it (a homogeneous pool differing only by seed must
        send different requests)."""
        if self.binding.sampling.seed is None:
            self.binding.sampling = self.binding.sampling.model_copy(update={"seed": seed})


class EdvAgent(_StrategyMixin, LLMAgent):
    """Conversational agent (talks to a user simulator)."""

    def __init__(self, tools, domain_policy, binding: ModelBinding, strategy: str,
                 experience_fn: ExperienceFn | None, tool_schemas: list[dict] | None = None):
        self._schemas = tool_schemas
        super().__init__(tools=tools, domain_policy=domain_policy, llm=binding.endpoint.litellm_model)
        self.binding, self.strategy_name = binding, strategy
        self.experiences, self.experience_fn, self.observed_text = [], experience_fn, ""

    def generate_next_message(self, message, state: LLMAgentState):
        if isinstance(message, UserMessage) and message.content and self._take_experiences(message.content):
            state.system_messages = [SystemMessage(role="system", content=self.system_prompt)]
        self._append(message, state)
        reply = self._respond(state)
        state.messages.append(reply)
        return reply, state


class EdvSoloAgent(_StrategyMixin, LLMSoloAgent):
    """Solo agent: works a ticket with tool calls only; ``done`` ends the episode."""

    def __init__(self, tools, domain_policy, task, binding: ModelBinding, strategy: str,
                 experience_fn: ExperienceFn | None, tool_schemas: list[dict] | None = None):
        # experiences (and schemas) are in place before the parent builds the system prompt
        self._schemas = tool_schemas
        self.binding, self.strategy_name = binding, strategy
        self.experiences, self.experience_fn, self.observed_text = [], experience_fn, ""
        self._take_experiences(str(task.ticket))
        super().__init__(tools=tools, domain_policy=domain_policy, task=task,
                         llm=binding.endpoint.litellm_model)

    def _ticket(self) -> str | None:
        return self.task.ticket

    def generate_next_message(self, message, state: LLMAgentState):
        if isinstance(message, UserMessage):
            raise ValueError("solo agent received a user message")
        self._append(message, state)
        reply = self._respond(state)
        if reply.is_tool_call():
            reply = self._check_if_stop_toolcall(reply)
        state.messages.append(reply)
        return reply, state


class EdvUserSimulator(UserSimulator):
    """τ²-bench's user simulator prompt, our client (tokens attributed to role user_sim)."""

    def __init__(self, tools, instructions, binding: ModelBinding,
                 tool_schemas: list[dict] | None = None):
        super().__init__(tools=tools, instructions=instructions, llm=binding.endpoint.litellm_model)
        self.binding = binding
        self._schemas = tool_schemas if tool_schemas is not None else (
            [t.openai_schema for t in self.tools] if self.tools else None)

    def _generate_next_message(self, message, state: UserState):
        self_msgs = message.tool_messages if isinstance(message, MultiToolMessage) else [message]
        state.messages.extend(self_msgs)
        history = to_litellm_messages(state.system_messages + state.flip_roles())
        c = self.binding.complete(history, tools=self._schemas)
        turn = parse_native_turn(c.content, c.tool_calls)
        calls = [ToolCall(id=tc["id"], name=tc["name"], arguments=tc["arguments"],
                          requestor="user") for tc in turn.tool_calls] or None
        content = None if calls else (turn.text or "(no reply)")
        reply = UserMessage(role="user", content=content, tool_calls=calls, cost=0.0,
                            usage=_usage(c))
        state.messages.append(reply)
        return reply, state

    def set_seed(self, seed: int) -> None:
        self.binding.sampling = self.binding.sampling.model_copy(update={"seed": seed})
