"""An agent's options (`--agent-option KEY=VALUE`, a fleet plan's `options`), typed.

Each connector declares its options as a pydantic model (`Connector.options_model`, a subclass
of `AgentOptions`): names, types, defaults and what each does. They are checked before a run
is made (`parse`): an unknown key is refused with the names the agent has, a value of the
wrong type with the type it needs, each in one line. The values reach the connector as the
strings given (`AgentContext.options`); a connector reads its typed copy with `parse`.
docs/agent-options.md is written from these models (`options_markdown`), and a test holds
the two equal.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class AgentOptionsError(ValueError):
    """A bad agent option: one line naming the agent, the key and what is allowed."""


class AgentOptions(BaseModel):
    """The options of an agent that has none; an agent with its own subclasses this."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: options whose value is a secret (an API key): never shown back, not in the docs' values
    secret: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def parse(cls, agent: str, values: Mapping[str, str]) -> Self:
        """The options `values` give (strings, as the command line passes them), checked:
        `AgentOptionsError` for an unknown key or a value of the wrong type."""
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            known = ", ".join(cls.model_fields)
            raise AgentOptionsError(
                f"agent {agent!r} has no option {unknown[0]!r} (--agent-option); "
                + (f"its options are: {known}" if known else "it takes no options"))
        try:
            return cls(**{k: (None if v == "" and _optional(cls, k) else v)
                          for k, v in values.items()})
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            key = str(error["loc"][0]) if error["loc"] else "?"
            shown = "(hidden)" if key in cls.secret else repr(values.get(key))
            why = error["msg"].removeprefix("Input ").removeprefix("Value error, ")
            raise AgentOptionsError(f"agent {agent!r}: option {key}={shown}: {why} "
                                    f"({key} is {type_name(cls, key)})") from None

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """Name, type, default and description of each option (the docs, `a2rl agents`)."""
        return [{"name": name, "type": type_name(cls, name),
                 "default": None if name in cls.secret else field.get_default(),
                 "description": field.description or ""}
                for name, field in cls.model_fields.items()]


class OpenAIProviderOptions(AgentOptions):
    """Its model provider: an OpenAI-compatible endpoint and its key (`OPENAI_API_KEY` in the
    environment, or the option)."""

    secret = frozenset({"openai_api_key"})

    openai_base_url: str = Field("", description="the provider's endpoint (Responses API for "
                                 "Codex, chat completions for OpenCode); empty: "
                                 "https://api.openai.com/v1")
    openai_api_key: str = Field("", description="the key, over `OPENAI_API_KEY` in the "
                                "environment")


def _optional(model: type[BaseModel], name: str) -> bool:
    return type(None) in get_args(model.model_fields[name].annotation)


def type_name(model: type[BaseModel], name: str) -> str:
    """An option's type in words: int, float, str, "one of a, b", "int or empty"."""
    field = model.model_fields[name]
    annotation = field.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return f"{_name(args[0])} or empty"
    text = _name(annotation)
    bounds = [f"{op} {getattr(m, attr)}" for m in field.metadata
              for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
              if getattr(m, attr, None) is not None]
    return f"{text} {' '.join(bounds)}".strip()


def _name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(annotation))
    return getattr(annotation, "__name__", str(annotation))
