"""Errors raised by cast-rewards' decomposers.

They derive from cast-core's error classes so the CLI prints them as one clean line and callers
that only know the core contract (``AtomDecomposer.decompose`` raises ``SceneGraphError`` on bad
input) can still catch them.
"""

from __future__ import annotations

from cast_core.errors import CastError, SceneGraphError


class PromptParseError(SceneGraphError):
    """A prompt could not be read into a scene graph.

    The message names the exact span that failed, its character position in the original prompt
    and what was expected there, because "could not parse prompt" alone sends the user hunting
    through a long prompt file. The pieces are also kept as attributes for programs.
    """

    def __init__(self, prompt: str, start: int, end: int, reason: str) -> None:
        self.prompt = prompt
        self.start = start
        self.end = end
        self.span = prompt[start:end]
        self.reason = reason
        super().__init__(
            f"cannot read {cut(self.span)!r} in prompt {cut(prompt)!r} (position {start}): {cut(reason, 240)}"
        )


def cut(text: str, limit: int = 120) -> str:
    """Quoted input in one line: a 5,000-word prompt must not become a 25 KB error message."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class LexiconError(CastError, ValueError):
    """A lexicon was configured with an unusable phrase (empty, malformed or conflicting)."""
