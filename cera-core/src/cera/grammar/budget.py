"""The token budget rule: a constrained value completes within the tokens it may take.

The budget is what the generation may still write: ``max_tokens``, and the room left in
the context when that is less. As the budget nears its end the constraint steers toward
the shortest completion of the grammar from where it stands (`cera.grammar.completion`):
once the tokens left are within `WINDOW` of what the shortest completion needs, each step
allows only the next token of that completion and the model's own first choice when a
completion after it still fits in what is left (checked by the same search). So a value
that cannot complete in the tokens left is never started, and the output ends complete.
Only a budget below the grammar's shortest completion from its start cannot be met:
`GrammarProcessor` then raises `cera.errors.GrammarBudgetError` before the first token.

`close` asks for the shortest completion now, whatever the budget (the calls of a reply
end at a call that repeats an earlier one, `cera.grammar.call_repeats`).

Cost: one search (milliseconds to a few hundred on a 49k vocabulary, more for grammars
with long forced texts) when the rule first looks, then one per step inside the window
unless the model follows the completion. Outside it the rule looks again once a third of
the slack (tokens left, less the completion and the window) has been written: a token
shortens what is left by one and lengthens the completion by rarely more than two, so
the window is not passed between two looks.
"""

from __future__ import annotations

import numpy as np

from .completion import Completion, shortest_completion, single_byte_tokens, special_tokens

WINDOW = 8  # tokens of slack under which every step is steered
RETRY = 16  # tokens between looks after a search that found no completion


class BudgetRule:
    """The rule for one processor (its matcher, tokenizer view and budget; None: no
    limit, only `close` steers)."""

    def __init__(self, matcher, lt, token_bytes: list[bytes], n_vocab: int, budget: int | None, eog_ids=()):
        self.matcher, self.lt, self.n_vocab = matcher, lt, n_vocab
        self.singles = single_byte_tokens(token_bytes)
        self.eog = [t for t in eog_ids if t < n_vocab]
        self.specials = special_tokens(token_bytes, eog_ids)
        self.budget = budget
        self.used = 0  # tokens generated so far (before a lazy trigger too)
        self.witness: Completion | None = None  # the shortest completion from the current state
        self.known = False  # `witness` is for the current state
        self.next_look = 0  # `used` at which to look again (while not known)
        self.checked: dict[int, Completion | None] = {}  # this step's candidates, looked at
        self.shortest_at_start: int | None = None
        self.closing = False  # `close` was asked: steer to the end now

    def _look(self) -> Completion | None:
        self.witness = shortest_completion(self.matcher, self.lt, self.singles, self.n_vocab, self.specials)
        self.known = True
        w = self.witness
        if w is None:
            self.next_look = self.used + RETRY
        elif self.budget is not None:
            slack = self.left() - len(w.tokens) - WINDOW
            self.next_look = self.used + max(1, slack // 3)
        return w

    def start(self) -> None:
        """When the grammar starts: the shortest completion from its start."""
        w = self._look() if self.budget is not None else None
        self.shortest_at_start = None if w is None else len(w.tokens)

    def close(self) -> None:
        """Steer to the shortest completion from the next step on."""
        self.closing = True

    def left(self) -> int:
        return self.budget - self.used if self.budget is not None else 1 << 30

    def steer(self, ok: np.ndarray, logits: np.ndarray | None) -> None:
        """Narrow ``ok`` (the grammar's allowed tokens, booleans) for this step."""
        if self.engaged():
            self.narrow(ok, logits)

    def engaged(self) -> bool:
        """Whether this step is steered (the end is near, or `close` was asked): only then
        does `narrow` change the allowed tokens. Call once a step, before `narrow`."""
        self.checked = {}
        if self.budget is None and not self.closing:
            return False
        left = self.left()
        if not self.known:
            if self.used < self.next_look and not self.closing:
                return False  # the end is far: look again later
            self._look()
        w = self.witness
        return w is not None and (left - len(w.tokens) <= WINDOW or self.closing)

    def narrow(self, ok: np.ndarray, logits: np.ndarray | None) -> None:
        """Narrow ``ok`` for a step that `engaged` says is steered."""
        left, w = self.left(), self.witness
        keep = [w.tokens[0]] if w.tokens else [t for t in self.eog if ok[t]]
        if logits is not None:  # a token an earlier step of the chain ruled out (ignore_eos) is no way out
            keep = [t for t in keep if t < len(logits) and np.isfinite(logits[t])]
        first = _first_choice(ok, logits)
        if first is not None and first not in keep and not self.closing:
            after = self._after(first)
            self.checked[first] = after
            if after is not None and len(after.tokens) <= left - 1:
                keep.append(first)
        if not keep:
            return
        ok[:] = False
        ok[keep] = True

    def _after(self, token: int) -> Completion | None:
        probe = self.matcher.deep_copy()
        if not probe.consume_token(int(token)):
            return None
        return shortest_completion(probe, self.lt, self.singles, self.n_vocab, self.specials)

    def accepted(self, token: int) -> None:
        """The token chosen (call after the matcher consumed it)."""
        self.used += 1
        w = self.witness if self.known else None
        if w is not None and w.tokens and w.tokens[0] == token:
            self.witness = Completion(w.data, w.tokens[1:])
        elif token in self.checked and self.checked[token] is not None:
            self.witness = self.checked[token]
        else:
            self.known = False
        self.checked = {}

    def counted(self) -> None:
        """A token generated before a lazy grammar started."""
        self.used += 1

    def restarted(self) -> None:
        """The grammar took text at once (a lazy trigger): what was known is stale."""
        self.known = False
        self.next_look = self.used


def _first_choice(ok: np.ndarray, logits: np.ndarray | None) -> int | None:
    """The allowed token of highest logit (None without logits)."""
    if logits is None:
        return None
    n = min(len(ok), len(logits))
    if not ok[:n].any():
        return None
    masked = np.where(ok[:n], logits[:n], -np.inf)
    return int(np.argmax(masked))
