"""Structured output: constrain generation to a GBNF grammar, a JSON Schema, any JSON
object, or a regular expression; lazily (free text until a trigger) when asked.

    from cera.grammar import Constraint, Trigger
    session.generate(grammar=Constraint.json_schema({"type": "object", ...}))
    session.generate(json_schema={"type": "object"})        # the same through the options
    session.generate(grammar='root ::= "yes" | "no"')       # GBNF text
    tool = Constraint.gbnf(TOOL_GBNF).lazy(Trigger(word="<tool_call>"))

The constraint is one processor in the sampling chain (`GrammarProcessor`): each step it
masks the logits to the tokens the grammar allows (end-of-generation only where the
grammar can end), and when a token is chosen it advances and starts computing the next
mask on a worker thread, so the mask is ready when the forward pass returns. The engine
is llguidance (see README.md beside this file for why); GBNF is translated by `gbnf`,
JSON Schemas are compiled by llguidance itself. Importing this package is cheap; the
engine loads when a constraint is compiled.
"""

from __future__ import annotations

from .constraint import Constraint, Trigger
from .processor import GrammarProcessor, processor_for

__all__ = ["Constraint", "GrammarProcessor", "Trigger", "processor_for"]
