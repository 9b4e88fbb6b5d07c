"""Text helpers for messages shared by the CLIs, the agent, the trainer and the benches."""

__all__ = ["one_line", "counted"]


def one_line(text) -> str:
    """``str(text)`` on one line: an exception's text may hold newlines (pyarrow's two-line
    errors, an answer's CR LF), and a message made of it is one log or error line."""
    return " ".join(str(text).split())


def counted(n: int, noun: str) -> str:
    """``1 match``, ``2 matches``, ``12,000 events``."""
    plural = noun + ("es" if noun.endswith(("ch", "s")) else "s")
    return f"{n:,} {noun if n == 1 else plural}"
