"""The token budget rule: a constrained value completes within ``max_tokens``.

As the budget nears its end the constraint steers toward the shortest completion of the
grammar from where it stands (`cera.grammar.completion`): once the tokens left are within
`WINDOW` of what the shortest completion needs, each step allows only the next token of
that completion and the model's own first choice when a completion after it still fits
in what is left (checked by the same search). So a value that cannot complete in the
tokens left is never started, and the output ends complete. Only a budget below the
grammar's shortest completion from its start cannot be met (`GrammarProcessor.cannot_fit`).

Cost: one search (milliseconds to a few hundred on a 49k vocabulary, more for grammars
with long forced texts) when the rule first looks, then one per step inside the window
unless the model follows the completion; outside it, a look every `EVERY` tokens once the
end is within `3 * WINDOW` of the completion.
"""

from __future__ import annotations

import numpy as np

from .completion import Completion, shortest_completion, single_byte_tokens

WINDOW = 8  # tokens of slack under which every step is steered
EVERY = 16  # tokens between looks while the end is far


class BudgetRule:
    """The rule for one processor (its matcher, tokenizer view and budget)."""

    def __init__(self, matcher, lt, token_bytes: list[bytes], n_vocab: int, budget: int, eog_ids=()):
        self.matcher, self.lt, self.n_vocab = matcher, lt, n_vocab
        self.singles = single_byte_tokens(token_bytes)
        self.eog = [t for t in eog_ids if t < n_vocab]
        self.budget = budget
        self.used = 0  # tokens generated so far (before a lazy trigger too)
        self.witness: Completion | None = None  # the shortest completion from the current state
        self.known = False  # `witness` is for the current state
        self.last_d: int | None = None  # tokens of the last completion found
        self.last_look = -EVERY
        self.checked: dict[int, Completion | None] = {}  # this step's candidates, looked at
        self.shortest_at_start: int | None = None

    def _look(self) -> Completion | None:
        self.witness = shortest_completion(self.matcher, self.lt, self.singles, self.n_vocab)
        self.known, self.last_look = True, self.used
        self.last_d = None if self.witness is None else len(self.witness.tokens)
        return self.witness

    def start(self) -> None:
        """When the grammar starts: the shortest completion from its start."""
        w = self._look()
        self.shortest_at_start = None if w is None else len(w.tokens)

    def left(self) -> int:
        return self.budget - self.used

    def steer(self, ok: np.ndarray, logits: np.ndarray | None) -> None:
        """Narrow ``ok`` (the grammar's allowed tokens, booleans) for this step."""
        self.checked = {}
        left = self.left()
        if not self.known:
            recent = self.used - self.last_look < EVERY
            if recent and (self.last_d is None or left - self.last_d > 3 * WINDOW):
                return  # the end is far (or no completion was found lately): look again later
            self._look()
        w = self.witness
        if w is None or left - len(w.tokens) > WINDOW:
            return
        keep = [w.tokens[0]] if w.tokens else [t for t in self.eog if ok[t]]
        first = _first_choice(ok, logits)
        if first is not None and first not in keep:
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
        return shortest_completion(probe, self.lt, self.singles, self.n_vocab)

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


def _first_choice(ok: np.ndarray, logits: np.ndarray | None) -> int | None:
    """The allowed token of highest logit (None without logits)."""
    if logits is None:
        return None
    n = min(len(ok), len(logits))
    if not ok[:n].any():
        return None
    masked = np.where(ok[:n], logits[:n], -np.inf)
    return int(np.argmax(masked))
