"""The one options type of a generation, shared by the Python API and the CLI.

`GenerateOptions` says what to generate and when to stop. Each field carries its command
line flag and help in its metadata, so the CLI builds its options from this class
(`cera_cli.options`) instead of repeating them; the server (`cera serve`) maps request
fields onto it.
"""

from __future__ import annotations

import attrs

from ..errors import InvalidOptions
from .sampling import SamplingOptions


def _opt(default, flag: str | None, help: str, **kw):
    return attrs.field(default=default, metadata={"flag": flag, "help": help}, **kw)


def _tuple_of_str(v) -> tuple[str, ...]:
    if isinstance(v, str):
        return (v,)
    try:
        out = tuple(v)
    except TypeError:
        raise InvalidOptions(f"stop must be a string or a list of strings, got {v!r}") from None
    if not all(isinstance(s, str) for s in out):
        raise InvalidOptions(f"stop must be a string or a list of strings, got {v!r}")
    return out


def _tuple_of_int(v) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in v)
    except (TypeError, ValueError):
        raise InvalidOptions(f"stop_tokens must be token ids (integers), got {v!r}") from None


@attrs.define
class GenerateOptions:
    """What to generate and when to stop; sampling fields are those of `SamplingOptions`."""

    max_tokens: int | None = _opt(256, "-n/--max-tokens/--n-predict", "Tokens to generate (-1: until the context is full).")
    temperature: float = _opt(0.8, "--temp/--temperature", "Temperature; 0 for greedy decoding.")
    top_k: int = _opt(40, "--top-k", "Top-k (0: off).")
    top_p: float = _opt(0.95, "--top-p", "Top-p (1: off).")
    min_p: float = _opt(0.05, "--min-p", "Min-p (0: off).")
    repeat_penalty: float = _opt(1.0, "--repeat-penalty", "Repetition penalty (1: off).")
    repeat_last_n: int = _opt(64, "--repeat-last-n", "Tokens of history the penalties look at (-1: all).")
    presence_penalty: float = _opt(0.0, "--presence-penalty", "Subtracted from the logit of every token already generated or in the prompt window (0: off).")
    frequency_penalty: float = _opt(0.0, "--frequency-penalty", "Subtracted per occurrence of a token in the window (0: off).")
    seed: int | None = _opt(None, "-s/--seed", "Random seed; the same seed gives the same output (-1: random; the run prints the one drawn).")
    stop: tuple[str, ...] = _opt((), "--stop", "Stop string, not included in the output (repeatable).", converter=_tuple_of_str)
    stop_tokens: tuple[int, ...] = _opt((), None, "Extra stop token ids.", converter=_tuple_of_int)
    ignore_eos: bool = _opt(False, "--ignore-eos", "Never stop on an end-of-generation token.")
    context_shift: bool = _opt(False, "--context-shift", "When the context fills, drop the oldest half of it (after --n-keep) and go on.")
    n_keep: int = _opt(0, "--n-keep", "Tokens at the start that a context shift keeps.")
    spec: bool = _opt(False, "--spec", "Speculative decoding by prompt lookup (greedy only; the output is the greedy output).")
    spec_ngram: int = _opt(3, "--spec-ngram", "Longest n-gram matched in the context to draft from.")
    spec_k: int = _opt(8, "--spec-k", "Tokens drafted per verification pass.")
    draft_max: int = _opt(16, "--draft-max/--draft/--draft-n", "With a draft model: most tokens it drafts per verification pass (0: no draft-model speculation).")
    draft_min: int = _opt(0, "--draft-min/--draft-n-min", "With a draft model: a shorter draft is not verified (the token is evaluated plainly).")
    draft_p_min: float = _opt(0.75, "--draft-p-min", "With a draft model: drafting stops where the draft gives its token less probability than this.")
    draft_vocab: int = _opt(32768, "--draft-vocab", "With a draft model: it drafts from the first this many token ids only, computing only their logits (0: all).")
    grammar: object = _opt(None, "--grammar", "GBNF grammar the output must follow (text, or @file.gbnf); a cera.grammar.Constraint from Python.")
    json_schema: object = _opt(None, "--json-schema", "JSON Schema the output must follow (JSON text, or @file.json); stdout carries the JSON value alone.")
    json: bool = _opt(False, "--json", "Output one JSON object; stdout carries it alone.")
    regex: str | None = _opt(None, "--regex", "Regular expression (Rust regex syntax) the whole output must match.")
    json_schema_lenient: bool = _opt(False, "--json-schema-lenient", "Ignore JSON Schema keywords that cannot be enforced, with a warning, instead of failing.")
    logprobs: bool = _opt(False, None, "Report each token's log-probability (reads all logits back).")
    top_logprobs: int = _opt(0, None, "Also report this many most likely alternatives per token.")

    def __attrs_post_init__(self):
        if self.max_tokens is not None:
            if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool):
                raise InvalidOptions(f"max_tokens must be an integer or None, got {self.max_tokens!r}")
            if self.max_tokens < 0:
                self.max_tokens = None  # llama.cpp's -n -1: until the context is full
        for name in ("n_keep", "spec_ngram", "spec_k", "draft_max", "draft_min", "draft_vocab"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidOptions(f"{name} must be a non-negative integer, got {v!r}")
        if not isinstance(self.draft_p_min, (int, float)) or isinstance(self.draft_p_min, bool) or not 0.0 <= self.draft_p_min <= 1.0:
            raise InvalidOptions(f"draft_p_min must be a number in [0, 1], got {self.draft_p_min!r}")
        if not isinstance(self.top_logprobs, int) or self.top_logprobs < 0:
            raise InvalidOptions(f"top_logprobs must be a non-negative integer, got {self.top_logprobs!r}")
        self.sampling()  # validates the sampling fields
        if self.constrained:
            from ..grammar.constraint import from_options

            from_options(self)  # a bad grammar or schema fails here, before any model work

    def sampling(self) -> SamplingOptions:
        return SamplingOptions(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=self.repeat_last_n,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=self.seed,
        )

    @property
    def constrained(self) -> bool:
        """A grammar, schema, JSON or regex constrains the output."""
        return self.json or any(getattr(self, n) is not None for n in ("grammar", "json_schema", "regex"))

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs or self.top_logprobs > 0


def make_options(options: GenerateOptions | None, overrides: dict) -> GenerateOptions:
    """``options`` with keyword overrides; an unknown keyword is an InvalidOptions naming it."""
    names = {f.name for f in attrs.fields(GenerateOptions)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InvalidOptions(f"unknown generation option(s) {unknown}; known: {', '.join(sorted(names))}")
    try:
        if options is None:
            return GenerateOptions(**overrides)
        return attrs.evolve(options, **overrides) if overrides else options
    except TypeError as e:
        raise InvalidOptions(str(e)) from None


__all__ = ["GenerateOptions", "make_options"]
